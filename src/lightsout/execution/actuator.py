"""The machine's port over `lightsout.k8s`: carries out the effects of one pass's decision.

Called by the effect interpreter (`actuation.interpreter.carry_out`) with a `Decision` from
`planning.machine.passes.pass_decision`; the status it patches is `execution.statuswriter`'s. Every
effect is idempotent: creating a Job that exists adopts it (deterministic names), cordoning a
cordoned node changes nothing, evicting a gone pod is fine. The Lease is taken with optimistic
concurrency (replace with resourceVersion), so two operators racing for one machine cannot both
win.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lightsout import API_GROUP, API_VERSION
from lightsout.actuation import inputs
from lightsout.actuation.nodeops import (
    STARTUP_TAINT,
    blocking_pdb,
    has_startup_taint,
    metadata_patch,
    node_unregistered,
    pods_to_drain,
)
from lightsout.actuation.pool import PoolExhaustedError
from lightsout.config import OperatorConfig
from lightsout.execution import addresses, join, leases, providerid, registration
from lightsout.execution.extravars import action_extravars, credentials_secret
from lightsout.execution.jobs import (
    JobRequest,
    build_action_job,
    build_extravars_configmap,
    configured_pod,
    job_name,
)
from lightsout.execution.statuswriter import wanted_status
from lightsout.k8s.api import Api, ConflictError, EvictionBlockedError, error_message
from lightsout.metrics.families import LEASE_CONFLICTS
from lightsout.models.enums import Action, DesiredPowerState
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec, PlaybookOverrides
from lightsout.planning.machine.effects import (
    Decision,
    DeleteJob,
    Event,
    StartJob,
)
from lightsout.planning.types import (
    STARTUP_TAINT_KEY,
    DrainStatus,
    EventType,
    MachineState,
    ObservedPowerState,
)
from lightsout.state.parse import dig
from lightsout.state.status import node_status

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
#: What an action Job's deadline adds to the machine's boot or shutdown timeout: the playbook's
#: own work around the wait (30 to 60 tasks). On a loaded runner node a shutdown took 191 s of
#: it (54 tasks, CI with three labs), so the margin is 5 minutes, not 2; a hung Job is still
#: ended, only later.
JOB_OVERHEAD_SECONDS = 300
#: Tries of a conditional patch of a core Node's taints that lost a race with another writer.
NODE_PATCH_TRIES = 3


@dataclass
class KubeMachine:
    """One machine during one reconcile pass, through the Kubernetes API: the `MachinePort`
    the effect interpreter (`actuation.interpreter`) carries its decision out through."""

    #: The process' one client (`lightsout.k8s.api`).
    api: Api
    node: Obj
    #: The pass's one parse of the machine's and its Group's spec.
    spec: NodeSpec
    group_spec: GroupSpec | None
    config: OperatorConfig
    #: What its core Node should carry: the Group's labels and taints, then the machine's.
    labels: Mapping[str, str] = field(init=False)
    taints: list[dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.labels, self.taints = inputs.wanted_metadata(self.node, self.spec, self.group_spec)

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
    def acquire_lease(self, now: dt.datetime) -> bool:
        """Take or renew the machine's Lease; False when another holder has it (or won a race)."""
        identity, seconds = self.config.identity, self.config.lease_seconds
        taken = leases.take(
            self.api,
            self.lease_namespace,
            self.lease_name,
            identity,
            now,
            duration_seconds=seconds,
            machine=(self.namespace, self.name),
        )
        if taken is not None:
            return True
        LEASE_CONFLICTS.inc()
        return False

    def release_lease(self, now: dt.datetime) -> None:
        identity = self.config.identity
        if not leases.give_back(self.api, self.lease_namespace, self.lease_name, identity, now):
            log.info("lease %s changed while releasing; leaving it", self.lease_name)

    # ---------------------------------------------------------------- Jobs
    def job_request(self, effect: StartJob | DeleteJob, address: str | None = None) -> JobRequest:
        """The Job of `effect`; `address` is the clone's static address (execution/addresses)."""
        spec, action = self.spec, effect.action
        playbooks = spec.playbooks or PlaybookOverrides()
        group_playbooks = self.group_spec.playbooks if self.group_spec else None
        timeout = (
            spec.power.shutdown_timeout_seconds
            if action in (Action.SHUTDOWN, Action.DEPROVISION)
            else spec.power.boot_timeout_seconds
        )
        secret, ca_secret = credentials_secret(spec)
        joining = action is Action.PROVISION and spec.clone_join is not None
        network = addresses.network(spec, self.group_spec, address)
        return JobRequest(
            node_name=self.name,
            namespace=self.namespace,
            node_uid=str(self.node["metadata"].get("uid", "")),
            generation=effect.generation,
            attempt=effect.attempt,
            action=effect.action,
            extravars={
                **action_extravars(self.node, spec, action),
                **_os_down(effect),
                **(join.job_extravars(spec, self.labels, self.taints, network) if joining else {}),
            },
            credentials_secret=secret,
            ca_secret=ca_secret,
            join_secret=join.join_secret_name(self.name) if joining else None,
            join_sources=join.join_sources(spec) if joining else (),
            overlay_configmap=playbooks.config_map_name
            or (group_playbooks.config_map_name if group_playbooks else None),
            playbook=getattr(playbooks, action.value),
            image=self.config.runner_image,
            deadline_seconds=int(timeout) + JOB_OVERHEAD_SECONDS,
            ttl_seconds=self.config.job_ttl_seconds,
            **asdict(configured_pod(self.config, magic_packets=spec.driver.sends_magic_packets)),
        )

    def start_job(self, effect: StartJob) -> None:
        """Create the action Job unless it exists (then it is adopted)."""
        name = job_name(self.name, str(effect.action), effect.generation, effect.attempt)
        if self.api.get_job(self.namespace, name) is not None:
            log.info("adopting existing job %s", name)
            return
        # The pass leased it before writing this provision's status; this finds that lease.
        address = (
            addresses.allocate(self.api, self.node, self.spec, self.group_spec)
            if effect.action is Action.PROVISION
            else None
        )
        request = self.job_request(effect, address)
        self.api.apply_configmap(self.namespace, build_extravars_configmap(request))
        if request.join_secret:
            # Fresh credentials for every attempt: the previous attempt's token is revoked.
            join.issue(self.api, self.node, self.spec, dt.datetime.now(dt.UTC))
        try:
            self.api.create_job(self.namespace, build_action_job(request))
        except ConflictError:
            log.info("job %s already exists; adopted", name)

    # ---------------------------------------------------------------- core Node
    def cordon(self, unschedulable: bool) -> None:
        if self.api.get_node(self.core_name) is not None:
            self.api.patch_node(self.core_name, {"spec": {"unschedulable": unschedulable or None}})

    def _on_fresh_node[T](self, step: Callable[[Obj | None], T]) -> T:
        """Run `step` on a fresh read of the core Node, again when it loses a race (409: the Node
        changed since the read, or was created meanwhile), at most NODE_PATCH_TRIES times."""
        for _ in range(NODE_PATCH_TRIES):
            with contextlib.suppress(ConflictError):
                return step(self.api.get_node(self.core_name))
        raise ConflictError(f"core Node {self.core_name} kept changing while patching it")

    def apply_metadata(self) -> None:
        """The wanted labels and taints on the core Node, the startup taint removed (an event)."""

        def step(node: Obj | None) -> None:
            patch = node and metadata_patch(
                node, self.labels, self.taints, drop=(STARTUP_TAINT_KEY,)
            )
            if not patch:
                return
            self.api.patch_node(self.core_name, patch)
            if has_startup_taint(node):
                message = (
                    f"core Node {self.core_name} is Ready with its labels and taints: removed the "
                    f"startup taint {STARTUP_TAINT_KEY}:NoSchedule"
                )
                self.post_event(Event(EventType.NORMAL, "StartupTaintRemoved", message))

        self._on_fresh_node(step)

    def prepare_core_node(self) -> str | None:
        """Before power-on: the core Node exists with the wanted labels and taints and the startup
        taint. Creates it (with the machine's providerID) when absent, else patches it; an event
        says which. Returns the API's error when it cannot: the caller then does not power on."""
        taints = [*self.taints, dict(STARTUP_TAINT)]

        def step(node: Obj | None) -> None:
            if node is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": self.core_name, "labels": dict(self.labels)},
                    "spec": {
                        "taints": taints,
                        "providerID": providerid.wanted(self.node, self.spec),
                    },
                }
                # AlreadyExists (its kubelet was first) is a 409 too: the next try patches that one.
                self.api.create_node(body)
                message = (
                    f"created core Node {self.core_name} before power-on with {len(self.labels)} "
                    f"label(s), {len(self.taints)} taint(s) and the startup taint "
                    f"{STARTUP_TAINT_KEY}:NoSchedule"
                )
                self.post_event(Event(EventType.NORMAL, "CoreNodeCreated", message))
                return
            patch = metadata_patch(node, self.labels, taints)
            if not patch:
                return
            self.api.patch_node(self.core_name, patch)
            message = (
                f"core Node {self.core_name} exists: gave it its labels and taints and the startup "
                f"taint {STARTUP_TAINT_KEY}:NoSchedule before power-on"
            )
            self.post_event(Event(EventType.NORMAL, "CoreNodeTainted", message))

        try:
            self._on_fresh_node(step)
        except Exception as exc:
            log.warning("machine %s/%s: core Node not prepared", self.namespace, self.name)
            return error_message(exc)
        return None

    def kubelet_registering(
        self, kubelet: Obj
    ) -> tuple[dict[str, str], list[dict[str, str]]] | None:
        """The machine's kubelet POSTs its Node (the admission webhook calls this; never for a dry
        run). The Node exists and still carries the startup taint: the kubelet's own labels and
        taints are merged into it (an event says which, and which labels a kubelet may not set
        were left out); returns None. No Node yet: returns the labels and taints the kubelet's
        object must be created with (the wanted ones and the startup taint over its own)."""

        def step(node: Obj | None) -> tuple[dict[str, str], list[dict[str, str]]] | None:
            if node is None:
                return registration.registration_metadata(kubelet, self.labels, self.taints)
            patch = registration.merge_patch(node, kubelet, self.labels, self.taints)
            if not patch:
                return None
            self.api.patch_node(self.core_name, patch)
            _, _, refused = registration.kubelet_metadata(kubelet)
            added = sorted(k for k in (patch.get("metadata") or {}).get("labels") or {})
            taints = dig(patch, "spec", "taints")
            message = (
                f"core Node {self.core_name} was POSTed again (its kubelet registering): merged "
                f"the request's label(s) {', '.join(added) or '(none new)'}"
                + (f" and taints ({len(taints)} on the Node now)" if taints is not None else "")
                + " into the Node made before power-on (the Group's and the machine's win)"
                + (
                    f"; left out label(s) a kubelet may not set: {', '.join(refused)}"
                    if refused
                    else ""
                )
            )
            self.post_event(Event(EventType.NORMAL, "KubeletMetadataMerged", message))
            return None

        created = self._on_fresh_node(step)
        if created is None:
            return None
        message = (
            f"the kubelet of core Node {self.core_name} registers a Node that does not exist: it "
            f"is created with its own labels and taints plus {len(self.labels)} label(s) and "
            f"{len(self.taints)} taint(s) of the Group and the machine and the startup taint "
            f"{STARTUP_TAINT_KEY}:NoSchedule"
        )
        self.post_event(Event(EventType.NORMAL, "CoreNodeRegistering", message))
        return created

    def drain(self, force: bool) -> DrainStatus:
        """One pass of evictions; returns what is left and which PDB (if any) is blocking.
        With `force`, a pod whose eviction a PDB blocks is deleted (its grace period honoured)."""
        remaining = pods_to_drain(self.api.pods_on_node(self.core_name))
        blocked_by, blocked_message = None, ""
        for pod in remaining:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self.api.evict(meta["namespace"], meta["name"])
            except EvictionBlockedError as exc:
                if force:
                    self.api.delete_pod(meta["namespace"], meta["name"])
                    log.warning(
                        "deleted pod %s/%s on %s: past the battery's drain deadline (%s)",
                        meta["namespace"],
                        meta["name"],
                        self.core_name,
                        exc.message,
                    )
                    continue
                pdb = blocking_pdb(pod, self.api.list_pdbs(meta["namespace"]))
                blocked_by = pdb or f"{meta['namespace']}/{meta['name']}"
                blocked_message = f"evicting {meta['namespace']}/{meta['name']}: {exc.message}"
        return DrainStatus(
            pods_remaining=len(remaining), blocked_by=blocked_by, blocked_message=blocked_message
        )

    def pods_remaining(self) -> int:
        return len(pods_to_drain(self.api.pods_on_node(self.core_name)))

    def post_event(self, effect: Event) -> None:
        involved = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "Node",
            "metadata": self.node["metadata"],
        }
        self.api.post_event(involved, str(effect.type), effect.reason, effect.message)

    # ---------------------------------------------------------------- the rest of the port
    @property
    def phase(self) -> str | None:
        phase = node_status(self.node).phase
        return None if phase is None else str(phase)

    @property
    def renew_lease_every(self) -> float:
        return self.config.lease_seconds / 3

    def allocate_address(self) -> str | None:
        try:
            addresses.allocate(self.api, self.node, self.spec, self.group_spec)
        except PoolExhaustedError as exc:
            log.warning("machine %s/%s: %s", self.namespace, self.name, exc)
            return str(exc)
        return None

    def write_status(self, machine: MachineState, decision: Decision, now: dt.datetime) -> bool:
        """Patch what changed from the Node's status to `wanted_status`, conditional on the
        Node's resourceVersion: False when it changed since the read (409)."""
        status = node_status(self.node)
        new = wanted_status(
            self.node, self.spec, decision, now, (machine.desired, machine.intent_generation)
        )
        changed = inputs.status_patch(status.stored, new)
        if not changed:
            return True
        fields = ", ".join(sorted(changed))
        log.debug("status of %s/%s: %s changed", self.namespace, self.name, fields)
        version = self.node["metadata"].get("resourceVersion")
        try:
            self.api.patch_status(self.namespace, "nodes", self.name, changed, version)
        except ConflictError:
            return False
        if status.phase != new["phase"]:
            log.info(
                "machine %s/%s: %s -> %s (%s)",
                self.namespace,
                self.name,
                status.phase,
                new["phase"],
                decision.reason,
            )
        return True

    def settle(self, previous_phase: str | None, phase: str) -> None:
        join.settle(self.api, self.node, self.spec, previous_phase, phase)
        addresses.settle(self.api, self.node, self.spec, previous_phase, phase)

    def delete_job(self, effect: DeleteJob) -> None:
        name = job_name(self.name, str(effect.action), effect.generation, effect.attempt)
        self.api.delete_job(self.namespace, name)

    def delete_core_node(self, unregistered_only: bool) -> None:
        """`unregistered_only`: only if no kubelet has registered it, as of a fresh read (a
        kubelet registering meanwhile changes it, and the conditional delete leaves it alone)."""
        if not unregistered_only:
            self.api.delete_node(self.core_name)
            return

        def step(node: Obj | None) -> None:
            if node_unregistered(node):
                self.api.delete_node(
                    self.core_name, resource_version=(node or {})["metadata"].get("resourceVersion")
                )

        self._on_fresh_node(step)

    def set_desired(self, state: ObservedPowerState) -> None:
        write_desired(self.api, self.node, DesiredPowerState(state.value))


def write_desired(
    api: Api, machine: Obj, state: DesiredPowerState, *, conditional: bool = False
) -> None:
    """The one writer of a machine's `spec.desiredPowerState` (the plan applier, the
    externalgrpc servicer, driftPolicy Adopt). `conditional`: only if the machine is unchanged
    since it was read (else `ConflictError`)."""
    meta = machine["metadata"]
    patch: dict[str, Any] = {"spec": {"desiredPowerState": str(state)}}
    if conditional:
        patch["metadata"] = {"resourceVersion": meta.get("resourceVersion")}
    api.patch_resource(meta["namespace"], "nodes", meta["name"], patch)


def _os_down(effect: StartJob | DeleteJob) -> dict[str, Any]:
    """`lightsout_os_down` for the power-off that follows a `cut_pending` one (the evidence
    that the OS is down, playbooks/README.md), else nothing."""
    if not isinstance(effect, StartJob) or not effect.os_down_evidence:
        return {}
    return {
        "lightsout_os_down": {
            "evidence": effect.os_down_evidence,
            "forced_after": effect.os_down_forced_after,
        }
    }
