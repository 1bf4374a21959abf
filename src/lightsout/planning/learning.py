"""What a machine's phase history teaches: its real boot and shutdown durations, and how often
it was powered on in the last 24 hours.

`fsm.decide` calls `learn(before, decision, now)` on every decision (pure, like the rest of the
state machine); the Node handler persists the returned record as `status.learned`, and the
replay simulator carries it between decisions the same way. `state.build` reads the medians
(`bootSeconds`, `shutdownSeconds`) and the power-on times into `state.Machine`, where the
planner uses them: pre-warming's lead time, the break-even time behind
`scaleDown.unneededSeconds: auto` (`planning.breakeven`), the FastestBoot policy and the
`maxPowerCyclesPerDay` wear limit.

A boot sample is the time from the start of the successful power-on Job to the machine's
Ready (Booting -> Ready with that Job succeeded); a shutdown sample the time from the start of
the successful power-off Job to Off. The figure is the median of the last `MAX_SAMPLES`, so one
slow boot (a disk check, a firmware update) among them does not move it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from lightsout.models.node import MAX_POWER_ONS_KEPT, MAX_SAMPLES
from lightsout.planning.types import (
    Action,
    Learned,
    MachineState,
    Operation,
    OperationResult,
    Phase,
)

#: How far back power-ons count for `maxPowerCyclesPerDay`.
DAY = timedelta(days=1)
_ON_PHASES = frozenset({Phase.POWERING_ON, Phase.PROVISIONING})
_OFF_PHASES = frozenset({Phase.POWERING_OFF, Phase.DEPROVISIONING})


def median(samples: Sequence[int]) -> int | None:
    """The learned figure of a list of samples (None: nothing learned yet)."""
    return round(statistics.median(samples)) if samples else None


def learn(
    before: MachineState, phase: Phase, operation: Operation | None, now: datetime
) -> Learned | None:
    """The machine's new `status.learned` when the move from `before.phase` to `phase` teaches
    something, else None (nothing to write)."""
    if phase is before.phase:
        return None
    old = before.learned
    if phase in _ON_PHASES:
        recent = tuple(t for t in old.power_ons if now - t < DAY)
        return replace(old, power_ons=(*recent, now)[-MAX_POWER_ONS_KEPT:])
    took = _took(operation, now)
    if took is None:
        return None
    if before.phase is Phase.BOOTING and phase is Phase.READY and _did(operation, before.on_action):
        return replace(old, boot_samples=(*old.boot_samples, took)[-MAX_SAMPLES:])
    if before.phase in _OFF_PHASES and phase is Phase.OFF and _did(operation, before.off_action):
        return replace(old, shutdown_samples=(*old.shutdown_samples, took)[-MAX_SAMPLES:])
    return None


def _took(operation: Operation | None, now: datetime) -> int | None:
    """Seconds since the operation's Job started, when it succeeded."""
    if operation is None or operation.result is not OperationResult.SUCCEEDED:
        return None
    return max(0, round((now - operation.started).total_seconds()))


def _did(operation: Operation | None, action: Action) -> bool:
    return operation is not None and operation.action is action


__all__ = ["DAY", "learn", "median"]
