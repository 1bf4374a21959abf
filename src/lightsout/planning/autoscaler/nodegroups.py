"""cluster-autoscaler's view of Lights-Out: node groups, instances and their sizes. PURE.

A Group with `spec.autoscaler: cluster-autoscaler` is a node group (id `<namespace>/<name>`);
its machines are the instances, each known by its providerID (`provider_id`). The group's size
is intent, not observation: the number of its machines whose `spec.desiredPowerState` is `On`.
cluster-autoscaler changes that size; these functions decide which machines change and what to
report, and `lightsout.grpc.servicer` (the externalgrpc adapter) writes the result as
`desiredPowerState` patches, leaving the power work to each machine's state machine.

Every function takes a `Snapshot` (built from live reads of the Groups, machines and core
Nodes) and raises `NodeGroupError` for a request that must be refused, with a message a person
reading cluster-autoscaler's log understands.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from lightsout.models.enums import Autoscaler, DesiredPowerState, Phase
from lightsout.planning.autoscaler.battery import held_power_ons
from lightsout.planning.autoscaler.breakeven import UNLEARNED_SECONDS, unneeded_seconds
from lightsout.planning.autoscaler.scheduling import starting
from lightsout.planning.energy import tariff
from lightsout.planning.policy import EnergyModel, idle_rank
from lightsout.state.resources import CPU, PODS, Resources
from lightsout.state.types import CoreNode, Group, Machine, ObjectKey, Snapshot, Taint

#: Scheme of the providerID Lights-Out gives a machine's core Node when its spec names none.
PROVIDER_SCHEME = "lightsout://"
#: Annotation on the template node naming the machine it was built from (PricingNodePrice on a
#: template node resolves the machine through it: the template's name is cluster-autoscaler's).
TEMPLATE_MACHINE = "lightsout.dev/machine"
#: Label whose value names a machine's GPU type (GPULabel / GetAvailableGPUTypes).
GPU_LABEL = "lightsout.dev/gpu-type"
#: InstanceErrorInfo.instanceErrorClass for a failed machine ("Other").
ERROR_CLASS_OTHER = 99


class NodeGroupError(Exception):
    """A request cluster-autoscaler must be told no to (the servicer maps it to a gRPC error)."""


class NodeGroupNotFoundError(NodeGroupError):
    """No such node group (or not one cluster-autoscaler drives)."""


def provider_id(namespace: str, name: str, spec_provider_id: str | None = None) -> str:
    """The providerID of machine `namespace/name`: its spec's, else `lightsout://ns/name`."""
    return spec_provider_id or f"{PROVIDER_SCHEME}{namespace}/{name}"


def machine_provider_id(machine: Machine) -> str:
    return machine.provider_id or provider_id(machine.key.namespace, machine.key.name)


def group_id(key: ObjectKey) -> str:
    return f"{key.namespace}/{key.name}"


class InstanceState(StrEnum):
    RUNNING = "running"
    CREATING = "creating"
    DELETING = "deleting"


@dataclass(frozen=True, slots=True)
class NodeGroupInfo:
    id: str
    min_size: int
    max_size: int
    debug: str


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    state: InstanceState
    error_code: str = ""
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class TemplateNode:
    """What a new node of the group will look like (quantities as Kubernetes strings)."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    capacity: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Options:
    """The NodeGroupAutoscalingOptions fields Lights-Out has a say in (None: keep the default)."""

    scale_down_utilization_threshold: float | None = None
    scale_down_unneeded_seconds: int | None = None
    max_node_provision_seconds: int | None = None


# --- reading the snapshot -------------------------------------------------------------------


def managed_groups(snapshot: Snapshot) -> list[Group]:
    groups = [g for g in snapshot.groups if g.autoscaler == Autoscaler.CLUSTER_AUTOSCALER]
    return sorted(groups, key=lambda g: g.key)


def _managed_machines(snapshot: Snapshot) -> list[Machine]:
    keys = {g.key for g in managed_groups(snapshot)}
    return [m for m in snapshot.machines if m.group_key in keys]


def find_group(snapshot: Snapshot, node_group_id: str) -> Group:
    for group in managed_groups(snapshot):
        if group_id(group.key) == node_group_id:
            return group
    raise NodeGroupNotFoundError(
        f"no Group {node_group_id!r} with spec.autoscaler: cluster-autoscaler"
    )


def members(snapshot: Snapshot, group: Group) -> list[Machine]:
    return sorted((m for m in snapshot.machines if m.group_key == group.key), key=lambda m: m.key)


def target_size(snapshot: Snapshot, group: Group) -> int:
    """The size cluster-autoscaler asked for: machines meant to be on."""
    return sum(1 for m in members(snapshot, group) if m.desired == DesiredPowerState.ON)


def _available(machines: Iterable[Machine]) -> list[Machine]:
    """Machines IncreaseSize may power on: meant to be off, not pinned by a person, and every
    object their power-on Job needs exists (`Machine.unresolved`)."""
    return [
        m
        for m in machines
        if m.desired == DesiredPowerState.OFF and m.autoscaling_enabled and not m.unresolved
    ]


def held_back(snapshot: Snapshot, group: Group) -> list[str]:
    """`<machine>: <reason>: <message>` for each machine of the Group meant to be off that
    cannot be powered on because an object it names is missing."""
    return [
        f"{m.key.name}: {m.unresolved}"
        for m in members(snapshot, group)
        if m.desired == DesiredPowerState.OFF and m.unresolved
    ]


def max_size(snapshot: Snapshot, group: Group) -> int:
    """The Group's maxNodes, capped by the machines that could really be on."""
    machines = members(snapshot, group)
    reachable = target_size(snapshot, group) + len(_available(machines))
    return max(min(group.max_nodes, reachable), 0)


def node_groups(snapshot: Snapshot) -> list[NodeGroupInfo]:
    out = []
    for group in managed_groups(snapshot):
        size = target_size(snapshot, group)
        machines = len(members(snapshot, group))
        held = held_back(snapshot, group)
        out.append(
            NodeGroupInfo(
                id=group_id(group.key),
                min_size=min(group.min_nodes, max_size(snapshot, group)),
                max_size=max_size(snapshot, group),
                debug=f"{group_id(group.key)}: {size} of {machines} machines meant on "
                f"(min {group.min_nodes}, max {group.max_nodes}, {group.selection_policy})"
                + (f"; cannot be powered on: {'; '.join(held)}" if held else ""),
            )
        )
    return out


def instance_id(snapshot: Snapshot, machine: Machine) -> str:
    """How cluster-autoscaler knows the machine: its core Node's providerID once that has one
    (normally the machine's own, which Lights-Out sets; a different one is kept and reported by
    the machine's ProviderIDConflict condition), else the machine's providerID."""
    node = _core_node(snapshot, machine)
    if node is not None and node.provider_id:
        return node.provider_id
    return machine_provider_id(machine)


def machine_by_provider_id(snapshot: Snapshot, wanted: str) -> Machine | None:
    if not wanted:
        return None
    return next((m for m in snapshot.machines if instance_id(snapshot, m) == wanted), None)


def group_for_node(snapshot: Snapshot, node_provider_id: str) -> Group | None:
    """The managed Group of the machine with this providerID (also the fake nodes
    cluster-autoscaler makes for unregistered instances: their providerID is the instance id)."""
    machine = machine_by_provider_id(snapshot, node_provider_id)
    if machine is None:
        return None
    return next((g for g in managed_groups(snapshot) if g.key == machine.group_key), None)


def _core_node(snapshot: Snapshot, machine: Machine) -> CoreNode | None:
    return next((n for n in snapshot.nodes if n.name == machine.kubernetes_node_name), None)


def registered(snapshot: Snapshot, machine: Machine) -> bool:
    """Whether the machine's core Node exists (whatever its providerID says yet) and no longer
    carries the startup taint (Lights-Out creates the Node before power-on: until the machine
    is Ready it is not a registered node)."""
    node = _core_node(snapshot, machine)
    return node is not None and not node.deleting and not starting(node)


# --- changing the size ----------------------------------------------------------------------


def power_on_order(snapshot: Snapshot, group: Group) -> list[Machine]:
    """The Group's machines IncreaseSize may power on, best first under its selectionPolicy."""
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    return sorted(
        _available(members(snapshot, group)),
        key=lambda m: (idle_rank(m, group, energy, m.resources), m.key),
    )


def increase_size(
    snapshot: Snapshot, group: Group, delta: int, now: dt.datetime | None = None
) -> list[Machine]:
    """The `delta` machines to power on, or an error: no partial scale-up is ever chosen, and
    none while the Group's UPS holds power-ons back (`battery.held_power_ons`, at `now`)."""
    if delta <= 0:
        raise NodeGroupError(f"delta must be positive, got {delta}")
    battery = None if now is None else held_power_ons(snapshot, now).get(group.key)
    if battery is not None:
        raise NodeGroupError(f"no power-on now: {battery}")
    size = target_size(snapshot, group)
    if size + delta > group.max_nodes:
        raise NodeGroupError(
            f"size increase too large: {size} + {delta} > maxNodes {group.max_nodes}"
        )
    order = power_on_order(snapshot, group)
    if len(order) < delta:
        held = held_back(snapshot, group)
        raise NodeGroupError(
            f"size increase too large: {delta} wanted, {len(order)} machines of "
            f"{group_id(group.key)} can be powered on"
            + (f" (cannot be powered on: {'; '.join(held)})" if held else "")
        )
    return order[:delta]


def decrease_target_size(snapshot: Snapshot, group: Group, delta: int) -> list[Machine]:
    """Machines to cancel (power off) among those requested but not registered yet.

    `delta` is negative. Registered machines are never touched: if fewer than -delta requested
    machines are still unregistered, the request is refused as a whole.
    """
    if delta >= 0:
        raise NodeGroupError(f"delta must be negative, got {delta}")
    waiting = [
        m
        for m in members(snapshot, group)
        if m.desired == DesiredPowerState.ON
        and m.autoscaling_enabled
        and not registered(snapshot, m)
    ]
    if len(waiting) < -delta:
        raise NodeGroupError(
            f"attempt to delete existing nodes: target {target_size(snapshot, group)}, "
            f"delta {delta}, only {len(waiting)} requested machines have not registered"
        )
    # Cancel those that got least far: not started first, then the latest to start.
    progress = {Phase.OFF: 0, None: 0, Phase.POWERING_ON: 1, Phase.PROVISIONING: 1}
    epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
    waiting.sort(
        key=lambda m: (progress.get(m.phase, 2), -(m.phase_since or epoch).timestamp(), m.key)
    )
    return waiting[:-delta]


def delete_nodes(snapshot: Snapshot, group: Group, provider_ids: Sequence[str]) -> list[Machine]:
    """The machines behind the nodes cluster-autoscaler deletes; all of them or an error."""
    chosen: list[Machine] = []
    for wanted in provider_ids:
        machine = machine_by_provider_id(snapshot, wanted)
        if machine is None or machine.group_key != group.key:
            raise NodeGroupError(f"node {wanted!r} is not in node group {group_id(group.key)}")
        if not machine.autoscaling_enabled:
            raise NodeGroupError(
                f"machine {machine.key} is pinned (spec.autoscaling.enabled: false)"
            )
        if machine not in chosen:
            chosen.append(machine)
    meant_on = [m for m in chosen if m.desired == DesiredPowerState.ON]
    if target_size(snapshot, group) - len(meant_on) < group.min_nodes:
        raise NodeGroupError(
            f"deleting {len(meant_on)} nodes would take {group_id(group.key)} below "
            f"minNodes {group.min_nodes}"
        )
    return chosen


# --- reporting ------------------------------------------------------------------------------

_CREATING = frozenset({None, Phase.OFF, Phase.POWERING_ON, Phase.BOOTING, Phase.PROVISIONING})


def instance(snapshot: Snapshot, machine: Machine) -> Instance | None:
    """The machine as an instance; None for one that is off and meant to stay off."""
    pid = instance_id(snapshot, machine)
    if machine.phase == Phase.FAILED:
        if machine.desired == DesiredPowerState.OFF:
            return Instance(pid, InstanceState.DELETING)
        return Instance(
            pid,
            InstanceState.CREATING,
            error_code="PowerActionFailed",
            error_message=f"machine {machine.key} is Failed; see its status and events",
        )
    if machine.desired == DesiredPowerState.ON:
        creating = (
            machine.phase in _CREATING
            or (machine.phase == Phase.UNKNOWN and not registered(snapshot, machine))
            # Its Node still carries the startup taint: on its way, not usable yet.
            or starting(_core_node(snapshot, machine))
        )
        return Instance(pid, InstanceState.CREATING if creating else InstanceState.RUNNING)
    if machine.phase in (None, Phase.OFF):
        return None
    return Instance(pid, InstanceState.DELETING)


def instances(snapshot: Snapshot, group: Group) -> list[Instance]:
    return [i for m in members(snapshot, group) if (i := instance(snapshot, m)) is not None]


def template_machine(snapshot: Snapshot, group: Group) -> Machine:
    """The machine a new node of the group would be: the next one the policy powers on."""
    order = power_on_order(snapshot, group)
    candidates = [m for m in order if m.resources] or [
        m for m in members(snapshot, group) if m.resources
    ]
    if not candidates:
        raise NodeGroupError(
            f"no machine of {group_id(group.key)} declares spec.resources: "
            "cluster-autoscaler cannot scale it up from zero"
        )
    return candidates[0]


def template_node(snapshot: Snapshot, group: Group) -> TemplateNode:
    machine = template_machine(snapshot, group)
    resources = machine.resources or Resources()
    # The labels its core Node will carry (`Machine.labels`), so that a pod selecting one (its
    # Group, say) makes cluster-autoscaler scale the group up from zero; `lightsout.dev/group`
    # and `lightsout.dev/node` differ between Groups, and README's `--balancing-ignore-label`s
    # let cluster-autoscaler balance Groups that are otherwise alike.
    labels = {"kubernetes.io/hostname": machine.kubernetes_node_name, **machine.labels}
    return TemplateNode(
        name=machine.kubernetes_node_name,
        labels=labels,
        annotations={TEMPLATE_MACHINE: str(machine.key)},
        taints=machine.taints,
        capacity={name: f"{amount}m" if name == CPU else str(amount) for name, amount in resources},
    )


def options(snapshot: Snapshot, group: Group) -> Options:
    """What the Group says: its scale-down threshold and unneeded time (`auto`: its machines'
    longest, see `planning.autoscaler.breakeven`), and its machines' longest boot timeout as the
    time a node may take to register."""
    machines = members(snapshot, group)
    boots = [m.boot_seconds for m in machines]
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    waits = [unneeded_seconds(m, group, energy)[0] for m in machines]
    finite = [w for w in waits if math.isfinite(w)]
    unneeded = group.scale_down.unneeded_seconds
    if unneeded is None:
        unneeded = math.ceil(max(finite)) if finite else UNLEARNED_SECONDS
    return Options(
        scale_down_utilization_threshold=group.scale_down.utilization_threshold,
        scale_down_unneeded_seconds=unneeded,
        max_node_provision_seconds=max(boots) if boots else None,
    )


def node_price(
    snapshot: Snapshot,
    machine: Machine,
    start: dt.datetime,
    end: dt.datetime,
) -> float:
    """What running the machine from `start` to `end` costs: its on watts (idle, else the
    snapshot's default) times the hours times its Group's electricity price per kWh (with a
    tariff or a price series, each stretch of the period at its own price)."""
    group = next((g for g in snapshot.groups if g.key == machine.group_key), None)
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    watts = machine.watts_on if machine.watts_on is not None else machine.watts_idle
    if watts is None:
        watts = energy.default_watts
    electricity = group.electricity if group is not None else None
    if group is not None and electricity is not None and (electricity.rates or group.prices):
        return tariff.cost(electricity, watts, start, end, group.prices)
    price = group.price_per_kwh if group is not None else None
    price = energy.default_price if price is None else price
    hours = max((end - start).total_seconds(), 0.0) / 3600.0
    return watts / 1000.0 * hours * price


def pod_share(requests: Resources, capacity: Resources | None) -> float | None:
    """The fraction of a machine of `capacity` that a pod's `requests` take: the largest
    fraction of any resource it asks for (the pod count aside), 0 for a pod that asks for
    nothing, 1 on a machine that declares no resources (the pod is priced a whole machine);
    None when the machine cannot hold it (too little of something, or none at all)."""
    if not capacity:
        return 1.0
    fractions = [0.0]
    for name, amount in requests:
        if name == PODS or amount <= 0:
            continue
        available = capacity.get(name)
        if available < amount:
            return None
        fractions.append(amount / available)
    return max(fractions)


def pod_price(
    snapshot: Snapshot,
    requests: Resources,
    start: dt.datetime,
    end: dt.datetime,
) -> float:
    """What a pod with these requests costs from `start` to `end`: its `pod_share` of the machine
    where that share is cheapest, among the cluster-autoscaler Groups' machines that can hold
    it, times that machine's `node_price` over the same period.

    So a pod that fills a machine costs what the machine does, and the pods a machine can hold
    never cost more than it: cluster-autoscaler's `price` expander divides a node group's price
    by the pods' (plus a "stabilization pod" priced here too), which then ranks the groups by
    what their machines draw. Raises `NodeGroupError` when no such machine can hold the pod.
    """
    prices = [
        fraction * node_price(snapshot, m, start, end)
        for m in _managed_machines(snapshot)
        if (fraction := pod_share(requests, m.resources)) is not None
    ]
    if not prices:
        raise NodeGroupError(
            f"no machine of a cluster-autoscaler Group can hold a pod requesting {requests}"
        )
    return min(prices)


def gpu_types(snapshot: Snapshot) -> list[str]:
    """GPU types the managed Groups' machines declare (their `GPU_LABEL` label)."""
    return sorted(
        {m.labels[GPU_LABEL] for m in _managed_machines(snapshot) if GPU_LABEL in m.labels}
    )
