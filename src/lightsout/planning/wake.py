"""When time alone would change the autoscaler's plan: `next_wake(snapshot, plan, now)`.

Pure. The autoscaler handler (through `execution.scaling`) sleeps until this moment when no
watched change wakes it first; the replay simulator (`lightsout.simulate.replay.engine`) wakes the
planner at the same moments, so simulated and real plans are made at the same times.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from lightsout.models.enums import Autoscaler
from lightsout.planning.breakeven import unneeded_seconds, wear_hold
from lightsout.planning.cluster import SCHEDULER_GRACE
from lightsout.planning.decisions import Plan
from lightsout.planning.policy import EnergyModel
from lightsout.planning.prewarm import next_due
from lightsout.planning.scaledown import job_grace_end
from lightsout.planning.windows import moments as window_moments
from lightsout.state.types import Snapshot


def next_wake(snapshot: Snapshot, plan: Plan, now: datetime) -> datetime | None:
    """The earliest future moment at which the same snapshot would give a different plan.

    Time alone changes a plan only through deadlines: a machine's unneeded time running out
    (a fixed one or its break-even time), a wear limit letting go, a Group's scale-down
    stabilisation window closing, a running Job's pod passing its Group's
    scaleDown.jobGraceSeconds, a pending pod passing its Group's scale-up window, the planner's
    grace for the scheduler's verdicts running out, a schedule window opening or closing (a
    floor one boot ahead of its opening), and an expected pod (a CronJob run) entering
    its pre-warming lead time. Between them nothing but a watched change can alter the plan, so
    the autoscaler sleeps.
    """
    moments: list[datetime] = []
    groups = {group.key: group for group in snapshot.groups}
    machines = {machine.key: machine for machine in snapshot.machines}
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    for key, since in plan.unneeded_since.items():
        machine = machines.get(key)
        group = groups.get(machine.group_key) if machine else None
        if machine is None or group is None:
            continue
        wait, _ = unneeded_seconds(machine, group, energy)
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


__all__ = ["next_wake"]
