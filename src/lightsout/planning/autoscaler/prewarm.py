"""Pre-warming for scheduled work: capacity for a CronJob's next run before the run exists.

A CronJob says exactly when its next pod comes. `due(snapshot, now)` turns the snapshot's
`expected` pods whose arrival is within their lead time into pending pods, so
`autoscale.plan` places them like any pending pod: on capacity that is Ready or coming, else
by powering a machine on, early enough that the run waits about nothing. A run's `Lead` is the
boot of the slowest machine that could take it (its learned boot time, else its
bootTimeoutSeconds) plus `MARGIN`; a machine too small for the run (its requests against the
machine's room when empty, `scheduling.fits`), or that its selector, affinity or taints keep
it off, never sets it. `next_due` is when the next expected pod enters its lead time, a
deadline for `wake.next_wake`. A CronJob whose Jobs are deferrable announces no run
(`state.cron.expected_pods`): it is held at its scheduled time, and its machines come on at
its release (`deferral`).

The lead shrinks once a boot is learned: a run pre-warmed at 600 s + `MARGIN` (a boot timeout)
finds its machine Ready 9 minutes early, and from then on due only 75 s ahead (the 60 s boot
just learned), it no longer keeps the machine on as a pending pod. `Lead.longest`, the lead
with every fitting machine's boot taken at the longer of its timeout and its learned boot, is
how early pre-warming may have acted for the run: a machine powered on since then is kept on
for it by scale-down (`scaledown._announced`), so a pre-warmed machine is up when its run
comes, powered on once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from lightsout.planning.autoscaler.scheduling import fits, view_of_machine
from lightsout.state.types import ExpectedPod, Machine, ObjectKey, Pod, Snapshot

#: Slack on top of the boot time: the planner's debounce, the scheduler's bind, jitter.
MARGIN = timedelta(seconds=15)


@dataclass(frozen=True)
class Lead:
    """How early the planner must act for an expected pod, and which machine says so."""

    time: timedelta
    #: The slowest machine that can hold the pod (None: no machine can).
    machine: Machine | None = None
    #: The lead were no boot learned: each machine that can hold the pod at the longer of its
    #: bootTimeoutSeconds and its learned boot, + `MARGIN`. Pre-warming never acted earlier.
    longest: timedelta = MARGIN

    @property
    def seconds(self) -> float:
        return self.time.total_seconds()

    @property
    def longest_seconds(self) -> float:
        return self.longest.total_seconds()

    def describe(self) -> str:
        """The lead time and where it comes from, for a person: "lead time 75s: learned boot
        60s of machine nuc-1, the slowest that can hold it, + 15s margin"."""
        margin = f"{MARGIN.total_seconds():.0f}s margin"
        if self.machine is None:
            return f"lead time {self.seconds:.0f}s: no machine can hold it, {margin} only"
        boot = self.machine.boot_estimate
        how = (
            f"learned boot {boot:.0f}s"
            if self.machine.learned_boot_seconds is not None
            else f"boot timeout {boot:.0f}s (boot not learned yet)"
        )
        return (
            f"lead time {self.seconds:.0f}s: {how} of machine {self.machine.key.name}, "
            f"the slowest that can hold it, + {margin}"
        )


def lead_time(snapshot: Snapshot, expected: ExpectedPod) -> Lead:
    """How early the planner must act for `expected`: the slowest machine that could hold it
    (placement and capacity, on the machine with nothing but its DaemonSet pods)."""
    nodes = {node.name: node for node in snapshot.nodes}
    slowest: Machine | None = None
    longest = 0.0
    for machine in snapshot.machines:
        view = view_of_machine(
            machine, snapshot.daemonsets, nodes.get(machine.kubernetes_node_name)
        )
        if view is None or not fits(expected.scheduling, view):
            continue
        if slowest is None or machine.boot_estimate > slowest.boot_estimate:
            slowest = machine
        longest = max(longest, float(machine.boot_seconds), machine.boot_estimate)
    boot = slowest.boot_estimate if slowest is not None else 0.0
    return Lead(timedelta(seconds=boot) + MARGIN, slowest, timedelta(seconds=longest) + MARGIN)


def lead_times(snapshot: Snapshot) -> dict[ObjectKey, Lead]:
    """Every expected pod's lead time, computed once per plan (it reads every machine)."""
    return {expected.key: lead_time(snapshot, expected) for expected in snapshot.expected}


def due(
    snapshot: Snapshot, now: datetime, leads: Mapping[ObjectKey, Lead] | None = None
) -> tuple[Pod, ...]:
    """Expected pods inside their lead time, as pending pods no node has refused yet."""
    leads = lead_times(snapshot) if leads is None else leads
    return tuple(
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
        for expected in snapshot.expected
        if now <= expected.at <= now + leads[expected.key].time
    )


def next_due(snapshot: Snapshot, now: datetime) -> datetime | None:
    """When the next expected pod enters its lead time (None: none is coming)."""
    moments = [e.at - lead_time(snapshot, e).time for e in snapshot.expected if e.at > now]
    future = [m for m in moments if m > now]
    return min(future, default=None)


__all__ = ["MARGIN", "Lead", "due", "lead_time", "lead_times", "next_due"]
