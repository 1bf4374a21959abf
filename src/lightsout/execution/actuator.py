"""Carries out the state machine's effects for one machine through `lightsout.k8s`.

Called by the Node reconciler with a `Decision` from `planning.fsm.decide`. Every effect is
idempotent: creating a Job that exists adopts it (deterministic names), cordoning a cordoned
node changes nothing, evicting a gone pod is fine. The Lease is taken with optimistic
concurrency (replace with resourceVersion), so two operators racing for one machine cannot both
win.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightsout import API_GROUP, API_VERSION
from lightsout.config import OperatorConfig
from lightsout.execution import addresses, join, leases, providerid, registration
from lightsout.execution.extravars import action_extravars, credentials_secret
from lightsout.execution.jobs import (
    JobRequest,
    build_action_job,
    build_extravars_configmap,
    job_name,
)
from lightsout.execution.nodeops import (
    STARTUP_TAINT,
    blocking_pdb,
    has_startup_taint,
    metadata_patch,
    node_unregistered,
    pods_to_drain,
)
from lightsout.k8s import api
from lightsout.metrics.families import LEASE_CONFLICTS
from lightsout.models.enums import Action
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec, PlaybookOverrides
from lightsout.planning.effects import (
    ApplyNodeMetadata,
    Cordon,
    DeleteCoreNode,
    DeleteJob,
    Drain,
    Effect,
    Event,
    SetDesiredPowerState,
    StartJob,
    Uncordon,
)
from lightsout.planning.types import STARTUP_TAINT_KEY, DrainStatus, EventType, LeaseState
from lightsout.state.parse import dig

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]


@dataclass
class MachineContext:
    """Everything the actuator needs to know about one machine for one reconcile pass: its
    Node (metadata, status) and the pass's one parse of its and its Group's spec."""

    node: Obj
    spec: NodeSpec
    group_spec: GroupSpec | None
    config: OperatorConfig
    labels: Mapping[str, str]
    taints: list[dict[str, str]]

    @property
    def name(self) -> str:
        return str(self.node["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.node["metadata"]["namespace"])

    @property
    def core_name(self) -> str:
        return self.spec.kubernetes_node_name

    @property
    def lease_namespace(self) -> str:
        return self.config.lease_namespace or self.namespace

    @property
    def lease_name(self) -> str:
        return leases.lease_name(self.namespace, self.name)


# ---------------------------------------------------------------- Lease
def read_lease_state(ctx: MachineContext, now: dt.datetime) -> LeaseState:
    lease = api.get_lease(ctx.lease_namespace, ctx.lease_name)
    return leases.lease_state(lease, ctx.config.identity, now)


def acquire_lease(ctx: MachineContext, now: dt.datetime) -> bool:
    """Take or renew the machine's Lease; False when another holder has it (or won a race)."""
    current = api.get_lease(ctx.lease_namespace, ctx.lease_name)
    try:
        if current is None:
            body = leases.build_lease(
                ctx.lease_name,
                ctx.lease_namespace,
                ctx.config.identity,
                ctx.config.lease_seconds,
                now,
            )
            api.create_lease(ctx.lease_namespace, body)
            return True
        patched = leases.acquire(current, ctx.config.identity, ctx.config.lease_seconds, now)
        if patched is None:
            LEASE_CONFLICTS.inc()
            return False
        api.replace_lease(ctx.lease_namespace, ctx.lease_name, patched)
        return True
    except api.ConflictError:
        LEASE_CONFLICTS.inc()
        return False


def release_lease(ctx: MachineContext, now: dt.datetime) -> None:
    current = api.get_lease(ctx.lease_namespace, ctx.lease_name)
    if current is None:
        return
    released = leases.release(current, ctx.config.identity, now)
    if released is not None:
        try:
            api.replace_lease(ctx.lease_namespace, ctx.lease_name, released)
        except api.ConflictError:
            log.info("lease %s changed while releasing; leaving it", ctx.lease_name)


# ---------------------------------------------------------------- Jobs
def job_request(
    ctx: MachineContext, effect: StartJob | DeleteJob, address: str | None = None
) -> JobRequest:
    """The Job of `effect`; `address` is the clone's static address (execution/addresses)."""
    spec, action = ctx.spec, effect.action
    playbooks = spec.playbooks or PlaybookOverrides()
    group_playbooks = ctx.group_spec.playbooks if ctx.group_spec else None
    timeout = (
        spec.power.shutdown_timeout_seconds
        if action in (Action.SHUTDOWN, Action.DEPROVISION)
        else spec.power.boot_timeout_seconds
    )
    secret, ca_secret = credentials_secret(spec)
    joining = action is Action.PROVISION and join.wanted(spec) is not None
    network = addresses.network(spec, ctx.group_spec, address)
    return JobRequest(
        node_name=ctx.name,
        namespace=ctx.namespace,
        node_uid=str(ctx.node["metadata"].get("uid", "")),
        generation=effect.generation,
        attempt=effect.attempt,
        action=effect.action,
        extravars={
            **action_extravars(ctx.node, spec, action),
            **(join.job_extravars(spec, ctx.labels, ctx.taints, network) if joining else {}),
        },
        credentials_secret=secret,
        ca_secret=ca_secret,
        join_secret=join.join_secret_name(ctx.name) if joining else None,
        join_sources=join.join_sources(spec) if joining else (),
        overlay_configmap=playbooks.config_map_name
        or (group_playbooks.config_map_name if group_playbooks else None),
        playbook=getattr(playbooks, action.value),
        image=ctx.config.runner_image,
        deadline_seconds=int(timeout) + 120,
        ttl_seconds=ctx.config.job_ttl_seconds,
        service_account_name=ctx.config.job_service_account,
        node_selector=dict(ctx.config.job_node_selector),
        tolerations=tuple({"key": key, "operator": "Exists"} for key in ctx.config.job_tolerations),
        # A magic packet is a broadcast on the node's own network.
        host_network=ctx.config.job_host_network or spec.driver.wol is not None,
    )


def start_job(ctx: MachineContext, effect: StartJob) -> str:
    """Create the action Job unless it exists (then it is adopted). Returns its name."""
    name = job_name(ctx.name, str(effect.action), effect.generation, effect.attempt)
    if api.get_job(ctx.namespace, name) is not None:
        log.info("adopting existing job %s", name)
        return name
    # The reconcile pass leased it before writing this provision's status; this finds that lease.
    address = (
        addresses.allocate(ctx.node, ctx.spec, ctx.group_spec)
        if effect.action is Action.PROVISION
        else None
    )
    request = job_request(ctx, effect, address)
    api.apply_configmap(ctx.namespace, build_extravars_configmap(request))
    if request.join_secret:
        # Fresh credentials for every attempt: the previous attempt's token is revoked.
        join.issue(ctx.node, ctx.spec, dt.datetime.now(dt.UTC))
    try:
        api.create_job(ctx.namespace, build_action_job(request))
    except api.ConflictError:
        log.info("job %s already exists; adopted", name)
    return name


# ---------------------------------------------------------------- core Node
def cordon(ctx: MachineContext, unschedulable: bool) -> None:
    if api.get_node(ctx.core_name) is not None:
        api.patch_node(ctx.core_name, {"spec": {"unschedulable": unschedulable or None}})


#: Tries of a conditional patch of a core Node's taints that lost a race with another writer.
NODE_PATCH_TRIES = 3


def _on_fresh_node(ctx: MachineContext, step: Callable[[Obj | None], None]) -> None:
    """Run `step` on a fresh read of the core Node, again when it loses a race (409: the Node
    changed since the read, or was created meanwhile), at most NODE_PATCH_TRIES times."""
    for _ in range(NODE_PATCH_TRIES):
        try:
            step(api.get_node(ctx.core_name))
        except api.ConflictError:
            continue
        return
    raise api.ConflictError(f"core Node {ctx.core_name} kept changing while patching it")


def apply_metadata(ctx: MachineContext) -> None:
    """The wanted labels and taints on the core Node, the startup taint removed (an event)."""

    def step(node: Obj | None) -> None:
        patch = node and metadata_patch(node, ctx.labels, ctx.taints, drop=(STARTUP_TAINT_KEY,))
        if not patch:
            return
        api.patch_node(ctx.core_name, patch)
        if has_startup_taint(node):
            message = (
                f"core Node {ctx.core_name} is Ready with its labels and taints: removed the "
                f"startup taint {STARTUP_TAINT_KEY}:NoSchedule"
            )
            post_event(ctx, Event(EventType.NORMAL, "StartupTaintRemoved", message))

    _on_fresh_node(ctx, step)


def prepare_core_node(ctx: MachineContext) -> None:
    """Before power-on: the core Node exists with the wanted labels and taints and the startup
    taint. Creates it (with the machine's providerID) when absent, else patches it; an event
    says which. Raises the API's error when it cannot: the caller then does not power on."""
    taints = [*ctx.taints, dict(STARTUP_TAINT)]

    def step(node: Obj | None) -> None:
        if node is None:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": ctx.core_name, "labels": dict(ctx.labels)},
                "spec": {"taints": taints, "providerID": providerid.wanted(ctx.node, ctx.spec)},
            }
            # AlreadyExists (its kubelet was first) is a 409 too: the next try patches that one.
            api.create_node(body)
            message = (
                f"created core Node {ctx.core_name} before power-on with {len(ctx.labels)} "
                f"label(s), {len(ctx.taints)} taint(s) and the startup taint "
                f"{STARTUP_TAINT_KEY}:NoSchedule"
            )
            post_event(ctx, Event(EventType.NORMAL, "CoreNodeCreated", message))
            return
        patch = metadata_patch(node, ctx.labels, taints)
        if not patch:
            return
        api.patch_node(ctx.core_name, patch)
        message = (
            f"core Node {ctx.core_name} exists: gave it its labels and taints and the startup "
            f"taint {STARTUP_TAINT_KEY}:NoSchedule before power-on"
        )
        post_event(ctx, Event(EventType.NORMAL, "CoreNodeTainted", message))

    _on_fresh_node(ctx, step)


def delete_unregistered_node(ctx: MachineContext) -> None:
    """Delete the core Node if no kubelet has registered it, as of a fresh read: a kubelet
    registering meanwhile changes it, and the conditional delete then leaves it alone."""

    def step(node: Obj | None) -> None:
        if node_unregistered(node):
            api.delete_node(
                ctx.core_name, resource_version=(node or {})["metadata"].get("resourceVersion")
            )

    _on_fresh_node(ctx, step)


def kubelet_registering(
    ctx: MachineContext, kubelet: Obj
) -> tuple[dict[str, str], list[dict[str, str]]] | None:
    """The machine's kubelet POSTs its Node (the admission webhook calls this; never for a dry
    run). The Node exists and still carries the startup taint: the kubelet's own labels and
    taints are merged into it (an event says which, and which labels a kubelet may not set
    were left out); returns None. No Node yet: returns the labels and taints the kubelet's
    object must be created with (the wanted ones and the startup taint over its own)."""
    outcome: list[tuple[dict[str, str], list[dict[str, str]]]] = []

    def step(node: Obj | None) -> None:
        outcome.clear()
        if node is None:
            outcome.append(registration.registration_metadata(kubelet, ctx.labels, ctx.taints))
            return
        patch = registration.merge_patch(node, kubelet, ctx.labels, ctx.taints)
        if not patch:
            return
        api.patch_node(ctx.core_name, patch)
        _, _, refused = registration.kubelet_metadata(kubelet)
        added = sorted(k for k in (patch.get("metadata") or {}).get("labels") or {})
        taints = dig(patch, "spec", "taints")
        message = (
            f"core Node {ctx.core_name} was POSTed again (its kubelet registering): merged "
            f"the request's label(s) {', '.join(added) or '(none new)'}"
            + (f" and taints ({len(taints)} on the Node now)" if taints is not None else "")
            + " into the Node made before power-on (the Group's and the machine's win)"
            + (
                f"; left out label(s) a kubelet may not set: {', '.join(refused)}"
                if refused
                else ""
            )
        )
        post_event(ctx, Event(EventType.NORMAL, "KubeletMetadataMerged", message))

    _on_fresh_node(ctx, step)
    if not outcome:
        return None
    message = (
        f"the kubelet of core Node {ctx.core_name} registers a Node that does not exist: it is "
        f"created with its own labels and taints plus {len(ctx.labels)} label(s) and "
        f"{len(ctx.taints)} taint(s) of the Group and the machine and the startup taint "
        f"{STARTUP_TAINT_KEY}:NoSchedule"
    )
    post_event(ctx, Event(EventType.NORMAL, "CoreNodeRegistering", message))
    return outcome[0]


def drain(ctx: MachineContext) -> DrainStatus:
    """One pass of evictions; returns what is left and which PDB (if any) is blocking."""
    remaining = pods_to_drain(api.pods_on_node(ctx.core_name))
    blocked_by, blocked_message = None, ""
    for pod in remaining:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        try:
            api.evict(meta["namespace"], meta["name"])
        except api.EvictionBlockedError as exc:
            pdb = blocking_pdb(pod, api.pdbs(meta["namespace"]))
            blocked_by = pdb or f"{meta['namespace']}/{meta['name']}"
            blocked_message = f"evicting {meta['namespace']}/{meta['name']}: {exc.message}"
    return DrainStatus(
        pods_remaining=len(remaining), blocked_by=blocked_by, blocked_message=blocked_message
    )


def pods_remaining(ctx: MachineContext) -> int:
    return len(pods_to_drain(api.pods_on_node(ctx.core_name)))


def post_event(ctx: MachineContext, effect: Event) -> None:
    involved = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "Node",
        "metadata": ctx.node["metadata"],
    }
    api.post_event(involved, str(effect.type), effect.reason, effect.message)


def apply_effect(ctx: MachineContext, effect: Effect) -> DrainStatus | None:
    """Carry out one effect (Lease, Requeue and SetCondition are handled by the caller)."""
    if isinstance(effect, StartJob):
        start_job(ctx, effect)
    elif isinstance(effect, DeleteJob):
        api.delete_job(
            ctx.namespace,
            job_name(ctx.name, str(effect.action), effect.generation, effect.attempt),
        )
    elif isinstance(effect, Cordon):
        cordon(ctx, True)
    elif isinstance(effect, Uncordon):
        cordon(ctx, False)
    elif isinstance(effect, ApplyNodeMetadata):
        apply_metadata(ctx)
    elif isinstance(effect, Drain):
        return drain(ctx)
    elif isinstance(effect, DeleteCoreNode):
        if effect.unregistered_only:
            delete_unregistered_node(ctx)
        else:
            api.delete_node(ctx.core_name)
    elif isinstance(effect, SetDesiredPowerState):
        patch = {"spec": {"desiredPowerState": str(effect.state)}}
        api.patch_resource(ctx.namespace, "nodes", ctx.name, patch)
    elif isinstance(effect, Event):
        post_event(ctx, effect)
    return None
