"""The planner's working model of one snapshot: machines classified, capacity as bins, pending
pods grouped into classes of identical scheduling requirements.

`lightsout.planning.autoscaler.autoscale.plan` builds a `Cluster` once per call and hands it to the
scale-up (`planning.autoscaler.scaleup`) and scale-down (`planning.autoscaler.scaledown`) passes.
`Cluster`, `MachineInfo`, `PodClass` and `Bin` are frozen: a pass never changes what it is given, it
returns what it decided (a `Cluster` whose bins hold the pods it placed, the classes of the pods
still unplaced). Inside one pass, `Waiting` (the pods of a class not placed yet) and `Filling` (a
bin's room as pods go onto it) are the scratch space it fills and then freezes into its result.

Speed comes from two ideas: pods with equal `SchedulingRequirements` form one `PodClass` placed
by count (how many fit = the minimum over resources of free // request), and nodes are reduced
to a `shape` (labels, taints, cordon) so each (class, shape) placement check runs once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property

from lightsout.models.enums import Autoscaler, DesiredPowerState, Phase
from lightsout.planning.autoscaler.scheduling import (
    HOSTNAME_LABEL,
    NodeView,
    placement_reasons,
    starting,
    view_of_machine,
)
from lightsout.state.corenode import NODE_LABEL
from lightsout.state.resources import PODS
from lightsout.state.types import (
    CoreNode,
    Group,
    Machine,
    ObjectKey,
    Pod,
    SchedulingRequirements,
    Snapshot,
)

#: How long after a pod's Unschedulable verdict, or after a node became Ready, the planner
#: believes its own simulation over the scheduler's "no": long enough for the scheduler to
#: retry (its backoff tops out at 10 s and node events requeue at once), short enough that a
#: constraint the simulation does not model (pod anti-affinity, topology spread) only delays a
#: power-on by this much instead of blocking it for ever.
SCHEDULER_GRACE = timedelta(seconds=30)


class Availability(StrEnum):
    READY = "Ready"  # on, core Node Ready: capacity now
    COMING = "Coming"  # desired On, not Ready yet: capacity in flight
    GOING = "Going"  # desired Off, not off yet: leaving
    OFF = "Off"  # off: may be powered on
    FAILED = "Failed"
    UNAVAILABLE = "Unavailable"  # on paper, but not usable (phase Unknown, core Node NotReady)


@dataclass(frozen=True, eq=False)
class MachineInfo:
    machine: Machine
    group: Group | None
    availability: Availability
    state: str  # a few words for explanations: "Ready", "powering on (Booting)", ...
    node: CoreNode | None
    #: The machine's node with no workload but its DaemonSets; None when capacity is unknown.
    view: NodeView | None
    shape: Hashable = None

    @property
    def key(self) -> ObjectKey:
        return self.machine.key

    @property
    def managed(self) -> bool:
        """The built-in autoscaler may change this machine's power state."""
        return (
            self.group is not None
            and self.group.autoscaler is Autoscaler.BUILTIN
            and self.machine.autoscaling_enabled
        )

    @property
    def active(self) -> bool:
        """Counts as on for minNodes/maxNodes: on, or on its way."""
        return self.availability in (Availability.READY, Availability.COMING) or (
            self.availability is Availability.UNAVAILABLE
            and self.machine.desired is DesiredPowerState.ON
        )


@dataclass(frozen=True, eq=False)
class PodClass:
    """Pending pods with identical scheduling requirements, oldest verdict first."""

    id: int
    req: SchedulingRequirements
    pods: tuple[Pod, ...]
    weight: float = 0.0
    #: Groups whose scale-up window these pods are past (set for the scale-up pass).
    eligible: frozenset[ObjectKey] = frozenset()

    @cached_property
    def demand(self) -> tuple[tuple[str, int], ...]:
        return tuple((k, v) for k, v in self.req.requests if v > 0)

    @cached_property
    def static_key(self) -> Hashable:
        return (self.req.node_selector, self.req.affinity, self.req.tolerations)


class Waiting:
    """Scratch of one pass: the pods of `cls` it has not placed yet, `cls.pods[lo:hi]`. Pods are
    taken from the back (youngest) for capacity that already exists and from the front (oldest)
    for new machines, so the pods that have waited longest are the ones new machines are for."""

    __slots__ = ("cls", "hi", "lo")

    def __init__(self, cls: PodClass) -> None:
        self.cls = cls
        self.lo = 0
        self.hi = len(cls.pods)

    @property
    def remaining(self) -> int:
        return self.hi - self.lo

    def rest(self) -> tuple[Pod, ...]:
        return self.cls.pods[self.lo : self.hi]

    def take_front(self, count: int) -> tuple[Pod, ...]:
        taken = self.cls.pods[self.lo : self.lo + count]
        self.lo += count
        return taken

    def take_back(self, count: int) -> tuple[Pod, ...]:
        taken = self.cls.pods[self.hi - count : self.hi]
        self.hi -= count
        return taken

    def unplaced(self) -> PodClass:
        """The class of the pods not placed."""
        return replace(self.cls, pods=self.rest())


@dataclass(frozen=True, eq=False)
class Bin:
    """Free capacity of one node (real or simulated) during a `plan` call."""

    name: str
    view: NodeView
    shape: Hashable
    free: Mapping[str, int]
    info: MachineInfo | None = None
    ready_since: datetime | None = None
    #: Pending pods simulated onto this bin, by class id.
    placed: Mapping[int, tuple[Pod, ...]] = field(default_factory=dict)

    @property
    def group_key(self) -> ObjectKey | None:
        return _group_key(self.info)


class Filling:
    """Scratch of one pass: a `Bin` as the pass places pods on it (or takes them off)."""

    __slots__ = ("bin", "changed", "free", "info", "name", "placed", "shape", "view")

    def __init__(self, target: Bin) -> None:
        self.bin = target
        self.name, self.view = target.name, target.view
        self.shape, self.info = target.shape, target.info
        self.free = dict(target.free)
        self.placed = {cls_id: list(pods) for cls_id, pods in target.placed.items()}
        self.changed = False

    @property
    def group_key(self) -> ObjectKey | None:
        return _group_key(self.info)

    def add(self, cls: PodClass, pods: Sequence[Pod]) -> None:
        self.changed = True
        for name, value in cls.demand:
            self.free[name] = self.free.get(name, 0) - value * len(pods)
        self.placed.setdefault(cls.id, []).extend(pods)

    def remove(self, cls: PodClass, count: int) -> list[Pod]:
        self.changed = True
        pods = self.placed[cls.id]
        moved, self.placed[cls.id] = pods[len(pods) - count :], pods[: len(pods) - count]
        if not self.placed[cls.id]:
            del self.placed[cls.id]
        for name, value in cls.demand:
            self.free[name] = self.free.get(name, 0) + value * count
        return moved

    def frozen(self) -> Bin:
        """The bin with the pods placed so far."""
        if not self.changed:
            return self.bin  # most bins of a pass take no pod: no copy for them
        b = self.bin
        placed = {cls_id: tuple(pods) for cls_id, pods in self.placed.items()}
        return Bin(b.name, b.view, b.shape, dict(self.free), b.info, b.ready_since, placed)


def _group_key(info: MachineInfo | None) -> ObjectKey | None:
    return info.group.key if info and info.group else None


def count_fit(demand: Iterable[tuple[str, int]], free: Mapping[str, int]) -> int:
    """How many pods requesting `demand` fit into `free` (every pod requests `pods: 1`, so the
    answer is always bounded)."""
    best = 1 << 62
    for name, value in demand:
        have = free.get(name, 0)
        if have < value:
            return 0
        best = min(best, have // value)
    return best


#: Labels whose value names one node: left out of a node's shape unless some pod selects by name.
NAME_LABELS = frozenset({HOSTNAME_LABEL, NODE_LABEL})


class Placer:
    """Placement checks (selector, affinity, taints, cordon) cached by (class, node shape)."""

    def __init__(self, named: frozenset[str] | None) -> None:
        # A node's name (and the labels naming it) only belongs in its shape when some pod
        # picks nodes by that name; otherwise a thousand identical machines collapse into one
        # shape and one check. `named` is None when any name might matter.
        self.named = named
        self._cache: dict[tuple[Hashable, Hashable], tuple[str, ...]] = {}

    def shape(self, view: NodeView) -> Hashable:
        named = self.named is None or view.name in self.named
        labels = view.labels
        if not named:
            labels = {k: v for k, v in labels.items() if k not in NAME_LABELS}
        return (tuple(sorted(labels.items())), view.taints, view.unschedulable, named and view.name)

    def reasons(self, cls: PodClass, shape: Hashable, view: NodeView) -> tuple[str, ...]:
        key = (cls.static_key, shape)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = tuple(placement_reasons(cls.req, view))
        return found

    def capacity(self, cls: PodClass, target: Bin | Filling) -> int:
        if self.reasons(cls, target.shape, target.view):
            return 0
        return count_fit(cls.demand, target.free)


@dataclass(frozen=True, eq=False)
class Cluster:
    now: datetime
    infos: tuple[MachineInfo, ...]
    groups: Mapping[ObjectKey, Group]
    pods_by_node: Mapping[str, Sequence[Pod]]
    ready_bins: tuple[Bin, ...]
    coming_bins: tuple[Bin, ...]
    pending: tuple[Pod, ...]
    #: Caches its placement checks; it answers every call the same way.
    placer: Placer
    #: Per Group: machines on or coming (for min/max), power-on operations in flight (for
    #: scaleUp.maxConcurrentOperations: see `POWERED_UP`) and power-offs in flight.
    active: Mapping[ObjectKey, int]
    coming: Mapping[ObjectKey, int]
    going: Mapping[ObjectKey, int]


#: Phases of a machine coming up whose power-on operation is over: the power-on Job succeeded
#: and the machine boots by itself. scaleUp.maxConcurrentOperations limits power operations
#: (the Jobs that drive a BMC, a Wake-on-LAN sender, a hypervisor), so these no longer count
#: against it: counting a boot of minutes would hold the third machine of a burst back by a
#: whole boot, and its pods would wait two boots.
POWERED_UP = frozenset({Phase.BOOTING, Phase.READY})


def classify(machine: Machine, node: CoreNode | None) -> tuple[Availability, str]:
    phase = machine.phase
    if phase is Phase.FAILED:
        return Availability.FAILED, "Failed"
    if phase is Phase.UNKNOWN:
        return Availability.UNAVAILABLE, "phase Unknown"
    if machine.unresolved and phase in (None, Phase.OFF):
        # Its power-on is held back (state.references): never chosen, and `lightsout plan`
        # says why.
        return Availability.UNAVAILABLE, f"off, cannot be powered on: {machine.unresolved}"
    if machine.desired is DesiredPowerState.ON:
        if phase is Phase.READY:
            if starting(node):
                return Availability.COMING, "powering on (Ready, its core Node not schedulable yet)"
            if node is not None and node.ready and not node.deleting:
                return Availability.READY, "Ready"
            return (
                Availability.UNAVAILABLE,
                f"Ready, but core node {machine.kubernetes_node_name} is not",
            )
        return Availability.COMING, f"powering on ({phase or 'requested'})"
    if phase in (None, Phase.OFF):
        return Availability.OFF, "Off"
    return Availability.GOING, f"powering off ({phase})"


def named_nodes(pods: Iterable[Pod]) -> frozenset[str] | None:
    """The node names pods select by (hostname label or metadata.name field), or None when
    some pod uses a name in a way that makes every name matter (NotIn, Exists, ..., or any
    use of the label naming the machine, `NODE_LABEL`)."""
    named: set[str] = set()
    seen: set[SchedulingRequirements] = set()
    for pod in pods:
        req = pod.scheduling
        if req in seen:
            continue
        seen.add(req)
        if any(key == NODE_LABEL for key, _ in req.node_selector):
            return None
        named.update(value for key, value in req.node_selector if key == HOSTNAME_LABEL)
        for term in req.affinity or ():
            if any(r.key == NODE_LABEL for r in term.match_expressions):
                return None
            by_name = [r for r in term.match_expressions if r.key == HOSTNAME_LABEL]
            for requirement in (*by_name, *term.match_fields):
                if requirement.operator != "In":
                    return None
                named.update(requirement.values)
    return frozenset(named)


def build_cluster(snapshot: Snapshot, now: datetime) -> Cluster:
    groups = {group.key: group for group in snapshot.groups}
    nodes = {node.name: node for node in snapshot.nodes}
    pods_by_node: dict[str, list[Pod]] = defaultdict(list)
    pending: list[Pod] = []
    for pod in snapshot.pods:
        if pod.node_name is not None:
            if not pod.terminal:
                pods_by_node[pod.node_name].append(pod)
        elif pod.pending_unschedulable:
            pending.append(pod)
    placer = Placer(named_nodes(pending))

    infos: list[MachineInfo] = []
    active: dict[ObjectKey, int] = defaultdict(int)
    coming: dict[ObjectKey, int] = defaultdict(int)
    going: dict[ObjectKey, int] = defaultdict(int)
    for machine in sorted(snapshot.machines, key=lambda m: m.key):
        node = nodes.get(machine.kubernetes_node_name)
        availability, state = classify(machine, node)
        view = view_of_machine(machine, snapshot.daemonsets, node)
        group_key = machine.group_key
        shape = placer.shape(view) if view is not None else None
        info = MachineInfo(machine, groups.get(group_key), availability, state, node, view, shape)
        infos.append(info)
        active[group_key] += info.active
        coming[group_key] += availability is Availability.COMING and machine.phase not in POWERED_UP
        going[group_key] += availability is Availability.GOING

    by_node = {info.machine.kubernetes_node_name: info for info in infos}
    ready_bins: list[Bin] = []
    for node in sorted(nodes.values(), key=lambda n: n.name):
        owner = by_node.get(node.name)
        if not node.ready or node.deleting or node.unschedulable or starting(node):
            continue
        if owner is not None and owner.availability is not Availability.READY:
            continue
        free = node.allocatable.as_dict()
        for pod in pods_by_node.get(node.name, ()):
            for name, value in pod.requests:
                free[name] = free.get(name, 0) - value
        view = NodeView(node.name, node.labels, node.taints, node.allocatable)
        since = node.ready_since
        if owner is not None and owner.machine.phase_since is not None:
            # A machine is only usable once the operator has labelled and uncordoned it (phase
            # Ready), which can be long after its kubelet reported Ready.
            since = max(since, owner.machine.phase_since) if since else owner.machine.phase_since
        ready_bins.append(Bin(node.name, view, placer.shape(view), free, owner, since))

    coming_bins: list[Bin] = []
    for info in infos:
        if info.availability is Availability.COMING and info.view is not None:
            free = info.view.free.as_dict()
            # DaemonSet pods are already in the view; pods bound early take the rest.
            for pod in pods_by_node.get(info.machine.kubernetes_node_name, ()):
                if not pod.daemonset:
                    for name, value in pod.requests:
                        free[name] = free.get(name, 0) - value
            coming_bins.append(Bin(info.view.name, info.view, info.shape, free, info))

    return Cluster(
        now=now,
        infos=tuple(infos),
        groups=groups,
        pods_by_node=dict(pods_by_node),
        ready_bins=tuple(ready_bins),
        coming_bins=tuple(coming_bins),
        pending=tuple(pending),
        placer=placer,
        active=dict(active),
        coming=dict(coming),
        going=dict(going),
    )


def pod_weights(
    classes: Iterable[PodClass], capacities: Iterable[Mapping[str, int]]
) -> list[PodClass]:
    """The classes with their weights: each class's largest request as a share of the largest
    capacity of that resource anywhere. Sorting by it is the "decreasing" of first-fit
    decreasing, and it is the unit of demand the selection policies compare machines by."""
    reference: dict[str, int] = {}
    for capacity in capacities:
        for name, value in capacity.items():
            reference[name] = max(reference.get(name, 0), value)
    floor = 1 / reference[PODS] if reference.get(PODS) else 0.001
    return [
        replace(
            cls,
            weight=max(
                [floor, *(v / reference[k] for k, v in cls.demand if reference.get(k, 0) > 0)]
            ),
        )
        for cls in classes
    ]


def since_verdict(pod: Pod, now: datetime) -> float:
    """Seconds since the scheduler declared the pod Unschedulable."""
    since = pod.unschedulable_since or pod.created or now
    return (now - since).total_seconds()
