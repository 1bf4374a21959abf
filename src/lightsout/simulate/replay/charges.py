"""A replay machine's energy by cause, counted as the replay goes (`SimMachine.charges`).

Each `SimMachine` carries a `Charges`, which its `count_energy` feeds with every interval its
true energy account counts (the same seconds, the same `planning.energy.account.Draw`), so the
causes of a machine add up to its energy:

- **standby**: its `offWatts` all the time, which every schedule pays, the bound's included;
- **load**: its pods' share, `(on - idle) x cpu share`, wherever it was counted;
- and its idle draw above standby, charged by phase: **poweringOn** (PoweringOn, Provisioning,
  Booting), **shuttingDown** (Draining, PoweringOff, Deprovisioning), **other** (Failed,
  Unknown) and, while Ready, **busy** (pods running), **jobGrace** (pods running, but only a
  Job's grace keeps them there: the planner found the machine otherwise movable) or **idle**
  (no pod), split by the planner's last `Hold` for the machine
  (`planning.autoscaler.decisions.Hold`: waiting out its unneeded time, kept for pending or
  pre-warmed pods, an announced run, minNodes, ...; "unplanned" until a plan names one).

`analysis.breakdown` reports them per machine, beside the offline bound's schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from lightsout.models.enums import Phase
from lightsout.planning.autoscaler.decisions import Hold
from lightsout.planning.energy.account import Draw, is_powered

_HOUR = 3600.0


class Cause(StrEnum):
    STANDBY = "standby"
    LOAD = "load"
    BUSY = "busy"
    JOB_GRACE = "jobGrace"
    IDLE = "idle"
    POWERING_ON = "poweringOn"
    SHUTTING_DOWN = "shuttingDown"
    OTHER = "other"


#: The idle cause before a plan said why the machine stays on: the always-on replay never
#: plans, and the planner runs 0.1 s after a change (a hold for pods it no longer has is stale).
UNPLANNED = "unplanned"
_STALE = frozenset({Hold.BUSY, Hold.JOB_GRACE})

_PHASE_CAUSE = {
    Phase.POWERING_ON: Cause.POWERING_ON,
    Phase.PROVISIONING: Cause.POWERING_ON,
    Phase.BOOTING: Cause.POWERING_ON,
    Phase.DRAINING: Cause.SHUTTING_DOWN,
    Phase.POWERING_OFF: Cause.SHUTTING_DOWN,
    Phase.DEPROVISIONING: Cause.SHUTTING_DOWN,
}


def cause_of(phase: Phase, pods: bool, hold: Hold | None) -> tuple[Cause, str | None]:
    """What a powered machine's idle draw is charged to in this state (and the hold, for idle)."""
    if phase is Phase.READY:
        if not pods:
            return Cause.IDLE, UNPLANNED if hold is None or hold in _STALE else hold.value
        return (Cause.JOB_GRACE if hold is Hold.JOB_GRACE else Cause.BUSY), None
    return _PHASE_CAUSE.get(phase, Cause.OTHER), None


@dataclass
class Charges:
    """One machine's energy by cause, Wh (a replay's machines each keep one)."""

    wh: dict[tuple[Cause, str | None], float] = field(default_factory=dict)

    def charge(
        self,
        seconds: float,
        draw: Draw,
        phase: Phase,
        utilisation: float,
        *,
        pods: bool,
        hold: Hold | None,
    ) -> None:
        """Charge `seconds` in this state: what its `Account` counts for them, split."""
        if seconds <= 0:
            return
        hours = seconds / _HOUR
        powered = is_powered(phase)
        standby = draw.watts(False)
        base = draw.watts(powered)
        self._add((Cause.STANDBY, None), standby * hours)
        if powered:
            self._add(cause_of(phase, pods, hold), (base - standby) * hours)
            self._add((Cause.LOAD, None), (draw.watts(powered, utilisation) - base) * hours)

    def _add(self, key: tuple[Cause, str | None], wh: float) -> None:
        self.wh[key] = self.wh.get(key, 0.0) + wh

    @property
    def total_wh(self) -> float:
        return sum(self.wh.values())

    def of(self, *causes: Cause) -> float:
        return sum(wh for (cause, _), wh in self.wh.items() if cause in causes)

    def as_json(self) -> dict[str, Any]:
        """kWh per cause; `idle` per hold."""
        out: dict[str, Any] = {cause.value: 0.0 for cause in Cause if cause is not Cause.IDLE}
        idle: dict[str, float] = {}
        for (cause, hold), wh in sorted(self.wh.items(), key=lambda item: -item[1]):
            if cause is Cause.IDLE:
                idle[hold or UNPLANNED] = round(wh / 1000, 6)
            else:
                out[cause.value] = round(out[cause.value] + wh / 1000, 6)
        out[Cause.IDLE.value] = idle
        return out
