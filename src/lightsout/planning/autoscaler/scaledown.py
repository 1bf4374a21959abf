"""Scale-down: which Ready machines are unneeded, and which of those to power off now.

Called by `lightsout.planning.autoscaler.autoscale.plan` after scale-up, on the bins scale-up left
(pending pods already placed on them). A Ready machine of a builtin Group with autoscaling enabled
is *unneeded* when:

- no pending pod is expected to run on it (a machine powered on for a pod keeps it);
- its utilisation (requests of pods other than DaemonSet and mirror pods over allocatable, the
  larger of cpu and memory) is under the Group's scaleDown.utilizationThreshold;
- none of its pods carries `lightsout.dev/do-not-disrupt: "true"` (or cluster-autoscaler's
  `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`), lacks a controller (it would
  not come back after eviction), or is selected by a PodDisruptionBudget allowing no disruption;
- none of its pods is a Job's that has run for less than the Group's scaleDown.jobGraceSeconds
  (counted from the pod's start): evicting it would restart the Job's work from zero. Past
  that, or with 0, the pod is movable like any other (cluster-autoscaler's rule);
- every such pod fits on the other Ready nodes. Machines are considered one by one and the
  space their pods would take is reserved, so two machines never count on the same free space,
  and a machine found unneeded no longer offers its own space to the others.

An unneeded machine is powered off once it has been unneeded for scaleDown.unneededSeconds
(`auto`: its break-even time, weighed by the Group's price from the moment it became unneeded,
`planning.autoscaler.breakeven`), outside
scaleDown.stabilizationWindowSeconds after the Group's last scale-up (and never while the same
plan powers machines on in its Group), without taking the Group below minNodes, and at most
scaleDown.maxConcurrentOperations at once counting those already powering off. It also stays
on while a wear limit holds it (minimumOnSeconds, maxPowerCyclesPerDay), and while announced
demand it would serve (a CronJob's next run no needed Ready machine can take) comes sooner than
powering it off and on again would pay: its shutdown time plus the run's pre-warming lead time,
which is one break-even time plus the lead's margin. That gap is known, so the price does not
enter: a cycle draws in the same hours staying on would, and saves only the time in between.
A machine pre-warmed for such a run stays on until the run comes, however long that is: one
powered on no earlier than the run's longest lead before it (`prewarm.Lead.longest`, its
lead were no boot learned), which its lead may have been when it came on. Its boot, learned
on the way, shortens the lead (a 600 s boot timeout to a 60 s boot), and the run, no longer
due, would otherwise leave it idle past its unneeded time, powered off minutes before the run
and on again for it: two boots for one run, and the run at risk of waiting for the second.

Beside each machine's note (words), `ScaleDown.holds` says as a `Hold` why a Ready machine it
could power off stays on: the replay's energy breakdown (`simulate.replay.charges`) charges a Ready
machine's idle time to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.models.enums import Autoscaler
from lightsout.planning.autoscaler.breakeven import unneeded_seconds, wear_hold
from lightsout.planning.autoscaler.cluster import (
    Availability,
    Bin,
    Cluster,
    MachineInfo,
    PodClass,
    count_fit,
)
from lightsout.planning.autoscaler.decisions import Hold, PowerOff
from lightsout.planning.autoscaler.explain import listed
from lightsout.planning.autoscaler.scheduling import fits, placement_reasons, selector_matches
from lightsout.planning.policy import EnergyModel, power_off_rank
from lightsout.state.resources import CPU, MEMORY
from lightsout.state.types import DisruptionBudget, ExpectedPod, ObjectKey, Pod

#: The owner kind whose running pods keep their machine for scaleDown.jobGraceSeconds.
JOB = "Job"


@dataclass(frozen=True, slots=True)
class Upcoming:
    """An announced pod (a CronJob's next run) and how long before it pre-warming acts."""

    pod: ExpectedPod
    lead_seconds: float
    #: How early pre-warming may have acted for it (`prewarm.Lead.longest`); None: the lead.
    longest_seconds: float | None = None


@dataclass
class ScaleDown:
    actions: list[PowerOff] = field(default_factory=list)
    unneeded_since: dict[ObjectKey, datetime] = field(default_factory=dict)
    notes: dict[ObjectKey, str] = field(default_factory=dict)
    #: Why each Ready machine of a builtin Group that is not powered off stays on.
    holds: dict[ObjectKey, Hold] = field(default_factory=dict)


def scale_down(
    cluster: Cluster,
    energy: EnergyModel,
    budgets: Sequence[DisruptionBudget],
    previous: Mapping[ObjectKey, datetime],
    scaling_up: Set[ObjectKey],
    *,
    upcoming: Sequence[Upcoming] = (),
) -> ScaleDown:
    candidates, notes = _candidates(cluster, energy)
    result = ScaleDown(notes=notes, holds=dict.fromkeys(notes, Hold.PINNED))
    bins = {b.name: b for b in cluster.ready_bins}
    # Each Ready node's free room less what the pods of unneeded machines would take there.
    free: dict[str, Mapping[str, int]] = {b.name: b.free for b in cluster.ready_bins}
    removed: set[str] = set()
    unneeded: list[tuple[MachineInfo, float, int]] = []
    for info, utilisation in candidates:
        assert info.group is not None
        threshold = info.group.scale_down.utilization_threshold
        target = bins.get(info.machine.kubernetes_node_name)
        movable = [
            pod
            for pod in cluster.pods_by_node.get(info.machine.kubernetes_node_name, ())
            if not (pod.daemonset or pod.mirror or pod.terminal or pod.deleting)
        ]
        grace = info.group.scale_down.job_grace_seconds
        why = _needed(
            target, utilisation, threshold, movable, budgets, job_grace=grace, now=cluster.now
        )
        if why is None:
            moved = _reschedule(cluster, info, movable, removed, free)
            if isinstance(moved, str):
                why = Hold.BUSY, moved
            else:
                free.update(moved)
        elif why[0] is Hold.JOB_GRACE and isinstance(
            _reschedule(cluster, info, movable, removed, free), str
        ):
            # Its pods could not move anyway: the grace is not what keeps it on.
            why = Hold.BUSY, why[1]
        if why is not None:
            result.holds[info.key], text = why
            result.notes[info.key] = f"needed: {text}"
            continue
        removed.add(info.machine.kubernetes_node_name)
        unneeded.append((info, utilisation, len(movable)))

    planned: dict[ObjectKey, int] = {}
    for info, utilisation, pods in unneeded:
        group = info.group
        assert group is not None
        since = previous.get(info.key, cluster.now)
        result.unneeded_since[info.key] = since
        # Compared unrounded: a wait of 97.5 s (a fractional break-even, or a multiple of one)
        # is over at its deadline, the moment `wake.next_wake` wakes the planner for, and no
        # deadline is left after it; truncated to 97 s it stayed on until something changed.
        elapsed_seconds = (cluster.now - since).total_seconds()
        elapsed = int(elapsed_seconds)
        wait, source = unneeded_seconds(info.machine, group, energy, since)
        held = (
            (
                (Hold.UNNEEDED_WAIT, f"only for {elapsed}s of {wait:.0f}s ({source})")
                if elapsed_seconds < wait
                else None
            )
            or _held_back(cluster, info, planned.get(group.key, 0), scaling_up)
            or _announced(cluster, info, upcoming, removed, free)
            or _worn(info, cluster.now)
        )
        if held is not None:
            result.holds[info.key], text = held
            result.notes[info.key] = f"unneeded, but {text}"
            continue
        planned[group.key] = planned.get(group.key, 0) + 1
        moving = {0: "no pod to move", 1: "its 1 pod fits on another node"}.get(
            pods, f"its {pods} pods fit on other nodes"
        )
        reason = (
            f"unneeded for {elapsed}s ({source} {wait:.0f}s): utilisation {utilisation:.0%} "
            f"under {group.scale_down.utilization_threshold:.0%} and {moving}"
        )
        result.actions.append(PowerOff(info.key, group.key, reason, group.dry_run))
        result.notes[info.key] = f"powering off: {reason}"
    return result


def _candidates(
    cluster: Cluster, energy: EnergyModel
) -> tuple[list[tuple[MachineInfo, float]], dict[ObjectKey, str]]:
    """The Ready machines scale-down may power off, with their utilisation, in the order they
    are considered; and why each other Ready machine of a builtin Group never is."""
    notes: dict[ObjectKey, str] = {}
    candidates: list[tuple[tuple[float, ...], MachineInfo, float]] = []
    for info in cluster.infos:
        group = info.group
        if info.availability is not Availability.READY or group is None:
            continue
        if group.autoscaler is not Autoscaler.BUILTIN:
            continue
        if not info.machine.autoscaling_enabled:
            notes[info.key] = (
                "pinned (autoscaling.enabled=false): never powered off by the autoscaler"
            )
            continue
        if not group.scale_down.enabled:
            notes[info.key] = f"group {group.key.name} has scaleDown.enabled=false"
            continue
        utilisation = _utilisation(cluster, info)
        order = power_off_rank(info.machine, group, energy)
        candidates.append(((*order, utilisation), info, utilisation))
    candidates.sort(key=lambda item: (item[0], item[1].key))
    return [(info, utilisation) for _, info, utilisation in candidates], notes


def _utilisation(cluster: Cluster, info: MachineInfo) -> float:
    node = info.node
    if node is None:
        return 1.0
    pods = [p for p in cluster.pods_by_node.get(node.name, ()) if not (p.daemonset or p.mirror)]
    shares = [
        sum(pod.requests.get(name) for pod in pods) / node.allocatable.get(name)
        for name in (CPU, MEMORY)
        if node.allocatable.get(name) > 0
    ]
    return max(shares, default=1.0)


def _needed(
    target: Bin | None,
    utilisation: float,
    threshold: float,
    movable: Sequence[Pod],
    budgets: Sequence[DisruptionBudget],
    *,
    job_grace: int,
    now: datetime,
) -> tuple[Hold, str] | None:
    """Why the machine is needed whatever the other nodes offer, or None."""
    if target is None:
        return Hold.BUSY, "its node is cordoned or not schedulable; left as it is"
    if target.placed:
        waiting = [pod.key for pods in target.placed.values() for pod in pods]
        return Hold.PENDING, f"pending pods are expected to run here ({listed(waiting)})"
    if utilisation >= threshold:
        return Hold.BUSY, (
            f"utilisation {utilisation:.0%} is not under the threshold {threshold:.0%}"
        )
    for pod in movable:
        if pod.do_not_disrupt:
            return Hold.BUSY, f"pod {pod.key} has {pod.do_not_disrupt}"
        if pod.owner_kind is None:
            return Hold.BUSY, (
                f"pod {pod.key} has no controller and would not come back after eviction"
            )
        end = job_grace_end(pod, job_grace, now)
        if end is not None and end > now:
            left = (end - now).total_seconds()
            return Hold.JOB_GRACE, (
                f"Job {pod.key.namespace}/{pod.owner_name or '?'} is running (pod {pod.key}, "
                f"for {job_grace - left:.0f}s): movable in {left:.0f}s "
                f"(scaleDown.jobGraceSeconds {job_grace})"
            )
        for budget in budgets:
            if budget.key.namespace != pod.key.namespace:
                continue
            if (budget.disruptions_allowed or 0) > 0:
                continue
            if selector_matches(budget.selector, pod.labels):
                return Hold.BUSY, (
                    f"PodDisruptionBudget {budget.key} allows no disruption (pod {pod.key})"
                )
    return None


def job_grace_end(pod: Pod, job_grace_seconds: int, now: datetime) -> datetime | None:
    """When a Job's pod on a node stops keeping its machine on (scaleDown.jobGraceSeconds after
    its start; `now` stands in for a start not yet known); None for another pod, or grace 0.
    `planning.autoscaler.wake` plans again at that moment."""
    if pod.owner_kind != JOB or job_grace_seconds <= 0:
        return None
    return (pod.started or pod.created or now) + timedelta(seconds=job_grace_seconds)


def _reschedule(
    cluster: Cluster,
    info: MachineInfo,
    movable: Sequence[Pod],
    removed: Set[str],
    free: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]] | str:
    """Room on the other Ready nodes (`free`) for the machine's pods: the free room left on the
    nodes they would move to when all fit, else why not. Pods that would move are not pending
    pods, so `Bin.placed` does not list them."""
    own = info.machine.kubernetes_node_name
    by_req: dict[object, list[Pod]] = {}
    for pod in movable:
        by_req.setdefault(pod.scheduling, []).append(pod)
    classes = [
        PodClass(i, pods[0].scheduling, tuple(pods)) for i, pods in enumerate(by_req.values())
    ]
    classes.sort(key=lambda c: (-c.req.requests.get(CPU), -c.req.requests.get(MEMORY)))
    placer = cluster.placer
    reserved: dict[str, dict[str, int]] = {}
    for cls in classes:
        left = len(cls.pods)
        for target in cluster.ready_bins:
            if not left:
                break
            if target.name == own or target.name in removed:
                continue
            if placer.reasons(cls, target.shape, target.view):
                continue
            room = reserved[target.name] if target.name in reserved else free[target.name]
            count = min(left, count_fit(cls.demand, room))
            if count:
                taken = {name: room.get(name, 0) - value * count for name, value in cls.demand}
                reserved[target.name] = {**room, **taken}
                left -= count
        if left:
            return f"pod {cls.pods[-left].key} would not fit on any other Ready node"
    return reserved


def _held_back(
    cluster: Cluster,
    info: MachineInfo,
    planned: int,
    scaling_up: Set[ObjectKey],
) -> tuple[Hold, str] | None:
    group = info.group
    assert group is not None
    policy = group.scale_down
    if group.key in scaling_up:
        return Hold.STABILISATION, f"group {group.key.name} is scaling up in this plan"
    if group.last_scale_up is not None:
        since = int((cluster.now - group.last_scale_up).total_seconds())
        if since < policy.stabilization_seconds:
            return Hold.STABILISATION, (
                f"within the stabilisation window: group {group.key.name} scaled up {since}s ago "
                f"(scaleDown.stabilizationWindowSeconds {policy.stabilization_seconds})"
            )
    active = cluster.active.get(group.key, 0) - planned
    if active - 1 < group.min_nodes:
        return Hold.MIN_NODES, (
            f"group {group.key.name} is at minNodes ({active} on, minimum {group.min_nodes})"
        )
    in_flight = cluster.going.get(group.key, 0) + planned
    if in_flight >= policy.max_concurrent:
        return Hold.IN_FLIGHT, (
            f"group {group.key.name} has {in_flight} power-offs in flight "
            f"(scaleDown.maxConcurrentOperations {policy.max_concurrent})"
        )
    return None


def _worn(info: MachineInfo, now: datetime) -> tuple[Hold, str] | None:
    hold = wear_hold(info.machine, now)
    return None if hold is None else (Hold.WEAR, f"{hold[1]}: on until {hold[0]:%Y-%m-%d %H:%M:%S}")


def _announced(
    cluster: Cluster,
    info: MachineInfo,
    upcoming: Sequence[Upcoming],
    removed: Set[str],
    free: Mapping[str, Mapping[str, int]],
) -> tuple[Hold, str] | None:
    """An announced pod this machine would serve, due before a power cycle would pay or
    pre-warmed for (powered on within the pod's longest lead of it)."""
    view = info.view
    if view is None:
        return None
    shutdown = info.machine.learned_shutdown_seconds or 0.0
    power_ons = info.machine.power_ons
    powered_on = power_ons[-1] if power_ons else None
    for item in upcoming:
        until = (item.pod.at - cluster.now).total_seconds()
        if until <= 0:
            continue
        longest = item.lead_seconds if item.longest_seconds is None else item.longest_seconds
        warmed = (
            powered_on is not None
            and powered_on <= cluster.now
            and (item.pod.at - powered_on).total_seconds() <= longest
        )
        if until > shutdown + item.lead_seconds and not warmed:
            continue
        req = item.pod.scheduling
        if not fits(req, view):
            continue
        # Served by a Ready machine that stays on anyway: no reason to keep this one.
        demand = tuple(req.requests)
        if any(
            b.name not in removed
            and b.name != info.machine.kubernetes_node_name
            and not placement_reasons(req, b.view)
            and count_fit(demand, free[b.name])
            for b in cluster.ready_bins
        ):
            continue
        if until <= shutdown + item.lead_seconds:
            return Hold.ANNOUNCED, (
                f"{item.pod.key} is due in {until:.0f}s, sooner than a power cycle pays "
                f"(shutdown {shutdown:.0f}s + pre-warming lead {item.lead_seconds:.0f}s)"
            )
        assert powered_on is not None
        ahead = (item.pod.at - powered_on).total_seconds()
        return Hold.ANNOUNCED, (
            f"pre-warmed for {item.pod.key}, due in {until:.0f}s: powered on {ahead:.0f}s "
            f"before it, within its lead with no boot learned ({longest:.0f}s); kept on until "
            f"it comes, not powered off and on again"
        )
    return None
