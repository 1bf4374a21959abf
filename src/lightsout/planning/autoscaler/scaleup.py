"""Scale-up: which powered-off machines to power on so that pending pods can run.

Called by `lightsout.planning.autoscaler.autoscale.plan` in three steps:

1. `absorb` (`lightsout.planning.autoscaler.absorb`): capacity that exists or is on its way takes
   pending pods first.
2. `choose`: the rest are bin-packed onto a *set* of powered-off machines. Greedy: at each step
   every distinct candidate (identical machines collapse into one offer) is filled first-fit
   decreasing with the remaining pods; each Group's selection policy picks its best offer and
   `policy.best` picks among Groups (`policy.select`, which a deferrable Job's price follows);
   identical machines that would be filled identically are taken in one step. Each Group's
   room (maxNodes, and scaleUp.maxConcurrentOperations less the power-on operations in
   flight, booting machines apart) bounds it. Then machines whose pods fit on the others are
   dropped. The candidates are the machines `startable.not_startable`
   allows; a Group in a quiet window is offered a class only when no other Group has a machine
   `startable.could_power_on` accepts for it (`eligible_classes`), and when strict never.
3. `top_up`: Groups below minNodes get their cheapest machines powered on.

Each step returns what it decided (`Absorbed`, `Choice`, `TopUp`) and changes nothing it is
given; `plan` hands each result to the next step.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from lightsout.models.enums import Autoscaler, SelectionPolicy
from lightsout.planning.autoscaler.cluster import (
    Bin,
    Cluster,
    MachineInfo,
    PodClass,
    Waiting,
    count_fit,
    since_verdict,
)
from lightsout.planning.autoscaler.packing import drop_redundant
from lightsout.planning.autoscaler.startable import alternatives, not_startable, quiet_wake
from lightsout.planning.policy import EnergyModel, Fill, fill_of, idle_rank, select
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
    #: Why a quiet window open on its Group lets it wake this machine (`startable.quiet_wake`),
    #: for its PowerOn reason; "" when none is open.
    quiet: str = ""


def eligible_classes(cluster: Cluster, classes: Sequence[PodClass]) -> tuple[PodClass, ...]:
    """The pods left after `absorb` (`Absorbed.classes`), regrouped by the Groups whose scale-up
    window they are past (scaleUp.stabilizationWindowSeconds: how long a pod must wait before a
    machine is started), less the Groups a quiet window holds back from them (`_quieted`)."""
    windows = {
        key: group.scale_up.stabilization_seconds
        for key, group in cluster.groups.items()
        if group.autoscaler is Autoscaler.BUILTIN
    }
    # A pod's eligible Groups depend only on how many distinct windows its age has passed.
    levels = sorted(set(windows.values()))
    by_level = [frozenset(k for k, w in windows.items() if w <= level) for level in levels]
    room = room_of(cluster)
    out: list[PodClass] = []
    for cls in classes:
        buckets: dict[frozenset[ObjectKey], list[Pod]] = {}
        for pod in cls.pods:
            passed = bisect.bisect_right(levels, since_verdict(pod, cluster.now))
            eligible = by_level[passed - 1] if passed else frozenset()
            buckets.setdefault(eligible, []).append(pod)
        for eligible, pods in buckets.items():
            regrouped = PodClass(len(out), cls.req, tuple(pods), cls.weight, eligible)
            out.append(_quieted(cluster, room, regrouped))
    out.sort(key=lambda c: (-c.weight, c.pods[0].key))
    return tuple(out)


def _quieted(cluster: Cluster, room: Mapping[ObjectKey, int], cls: PodClass) -> PodClass:
    """`cls` without the Groups a quiet schedule window keeps from powering on for it: a strict
    one always, a quiet one when another Group has a machine that could be powered on now for
    its pods (`startable.alternatives`: autoscaled, Off, not pinned, its Group below its
    maximum and not itself quiet)."""
    quiet = {key for key in cls.eligible if cluster.groups[key].quiet}
    if not quiet:
        return cls
    held = {key for key in quiet if cluster.groups[key].quiet == "strict"}
    if held != quiet and next(alternatives(cluster, room, cls), None) is not None:
        held = quiet
    return replace(cls, eligible=cls.eligible - held)


def offers_of(cluster: Cluster, energy: EnergyModel) -> list[Offer]:
    offers: dict[Hashable, Offer] = {}
    for info in cluster.infos:
        if not_startable(info) is not None or info.view is None:
            continue
        assert info.group is not None  # managed
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
        candidates: list[tuple[Offer, Fill, ObjectKey]] = []
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
            candidates.append((offer, offer.cached.fill, offer.first.key))
        if not candidates:
            break
        offer = select(candidates)
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
    by_id = {cls.id: cls for cls in classes}
    packed = drop_redundant(cluster.placer, [target for target, _ in picked], by_id)
    chosen: list[Chosen] = []
    for machine, (_, fill) in zip(packed, picked, strict=True):
        if machine.placed:
            pods = tuple(pod for pods in machine.placed.values() for pod in pods)
            quiet = ""
            if fill.group.quiet:
                quiet = quiet_wake(cluster, room, fill.group, (by_id[i] for i in machine.placed))
            chosen.append(Chosen(machine, fill, pods, quiet))
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
    return _Simulated(placed, free, fill)


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
    planned = Counter(entry.bin.group_key for entry in chosen if entry.bin.group_key is not None)
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
            if info.group is group and not_startable(info) is None and info.key not in taken
        ]
        candidates.sort(
            key=lambda i: (
                idle_rank(i.machine, group, energy, i.view.allocatable if i.view else None),
                i.key,
            )
        )
        reason = f"group {key.name} is below minNodes ({have} of {group.min_nodes})"
        if group.window_note:
            reason = f"{group.window_note}; {reason}"
        for info in candidates[:deficit]:
            out.append((info, reason))
            room_left[key] -= 1
    return TopUp(tuple(out), room_left)
