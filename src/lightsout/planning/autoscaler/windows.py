"""A Group's schedule windows (`spec.windows`) applied to the planner's view of it. Pure.

`effective(group, machines, now)` is the Group the planner sizes at `now`: a floor window's
minNodes from one lead time before it opens until it closes, a ceiling window's maxNodes while it
is open, a quiet window's `quiet` while it is open (`scaleup.eligible_classes` then offers none of
the Group's machines to a pod while another Group's machine could be powered on for it,
`startable.could_power_on`, or to any pod when strict), the Group's own limits otherwise. The lead
is that of pre-warming (`planning.autoscaler.prewarm`): the boot (learned, else bootTimeoutSeconds)
of the slowest of the machines the floor needs plus `MARGIN`, so they are Ready when the window
opens. The floor needs the `minNodes` machines `scaleup.top_up` would power on first: the Group's
autoscaled machines that have not failed, in `policy.idle_rank` order (`floor_order`); a slow
machine the floor would not choose does not make it start early. A machine's boot estimate shrinks
once the boot the floor started is learned, and with it the lead: a floor whose opening is within
the unlearned lead (the boot timeouts) keeps the Group's machines already on (`held`), powering no
more on, so the floor's machine is not powered off again before the window opens. When it closes,
the floor's machines are unneeded like any other and power off on their usual timers. `moments` are
the instants a window changes the plan, for `wake.next_wake`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lightsout.models.enums import DesiredPowerState, Phase
from lightsout.models.windows import zone
from lightsout.planning.autoscaler.prewarm import MARGIN
from lightsout.planning.policy import EnergyModel, idle_rank
from lightsout.state.types import Group, Machine, Window


@dataclass(frozen=True, slots=True)
class InForce:
    """A window whose limits apply at some moment, and the opening they come from."""

    window: Window
    opens: datetime
    #: Applied before `opens`: only its floor, powered on ahead by `lead`.
    early: bool
    lead: timedelta
    #: Early and past its lead: only this many machines already on are kept (None: the floor).
    held: int | None = None

    @property
    def closes(self) -> datetime:
        return self.opens + self.window.times.duration

    def describe(self) -> str:
        """`window evening (18:00-23:00 Europe/Berlin): minNodes 1 until 23:00`."""
        times = self.window.times
        tz = zone(times.time_zone)
        limits = []
        if self.window.min_nodes is not None:
            limits.append(f"minNodes {self.window.min_nodes}")
        if self.window.max_nodes is not None and not self.early:
            limits.append(f"maxNodes {self.window.max_nodes}")
        if self.window.quiet and not self.early:
            limits.append("quiet, strict" if self.window.strict else "quiet")
        text = (
            f"window {times.name} ({times.span(self.opens)}): {', '.join(limits)} "
            f"until {self.closes.astimezone(tz):%H:%M}"
        )
        if self.held is not None:
            text += (
                f", {self.held} machine(s) already on kept for it (it opens at "
                f"{self.opens.astimezone(tz):%H:%M})"
            )
        elif self.early:
            text += (
                f", powered on {self.lead.total_seconds():.0f}s before it opens at "
                f"{self.opens.astimezone(tz):%H:%M} (the boot of the slowest machine it needs "
                f"+ {MARGIN.total_seconds():.0f}s) so that it is Ready then"
            )
        return text


def floor_order(group: Group, machines: Sequence[Machine]) -> list[Machine]:
    """The Group's machines a floor may power on, first choice first, as `scaleup.top_up`
    ranks them (`policy.idle_rank`; a machine's declared resources stand for its allocatable)."""
    energy = EnergyModel.of(machines, (group,))
    own = [
        m
        for m in machines
        if m.group_key == group.key and m.autoscaling_enabled and m.phase is not Phase.FAILED
    ]
    return sorted(own, key=lambda m: (idle_rank(m, group, energy, m.resources), str(m.key)))


def lead(group: Group, machines: Sequence[Machine], floor: int, *, cold: bool = False) -> timedelta:
    """How early a floor of `floor` machines is powered on: the boot of the slowest of the
    first `floor` in `floor_order` + MARGIN; `cold`: with each boot at least its timeout (the
    longest it can have been before it was learned)."""
    needed = floor_order(group, machines)[:floor]
    boots = [max(m.boot_estimate, m.boot_seconds) if cold else m.boot_estimate for m in needed]
    return timedelta(seconds=max(boots, default=0.0)) + MARGIN


def leads(group: Group, machines: Sequence[Machine]) -> dict[str, timedelta]:
    """Each floor window's lead, by window name."""
    return {w.times.name: lead(group, machines, w.min_nodes) for w in group.windows if w.min_nodes}


def in_force(
    group: Group, now: datetime, ahead: Mapping[str, timedelta] | None = None
) -> list[InForce]:
    """The windows whose limits apply at `now`: open now, or (a floor) opening within its lead
    in `ahead` (by window name)."""
    out: list[InForce] = []
    for window in group.windows:
        times = window.times
        early = (ahead or {}).get(times.name, timedelta(0))
        opened = times.open_at(now)
        if opened is not None:
            out.append(InForce(window, opened, early=False, lead=early))
        elif window.min_nodes and early > timedelta(0):
            coming = times.next_opening(now)
            if coming is not None and coming <= now + early:
                out.append(InForce(window, coming, early=True, lead=early))
    return out


def effective(group: Group, machines: Sequence[Machine], now: datetime) -> Group:
    """`group` with the limits of its windows in force at `now` (itself when none is)."""
    if not group.windows:
        return group
    applied = in_force(group, now, leads(group, machines))
    applied += _held(group, machines, now, {entry.window.times.name for entry in applied})
    if not applied:
        return group
    min_nodes, max_nodes = group.min_nodes, group.max_nodes
    quiet: str | None = None
    for entry in applied:
        if entry.window.quiet and not entry.early:
            quiet = "strict" if entry.window.strict else "quiet"
        if entry.held is not None:
            min_nodes = max(min_nodes, entry.held)
        elif entry.window.min_nodes is not None:
            min_nodes = entry.window.min_nodes
        if entry.window.max_nodes is not None and not entry.early:
            max_nodes = entry.window.max_nodes
    return replace(
        group,
        min_nodes=min(min_nodes, max_nodes),
        max_nodes=max_nodes,
        quiet=quiet,
        window_note="; ".join(entry.describe() for entry in applied),
    )


def _held(
    group: Group, machines: Sequence[Machine], now: datetime, applied: set[str]
) -> list[InForce]:
    """Floors not yet in force whose opening is within their cold lead, holding the Group's
    machines already on (up to the floor)."""
    on = sum(1 for m in machines if m.group_key == group.key and m.desired is DesiredPowerState.ON)
    out: list[InForce] = []
    for window in group.windows:
        if not on or not window.min_nodes or window.times.name in applied:
            continue
        cold = lead(group, machines, window.min_nodes, cold=True)
        coming = window.times.next_opening(now)
        if coming is not None and coming <= now + cold:
            held = min(on, window.min_nodes)
            out.append(InForce(window, coming, early=True, lead=cold, held=held))
    return out


def moments(group: Group, machines: Sequence[Machine], now: datetime) -> list[datetime]:
    """When the Group's windows next change its limits: a floor's power-on one lead before its
    opening, each opening, each closing."""
    early = leads(group, machines)
    out: list[datetime] = []
    for window in group.windows:
        times = window.times
        ahead = early.get(times.name, timedelta(0))
        for opened in times.openings(now - times.duration - ahead, now + ahead, 100):
            out.extend((opened - ahead, opened, opened + times.duration))
        coming = times.next_opening(now + ahead)
        if coming is not None:
            out.extend((coming - ahead, coming))
    return [moment for moment in out if moment > now]


__all__ = ["InForce", "effective", "floor_order", "in_force", "lead", "leads", "moments"]
