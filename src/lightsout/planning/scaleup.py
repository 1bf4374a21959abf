"""Scale-up: which powered-off machines to power on so that pending pods can run.

Called by `lightsout.planning.autoscale.plan` in three steps:

1. `absorb`: capacity that exists or is on its way takes pending pods first — Ready nodes the
   scheduler may not have tried yet (see `cluster.SCHEDULER_GRACE`), and machines already
   powering on (their pods placed virtually, so a second machine is not started for them). A
   machine coming up takes pods as kube-scheduler will bind them: the one expected Ready first
   (`ready_in`: learned boot less the time since its power-on Job started) takes the oldest
   pods that fit, whatever their class; and a pod is only counted on one that is Ready no later
   than a fresh power-on of an off machine would be (plus `COMING_MARGIN_SECONDS`; a machine
   whose boot is not learned yet always counts), else it is left to `choose` and its
   explanation says why.
2. `choose`: the rest are bin-packed onto a *set* of powered-off machines. Greedy: at each step
   every distinct candidate (identical machines collapse into one offer) is filled first-fit
   decreasing with the remaining pods; each Group's selection policy picks its best offer,
   `policy.best` picks among Groups; identical machines that would be filled identically are
   taken in one step. Each Group's room (maxNodes, and scaleUp.maxConcurrentOperations less the
   power-on operations in flight, booting machines apart) bounds it. Then machines whose pods
   fit on the others are dropped.
3. `top_up`: Groups below minNodes get their cheapest machines powered on.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lightsout.models.enums import Autoscaler, Phase, SelectionPolicy
from lightsout.planning.cluster import (
    SCHEDULER_GRACE,
    Availability,
    Bin,
    Cluster,
    MachineInfo,
    PodClass,
    count_fit,
    since_verdict,
)
from lightsout.planning.packing import drop_redundant
from lightsout.planning.policy import EnergyModel, Fill, best, fill_of, idle_rank, rank
from lightsout.state.types import Group, ObjectKey, Pod


@dataclass(eq=False)
class Offer:
    """Identical powered-off machines of one Group, tried as one candidate."""

    group: Group
    machines: list[MachineInfo]
    allocatable: dict[str, int]
    #: Room on an empty machine: allocatable less its DaemonSet pods.
    empty: dict[str, int]
    taken: int = 0
    #: The last simulated fill, reused until `_Simulated.stale`.
    cached: _Simulated | None = None
    #: Nothing pending fits: pods only ever leave, so nothing ever will.
    spent: bool = False
    #: Some class the cached fill took pods from has lost pods since.
    dirty: bool = True

    @property
    def first(self) -> MachineInfo:
        return self.machines[self.taken]

    @property
    def left(self) -> int:
        return len(self.machines) - self.taken


@dataclass(eq=False)
class _Simulated:
    """One empty machine of an offer filled first-fit decreasing with the remaining pods."""

    #: (class, pods placed, the class's remaining count when simulated)
    placed: list[tuple[PodClass, int, int]]
    fill: Fill
    rank: tuple[float, ...]

    def stale(self) -> bool:
        """Whether filling again could differ. A class that was capped by room gives the same
        count while it still has that many pods; one that ran out must not have changed."""
        return any(
            cls.remaining != before and (before == count or cls.remaining < count)
            for cls, count, before in self.placed
        )


@dataclass(eq=False)
class Chosen:
    """A machine the plan powers on, with the pods placed on it."""

    bin: Bin
    fill: Fill
    pods: list[Pod] = field(default_factory=list)


#: How much later than a fresh power-on of an off machine a machine already coming up may be
#: Ready and still be counted on for a pending pod. Beyond it the pod is left to `choose`: a
#: CI pod should not wait four minutes for a big server when a NUC boots in fifty seconds.
#: Small, so a second machine is only started when it really saves its boot's worth of wait.
COMING_MARGIN_SECONDS = 10.0


def ready_in(info: MachineInfo, now: datetime) -> float:
    """Expected seconds until a machine coming up is Ready: its boot estimate (learned, else
    the boot timeout) less the time already spent since its power-on Job started (the last
    `status.learned.powerOns` entry; the phase's start when none is recorded)."""
    machine = info.machine
    if machine.phase is Phase.READY:
        return 0.0  # Ready, only its startup taint left
    if machine.phase in (None, Phase.OFF):
        return machine.boot_estimate  # the power-on Job has not started yet
    started = machine.power_ons[-1] if machine.power_ons else machine.phase_since
    if started is None:
        return machine.boot_estimate
    return max(0.0, machine.boot_estimate - (now - started).total_seconds())


@dataclass(frozen=True)
class FreshPowerOn:
    """The quickest powered-off machine a class of pods could get, and when it would be Ready."""

    info: MachineInfo
    seconds: float


def fresh_power_on(
    cluster: Cluster, cls: PodClass, room: Mapping[ObjectKey, int]
) -> FreshPowerOn | None:
    """The off machine that would be Ready soonest for `cls`'s oldest remaining pod if powered
    on now: its Group has room, the pod may run on it, one pod fits on it empty, and its
    Group's scale-up window (which the pod must wait out first) is counted in."""
    if not cls.remaining:
        return None
    age = since_verdict(cls.pods[cls.lo], cluster.now)
    found: FreshPowerOn | None = None
    for info in cluster.infos:
        group, view = info.group, info.view
        if info.availability is not Availability.OFF or not info.managed:
            continue
        if view is None or group is None or room.get(group.key, 0) <= 0:
            continue
        if cluster.placer.reasons(cls, info.shape, view):
            continue
        if not count_fit(cls.demand, view.free.as_dict()):
            continue
        window = max(0.0, group.scale_up.stabilization_seconds - age)
        seconds = window + info.machine.boot_estimate
        if found is None or seconds < found.seconds:
            found = FreshPowerOn(info, seconds)
    return found


def absorb(
    cluster: Cluster,
    classes: list[PodClass],
    notes: dict[ObjectKey, str],
    room: Mapping[ObjectKey, int],
    coming: dict[ObjectKey, str],
) -> dict[ObjectKey, str]:
    """Place pending pods on Ready nodes the scheduler may not have tried and on machines
    already powering on; note where each placed pod is expected to run, and in `coming` the
    machine coming up each pod counted on there waits for. Returns, for pods left over that
    fit on a machine already coming up, why they were not counted on it (that machine is Ready
    too late: see `COMING_MARGIN_SECONDS`)."""
    now, grace = cluster.now, SCHEDULER_GRACE.total_seconds()
    for cls in classes:
        ages = [-since_verdict(pod, now) for pod in cls.pods]  # ascending: oldest first
        fresh_from = bisect.bisect_right(ages, -grace)
        for target in cluster.ready_bins:
            if not cls.remaining:
                break
            node_fresh = (
                target.ready_since is not None
                and (now - target.ready_since).total_seconds() < grace
            )
            usable = cls.remaining if node_fresh else cls.hi - max(cls.lo, fresh_from)
            count = min(usable, cluster.placer.capacity(cls, target)) if usable > 0 else 0
            if count:
                pods = cls.take_back(count)
                target.add(cls, pods)
                note = f"fits on node {target.name}; the scheduler should place it there"
                notes.update((pod.key, note) for pod in pods)
    # Machines coming up, as kube-scheduler will fill them: the one Ready first takes the oldest
    # pods that fit, whatever their class.
    timed = sorted(
        (
            (ready_in(target.info, now) if target.info else 0.0, target.name, target)
            for target in cluster.coming_bins
        ),
        key=lambda entry: (entry[0], entry[1]),
    )
    fresh: dict[int, FreshPowerOn | None] = {}  # by class id, looked up when first needed
    late: dict[ObjectKey, str] = {}
    for seconds, _, target in timed:
        allowed = _in_time(
            cluster,
            target,
            seconds=seconds,
            learned=target.info is not None
            and target.info.machine.learned_boot_seconds is not None,
            classes=classes,
            room=room,
            fresh=fresh,
            late=late,
        )
        for key in _fill_oldest_first(cluster, target, allowed, notes):
            coming[key] = target.name
    return {key: note for key, note in late.items() if key not in notes}


def _in_time(
    cluster: Cluster,
    target: Bin,
    *,
    seconds: float,
    learned: bool,
    classes: list[PodClass],
    room: Mapping[ObjectKey, int],
    fresh: dict[int, FreshPowerOn | None],
    late: dict[ObjectKey, str],
) -> list[PodClass]:
    """The classes that fit on `target`, a machine coming up that is Ready in `seconds`, and
    may count on it: no off machine they could get would be Ready more than
    `COMING_MARGIN_SECONDS` sooner. The pods of the others get a note in `late`. A machine
    whose boot is not `learned` yet is always counted on: its estimate is the boot timeout, an
    upper bound, and starting a second machine on it would be a power-on bought on a guess."""
    usable: list[PodClass] = []
    for cls in classes:
        if not cls.remaining or not cluster.placer.capacity(cls, target):
            continue
        if cls.id not in fresh:
            fresh[cls.id] = fresh_power_on(cluster, cls, room)
        quicker = fresh[cls.id]
        if quicker is not None and learned and seconds > quicker.seconds + COMING_MARGIN_SECONDS:
            # No running seconds in it: the operator posts a changed note as a new event.
            note = (
                f"not counted on machine {target.name}, already powering on: machine "
                f"{quicker.info.key.name} powered on now would be Ready sooner (boot "
                f"about {quicker.info.machine.boot_estimate:.0f}s)"
            )
            late.update((pod.key, note) for pod in cls.rest() if pod.key not in late)
            continue
        usable.append(cls)
    return usable


def _fill_oldest_first(
    cluster: Cluster, target: Bin, classes: list[PodClass], notes: dict[ObjectKey, str]
) -> list[ObjectKey]:
    """Place the oldest pods of `classes` on `target` while they fit, as the scheduler binds
    pending pods oldest first: a class whose next pod does not fit drops out (its other pods
    ask the same), the others go on. Returns the pods placed."""
    now = cluster.now
    heap = [(-since_verdict(cls.pods[cls.lo], now), cls.pods[cls.lo].key, cls) for cls in classes]
    heapq.heapify(heap)
    info = target.info
    note = f"will run on machine {target.name}, already {info.state if info else 'powering on'}"
    placed: list[ObjectKey] = []
    while heap:
        _, _, cls = heapq.heappop(heap)
        fits = cluster.placer.capacity(cls, target)
        if not fits:
            continue
        # Take this class's pods up to the next class's oldest pod in one step.
        count = 1
        if heap:
            rival = heap[0][0]
            while (
                count < min(fits, cls.remaining)
                and -since_verdict(cls.pods[cls.lo + count], now) <= rival
            ):
                count += 1
        else:
            count = min(fits, cls.remaining)
        pods = cls.take_front(count)
        target.add(cls, pods)
        notes.update((pod.key, note) for pod in pods)
        placed.extend(pod.key for pod in pods)
        if cls.remaining:
            nxt = cls.pods[cls.lo]
            heapq.heappush(heap, (-since_verdict(nxt, now), nxt.key, cls))
    return placed


def eligible_classes(cluster: Cluster, classes: list[PodClass]) -> list[PodClass]:
    """The pods left after `absorb`, regrouped by the Groups whose scale-up window they are past
    (scaleUp.stabilizationWindowSeconds: how long a pod must wait before a machine is started)."""
    windows = {
        key: group.scale_up.stabilization_seconds
        for key, group in cluster.groups.items()
        if group.autoscaler is Autoscaler.BUILTIN
    }
    # A pod's eligible Groups depend only on how many distinct windows its age has passed.
    levels = sorted(set(windows.values()))
    by_level = [frozenset(k for k, w in windows.items() if w <= level) for level in levels]
    out: list[PodClass] = []
    for cls in classes:
        buckets: dict[frozenset[ObjectKey], list[Pod]] = {}
        for pod in cls.rest():
            passed = bisect.bisect_right(levels, since_verdict(pod, cluster.now))
            eligible = by_level[passed - 1] if passed else frozenset()
            buckets.setdefault(eligible, []).append(pod)
        for eligible, pods in buckets.items():
            out.append(PodClass(len(out), cls.req, pods, cls.weight, eligible))
    out.sort(key=lambda c: (-c.weight, c.pods[0].key))
    return out


def offers_of(cluster: Cluster, energy: EnergyModel) -> list[Offer]:
    offers: dict[Hashable, Offer] = {}
    for info in cluster.infos:
        if info.availability is not Availability.OFF or not info.managed:
            continue
        if info.view is None or info.group is None:
            continue
        m, policy = info.machine, info.group.selection_policy
        # Machines alike in everything their Group's policy looks at are one offer, so a
        # hundred identical boxes cost one simulation, not a hundred.
        key = (
            info.group.key,
            info.shape,
            info.view.allocatable,
            info.view.requested,
            energy.watts(m, 0.0),
            energy.watts(m, 1.0),
            m.priority if policy is SelectionPolicy.PRIORITY else 0,
            m.boot_estimate if policy is SelectionPolicy.FASTEST_BOOT else 0.0,
        )
        offer = offers.get(key)
        if offer is None:
            allocatable = info.view.allocatable.as_dict()
            offer = offers[key] = Offer(info.group, [], allocatable, info.view.free.as_dict())
        offer.machines.append(info)
    return list(offers.values())


def room_of(cluster: Cluster) -> dict[ObjectKey, int]:
    """Power-ons each builtin Group may still start: below maxNodes and within
    scaleUp.maxConcurrentOperations counting the power-on operations in flight (a machine
    already booting no longer counts, `cluster.POWERED_UP`)."""
    return {
        key: max(
            0,
            min(
                group.max_nodes - cluster.active.get(key, 0),
                group.scale_up.max_concurrent - cluster.coming.get(key, 0),
            ),
        )
        for key, group in cluster.groups.items()
        if group.autoscaler is Autoscaler.BUILTIN
    }


def choose(
    cluster: Cluster,
    classes: list[PodClass],
    room: dict[ObjectKey, int],
    energy: EnergyModel,
) -> list[Chosen]:
    """Pick machines to power on for `classes`; pods placed on them leave the classes."""
    offers = offers_of(cluster, energy)
    users: dict[int, set[Offer]] = {}  # class id -> offers whose cached fill uses it
    chosen: list[Chosen] = []
    while any(cls.remaining for cls in classes):
        per_group: dict[ObjectKey, tuple[tuple[tuple[float, ...], ObjectKey], Offer]] = {}
        for offer in offers:
            group = offer.group
            if offer.spent or not offer.left or room.get(group.key, 0) <= 0:
                continue
            if offer.dirty and (offer.cached is None or offer.cached.stale()):
                offer.cached = _simulate(cluster, offer, classes, energy)
                if offer.cached is None:
                    offer.spent = True
                    continue
                for cls, _, _ in offer.cached.placed:
                    users.setdefault(cls.id, set()).add(offer)
            offer.dirty = False
            assert offer.cached is not None
            key = (offer.cached.rank, offer.first.key)
            if group.key not in per_group or key < per_group[group.key][0]:
                per_group[group.key] = (key, offer)
        if not per_group:
            break
        winner = best([o.cached.fill for _, o in per_group.values() if o.cached is not None])
        offer = per_group[winner.group.key][1]
        assert offer.cached is not None
        placed = [(cls, count) for cls, count, _ in offer.cached.placed]
        # Identical machines filled identically: take as many as the pods and limits allow.
        copies = min(
            offer.left,
            room[offer.group.key],
            *(cls.remaining // count for cls, count in placed),
        )
        for _ in range(copies):
            info = offer.first
            offer.taken += 1
            assert info.view is not None
            target = Bin(info.view.name, info.view, info.shape, dict(offer.empty), info)
            for cls, count in placed:
                target.add(cls, cls.take_front(count))
            chosen.append(Chosen(target, offer.cached.fill))
        room[offer.group.key] -= copies
        for cls, _ in placed:
            for user in users.get(cls.id, ()):
                user.dirty = True
    drop_redundant(cluster.placer, [c.bin for c in chosen], {cls.id: cls for cls in classes})
    kept = [entry for entry in chosen if entry.bin.placed]
    for entry in chosen:
        if not entry.bin.placed and entry.bin.group_key is not None:
            room[entry.bin.group_key] += 1
    for entry in kept:
        entry.pods = [pod for pods in entry.bin.placed.values() for pod in pods]
    return kept


def _simulate(
    cluster: Cluster, offer: Offer, classes: list[PodClass], energy: EnergyModel
) -> _Simulated | None:
    """Fill an empty machine of `offer` first-fit decreasing (`classes` are heaviest first)."""
    info, group = offer.first, offer.group
    assert info.view is not None
    free = dict(offer.empty)
    placed: list[tuple[PodClass, int, int]] = []
    value = 0.0
    for cls in classes:
        if not cls.remaining or group.key not in cls.eligible:
            continue
        if cluster.placer.reasons(cls, info.shape, info.view):
            continue
        count = min(cls.remaining, count_fit(cls.demand, free))
        if count:
            for name, amount in cls.demand:
                free[name] -= amount * count
            placed.append((cls, count, cls.remaining))
            value += cls.weight * count
    if not placed:
        return None
    fill = fill_of(
        machine=info.machine,
        group=group,
        energy=energy,
        allocatable=offer.allocatable,
        free_after=free,
        value=value,
    )
    return _Simulated(placed, fill, rank(group.selection_policy, fill))


def top_up(
    cluster: Cluster,
    chosen: list[Chosen],
    room: dict[ObjectKey, int],
    energy: EnergyModel,
) -> list[tuple[MachineInfo, str]]:
    """Machines to power on because their Group is below minNodes."""
    taken = {entry.bin.info.key for entry in chosen if entry.bin.info}
    planned: dict[ObjectKey, int] = {}
    for entry in chosen:
        if entry.bin.group_key is not None:
            planned[entry.bin.group_key] = planned.get(entry.bin.group_key, 0) + 1
    out: list[tuple[MachineInfo, str]] = []
    for key, group in sorted(cluster.groups.items()):
        if group.autoscaler is not Autoscaler.BUILTIN:
            continue
        have = cluster.active.get(key, 0) + planned.get(key, 0)
        deficit = min(group.min_nodes - have, room.get(key, 0))
        if deficit <= 0:
            continue
        candidates = [
            info
            for info in cluster.infos
            if info.group is group
            and info.managed
            and info.availability is Availability.OFF
            and info.key not in taken
        ]
        candidates.sort(
            key=lambda i: (
                idle_rank(
                    group.selection_policy,
                    i.machine,
                    group,
                    energy,
                    i.view.allocatable.as_dict() if i.view else {},
                ),
                i.key,
            )
        )
        for info in candidates[:deficit]:
            out.append((info, f"group {key.name} is below minNodes ({have} of {group.min_nodes})"))
            room[key] -= 1
    return out
