"""Pre-warming for scheduled work: capacity for a CronJob's next run before the run exists.

A CronJob says exactly when its next pod comes. `due(snapshot, now)` turns the snapshot's
`expected` pods whose arrival is within their lead time (the slowest machine that could take
them: its learned boot time, else its bootTimeoutSeconds, plus `MARGIN`) into pending pods,
so `autoscale.plan` places them like any pending pod: on capacity that is Ready or coming, else
by powering a machine on, early enough that the run waits about nothing. `next_due` is when
the next expected pod enters its lead time, a deadline for `wake.next_wake`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from lightsout.planning.scheduling import placement_reasons, view_of_machine
from lightsout.state.types import ExpectedPod, ObjectKey, Pod, Snapshot

#: Slack on top of the boot time: the planner's debounce, the scheduler's bind, jitter.
MARGIN = timedelta(seconds=15)


def lead_time(snapshot: Snapshot, expected: ExpectedPod) -> timedelta:
    """How early the planner must act for `expected`: the slowest machine it could run on."""
    slowest = 0.0
    for machine in snapshot.machines:
        view = view_of_machine(machine, snapshot.daemonsets)
        if view is not None and not placement_reasons(expected.scheduling, view):
            slowest = max(slowest, machine.boot_estimate)
    return timedelta(seconds=slowest) + MARGIN


def lead_times(snapshot: Snapshot) -> dict[ObjectKey, timedelta]:
    """Every expected pod's lead time, computed once per plan (it reads every machine)."""
    return {expected.key: lead_time(snapshot, expected) for expected in snapshot.expected}


def due(
    snapshot: Snapshot, now: datetime, leads: Mapping[ObjectKey, timedelta] | None = None
) -> tuple[Pod, ...]:
    """Expected pods inside their lead time, as pending pods no node has refused yet."""
    leads = lead_times(snapshot) if leads is None else leads
    out: list[Pod] = []
    for expected in snapshot.expected:
        if now <= expected.at <= now + leads[expected.key]:
            out.append(
                Pod(
                    key=expected.key,
                    uid=f"expected:{expected.key}",
                    phase="Pending",
                    node_name=None,
                    scheduling=expected.scheduling,
                    owner_kind="Job",
                    unschedulable_since=now,
                    created=now,
                )
            )
    return tuple(out)


def next_due(snapshot: Snapshot, now: datetime) -> datetime | None:
    """When the next expected pod enters its lead time (None: none is coming)."""
    moments = [e.at - lead_time(snapshot, e) for e in snapshot.expected if e.at > now]
    future = [m for m in moments if m > now]
    return min(future, default=None)


__all__ = ["MARGIN", "due", "lead_time", "lead_times", "next_due"]
