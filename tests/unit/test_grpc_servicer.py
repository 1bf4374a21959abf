"""The externalgrpc CloudProvider service, RPC by RPC, through a real gRPC server and channel.

Component tier: `lightsout.grpc.server` serves `CloudProviderServicer` on 127.0.0.1 (plaintext)
over an in-memory cluster, and each test calls it with the generated client stub the way
cluster-autoscaler does, then checks what a user would see: the sizes reported, which machines'
`desiredPowerState` changed, the errors cluster-autoscaler gets. The objects come from the
autoscaler tests' builders, so they pass through `snapshot_from` as the API's would.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lightsout.actuation import inputs
from lightsout.config import OperatorConfig
from lightsout.grpc import server
from lightsout.grpc.cluster import ConflictError
from lightsout.grpc.protos import externalgrpc_pb2 as pb
from lightsout.grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from lightsout.grpc.protos import k8s_node_pb2, k8s_pod_pb2
from lightsout.handlers.externalgrpc import settings_of
from lightsout.planning.autoscaler import nodegroups as ng
from lightsout.state.build import CONFIGMAPS_KEY, GROUPS_KEY, MACHINES_KEY, NODES_KEY, SECRETS_KEY
from lightsout.state.references import contents_entry
from lightsout.state.resources import Resources
from tests.harness.ca_flags import readme_flags
from tests.unit.test_autoscale_objects import NS, core_node, group, machine

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
CA = "cluster-autoscaler"
GID = f"{NS}/ca"


class FakeCluster:
    """Groups, machines and core Nodes in memory; writes bump resourceVersion like the API."""

    def __init__(self, *objects: Obj) -> None:
        self.objects = [copy.deepcopy(o) for o in objects]
        for number, obj in enumerate(self.objects):
            obj["metadata"].setdefault("resourceVersion", str(number + 1))
        self.writes: list[tuple[str, str]] = []
        self.reasons: list[str] = []  # the events' messages
        self.race = False  # the next write finds the machine changed
        #: Secrets and ConfigMaps by key names, as the operator's caches give them; None: not
        #: known (no reference is checked).
        self.contents: dict[str, list[Obj]] | None = None

    def read(self) -> Mapping[str, list[Obj]]:
        out: dict[str, list[Obj]] = {GROUPS_KEY: [], MACHINES_KEY: [], NODES_KEY: []}
        for obj in self.objects:
            api = obj["apiVersion"]
            key = NODES_KEY if api == "v1" else GROUPS_KEY if obj["kind"] == "Group" else None
            out[key or MACHINES_KEY].append(copy.deepcopy(obj))
        return {**out, **copy.deepcopy(self.contents or {})}

    def set_power(self, machine: Obj, desired: str, reason: str) -> None:
        name = machine["metadata"]["name"]
        stored = self.machine(name)
        if self.race or stored["metadata"]["resourceVersion"] != machine["metadata"].get(
            "resourceVersion"
        ):
            raise ConflictError(name)
        stored["spec"]["desiredPowerState"] = desired
        stored["metadata"]["resourceVersion"] += "+"
        self.writes.append((name, desired))
        self.reasons.append(reason)

    def machine(self, name: str) -> Obj:
        return next(
            o for o in self.objects if o["kind"] == "Node" and o["metadata"]["name"] == name
        )


@pytest.fixture
def serve() -> Iterator[Any]:
    running: list[server.Running] = []
    channels: list[grpc.Channel] = []

    def start(*objects: Obj) -> tuple[pb_grpc.CloudProviderStub, FakeCluster]:
        cluster = FakeCluster(*objects)
        settings = server.Settings(address="127.0.0.1:0", insecure=True)
        running.append(server.start(settings, cluster))
        channel = grpc.insecure_channel(f"127.0.0.1:{running[-1].port}")
        channels.append(channel)
        return pb_grpc.CloudProviderStub(channel), cluster

    yield start
    for channel in channels:
        channel.close()
    for r in running:
        r.stop(0)


def ca_group(name: str = "ca", **spec: Any) -> Obj:
    return group(name, autoscaler=CA, **spec)


def pid(name: str) -> str:
    return f"lightsout://{NS}/{name}"


def fleet(**spec: Any) -> list[Obj]:
    """A cluster-autoscaler Group of three machines, all off (cheapest: m-b), and a builtin one."""
    return [
        ca_group(**spec),
        group("builtin"),
        machine("m-a", group="ca", watts=(200, 100, 0)),
        machine("m-b", group="ca", watts=(60, 30, 0)),
        machine("m-c", group="ca", watts=(120, 80, 0)),
        machine("other", group="builtin"),
    ]


def code(exc: pytest.ExceptionInfo[grpc.RpcError]) -> grpc.StatusCode:
    status: grpc.StatusCode = exc.value.code()
    return status


def test_node_groups_are_only_the_cluster_autoscaler_groups(serve: Any) -> None:
    stub, _ = serve(*fleet(minNodes=0, maxNodes=2))
    groups = stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups
    assert [(g.id, g.minSize, g.maxSize) for g in groups] == [(GID, 0, 2)]


def test_max_size_is_capped_by_the_machines_there_are(serve: Any) -> None:
    stub, _ = serve(*fleet(maxNodes=10))
    (only,) = stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups
    assert only.maxSize == 3


def test_node_group_for_node_by_provider_id_and_for_fake_nodes(serve: Any) -> None:
    stub, _ = serve(*fleet(), core_node("m-a"), core_node("always-on"))
    real = pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a"))
    # An instance that never registered comes back as a fake node named by the instance id.
    fake = pb.ExternalGrpcNode(
        name=pid("m-c"),
        providerID=pid("m-c"),
        annotations={"k8s.io/cluster-autoscaler/fake-node-reason": "unregistered"},
    )
    foreign = pb.ExternalGrpcNode(name="always-on", providerID="")
    builtin = pb.ExternalGrpcNode(name="other", providerID=pid("other"))
    ids = [
        stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=n)).nodeGroup.id
        for n in (real, fake, foreign, builtin)
    ]
    assert ids == [GID, GID, "", ""]


def test_target_size_counts_machines_meant_on(serve: Any) -> None:
    objects = fleet()
    objects[2]["spec"]["desiredPowerState"] = "On"  # m-a: on its way up, not Ready yet
    objects[2]["status"]["phase"] = "PoweringOn"
    stub, _ = serve(*objects)
    assert stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=GID)).targetSize == 1


def test_unknown_group_is_not_found(serve: Any) -> None:
    stub, _ = serve(*fleet())
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=f"{NS}/builtin"))
    assert code(exc) == grpc.StatusCode.NOT_FOUND


def test_increase_size_records_intent_on_the_policys_choice_and_returns(serve: Any) -> None:
    stub, cluster = serve(*fleet())
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=2))
    # LowestEnergy: the two machines that draw least when on; nothing else was touched.
    assert cluster.writes == [("m-b", "On"), ("m-c", "On")]
    assert cluster.machine("m-a")["spec"]["desiredPowerState"] == "Off"
    assert stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=GID)).targetSize == 2
    assert cluster.reasons[0] == f"cluster-autoscaler increased the size of {GID} by 2"


def test_increase_size_follows_priority_policy(serve: Any) -> None:
    objects = fleet(selectionPolicy="Priority")
    objects[2]["spec"]["autoscaling"]["priority"] = 50  # m-a
    stub, cluster = serve(*objects)
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert cluster.writes == [("m-a", "On")]


def test_increase_size_past_max_is_refused_and_changes_nothing(serve: Any) -> None:
    stub, cluster = serve(*fleet(maxNodes=2))
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=3))
    assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
    assert "maxNodes 2" in exc.value.details()
    assert cluster.writes == []


def test_increase_size_never_powers_on_a_pinned_machine(serve: Any) -> None:
    objects = fleet()
    for obj in objects[2:5]:
        obj["spec"]["autoscaling"]["enabled"] = obj["metadata"]["name"] == "m-a"
    stub, cluster = serve(*objects)
    with pytest.raises(grpc.RpcError):
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=2))
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert cluster.writes == [("m-a", "On")]


def test_a_lost_race_is_aborted_for_cluster_autoscaler_to_retry(serve: Any) -> None:
    stub, cluster = serve(*fleet())
    cluster.race = True
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert code(exc) == grpc.StatusCode.ABORTED


def _up(objects: list[Obj], name: str, phase: str, registered: bool) -> list[Obj]:
    obj = next(o for o in objects if o["metadata"]["name"] == name)
    obj["spec"]["desiredPowerState"] = "On"
    obj["status"]["phase"] = phase
    return [*objects, core_node(name)] if registered else objects


def test_decrease_target_size_cancels_only_unregistered_machines(serve: Any) -> None:
    objects = _up(fleet(), "m-a", "Ready", registered=True)
    objects = _up(objects, "m-b", "Booting", registered=False)
    stub, cluster = serve(*objects)
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id=GID, delta=-2))
    assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
    assert cluster.writes == []
    stub.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id=GID, delta=-1))
    assert cluster.writes == [("m-b", "Off")]


def test_delete_nodes_powers_off_exactly_the_named_machines(serve: Any) -> None:
    objects = _up(fleet(), "m-a", "Ready", registered=True)
    objects = _up(objects, "m-b", "Ready", registered=True)
    stub, cluster = serve(*objects)
    node = pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a"))
    stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=GID, nodes=[node]))
    assert cluster.writes == [("m-a", "Off")]
    assert stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=GID)).targetSize == 1


def test_delete_nodes_refuses_a_node_of_another_group_and_changes_nothing(serve: Any) -> None:
    objects = _up(fleet(), "m-a", "Ready", registered=True)
    stub, cluster = serve(*objects)
    nodes = [
        pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a")),
        pb.ExternalGrpcNode(name="other", providerID=pid("other")),
    ]
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=GID, nodes=nodes))
    assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
    assert cluster.writes == []


def test_delete_nodes_keeps_min_nodes(serve: Any) -> None:
    objects = _up(fleet(minNodes=1), "m-a", "Ready", registered=True)
    stub, cluster = serve(*objects)
    node = pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a"))
    with pytest.raises(grpc.RpcError):
        stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=GID, nodes=[node]))
    assert cluster.writes == []


def test_node_group_nodes_reports_each_machine_s_state(serve: Any) -> None:
    objects = _up(fleet(), "m-a", "Ready", registered=True)
    objects = _up(objects, "m-b", "PoweringOn", registered=False)
    objects = _up(objects, "m-c", "Failed", registered=False)
    objects.append(machine("m-d", group="ca", desired="Off", phase="Draining"))
    objects.append(machine("m-e", group="ca", desired="Off", phase="Off"))
    stub, _ = serve(*objects)
    got = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=GID)).instances
    states = {i.id: (i.status.instanceState, i.status.errorInfo.errorCode) for i in got}
    assert states == {
        pid("m-a"): (pb.InstanceStatus.instanceRunning, ""),
        pid("m-b"): (pb.InstanceStatus.instanceCreating, ""),
        pid("m-c"): (pb.InstanceStatus.instanceCreating, "PowerActionFailed"),
        pid("m-d"): (pb.InstanceStatus.instanceDeleting, ""),
    }
    failed = next(i for i in got if i.id == pid("m-c"))
    assert failed.status.errorInfo.instanceErrorClass == 99


def test_template_node_is_the_next_machine_with_its_resources_labels_taints(serve: Any) -> None:
    gpu = machine(
        "gpu-1",
        "8",
        "32Gi",
        group="ca",
        extended={"nvidia.com/gpu": 2},
        labels={"lightsout.dev/gpu-type": "rtx"},
        taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    )
    stub, _ = serve(ca_group(labels={"pool": "gpu"}), gpu)
    raw = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=GID)).nodeBytes
    node = k8s_node_pb2.Node.FromString(raw)
    capacity = {k: v.string for k, v in node.status.capacity.items()}
    assert capacity == {
        "cpu": "8000m",
        "memory": str(32 * 2**30),
        "pods": "110",
        "nvidia.com/gpu": "2",
    }
    assert dict(node.status.allocatable) == dict(node.status.capacity)
    assert node.metadata.labels["pool"] == "gpu"
    assert node.metadata.labels["lightsout.dev/gpu-type"] == "rtx"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("gpu", "yes", "NoSchedule")]
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]
    types = stub.GetAvailableGPUTypes(pb.GetAvailableGPUTypesRequest()).gpuTypes
    assert list(types) == ["rtx"]


def test_template_of_a_group_without_declared_resources_is_refused(serve: Any) -> None:
    stub, _ = serve(ca_group(), machine("m", resources=False, group="ca"))
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=GID))
    assert "spec.resources" in exc.value.details()


def test_options_start_from_the_defaults_and_override_what_the_group_says(serve: Any) -> None:
    stub, _ = serve(
        ca_group(scaleDown={"unneededSeconds": 120, "utilizationThreshold": 0.3}),
        machine("m-a", group="ca", boot=900),
        machine("m-b", group="ca", boot=300),
    )
    defaults = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5,
        scaleDownGpuUtilizationThreshold=0.6,
        zeroOrMaxNodeScaling=False,
        ignoreDaemonSetsUtilization=True,
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600),
        scaleDownUnreadyDuration=duration_pb2.Duration(seconds=1200),
        MaxNodeProvisionDuration=duration_pb2.Duration(seconds=60),
    )
    got = stub.NodeGroupGetOptions(
        pb.NodeGroupAutoscalingOptionsRequest(id=GID, defaults=defaults)
    ).nodeGroupAutoscalingOptions
    assert got.scaleDownUtilizationThreshold == pytest.approx(0.3)
    assert got.scaleDownUnneededDuration.seconds == 120
    assert got.MaxNodeProvisionDuration.seconds == 900  # the slowest machine's boot timeout
    # What the Group does not speak of keeps cluster-autoscaler's default, not zero.
    assert got.scaleDownGpuUtilizationThreshold == pytest.approx(0.6)
    assert got.ignoreDaemonSetsUtilization is True
    assert got.scaleDownUnreadyDuration.seconds == 1200


def test_each_group_answers_its_own_unneeded_time_whatever_the_global_flag(serve: Any) -> None:
    stub, _ = serve(
        ca_group("quick", scaleDown={"unneededSeconds": 10}),
        ca_group("slow", scaleDown={"unneededSeconds": 1800}),
        machine("q", group="quick"),
        machine("s", group="slow"),
    )
    # README's --scale-down-unneeded-time=10m, as cluster-autoscaler sends it.
    defaults = pb.NodeGroupAutoscalingOptions(
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600)
    )
    got = {
        name: stub.NodeGroupGetOptions(
            pb.NodeGroupAutoscalingOptionsRequest(id=f"{NS}/{name}", defaults=defaults)
        ).nodeGroupAutoscalingOptions.scaleDownUnneededDuration.seconds
        for name in ("quick", "slow")
    }
    assert got == {"quick": 10, "slow": 1800}


# --- --balance-similar-node-groups: what cluster-autoscaler compares ----------------------------
#: Labels cluster-autoscaler never compares (processors/nodegroupset: BasicIgnoredLabels).
CA_IGNORED_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "beta.kubernetes.io/fluentd-ds-ready",
        "kops.k8s.io/instancegroup",
    }
)
#: README's `--balancing-ignore-label`s.
README_IGNORED_LABELS = frozenset(
    flag.partition("=")[2]
    for flag in readme_flags()
    if flag.startswith("--balancing-ignore-label=")
)
RACK = {
    "labels": {"pool": "racks"},
    "taints": [{"key": "dedicated", "value": "racks", "effect": "NoSchedule"}],
}


def template(stub: pb_grpc.CloudProviderStub, name: str) -> k8s_node_pb2.Node:
    request = pb.NodeGroupTemplateNodeInfoRequest(id=f"{NS}/{name}")
    return k8s_node_pb2.Node.FromString(stub.NodeGroupTemplateNodeInfo(request).nodeBytes)


def similar(a: k8s_node_pb2.Node, b: k8s_node_pb2.Node, ignored: frozenset[str]) -> bool:
    """cluster-autoscaler's comparison of two empty templates (IsCloudProviderNodeInfoSimilar,
    1.34): the same capacities, memory within 1.5 % and the others equal; allocatable (here
    the capacity) alike; the same labels but the `ignored` ones. Taints are not compared."""
    capacities = [{k: v.string for k, v in n.status.capacity.items()} for n in (a, b)]
    if capacities[0].keys() != capacities[1].keys():
        return False
    for name, amount in capacities[0].items():
        other = capacities[1][name]
        if name == "memory":
            larger, smaller = max(int(amount), int(other)), min(int(amount), int(other))
            if larger - smaller > 0.015 * larger:
                return False
        elif amount != other:
            return False
    labels = [{k: v for k, v in n.metadata.labels.items() if k not in ignored} for n in (a, b)]
    return labels[0] == labels[1]


def test_two_groups_alike_are_similar_to_cluster_autoscaler_with_readmes_flags(
    serve: Any,
) -> None:
    stub, _ = serve(
        ca_group("rack-a", **RACK),
        ca_group("rack-b", **RACK),
        machine("a-1", group="rack-a"),
        machine("b-1", group="rack-b"),
    )
    a, b = template(stub, "rack-a"), template(stub, "rack-b")
    assert similar(a, b, CA_IGNORED_LABELS | README_IGNORED_LABELS)
    # Each template names its Group and machine, as their core Nodes will: without README's
    # --balancing-ignore-label flags the two Groups are never alike.
    assert a.metadata.labels["lightsout.dev/group"] == "rack-a"
    assert b.metadata.labels["lightsout.dev/node"] == "b-1"
    assert not similar(a, b, CA_IGNORED_LABELS)


@pytest.mark.parametrize(
    ("b_group", "b_machine"),
    [
        ({"labels": {"pool": "other"}}, {}),  # a Group label of its own
        ({}, {"labels": {"disk": "ssd"}}),  # a machine label of its own
        ({}, {"cpu": "8"}),  # more cpus
        ({}, {"memory": "9Gi"}),  # memory beyond 1.5 %
    ],
)
def test_groups_that_differ_are_not_similar_despite_readmes_flags(
    serve: Any, b_group: dict[str, Any], b_machine: dict[str, Any]
) -> None:
    stub, _ = serve(
        ca_group("rack-a", **RACK),
        ca_group("rack-b", **{**RACK, **b_group}),
        machine("a-1", group="rack-a"),
        machine("b-1", group="rack-b", **b_machine),
    )
    a, b = template(stub, "rack-a"), template(stub, "rack-b")
    assert not similar(a, b, CA_IGNORED_LABELS | README_IGNORED_LABELS)


def test_template_labels_are_those_the_operator_puts_on_the_core_node(serve: Any) -> None:
    """A pod selecting `lightsout.dev/group` makes cluster-autoscaler scale that Group up from
    zero only if its template carries the label the core Node will."""
    rack = ca_group("rack-a", labels={"pool": "racks", "zone": "a"})
    box = machine("a-1", group="rack-a", labels={"zone": "b", "disk": "ssd"})
    box["spec"]["driver"]["wol"]["ssh"]["privateKeySecretRef"] = {"name": "key"}  # a valid spec
    stub, _ = serve(rack, box)
    labels = dict(template(stub, "rack-a").metadata.labels)
    wanted, _ = inputs.wanted_metadata(box, inputs.node_spec(box), inputs.group_spec(rack))
    assert labels.pop("kubernetes.io/hostname") == "a-1"
    assert labels == wanted


def _stamp(moment: dt.datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def test_node_price_is_watts_times_hours_times_the_groups_price(serve: Any) -> None:
    stub, _ = serve(
        ca_group(electricity={"pricePerKWh": 0.25}),
        machine("m-a", group="ca", watts=(200, 100, 5)),
    )
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    request = pb.PricingNodePriceRequest(
        node=pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a")),
        startTimestamp=_stamp(start),
        endTimestamp=_stamp(start + dt.timedelta(hours=2)),
    )
    # 200 W for 2 h = 0.4 kWh at 0.25 per kWh.
    assert stub.PricingNodePrice(request).price == pytest.approx(0.1)
    # A template node (cluster-autoscaler renames it) is priced through its annotation.
    raw = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=GID)).nodeBytes
    template = k8s_node_pb2.Node.FromString(raw)
    request.node.CopyFrom(
        pb.ExternalGrpcNode(
            name="template-node-for-ca-123", annotations=dict(template.metadata.annotations)
        )
    )
    assert stub.PricingNodePrice(request).price == pytest.approx(0.1)


def test_node_price_under_a_tariff_prices_each_stretch_at_its_rate(serve: Any) -> None:
    """The price expander asks what a node costs over a period: with a time-of-use tariff,
    the part of it in the night rate costs the night's price."""
    night = {"from": "22:00", "to": "06:00", "pricePerKWh": 0.10}
    stub, _ = serve(
        ca_group(electricity={"pricePerKWh": 0.30, "rates": [night]}),
        machine("m-a", group="ca", watts=(200, 100, 5)),
    )
    start = dt.datetime(2026, 1, 1, 21, tzinfo=dt.UTC)
    request = pb.PricingNodePriceRequest(
        node=pb.ExternalGrpcNode(name="m-a", providerID=pid("m-a")),
        startTimestamp=_stamp(start),
        endTimestamp=_stamp(start + dt.timedelta(hours=2)),
    )
    # 21:00-22:00 at 0.30 and 22:00-23:00 at 0.10, 0.2 kWh each.
    assert stub.PricingNodePrice(request).price == pytest.approx(0.2 * 0.30 + 0.2 * 0.10)


def test_gpu_label_refresh_cleanup(serve: Any) -> None:
    stub, _ = serve(*fleet())
    assert stub.GPULabel(pb.GPULabelRequest()).label == "lightsout.dev/gpu-type"
    stub.Refresh(pb.RefreshRequest())
    stub.Cleanup(pb.CleanupRequest())


# --- node and pod prices (the price expander's choice is test_cluster_autoscaler_matrix's) ---
HOUR = (dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC))


def pod_bytes(
    cpu: str,
    memory: str = "100Mi",
    *,
    init: tuple[str, str] | None = None,
    overhead: Mapping[str, str] | None = None,
    extended: Mapping[str, str] | None = None,
) -> bytes:
    """A core/v1 Pod as cluster-autoscaler marshals it (only the fields priced are set)."""

    def container(name: str, cpu: str, memory: str) -> k8s_pod_pb2.Container:
        requests = {"cpu": cpu, "memory": memory, **(extended or {})}
        return k8s_pod_pb2.Container(
            name=name,
            resources=k8s_pod_pb2.ResourceRequirements(
                requests={k: k8s_node_pb2.Quantity(string=v) for k, v in requests.items()}
            ),
        )

    spec = k8s_pod_pb2.PodSpec(
        containers=[container("main", cpu, memory)],
        initContainers=[container("init", *init)] if init else [],
        overhead={k: k8s_node_pb2.Quantity(string=v) for k, v in (overhead or {}).items()},
    )
    pod = k8s_pod_pb2.Pod(metadata=k8s_node_pb2.ObjectMeta(name="p", namespace="apps"), spec=spec)
    encoded: bytes = pod.SerializeToString()
    return encoded


def pod_price(stub: pb_grpc.CloudProviderStub, raw: bytes) -> float:
    request = pb.PricingPodPriceRequest(
        pod_bytes=raw, startTimestamp=_stamp(HOUR[0]), endTimestamp=_stamp(HOUR[1])
    )
    price: float = stub.PricingPodPrice(request).price
    return price


def two_groups(small: tuple[str, float], big: tuple[str, float]) -> list[Obj]:
    """Issue 28's shape: Group "small" of two machines, Group "big" of one, at 1 per kWh."""
    (small_cpu, small_watts), (big_cpu, big_watts) = small, big
    price = {"electricity": {"pricePerKWh": 1.0}}
    return [
        ca_group("small", **price),
        ca_group("big", **price),
        *(
            machine(
                f"s-{i}", small_cpu, "8Gi", group="small", watts=(small_watts, small_watts / 2, 0)
            )
            for i in (1, 2)
        ),
        machine("b-1", big_cpu, "64Gi", group="big", watts=(big_watts, big_watts / 2, 0)),
    ]


def test_pod_price_is_its_share_of_the_machine_that_holds_it_cheapest(serve: Any) -> None:
    stub, _ = serve(*two_groups(("4", 30), ("16", 220)))
    # 3 of 4 cpus of a 30 W machine for an hour: 0.75 * 0.030 kWh at 1 per kWh. On the
    # 16-cpu machine it would be 3/16 * 0.220, dearer.
    assert pod_price(stub, pod_bytes("3")) == pytest.approx(0.0225)
    # Memory counts too: 6 Gi is 6/8 of a small machine (0.0225) but 6/64 of the big one.
    assert pod_price(stub, pod_bytes("1", "6Gi")) == pytest.approx(6 / 64 * 0.220)
    # An init container larger than the app containers, and the pod overhead, as the scheduler.
    assert pod_price(stub, pod_bytes("1", init=("2", "1Gi"), overhead={"cpu": "1"})) == (
        pytest.approx(0.0225)
    )
    # Too big for the small machines: its share of the one that holds it.
    assert pod_price(stub, pod_bytes("8")) == pytest.approx(0.5 * 0.220)
    # A pod that asks for nothing costs nothing (the expander has its stabilization pod).
    assert pod_price(stub, pod_bytes("0", "0")) == 0.0


GI = 2**30
MACHINE = Resources.of({"cpu": 4000, "memory": 8 * GI, "pods": 110})


@pytest.mark.parametrize(
    ("requests", "capacity", "expected"),
    [
        ({"cpu": 3000, "memory": GI, "pods": 1}, MACHINE, 0.75),  # cpu is the larger share
        ({"cpu": 1000, "memory": 6 * GI, "pods": 1}, MACHINE, 0.75),  # memory is
        ({"pods": 1}, MACHINE, 0.0),  # asks for nothing: the pod count is not priced
        ({"cpu": 3000, "pods": 1}, Resources(), 1.0),  # no declared resources: a whole machine
        ({"cpu": 5000, "pods": 1}, MACHINE, None),  # too big
        ({"cpu": 1000, "nvidia.com/gpu": 1}, MACHINE, None),  # asks for what it has not
    ],
)
def test_pod_share_is_the_largest_fraction_of_a_resource(
    requests: dict[str, int], capacity: Resources, expected: float | None
) -> None:
    assert ng.pod_share(Resources.of(requests), capacity) == expected


def test_a_pod_no_machine_can_hold_is_refused_with_the_reason(serve: Any) -> None:
    stub, _ = serve(*two_groups(("4", 30), ("16", 220)))
    for raw in (pod_bytes("32"), pod_bytes("1", extended={"nvidia.com/gpu": "1"})):
        with pytest.raises(grpc.RpcError) as exc:
            pod_price(stub, raw)
        assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
        assert "apps/p: no machine of a cluster-autoscaler Group can hold" in str(
            exc.value.details()
        )
    with pytest.raises(grpc.RpcError) as exc:
        pod_price(stub, b"\xff\xff")
    assert code(exc) == grpc.StatusCode.INVALID_ARGUMENT


def test_health_reports_serving_on_both_ports_and_not_serving_when_stopping() -> None:
    settings = server.Settings(address="127.0.0.1:0", insecure=True, health_address="127.0.0.1:0")
    running = server.start(settings, FakeCluster())
    try:
        for port in (running.port, running.health_port):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                for service in ("", server.SERVICE):
                    reply = health.Check(health_pb2.HealthCheckRequest(service=service))
                    assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # The health-only port offers nothing else.
        with grpc.insecure_channel(f"127.0.0.1:{running.health_port}") as channel:
            with pytest.raises(grpc.RpcError) as exc:
                pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest())
            assert code(exc) == grpc.StatusCode.UNIMPLEMENTED
        running.health.enter_graceful_shutdown()
        with grpc.insecure_channel(f"127.0.0.1:{running.health_port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        running.stop(0)


def test_no_transport_is_refused_unless_plaintext_is_asked_for() -> None:
    with pytest.raises(server.ConfigError, match="LIGHTSOUT_GRPC_INSECURE"):
        server.start(server.Settings(address="127.0.0.1:0"), FakeCluster())
    with pytest.raises(server.ConfigError, match="client CA"):
        server.credentials(server.Settings(address="127.0.0.1:0", cert_file="/x"))


def test_a_core_node_with_its_own_provider_id_is_still_matched(serve: Any) -> None:
    objects = _up(fleet(), "m-a", "Ready", registered=False)
    node = core_node("m-a")
    node["spec"]["providerID"] = "k3s://m-a"  # left as it is, reported by a condition
    stub, _ = serve(*objects, node)
    (only,) = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=GID)).instances
    assert only.id == "k3s://m-a"
    request = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(name="m-a", providerID=only.id))
    assert stub.NodeGroupForNode(request).nodeGroup.id == GID


def test_the_server_is_configured_from_the_operator_settings() -> None:
    assert settings_of(OperatorConfig.from_env({})) is None  # no address: no server
    # `lightsout run -n a -n b` limits what cluster-autoscaler is shown to those namespaces.
    watched = OperatorConfig.from_env({"LIGHTSOUT_WATCHED_NAMESPACES": "a,b"})
    assert watched.watched_namespaces == ("a", "b")
    settings = settings_of(
        OperatorConfig.from_env(
            {
                "LIGHTSOUT_GRPC_ADDRESS": "0.0.0.0:8086",
                "LIGHTSOUT_GRPC_TLS_CERT": "/tls/tls.crt",
                "LIGHTSOUT_GRPC_TLS_KEY": "/tls/tls.key",
                "LIGHTSOUT_GRPC_TLS_CLIENT_CA": "/tls/ca.crt",
                "LIGHTSOUT_GRPC_HEALTH_ADDRESS": "0.0.0.0:8087",
            }
        )
    )
    assert settings == server.Settings(
        address="0.0.0.0:8086",
        cert_file="/tls/tls.crt",
        key_file="/tls/tls.key",
        client_ca_file="/tls/ca.crt",
        health_address="0.0.0.0:8087",
    )


def test_a_machine_whose_node_keeps_the_startup_taint_is_still_creating(serve: Any) -> None:
    startup = [{"key": "lightsout.dev/unregistered", "effect": "NoSchedule"}]
    objects = _up(fleet(), "m-a", "Ready", registered=False)
    objects = _up(objects, "m-b", "Booting", registered=False)
    objects += [core_node("m-a", taints=startup), core_node("m-b", ready=False, taints=startup)]
    stub, cluster = serve(*objects)

    got = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=GID)).instances
    states = {i.id: i.status.instanceState for i in got}
    assert states == {
        pid("m-a"): pb.InstanceStatus.instanceCreating,
        pid("m-b"): pb.InstanceStatus.instanceCreating,
    }
    # Not registered yet, although their Nodes exist: DecreaseTargetSize may cancel both.
    stub.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id=GID, delta=-2))
    assert sorted(cluster.writes) == [("m-a", "Off"), ("m-b", "Off")]


def test_a_machine_whose_secret_is_missing_is_never_offered_and_the_refusal_says_why(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    objects = fleet(maxNodes=10)
    ssh = objects[3]["spec"]["driver"]["wol"]["ssh"]  # m-b, the cheapest
    ssh["privateKeySecretRef"] = {"name": "key-b"}
    stub, cluster = serve(*objects)
    cluster.contents = {SECRETS_KEY: [], CONFIGMAPS_KEY: []}
    why = f"m-b: SecretNotFound: SSH key Secret {NS}/key-b not found"
    (only,) = stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups
    assert only.maxSize == 2 and why in only.debug
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=2))
    assert cluster.writes == [("m-c", "On"), ("m-a", "On")], "m-b is never chosen"
    with caplog.at_level("INFO"), pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
    assert why in exc.value.details() and why in caplog.text
    # The Secret appears: m-b can be chosen.
    cluster.contents[SECRETS_KEY] = [contents_entry(NS, "key-b", ["ssh-privatekey"])]
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert cluster.writes[-1] == ("m-b", "On")


def test_increase_size_is_refused_while_the_groups_ups_is_on_battery(serve: Any) -> None:
    battery = {"source": {"nut": {"host": "127.0.0.1", "ups": "rack"}}, "tier": "Shed"}
    objects = fleet(maxNodes=3, battery=battery)
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)).isoformat()
    objects[0]["status"] = {
        "battery": {"mains": "OnBattery", "mainsSince": since, "upsStatus": "OB DISCHRG"}
    }
    stub, cluster = serve(*objects)
    with pytest.raises(grpc.RpcError) as exc:
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=GID, delta=1))
    assert code(exc) == grpc.StatusCode.FAILED_PRECONDITION
    assert "no power-on now: the mains failed" in exc.value.details()
    assert cluster.writes == []
