"""The externalgrpc `CloudProvider` service: each RPC a thin adapter over
`lightsout.planning.autoscaler.nodegroups`.

Every call reads the cluster afresh (`Cluster.read`), builds a snapshot, asks the pure function
and turns its answer (or its `NodeGroupError`) into the protobuf reply (or a gRPC status).
Calls that change a size only write `spec.desiredPowerState` of the chosen machines, each a
patch conditional on the machine's resourceVersion, and return: no RPC runs a playbook or
waits for hardware. Each machine's state machine (`handlers.node`) then does the power work,
through Draining and PoweringOff when cluster-autoscaler deletes a node.

Registered with a `grpc.Server` by `lightsout.grpc.server`; component tests call it through a
real in-process server and channel.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from lightsout.grpc.cluster import Cluster, ConflictError, Obj
from lightsout.grpc.protos import externalgrpc_pb2 as pb
from lightsout.grpc.protos import k8s_node_pb2 as k8s
from lightsout.grpc.protos import k8s_pod_pb2 as k8s_pod
from lightsout.planning.autoscaler import nodegroups as ng
from lightsout.state.build import (
    CONFIGMAPS_KEY,
    GROUPS_KEY,
    MACHINES_KEY,
    NODES_KEY,
    SECRETS_KEY,
    snapshot_from,
)
from lightsout.state.parse import pod_requests
from lightsout.state.types import Group, Machine, ObjectKey, Snapshot

log = logging.getLogger(__name__)

_STATES = {
    ng.InstanceState.RUNNING: pb.InstanceStatus.instanceRunning,
    ng.InstanceState.CREATING: pb.InstanceStatus.instanceCreating,
    ng.InstanceState.DELETING: pb.InstanceStatus.instanceDeleting,
}


class CloudProviderServicer:
    """Implements every RPC of `clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        # Size changes read, choose and write: one at a time, so two IncreaseSize calls never
        # choose the same machine.
        self._writing = threading.Lock()

    # --- reading ------------------------------------------------------------------------------
    def _read(self) -> tuple[Snapshot, Mapping[ObjectKey, Obj]]:
        objects = self.cluster.read()
        # With the Secrets' and ConfigMaps' key names (the operator's caches), a machine whose
        # references do not resolve is never offered (`Machine.unresolved`).
        keys = (GROUPS_KEY, MACHINES_KEY, NODES_KEY, SECRETS_KEY, CONFIGMAPS_KEY)
        snapshot = snapshot_from({k: objects[k] for k in keys if k in objects}, complete=True)
        raw = {
            ObjectKey(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in objects.get(MACHINES_KEY, [])
        }
        return snapshot, raw

    def _group(
        self, context: grpc.ServicerContext, node_group_id: str
    ) -> tuple[Snapshot, Mapping[ObjectKey, Obj], Group]:
        snapshot, raw = self._read()
        try:
            return snapshot, raw, ng.find_group(snapshot, node_group_id)
        except ng.NodeGroupError as exc:
            _abort(context, exc)

    # --- node groups --------------------------------------------------------------------------
    def NodeGroups(self, request: pb.NodeGroupsRequest, context: Any) -> pb.NodeGroupsResponse:
        snapshot, _ = self._read()
        return pb.NodeGroupsResponse(nodeGroups=[_node_group(i) for i in ng.node_groups(snapshot)])

    def NodeGroupForNode(
        self, request: pb.NodeGroupForNodeRequest, context: Any
    ) -> pb.NodeGroupForNodeResponse:
        snapshot, _ = self._read()
        group = ng.group_for_node(snapshot, request.node.providerID)
        if group is None:  # an empty id: not one of ours
            return pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup())
        info = next(i for i in ng.node_groups(snapshot) if i.id == ng.group_id(group.key))
        return pb.NodeGroupForNodeResponse(nodeGroup=_node_group(info))

    def NodeGroupTargetSize(
        self, request: pb.NodeGroupTargetSizeRequest, context: Any
    ) -> pb.NodeGroupTargetSizeResponse:
        snapshot, _, group = self._group(context, request.id)
        return pb.NodeGroupTargetSizeResponse(targetSize=ng.target_size(snapshot, group))

    def NodeGroupNodes(
        self, request: pb.NodeGroupNodesRequest, context: Any
    ) -> pb.NodeGroupNodesResponse:
        snapshot, _, group = self._group(context, request.id)
        return pb.NodeGroupNodesResponse(
            instances=[_instance(i) for i in ng.instances(snapshot, group)]
        )

    def NodeGroupTemplateNodeInfo(
        self, request: pb.NodeGroupTemplateNodeInfoRequest, context: Any
    ) -> pb.NodeGroupTemplateNodeInfoResponse:
        snapshot, _, group = self._group(context, request.id)
        try:
            template = ng.template_node(snapshot, group)
        except ng.NodeGroupError as exc:
            _abort(context, exc)
        return pb.NodeGroupTemplateNodeInfoResponse(nodeBytes=_node_bytes(template))

    def NodeGroupGetOptions(
        self, request: pb.NodeGroupAutoscalingOptionsRequest, context: Any
    ) -> pb.NodeGroupAutoscalingOptionsResponse:
        snapshot, _, group = self._group(context, request.id)
        # The reply replaces every default, zero values included: start from the defaults.
        merged = pb.NodeGroupAutoscalingOptions()
        merged.CopyFrom(request.defaults)
        wanted = ng.options(snapshot, group)
        if wanted.scale_down_utilization_threshold is not None:
            merged.scaleDownUtilizationThreshold = wanted.scale_down_utilization_threshold
        if wanted.scale_down_unneeded_seconds is not None:
            merged.scaleDownUnneededDuration.FromSeconds(wanted.scale_down_unneeded_seconds)
        if wanted.max_node_provision_seconds is not None:
            merged.MaxNodeProvisionDuration.FromSeconds(wanted.max_node_provision_seconds)
        return pb.NodeGroupAutoscalingOptionsResponse(nodeGroupAutoscalingOptions=merged)

    # --- changing sizes -----------------------------------------------------------------------
    def NodeGroupIncreaseSize(
        self, request: pb.NodeGroupIncreaseSizeRequest, context: Any
    ) -> pb.NodeGroupIncreaseSizeResponse:
        self._change(
            context,
            request.id,
            lambda s, g: ng.increase_size(s, g, request.delta, dt.datetime.now(dt.UTC)),
            "On",
            f"cluster-autoscaler increased the size of {request.id} by {request.delta}",
        )
        return pb.NodeGroupIncreaseSizeResponse()

    def NodeGroupDecreaseTargetSize(
        self, request: pb.NodeGroupDecreaseTargetSizeRequest, context: Any
    ) -> pb.NodeGroupDecreaseTargetSizeResponse:
        self._change(
            context,
            request.id,
            lambda s, g: ng.decrease_target_size(s, g, request.delta),
            "Off",
            f"cluster-autoscaler cancelled {-request.delta} requested node(s) of {request.id} "
            "that had not registered",
        )
        return pb.NodeGroupDecreaseTargetSizeResponse()

    def NodeGroupDeleteNodes(
        self, request: pb.NodeGroupDeleteNodesRequest, context: Any
    ) -> pb.NodeGroupDeleteNodesResponse:
        names = ", ".join(n.name or n.providerID for n in request.nodes)
        self._change(
            context,
            request.id,
            lambda s, g: ng.delete_nodes(s, g, [n.providerID for n in request.nodes]),
            "Off",
            f"cluster-autoscaler deleted node(s) {names} of {request.id}",
        )
        return pb.NodeGroupDeleteNodesResponse()

    def _change(
        self,
        context: grpc.ServicerContext,
        node_group_id: str,
        choose: Callable[[Snapshot, Group], list[Machine]],
        desired: str,
        reason: str,
    ) -> None:
        with self._writing:
            snapshot, raw, group = self._group(context, node_group_id)
            try:
                machines = choose(snapshot, group)
            except ng.NodeGroupError as exc:
                log.info("externalgrpc: refused on %s: %s", node_group_id, exc)
                _abort(context, exc)
            for machine in machines:
                if machine.desired == desired:
                    continue  # already meant so (DeleteNodes of a machine already going off)
                try:
                    self.cluster.set_power(raw[machine.key], desired, reason)
                except ConflictError:
                    _fail(
                        context,
                        grpc.StatusCode.ABORTED,
                        f"machine {machine.key} changed meanwhile; nothing more was changed",
                    )
                log.info("externalgrpc: %s -> %s: %s", machine.key, desired, reason)

    # --- pricing, GPUs, lifecycle ---------------------------------------------------------------
    def PricingNodePrice(
        self, request: pb.PricingNodePriceRequest, context: Any
    ) -> pb.PricingNodePriceResponse:
        snapshot, _ = self._read()
        machine = ng.machine_by_provider_id(snapshot, request.node.providerID)
        if machine is None:  # a template node: its annotation names the machine it shows
            wanted = request.node.annotations.get(ng.TEMPLATE_MACHINE, "")
            machine = next((m for m in snapshot.machines if str(m.key) == wanted), None)
        if machine is None:
            _fail(context, grpc.StatusCode.NOT_FOUND, f"no machine for node {request.node.name!r}")
        start = request.startTimestamp.ToDatetime(tzinfo=dt.UTC)
        end = request.endTimestamp.ToDatetime(tzinfo=dt.UTC)
        return pb.PricingNodePriceResponse(price=ng.node_price(snapshot, machine, start, end))

    def PricingPodPrice(
        self, request: pb.PricingPodPriceRequest, context: Any
    ) -> pb.PricingPodPriceResponse:
        try:
            pod = k8s_pod.Pod.FromString(request.pod_bytes)
        except DecodeError:
            _fail(context, grpc.StatusCode.INVALID_ARGUMENT, "pod_bytes is not a core/v1 Pod")
        snapshot, _ = self._read()
        start = request.startTimestamp.ToDatetime(tzinfo=dt.UTC)
        end = request.endTimestamp.ToDatetime(tzinfo=dt.UTC)
        try:
            price = ng.pod_price(snapshot, pod_requests(_pod_spec(pod.spec)), start, end)
        except ng.NodeGroupError as exc:
            _fail(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"pod {pod.metadata.namespace}/{pod.metadata.name}: {exc}",
            )
        return pb.PricingPodPriceResponse(price=price)

    def GPULabel(self, request: pb.GPULabelRequest, context: Any) -> pb.GPULabelResponse:
        return pb.GPULabelResponse(label=ng.GPU_LABEL)

    def GetAvailableGPUTypes(
        self, request: pb.GetAvailableGPUTypesRequest, context: Any
    ) -> pb.GetAvailableGPUTypesResponse:
        snapshot, _ = self._read()
        return pb.GetAvailableGPUTypesResponse(
            gpuTypes={name: any_pb2.Any() for name in ng.gpu_types(snapshot)}
        )

    def Refresh(self, request: pb.RefreshRequest, context: Any) -> pb.RefreshResponse:
        # Nothing is cached between calls: every RPC reads the cluster as it is.
        return pb.RefreshResponse()

    def Cleanup(self, request: pb.CleanupRequest, context: Any) -> pb.CleanupResponse:
        return pb.CleanupResponse()


def _abort(context: grpc.ServicerContext, exc: ng.NodeGroupError) -> NoReturn:
    code = (
        grpc.StatusCode.NOT_FOUND
        if isinstance(exc, ng.NodeGroupNotFoundError)
        else grpc.StatusCode.FAILED_PRECONDITION
    )
    _fail(context, code, str(exc))


def _fail(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("context.abort returns only by raising")  # pragma: no cover


def _node_group(info: ng.NodeGroupInfo) -> pb.NodeGroup:
    return pb.NodeGroup(id=info.id, minSize=info.min_size, maxSize=info.max_size, debug=info.debug)


def _instance(instance: ng.Instance) -> pb.Instance:
    status = pb.InstanceStatus(instanceState=_STATES[instance.state])
    if instance.error_code:
        status.errorInfo.errorCode = instance.error_code
        status.errorInfo.errorMessage = instance.error_message
        status.errorInfo.instanceErrorClass = ng.ERROR_CLASS_OTHER
    return pb.Instance(id=instance.id, status=status)


def _pod_spec(spec: k8s_pod.PodSpec) -> dict[str, Any]:
    """The spec's containers, init containers and overhead as the API's JSON has them, for
    `lightsout.state.parse.pod_requests` (one reading of a pod's requests, not two)."""

    def quantities(values: Mapping[str, k8s.Quantity]) -> dict[str, str]:
        return {name: q.string for name, q in values.items()}

    def container(c: k8s_pod.Container) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": c.name,
            "resources": {
                "limits": quantities(c.resources.limits),
                "requests": quantities(c.resources.requests),
            },
        }
        if c.HasField("restartPolicy"):
            out["restartPolicy"] = c.restartPolicy
        return out

    return {
        "containers": [container(c) for c in spec.containers],
        "initContainers": [container(c) for c in spec.initContainers],
        "overhead": quantities(spec.overhead),
    }


def _node_bytes(template: ng.TemplateNode) -> bytes:
    """The template as a protobuf-encoded core/v1 Node, Ready, allocatable = capacity."""
    quantities = {name: k8s.Quantity(string=value) for name, value in template.capacity.items()}
    node = k8s.Node(
        metadata=k8s.ObjectMeta(
            name=template.name, labels=dict(template.labels), annotations=dict(template.annotations)
        ),
        spec=k8s.NodeSpec(
            taints=[k8s.Taint(key=t.key, value=t.value, effect=t.effect) for t in template.taints]
        ),
        status=k8s.NodeStatus(
            capacity=quantities,
            allocatable=quantities,
            phase="Running",
            conditions=[k8s.NodeCondition(type="Ready", status="True", reason="Template")],
        ),
    )
    encoded: bytes = node.SerializeToString()
    return encoded
