"""Scale-up, step 1: what capacity that exists or is on its way takes of the pending pods.

`absorb` (called by `lightsout.planning.autoscaler.autoscale.plan` before `scaleup.choose`) places
pods on Ready nodes the scheduler may not have tried yet (see `cluster.SCHEDULER_GRACE`), and on
machines already powering on (virtually, so a second machine is not started for them). A
machine coming up takes pods as kube-scheduler will bind them: the one expected Ready first
(`ready_in`: learned boot less the time since its power-on Job started) takes the oldest pods
that fit, whatever their class; and a pod is only counted on one that is Ready no later than a
fresh power-on of an off machine would be (plus `COMING_MARGIN_SECONDS`; a machine whose boot
is not learned yet always counts), else it is left to `choose` and its explanation says why.
A pod announced for later (a CronJob run being pre-warmed: `planning.autoscaler.prewarm`) waits for
nothing that is Ready before it is due, so any machine coming up that is Ready by then takes
it: "sooner" only matters for the part of a pod's wait a quicker machine would save.
It returns what it decided (`Absorbed`) and changes nothing it is given.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from lightsout.models.enums import Phase
from lightsout.planning.autoscaler.cluster import (
    SCHEDULER_GRACE,
    Bin,
    Cluster,
    Filling,
    MachineInfo,
    PodClass,
    Waiting,
    count_fit,
    since_verdict,
)
from lightsout.planning.autoscaler.startable import not_startable
from lightsout.state.types import ObjectKey, Pod

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
        if not_startable(info) is not None:  # the rule scale-up and the quiet windows use
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
    cluster: Cluster,
    classes: Sequence[PodClass],
    room: Mapping[ObjectKey, int],
    announced: Mapping[ObjectKey, datetime] | None = None,
) -> Absorbed:
    """Place pending pods on Ready nodes the scheduler may not have tried and on machines
    already powering on. `announced` gives the pods that do not exist yet (CronJob runs
    being pre-warmed) and when each is due."""
    now, grace = cluster.now, SCHEDULER_GRACE.total_seconds()
    due = _due_by_class(classes, announced or {})
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
        (ready_in(target.info, now) if target.info else 0.0, target.name, index)
        for index, target in enumerate(cluster.coming_bins)
    )
    coming_bins = list(cluster.coming_bins)
    fresh: dict[int, FreshPowerOn | None] = {}  # by class id, looked up when first needed
    late: dict[ObjectKey, str] = {}
    coming: dict[ObjectKey, str] = {}
    for seconds, _, index in timed:
        arriving = coming_bins[index]
        verdict = _in_time(
            cluster, arriving, seconds=seconds, waiting=waiting, due=due, room=room, fresh=fresh
        )
        fresh.update(verdict.fresh)
        for key, note in verdict.late.items():
            late.setdefault(key, note)  # the first machine found too late is the one named
        state = arriving.info.state if arriving.info else "powering on"
        note = f"will run on machine {arriving.name}, already {state}"
        coming_bins[index], takes = _fill_oldest_first(cluster, arriving, verdict.usable)
        for left, count in takes:
            pods = left.take_front(count)
            at = due.get(left.cls.id)
            # A run not created yet: say why a machine Ready later than a fresh one serves.
            said = note if at is None else f"{note}, Ready before the run is due at {_hms(at)}"
            notes.update((pod.key, said) for pod in pods)
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


def _due_by_class(
    classes: Sequence[PodClass], announced: Mapping[ObjectKey, datetime]
) -> dict[int, datetime]:
    """For each class whose pods are all announced for later, when the first of them is due.
    A class with a pod that exists is absent: its pods are waiting now."""
    if not announced:
        return {}
    out: dict[int, datetime] = {}
    for cls in classes:
        moments = [announced.get(pod.key) for pod in cls.pods]
        known = [moment for moment in moments if moment is not None]
        if known and len(known) == len(moments):
            out[cls.id] = min(known)
    return out


def _hms(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%H:%M:%SZ}"


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
    waiting: Sequence[Waiting],
    due: Mapping[int, datetime],
    room: Mapping[ObjectKey, int],
    fresh: Mapping[int, FreshPowerOn | None],
) -> _InTime:
    """The classes with pods left (`waiting`) that fit on `target`, a machine coming up that is
    Ready in `seconds`, and may count on it: their pods would not wait more than
    `COMING_MARGIN_SECONDS` longer for it than for any off machine they could get (`fresh`:
    those looked up before). A pod that exists waits until the machine is Ready; a pod
    announced for later (its class's moment in `due`) only for what is Ready after it is due,
    so a machine Ready before then serves it however quick another would be. A machine whose
    boot is not learned yet is always counted on: its estimate is the boot timeout, an upper
    bound, and starting a second machine on it would be a power-on bought on a guess."""
    learned = target.info is not None and target.info.machine.learned_boot_seconds is not None
    usable: list[Waiting] = []
    late: dict[ObjectKey, str] = {}
    found: dict[int, FreshPowerOn | None] = {}
    for left in waiting:
        cls = left.cls
        if not left.remaining or not cluster.placer.capacity(cls, target):
            continue
        at = due.get(cls.id)
        due_in = 0.0 if at is None else max(0.0, (at - cluster.now).total_seconds())
        if not learned or seconds <= due_in + COMING_MARGIN_SECONDS:
            usable.append(left)  # Ready when they need it, or only a guess says otherwise
            continue
        if cls.id in fresh:
            quicker = fresh[cls.id]
        else:
            quicker = found[cls.id] = fresh_power_on(cluster, cls, cls.pods[left.lo], room)
        # The pods wait `seconds - due_in` for it, and at least `quicker.seconds - due_in` for
        # the quickest off machine.
        if quicker is not None and seconds > max(quicker.seconds, due_in) + COMING_MARGIN_SECONDS:
            # No running seconds in it: the operator posts a changed note as a new event.
            after = "" if at is None else f"Ready after the run is due at {_hms(at)}, and "
            note = (
                f"not counted on machine {target.name}, already powering on: {after}machine "
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
