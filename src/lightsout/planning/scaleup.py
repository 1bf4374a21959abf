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

Each step returns what it decided (`Absorbed`, `Choice`, `TopUp`) and changes nothing it is
given; `plan` hands each result to the next step.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from lightsout.models.enums import Autoscaler, Phase, SelectionPolicy
from lightsout.planning.cluster import (
    SCHEDULER_GRACE,
    Availability,
    Bin,
    Cluster,
    Filling,
    MachineInfo,
    PodClass,
    Waiting,
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
    allocatable: Mapping[str, int]
    #: Room on an empty machine: allocatable less its DaemonSet pods.
    empty: Mapping[str, int]
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
    placed: list[tuple[Waiting, int, int]]
    #: The machine's free room once they are.
    free: Mapping[str, int]
    fill: Fill
    rank: tuple[float, ...]

    def stale(self) -> bool:
        """Whether filling again could differ. A class that was capped by room gives the same
        count while it still has that many pods; one that ran out must not have changed."""
        return any(
            left.remaining != before and (before == count or left.remaining < count)
            for left, count, before in self.placed
        )


@dataclass(frozen=True, eq=False)
class Chosen:
    """A machine the plan powers on, with the pods placed on it."""

    bin: Bin
    fill: Fill
    pods: tuple[Pod, ...]


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
    cluster: Cluster, cls: PodClass, oldest: Pod, room: Mapping[ObjectKey, int]
) -> FreshPowerOn | None:
    """The off machine that would be Ready soonest for `oldest`, a pod of `cls`, if powered on
    now: its Group has room, the pod may run on it, one pod fits on it empty, and its Group's
    scale-up window (which the pod must wait out first) is counted in."""
    age = since_verdict(oldest, cluster.now)
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


@dataclass(frozen=True)
class Absorbed:
    """What `absorb` decided."""

    #: The cluster with the pods placed on its Ready and coming bins.
    cluster: Cluster
    #: The pods left over, per class (in the order given; a class may be left empty).
    classes: tuple[PodClass, ...]
    #: Where each placed pod is expected to run.
    notes: Mapping[ObjectKey, str]
    #: For each pod counted on a machine coming up, that machine.
    coming: Mapping[ObjectKey, str]
    #: For pods left over that fit on a machine already coming up, why they were not counted on
    #: it (that machine is Ready too late: see `COMING_MARGIN_SECONDS`).
    late: Mapping[ObjectKey, str]


def absorb(
    cluster: Cluster, classes: Sequence[PodClass], room: Mapping[ObjectKey, int]
) -> Absorbed:
    """Place pending pods on Ready nodes the scheduler may not have tried and on machines
    already powering on."""
    now, grace = cluster.now, SCHEDULER_GRACE.total_seconds()
    waiting = [Waiting(cls) for cls in classes]
    ready = [Filling(target) for target in cluster.ready_bins]
    notes: dict[ObjectKey, str] = {}
    for left in waiting:
        cls = left.cls
        ages = [-since_verdict(pod, now) for pod in cls.pods]  # ascending: oldest first
        fresh_from = bisect.bisect_right(ages, -grace)
        for target in ready:
            if not left.remaining:
                break
            since = target.bin.ready_since
            node_fresh = since is not None and (now - since).total_seconds() < grace
            usable = left.remaining if node_fresh else left.hi - max(left.lo, fresh_from)
            count = min(usable, cluster.placer.capacity(cls, target)) if usable > 0 else 0
            if count:
                pods = left.take_back(count)
                target.add(cls, pods)
                note = f"fits on node {target.name}; the scheduler should place it there"
                notes.update((pod.key, note) for pod in pods)
    # Machines coming up, as kube-scheduler will fill them: the one Ready first takes the oldest
    # pods that fit, whatever their class.
    timed = sorted(
        (
            (ready_in(target.info, now) if target.info else 0.0, target.name, index)
            for index, target in enumerate(cluster.coming_bins)
        ),
        key=lambda entry: (entry[0], entry[1]),
    )
    coming_bins = list(cluster.coming_bins)
    fresh: dict[int, FreshPowerOn | None] = {}  # by class id, looked up when first needed
    late: dict[ObjectKey, str] = {}
    coming: dict[ObjectKey, str] = {}
    for seconds, _, index in timed:
        arriving = coming_bins[index]
        verdict = _in_time(
            cluster,
            arriving,
            seconds=seconds,
            learned=arriving.info is not None
            and arriving.info.machine.learned_boot_seconds is not None,
            waiting=waiting,
            room=room,
            fresh=fresh,
        )
        fresh.update(verdict.fresh)
        for key, note in verdict.late.items():
            late.setdefault(key, note)  # the first machine found too late is the one named
        state = arriving.info.state if arriving.info else "powering on"
        note = f"will run on machine {arriving.name}, already {state}"
        coming_bins[index], takes = _fill_oldest_first(cluster, arriving, verdict.usable)
        for left, count in takes:
            pods = left.take_front(count)
            notes.update((pod.key, note) for pod in pods)
            coming.update((pod.key, arriving.name) for pod in pods)
    return Absorbed(
        cluster=replace(
            cluster,
            ready_bins=tuple(target.frozen() for target in ready),
            coming_bins=tuple(coming_bins),
        ),
        classes=tuple(left.unplaced() for left in waiting),
        notes=notes,
        coming=coming,
        late={key: note for key, note in late.items() if key not in notes},
    )


@dataclass(frozen=True)
class _InTime:
    """What `_in_time` found for one machine coming up."""

    usable: tuple[Waiting, ...]
    #: Why the pods of the other classes that fit were not counted on it.
    late: Mapping[ObjectKey, str]
    #: The quickest fresh power-ons it looked up, by class id.
    fresh: Mapping[int, FreshPowerOn | None]


def _in_time(
    cluster: Cluster,
    target: Bin,
    *,
    seconds: float,
    learned: bool,
    waiting: Sequence[Waiting],
    room: Mapping[ObjectKey, int],
    fresh: Mapping[int, FreshPowerOn | None],
) -> _InTime:
    """The classes with pods left (`waiting`) that fit on `target`, a machine coming up that is
    Ready in `seconds`, and may count on it: no off machine they could get would be Ready more
    than `COMING_MARGIN_SECONDS` sooner (`fresh`: those looked up before). A machine whose boot
    is not `learned` yet is always counted on: its estimate is the boot timeout, an upper
    bound, and starting a second machine on it would be a power-on bought on a guess."""
    usable: list[Waiting] = []
    late: dict[ObjectKey, str] = {}
    found: dict[int, FreshPowerOn | None] = {}
    for left in waiting:
        cls = left.cls
        if not left.remaining or not cluster.placer.capacity(cls, target):
            continue
        if cls.id in fresh:
            quicker = fresh[cls.id]
        else:
            quicker = found[cls.id] = fresh_power_on(cluster, cls, cls.pods[left.lo], room)
        if quicker is not None and learned and seconds > quicker.seconds + COMING_MARGIN_SECONDS:
            # No running seconds in it: the operator posts a changed note as a new event.
            note = (
                f"not counted on machine {target.name}, already powering on: machine "
                f"{quicker.info.key.name} powered on now would be Ready sooner (boot "
                f"about {quicker.info.machine.boot_estimate:.0f}s)"
            )
            late.update((pod.key, note) for pod in left.rest())
            continue
        usable.append(left)
    return _InTime(tuple(usable), late, found)


def _fill_oldest_first(
    cluster: Cluster, target: Bin, waiting: Sequence[Waiting]
) -> tuple[Bin, list[tuple[Waiting, int]]]:
    """`target` with the oldest pods of the classes in `waiting` placed on it while they fit,
    as the scheduler binds pending pods oldest first: a class whose next pod does not fit drops
    out (its other pods ask the same), the others go on. With it, how many pods of which class
    it took, in the order taken (the front of each class: `Waiting.take_front`)."""
    now = cluster.now
    # (age of the class's next pod, its key, the class, the index of that pod)
    heap = [(-since_verdict(w.cls.pods[w.lo], now), w.cls.pods[w.lo].key, w, w.lo) for w in waiting]
    heapq.heapify(heap)
    filling = Filling(target)
    takes: list[tuple[Waiting, int]] = []
    while heap:
        _, _, left, lo = heapq.heappop(heap)
        cls = left.cls
        fits = cluster.placer.capacity(cls, filling)
        if not fits:
            continue
        remaining = left.hi - lo
        # Take this class's pods up to the next class's oldest pod in one step.
        count = 1
        if heap:
            rival = heap[0][0]
            while (
                count < min(fits, remaining) and -since_verdict(cls.pods[lo + count], now) <= rival
            ):
                count += 1
        else:
            count = min(fits, remaining)
        filling.add(cls, cls.pods[lo : lo + count])
        takes.append((left, count))
        lo += count
        if lo < left.hi:
            nxt = cls.pods[lo]
            heapq.heappush(heap, (-since_verdict(nxt, now), nxt.key, left, lo))
    return filling.frozen(), takes


def eligible_classes(cluster: Cluster, classes: Sequence[PodClass]) -> tuple[PodClass, ...]:
    """The pods left after `absorb` (`Absorbed.classes`), regrouped by the Groups whose scale-up
    window they are past (scaleUp.stabilizationWindowSeconds: how long a pod must wait before a
    machine is started)."""
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
        for pod in cls.pods:
            passed = bisect.bisect_right(levels, since_verdict(pod, cluster.now))
            eligible = by_level[passed - 1] if passed else frozenset()
            buckets.setdefault(eligible, []).append(pod)
        for eligible, pods in buckets.items():
            out.append(PodClass(len(out), cls.req, tuple(pods), cls.weight, eligible))
    out.sort(key=lambda c: (-c.weight, c.pods[0].key))
    return tuple(out)


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


@dataclass(frozen=True)
class Choice:
    """What `choose` decided."""

    chosen: tuple[Chosen, ...]
    #: Power-ons each Group may still start after these.
    room: Mapping[ObjectKey, int]
    #: The pods no machine was chosen for, per class (in the order given; a class may be left
    #: empty).
    classes: tuple[PodClass, ...]


def choose(
    cluster: Cluster,
    classes: Sequence[PodClass],
    room: Mapping[ObjectKey, int],
    energy: EnergyModel,
) -> Choice:
    """Pick machines to power on for `classes` within each Group's `room`."""
    room_left = dict(room)
    waiting = [Waiting(cls) for cls in classes]
    offers = offers_of(cluster, energy)
    users: dict[int, set[Offer]] = {}  # class id -> offers whose cached fill uses it
    picked: list[tuple[Bin, Fill]] = []
    while any(left.remaining for left in waiting):
        per_group: dict[ObjectKey, tuple[tuple[tuple[float, ...], ObjectKey], Offer]] = {}
        for offer in offers:
            group = offer.group
            if offer.spent or not offer.left or room_left.get(group.key, 0) <= 0:
                continue
            if offer.dirty and (offer.cached is None or offer.cached.stale()):
                offer.cached = _simulate(cluster, offer, waiting, energy)
                if offer.cached is None:
                    offer.spent = True
                    continue
                for left, _, _ in offer.cached.placed:
                    users.setdefault(left.cls.id, set()).add(offer)
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
        placed = [(left, count) for left, count, _ in offer.cached.placed]
        # Identical machines filled identically: take as many as the pods and limits allow.
        copies = min(
            offer.left,
            room_left[offer.group.key],
            *(left.remaining // count for left, count in placed),
        )
        for _ in range(copies):
            info = offer.first
            offer.taken += 1
            assert info.view is not None
            # Every copy is filled as simulated, so its room left is the simulation's.
            free = dict(offer.cached.free)
            taken = {left.cls.id: left.take_front(count) for left, count in placed}
            target = Bin(info.view.name, info.view, info.shape, free, info, placed=taken)
            picked.append((target, offer.cached.fill))
        room_left[offer.group.key] -= copies
        for left, _ in placed:
            for user in users.get(left.cls.id, ()):
                user.dirty = True
    packed = drop_redundant(
        cluster.placer, [target for target, _ in picked], {c.id: c for c in classes}
    )
    chosen: list[Chosen] = []
    for machine, (_, fill) in zip(packed, picked, strict=True):
        if machine.placed:
            pods = tuple(pod for pods in machine.placed.values() for pod in pods)
            chosen.append(Chosen(machine, fill, pods))
        elif machine.group_key is not None:
            room_left[machine.group_key] += 1
    return Choice(tuple(chosen), room_left, tuple(left.unplaced() for left in waiting))


def _simulate(
    cluster: Cluster, offer: Offer, waiting: Sequence[Waiting], energy: EnergyModel
) -> _Simulated | None:
    """Fill an empty machine of `offer` first-fit decreasing with the pods left of `waiting`
    (its classes are heaviest first)."""
    info, group = offer.first, offer.group
    assert info.view is not None
    free = dict(offer.empty)
    placed: list[tuple[Waiting, int, int]] = []
    value = 0.0
    for left in waiting:
        cls = left.cls
        if not left.remaining or group.key not in cls.eligible:
            continue
        if cluster.placer.reasons(cls, info.shape, info.view):
            continue
        count = min(left.remaining, count_fit(cls.demand, free))
        if count:
            for name, amount in cls.demand:
                free[name] -= amount * count
            placed.append((left, count, left.remaining))
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
    return _Simulated(placed, free, fill, rank(group.selection_policy, fill))


@dataclass(frozen=True)
class TopUp:
    """What `top_up` decided."""

    #: Each machine to power on, with why.
    machines: tuple[tuple[MachineInfo, str], ...]
    #: Power-ons each Group may still start after these.
    room: Mapping[ObjectKey, int]


def top_up(
    cluster: Cluster,
    chosen: Sequence[Chosen],
    room: Mapping[ObjectKey, int],
    energy: EnergyModel,
) -> TopUp:
    """Machines to power on because their Group is below minNodes, besides `chosen`."""
    room_left = dict(room)
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
        deficit = min(group.min_nodes - have, room_left.get(key, 0))
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
            room_left[key] -= 1
    return TopUp(tuple(out), room_left)
