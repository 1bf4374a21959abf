"""A Group's schedule windows (`spec.windows`) applied to the planner's view of it. Pure.

`effective(group, machines, now)` is the Group the planner sizes at `now`: a floor window's
minNodes from one lead time before it opens until it closes, a ceiling window's maxNodes while
it is open, a quiet window's `quiet` while it is open (`scaleup.eligible_classes` then offers
none of the Group's machines to pods another Group could host, or to any pod when strict), the
Group's own limits otherwise. The lead is that of pre-warming
(`planning.prewarm`): the boot of the slowest of the Group's machines (its learned boot time,
else its bootTimeoutSeconds) plus `MARGIN`, so whichever machines `scaleup.top_up` chooses are
Ready when the window opens. When it closes, the floor's machines are unneeded like any other
and power off on their usual timers. `moments` are the instants a window changes the plan,
for `wake.next_wake`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lightsout.models.windows import zone
from lightsout.planning.prewarm import MARGIN
from lightsout.state.types import Group, Machine, Window


@dataclass(frozen=True, slots=True)
class InForce:
    """A window whose limits apply at some moment, and the opening they come from."""

    window: Window
    opens: datetime
    #: Applied before `opens`: only its floor, powered on ahead by `lead`.
    early: bool
    lead: timedelta

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
        if self.early:
            text += (
                f", powered on {self.lead.total_seconds():.0f}s before it opens at "
                f"{self.opens.astimezone(tz):%H:%M} (the boot of the Group's slowest machine "
                f"+ {MARGIN.total_seconds():.0f}s) so that it is Ready then"
            )
        return text


def lead(group: Group, machines: Sequence[Machine]) -> timedelta:
    """How early a floor is powered on: the slowest of the Group's machines' boot + MARGIN."""
    boots = [m.boot_estimate for m in machines if m.group_key == group.key]
    return timedelta(seconds=max(boots, default=0.0)) + MARGIN


def in_force(group: Group, now: datetime, ahead: timedelta = timedelta(0)) -> list[InForce]:
    """The windows whose limits apply at `now`: open now, or (a floor) opening within `ahead`."""
    out: list[InForce] = []
    for window in group.windows:
        times = window.times
        opened = times.open_at(now)
        if opened is not None:
            out.append(InForce(window, opened, early=False, lead=ahead))
        elif window.min_nodes is not None and ahead > timedelta(0):
            coming = times.next_opening(now)
            if coming is not None and coming <= now + ahead:
                out.append(InForce(window, coming, early=True, lead=ahead))
    return out


def effective(group: Group, machines: Sequence[Machine], now: datetime) -> Group:
    """`group` with the limits of its windows in force at `now` (itself when none is)."""
    if not group.windows:
        return group
    applied = in_force(group, now, lead(group, machines))
    if not applied:
        return group
    min_nodes, max_nodes = group.min_nodes, group.max_nodes
    quiet: str | None = None
    for entry in applied:
        if entry.window.quiet and not entry.early:
            quiet = "strict" if entry.window.strict else "quiet"
        if entry.window.min_nodes is not None:
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


def moments(group: Group, machines: Sequence[Machine], now: datetime) -> list[datetime]:
    """When the Group's windows next change its limits: a floor's power-on one lead before its
    opening, each opening, each closing."""
    ahead = lead(group, machines)
    out: list[datetime] = []
    for window in group.windows:
        times = window.times
        for opened in times.openings(now - times.duration - ahead, now + ahead, 100):
            out.extend((opened - ahead, opened, opened + times.duration))
        coming = times.next_opening(now + ahead)
        if coming is not None:
            out.extend((coming - ahead, coming))
    return [moment for moment in out if moment > now]


__all__ = ["InForce", "effective", "in_force", "lead", "moments"]
