"""A UPS reading turned into a Group's `status.battery`, its conditions and its events. Pure.

The operator reads each UPS the Groups name (`execution.ups`) and hands every reading, or the
error that stopped it, to `observe`; a replay hands it the trace's mains events the same way.
What comes back is the Group's next `status.battery`, and `changes` says what a person is told
(an event per change of the mains, of reachability and of low battery) and which conditions
hold (`PowerSourceReachable`, `OnBattery`).

`ups.status` is a set of flags (NUT's `OL`, `OB`, `LB`, `FSD`, ...): `FSD`, or `OB` with `LB`,
is low battery (as upsmon reads it), `OB` alone on battery, `OL` online. A status without
either (`WAIT` while upsd waits for its driver, `OFF`) tells nothing about the mains: the mains
are Unknown then, as when the UPS cannot be read, and the last flags are kept beside.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass

from lightsout.models.battery import BatteryStatus
from lightsout.models.enums import ConditionStatus, ConditionType, Mains


@dataclass(frozen=True)
class Reading:
    """What one read of a UPS returned: its variables, or why there are none."""

    variables: Mapping[str, str]
    error: str | None = None

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.variables.get("ups.status", "").split())


def mains_of(flags: frozenset[str]) -> Mains:
    """The mains as `ups.status`'s flags tell them."""
    if "FSD" in flags or {"OB", "LB"} <= flags:
        return Mains.LOW_BATTERY
    if "OB" in flags:
        return Mains.ON_BATTERY
    if "OL" in flags:
        return Mains.ONLINE
    return Mains.UNKNOWN


def _number(variables: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(variables[name])  # NUT sends strings, "023.4" too
    except (KeyError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def observe(
    old: BatteryStatus | None, source: str, reading: Reading, now: dt.datetime
) -> BatteryStatus:
    """The Group's next `status.battery` after `reading` (its outage record is kept)."""
    old = old or BatteryStatus(source=source)
    if reading.error is not None:
        return old.model_copy(
            update={"source": source, "mains": Mains.UNKNOWN, "error": reading.error}
        )
    mains = mains_of(reading.flags)
    last_known = _flags_mains(old)
    # The time the mains reached this state: kept across an unreadable spell that ends in the
    # state it began in, so a UPS that answers again does not restart the on-battery delay.
    since = old.mains_since if mains is last_known and old.mains_since else now
    runtime = _number(reading.variables, "battery.runtime")
    return BatteryStatus(
        source=source,
        mains=mains,
        mains_since=since,
        ups_status=" ".join(sorted(reading.flags)) or None,
        charge_percent=_number(reading.variables, "battery.charge"),
        runtime_seconds=None if runtime is None else round(runtime),
        load_percent=_number(reading.variables, "ups.load"),
        observed_at=now,
        outage=old.outage,
    )


def _flags_mains(status: BatteryStatus) -> Mains:
    return mains_of(frozenset((status.ups_status or "").split()))


def worth_writing(old: BatteryStatus | None, new: BatteryStatus) -> bool:
    """Whether `new` differs from `old` enough to be written: any change of the mains, the
    flags, the error or the outage; the charge by a percent, the runtime by 5 % (or 10 s),
    the load by 5 points. A UPS read every few seconds is not a status write every few seconds."""
    if old is None:
        return True
    if (old.mains, old.ups_status, old.error, old.outage, old.source) != (
        new.mains,
        new.ups_status,
        new.error,
        new.outage,
        new.source,
    ):
        return True
    return (
        _moved(old.charge_percent, new.charge_percent, 1.0)
        or _moved(
            old.runtime_seconds,
            new.runtime_seconds,
            max(10.0, 0.05 * (old.runtime_seconds or 0)),
        )
        or _moved(old.load_percent, new.load_percent, 5.0)
    )


def _moved(old: float | None, new: float | None, step: float) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(new - old) >= step


@dataclass(frozen=True)
class Change:
    """An event to post on the Group: Warning when the news is bad."""

    reason: str
    message: str
    warning: bool = False


def changes(old: BatteryStatus | None, new: BatteryStatus) -> list[Change]:
    """What a person is told about the step from `old` to `new`."""
    out: list[Change] = []
    was = None
    if old is not None:  # across an unreadable spell, the mains as last read
        was = old.mains if old.mains is not Mains.UNKNOWN else _flags_mains(old)
    if new.error is not None and (old is None or old.error is None):
        out.append(
            Change(
                "PowerSourceUnreachable",
                f"{new.source} cannot be read ({new.error}); no battery decision is made on a "
                "guess until it can",
                warning=True,
            )
        )
    if new.error is None and old is not None and old.error is not None:
        out.append(Change("PowerSourceReachable", f"{new.source} reads again: {new.mains}"))
    if new.mains is was or new.mains is Mains.UNKNOWN:
        return out
    detail = _figures(new)
    if new.mains is Mains.ON_BATTERY:
        out.append(Change("MainsLost", f"the mains failed: {new.source} on battery{detail}", True))
    elif new.mains is Mains.LOW_BATTERY:
        out.append(Change("LowBattery", f"{new.source} reports low battery{detail}", True))
    elif was is not None:
        out.append(Change("MainsBack", f"the mains are back: {new.source} online{detail}"))
    return out


def _figures(status: BatteryStatus) -> str:
    parts = []
    if status.charge_percent is not None:
        parts.append(f"charge {status.charge_percent:g}%")
    if status.runtime_seconds is not None:
        parts.append(f"runtime {status.runtime_seconds}s")
    return f" ({', '.join(parts)})" if parts else ""


@dataclass(frozen=True)
class Condition:
    """A Group condition, as `actuation.inputs.merged_conditions` merges it."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str


def conditions(status: BatteryStatus) -> tuple[Condition, Condition]:
    """The Group's `PowerSourceReachable` and `OnBattery` conditions."""
    reachable = status.error is None
    on_battery = status.mains in (Mains.ON_BATTERY, Mains.LOW_BATTERY)
    flags = status.ups_status or "no status"
    return (
        Condition(
            ConditionType.POWER_SOURCE_REACHABLE,
            ConditionStatus.TRUE if reachable else ConditionStatus.FALSE,
            "Read" if reachable else "Unreachable",
            f"{status.source}: {flags if reachable else status.error}",
        ),
        Condition(
            ConditionType.ON_BATTERY,
            ConditionStatus.TRUE if on_battery else ConditionStatus.FALSE,
            str(status.mains),
            f"{status.source}: {status.mains}{_figures(status)}",
        ),
    )


def describe(status: BatteryStatus) -> str:
    """`status.battery` in a few words (`lightsout status`): "OnBattery 80% 900s left"."""
    if status.error is not None:
        return f"unreadable ({status.error})"
    parts = [str(status.mains)]
    if status.charge_percent is not None:
        parts.append(f"{status.charge_percent:g}%")
    if status.runtime_seconds is not None:
        parts.append(f"{status.runtime_seconds}s left")
    return " ".join(parts)
