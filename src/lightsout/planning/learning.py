"""What a machine's phase history teaches: its real boot and shutdown durations, and how often
it was powered on in the last 24 hours.

`fsm.decide` calls `learn(before, decision, now)` on every decision (pure, like the rest of the
state machine); the Node handler persists the returned record as `status.learned`, and the
replay simulator carries it between decisions the same way. `state.build` reads the medians
(`bootSeconds`, `shutdownSeconds`) and the power-on times into `state.Machine`, where the
planner uses them: pre-warming's lead time, the break-even time behind
`scaleDown.unneededSeconds: auto` (`planning.autoscaler.breakeven`), the FastestBoot policy and the
`maxPowerCyclesPerDay` wear limit.

A boot sample is the time from the start of the successful power-on Job to the machine's
Ready (Booting -> Ready with that Job succeeded); a shutdown sample the time from the start of
the successful power-off Job to Off. The figure is the median of the last `MAX_SAMPLES`, so one
slow boot (a disk check, a firmware update) among them does not move it.

`learn_draw` learns the draw from the watts a health check measured (`status.power`): a reading
while off teaches the off draw, one while on with almost no cpu requested the idle draw, and one
while pods request a good share of the cpu the busy draw (extrapolated along the linear model
of `planning.energy.account.Draw`: idle + (busy - idle) * requested share). Each figure moves a
quarter of the way to a new reading, so one odd reading (a fan spinning up) moves it little. The
reconcile pass calls it with each new reading; `state.measured` makes the learned figures win
over the declared `spec.power` in energy accounting, the planner and recorded traces.
"""

from __future__ import annotations

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
from lightsout.state.learned import median

#: How far back power-ons count for `maxPowerCyclesPerDay`.
DAY = timedelta(days=1)
_ON_PHASES = frozenset({Phase.POWERING_ON, Phase.PROVISIONING})
_OFF_PHASES = frozenset({Phase.POWERING_OFF, Phase.DEPROVISIONING})


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


#: A reading with at most this share of the cpu requested is an idle sample.
IDLE_AT_MOST = 0.1
#: The busy draw is extrapolated only from readings with at least this share requested (from
#: less, the extrapolation would multiply the meter's noise).
BUSY_FROM = 0.25
#: How far a new reading moves the learned figure.
READING_WEIGHT = 0.25


def _blend(old: float | None, reading: float) -> float:
    return round(reading if old is None else old + (reading - old) * READING_WEIGHT, 1)


def learn_draw(learned: Learned, watts: float, powered: bool, utilisation: float) -> Learned:
    """`learned` with the draw a new reading of `watts` teaches, taken while the machine was
    powered (or off) with `utilisation` of its cpu requested; unchanged when it teaches
    nothing (a reading between idle and busy shares, or a busy one before any idle one)."""
    if watts < 0:
        return learned
    if not powered:
        return replace(learned, off_watts=_blend(learned.off_watts, watts))
    if utilisation <= IDLE_AT_MOST:
        return replace(learned, idle_watts=_blend(learned.idle_watts, watts))
    if utilisation >= BUSY_FROM and learned.idle_watts is not None:
        idle = learned.idle_watts
        busy = max(idle, idle + (watts - idle) / min(utilisation, 1.0))
        return replace(learned, busy_watts=_blend(learned.busy_watts, busy))
    return learned


def _took(operation: Operation | None, now: datetime) -> int | None:
    """Seconds since the operation's Job started, when it succeeded."""
    if operation is None or operation.result is not OperationResult.SUCCEEDED:
        return None
    return max(0, round((now - operation.started).total_seconds()))


def _did(operation: Operation | None, action: Action) -> bool:
    return operation is not None and operation.action is action


__all__ = ["DAY", "learn", "learn_draw", "median"]
