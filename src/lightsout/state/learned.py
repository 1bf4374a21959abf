"""`status.learned`, read and written in one place: what a machine's history taught.

A Node's `status.learned` holds the measured durations of its last power-ons and power-offs
(`bootSamples`, `shutdownSamples`, seconds, oldest first) and their medians (`bootSeconds`,
`shutdownSeconds`: the figures a person reads), its power-on requests of the last 24 hours
(`powerOns`) and the draw learned from measured watts (`offWatts`, `idleWatts`, `busyWatts`).
The state machine learns into a `Learned` (`planning.learning`), the status writers write it
with `learned_to_status`, and every reader (the state machine's inputs, the planner's snapshot,
the draw the planner and the energy accounts use, the trace recorder) reads it with
`learned_from_status`. A published figure without its samples (a person's, an older operator's)
counts as one sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightsout.state.parse import as_int, format_time, non_negative, parse_time


def median(samples: Sequence[int]) -> int | None:
    """The learned figure of a list of samples (None: nothing learned yet)."""
    return round(statistics.median(samples)) if samples else None


@dataclass(frozen=True)
class Learned:
    """`status.learned` as a record (see the module's docstring)."""

    boot_samples: tuple[int, ...] = ()
    shutdown_samples: tuple[int, ...] = ()
    power_ons: tuple[datetime, ...] = ()
    off_watts: float | None = None
    idle_watts: float | None = None
    busy_watts: float | None = None

    @property
    def boot_seconds(self) -> int | None:
        """Power-on to Ready, the median of the samples."""
        return median(self.boot_samples)

    @property
    def shutdown_seconds(self) -> int | None:
        """The power-off, the median of the samples."""
        return median(self.shutdown_samples)


def learned_from_status(raw: Any) -> Learned:
    """`status.learned` as a record (unreadable entries are dropped)."""
    if not isinstance(raw, Mapping):
        return Learned()

    def samples(name: str, figure: str) -> tuple[int, ...]:
        values = raw.get(name)
        if isinstance(values, list):
            return tuple(n for v in values if (n := as_int(v)) is not None and n >= 0)
        published = non_negative(raw.get(figure))
        return () if published is None else (round(published),)

    times = raw.get("powerOns")
    power_ons = tuple(t for t in map(parse_time, times if isinstance(times, list) else []) if t)
    return Learned(
        samples("bootSamples", "bootSeconds"),
        samples("shutdownSamples", "shutdownSeconds"),
        power_ons,
        off_watts=non_negative(raw.get("offWatts")),
        idle_watts=non_negative(raw.get("idleWatts")),
        busy_watts=non_negative(raw.get("busyWatts")),
    )


def learned_to_status(learned: Learned) -> dict[str, Any]:
    """`status.learned` for a record: the samples, their medians and the power-on times.
    A figure not learned yet is left out (the API server stores no null, so writing one would
    make every later comparison see a change)."""
    out: dict[str, Any] = {
        "bootSeconds": learned.boot_seconds,
        "shutdownSeconds": learned.shutdown_seconds,
        "bootSamples": list(learned.boot_samples),
        "shutdownSamples": list(learned.shutdown_samples),
        "powerOns": [format_time(t) for t in learned.power_ons],
        "offWatts": learned.off_watts,
        "idleWatts": learned.idle_watts,
        "busyWatts": learned.busy_watts,
    }
    return {key: value for key, value in out.items() if value is not None}
