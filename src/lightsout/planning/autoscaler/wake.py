"""When the built-in planner plans: `next_wake(snapshot, plan, now)`, the moment time alone would
change its plan, and `PlanningRound`, the rule both of its drivers follow between plans.

Pure. The operator's planner loop (`handlers.autoscale`, on the event loop's clock) and the
replay (`simulate.replay.engine`, on simulated seconds) each keep one `PlanningRound` and ask it
the same two questions: when is a change planned (the debounce, and the rest after a slow plan),
and when is the next plan if nothing changes (the plan's next wake, or a retry after a write
lost a race). So simulated and real plans are made at the same moments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from lightsout.models.enums import Autoscaler
from lightsout.planning.autoscaler.battery import deadlines
from lightsout.planning.autoscaler.breakeven import unneeded_seconds, wear_hold
from lightsout.planning.autoscaler.cluster import SCHEDULER_GRACE
from lightsout.planning.autoscaler.decisions import Plan
from lightsout.planning.autoscaler.prewarm import next_due
from lightsout.planning.autoscaler.scaledown import job_grace_end
from lightsout.planning.autoscaler.windows import moments as window_moments
from lightsout.planning.policy import EnergyModel
from lightsout.state.types import Snapshot

#: Seconds to let a burst of changes settle into one plan (a Deployment scaled to twenty
#: replicas makes one plan, not twenty).
DEBOUNCE = 0.1
#: After a plan that took t seconds to compute, a change is planned for no sooner than this many
#: t later: the planner (every machine parsed, every pod placed) holds the GIL, and while
#: thousands of machines are first seen it would otherwise plan after every event and starve
#: their passes. A plan of a few milliseconds (a homelab) is not slowed down in any way one
#: could notice; a replayed plan takes no simulated time, so the replay never rests.
PLAN_REST = 3.0
#: Seconds before planning again when a write lost a race and no watch event came meanwhile:
#: the machine's watch event wakes the planner; this is only a safety net, slow enough never
#: to spin if that event is late.
CONFLICT_RETRY = 2.0


@dataclass
class PlanningRound:
    """When the planner plans next, in seconds on its driver's clock."""

    #: Before this, a change is not planned (`PLAN_REST` after the last plan).
    rest_until: float = 0.0

    def change_planned_at(self, now: float) -> float:
        """When a change seen at `now` is planned: one debounce later, rested."""
        return max(now + DEBOUNCE, self.rest_until)

    def planned(
        self, now: float, took: float, wake: float | None, conflicts: bool = False
    ) -> float | None:
        """A plan that took `took` seconds to compute has been applied at `now`; `wake` is its
        `next_wake` on this clock. When to plan again if nothing changes (None: not until a
        change)."""
        self.rest_until = now + PLAN_REST * took
        if conflicts:
            wake = now + CONFLICT_RETRY if wake is None else min(wake, now + CONFLICT_RETRY)
        return None if wake is None else max(wake, now + DEBOUNCE)


def next_wake(snapshot: Snapshot, plan: Plan, now: datetime) -> datetime | None:
    """The earliest future moment at which the same snapshot would give a different plan.

    Time alone changes a plan only through deadlines: a machine's unneeded time running out
    (a fixed one or its break-even time), a wear limit letting go, a Group's scale-down
    stabilisation window closing, a running Job's pod passing its Group's
    scaleDown.jobGraceSeconds, a pending pod passing its Group's scale-up window, the planner's
    grace for the scheduler's verdicts running out, a schedule window opening or closing (a
    floor one boot ahead of its opening), and an expected pod (a CronJob run) entering
    its pre-warming lead time, a UPS on battery for longer than a Group's `onBatterySeconds`,
    the mains back for long enough to restore, a held deferrable Job's start. Between them
    nothing but a watched change can alter the plan, so the autoscaler sleeps.
    """
    moments: list[datetime] = deadlines(snapshot, now)
    # A held deferrable Job's cheapest start (`planning.autoscaler.deferral`).
    moments.extend(wait.start for wait in plan.waits.values())
    groups = {group.key: group for group in snapshot.groups}
    machines = {machine.key: machine for machine in snapshot.machines}
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    for key, since in plan.unneeded_since.items():
        machine = machines.get(key)
        group = groups.get(machine.group_key) if machine else None
        if machine is None or group is None:
            continue
        wait, _ = unneeded_seconds(machine, group, energy, since)
        if math.isfinite(wait):
            moments.append(since + timedelta(seconds=wait))
        hold = wear_hold(machine, now)
        if hold is not None:
            moments.append(hold[0])
        if group.last_scale_up is not None:
            window = timedelta(seconds=group.scale_down.stabilization_seconds)
            moments.append(group.last_scale_up + window)
    group_of = {
        machine.kubernetes_node_name: groups[machine.group_key]
        for machine in snapshot.machines
        if machine.group_key in groups
    }
    for pod in snapshot.pods:
        group = group_of.get(pod.node_name or "")
        if group is not None and not (pod.terminal or pod.deleting):
            end = job_grace_end(pod, group.scale_down.job_grace_seconds, now)
            if end is not None:
                moments.append(end)
    pending = [pod for pod in snapshot.pods if pod.pending_unschedulable]
    if pending:
        windows = {
            group.scale_up.stabilization_seconds
            for group in snapshot.groups
            if group.autoscaler is Autoscaler.BUILTIN
        }
        for pod in pending:
            since = pod.unschedulable_since or pod.created or now
            moments.append(since + SCHEDULER_GRACE)
            moments.extend(since + timedelta(seconds=w) for w in windows)
        ready = [node.ready_since for node in snapshot.nodes]
        ready += [machine.phase_since for machine in snapshot.machines]
        moments.extend(moment + SCHEDULER_GRACE for moment in ready if moment is not None)
    for group in snapshot.groups:
        if group.windows and group.autoscaler is Autoscaler.BUILTIN:
            moments.extend(window_moments(group, snapshot.machines, now))
    prewarm = next_due(snapshot, now)
    if prewarm is not None:
        moments.append(prewarm)
    future = [moment for moment in moments if moment > now]
    return min(future, default=None)


__all__ = ["CONFLICT_RETRY", "DEBOUNCE", "PLAN_REST", "PlanningRound", "next_wake"]
