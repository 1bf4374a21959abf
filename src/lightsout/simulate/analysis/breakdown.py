"""Where a replay's energy went, per machine and cause, beside the offline bound's schedule.

`lightsout simulate TRACE --breakdown` prints it (and `-o json` gives it under `breakdown`);
`benchmarks.simulator` and docs/simulator.md's Figures use it to say where Lights-Out spends
above the bound. The causes are what each replay machine counted as it went
(`replay.charges.Charges`: standby, load, and its idle draw above standby by phase and, while
Ready and idle, by the planner's last `Hold`).

The bound's side (`optimum.ScheduleEnergy`) has standby, load, `up` (above standby while up)
and `cycles` (power-on, boot and shutdown above standby); Lights-Out's causes are grouped the
same way (`GROUPS`) to subtract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lightsout.simulate.replay.charges import Cause

if TYPE_CHECKING:
    from lightsout.simulate.analysis.optimum import ScheduleEnergy
    from lightsout.simulate.replay.machines import SimMachine


#: Lights-Out's causes as the bound's schedule counts them (`optimum.ScheduleEnergy`).
GROUPS: Mapping[str, tuple[Cause, ...]] = {
    "standby": (Cause.STANDBY,),
    "load": (Cause.LOAD,),
    "up": (Cause.BUSY, Cause.JOB_GRACE, Cause.IDLE, Cause.OTHER),
    "cycles": (Cause.POWERING_ON, Cause.SHUTTING_DOWN),
}


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
