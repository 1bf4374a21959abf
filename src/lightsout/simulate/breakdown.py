"""Where a replay's energy went, per machine and cause, beside the offline bound's schedule.

`lightsout simulate TRACE --breakdown` prints it (and `-o json` gives it under `breakdown`);
`benchmarks.simulator` and docs/simulator.md's Figures use it to say where Lights-Out spends
above the bound. Each `SimMachine` carries a `Charges`, which its `count_energy` feeds with
every interval the ledger counts (the same seconds, the same `planning.energy.Draw`), so the
causes of a machine add up to its ledger's energy:

- **standby**: its `offWatts` all the time, which every schedule pays, the bound's included;
- **load**: its pods' share, `(on - idle) x cpu share`, wherever it was counted;
- and its idle draw above standby, charged by phase: **poweringOn** (PoweringOn, Provisioning,
  Booting), **shuttingDown** (Draining, PoweringOff, Deprovisioning), **other** (Failed,
  Unknown) and, while Ready, **busy** (pods running), **jobGrace** (pods running, but only a
  Job's grace keeps them there: the planner found the machine otherwise movable) or **idle**
  (no pod), split by the planner's last `Hold` for the machine (`planning.decisions.Hold`:
  waiting out its unneeded time, kept for pending or pre-warmed pods, an announced run,
  minNodes, ...; "unplanned" until a plan names one).

The bound's side (`optimum.ScheduleEnergy`) has standby, load, `up` (above standby while up)
and `cycles` (power-on, boot and shutdown above standby); Lights-Out's causes are grouped the
same way (`GROUPS`) to subtract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from lightsout.models.enums import Phase
from lightsout.planning.decisions import Hold
from lightsout.planning.energy import Draw, is_powered

if TYPE_CHECKING:
    from lightsout.simulate.machines import SimMachine
    from lightsout.simulate.optimum import ScheduleEnergy

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

#: Lights-Out's causes as the bound's schedule counts them (`optimum.ScheduleEnergy`).
GROUPS: Mapping[str, tuple[Cause, ...]] = {
    "standby": (Cause.STANDBY,),
    "load": (Cause.LOAD,),
    "up": (Cause.BUSY, Cause.JOB_GRACE, Cause.IDLE, Cause.OTHER),
    "cycles": (Cause.POWERING_ON, Cause.SHUTTING_DOWN),
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
        """Charge `seconds` in this state: what `Ledger.advance` counts for them, split."""
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


def breakdown(
    machines: Iterable[SimMachine], schedule: Sequence[ScheduleEnergy] | None = None
) -> list[dict[str, Any]]:
    """Per machine: its kWh by cause, and, given the bound's schedule, that schedule's kWh by
    group (`GROUPS`) and how much more Lights-Out spent in each (`aboveBound`)."""
    theirs = {s.name: s for s in schedule or ()}
    rows: list[dict[str, Any]] = []
    for machine in machines:
        charges = machine.charges
        row: dict[str, Any] = {
            "name": machine.name,
            "kWh": round(charges.total_wh / 1000, 6),
            "causes": charges.as_json(),
        }
        other = theirs.get(machine.name)
        if other is not None:
            ours = {group: charges.of(*causes) / 1000 for group, causes in GROUPS.items()}
            row["bound"] = other.as_json()
            row["aboveBound"] = {g: round(ours[g] - other.kwh_of(g), 6) for g in GROUPS}
        rows.append(row)
    return rows


def render(rows: Sequence[Mapping[str, Any]], schedule_note: str | None) -> str:
    """The breakdown as text: a line per machine, its causes largest first, and the bound's."""
    lines = ["energy by machine and cause, kWh (standby: offWatts all week, paid by any schedule)"]
    for row in rows:
        causes = row["causes"]
        # What rounds to 0.000 is left out (a plan's 0.1 s, say).
        parts = [
            (f"idle ({hold})", kwh)
            for hold, kwh in causes[Cause.IDLE.value].items()
            if round(kwh, 3) > 0
        ]
        parts += [(k, v) for k, v in causes.items() if k != Cause.IDLE.value and round(v, 3) > 0]
        parts.sort(key=lambda part: -part[1])
        text = ", ".join(f"{name} {kwh:.3f}" for name, kwh in parts)
        lines.append(f"  {row['name']}: {row['kWh']:.3f} = {text}")
        if "bound" in row:
            b, above = row["bound"], row["aboveBound"]
            lines.append(
                f"    bound's schedule: {b['kWh']:.3f} (up {b['upHours']:.1f} h, "
                f"{b['starts']:.1f} starts); Lights-Out above it: "
                + ", ".join(f"{g} {round(above[g], 3) + 0.0:+.3f}" for g in GROUPS)
            )
    if schedule_note:
        lines.append(f"  (the bound's schedule: {schedule_note})")
    return "\n".join(lines) + "\n"
