"""One reconcile pass for one machine, from what the watch caches hold about it.

Called by the Node reconciler's workers (`handlers/node.py`), in a worker thread, with a
`MachineView`: the machine's Lights-Out Node and its and its Group's spec read into the API
models (once per pass), its action Jobs and their pods, its core Node, its Lease and (while
draining) the pods on its core Node, all copied from kopf indexes on the event loop before the
pass. A pass reads what the state machine observes (`actuation.inputs.observations`) and what
it reads beside (`planning.machine.passes.Readings`: the newest health check, the providerID, CPU
use), decides with `planning.machine.passes.pass_decision` (the replay's decision too) → write
status → carry out effects, and returns when the machine wants its next pass (None: only when
something it watches changes; there is no periodic re-read).

Nothing is kept in memory between passes that the API does not also hold: an operator killed at
any instant resumes correctly and re-adopts a running Job by its deterministic name. A cache can
lag behind the API; that costs a retry, never a wrong action: the status write carries the
`resourceVersion` the pass read (409 → the newer object's watch event brings another pass),
a Job is looked up live before it is created, and a drain is only declared finished after a
live list of the core Node's pods agrees with the cache.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightsout.actuation import inputs, interpreter
from lightsout.actuation.nodeops import pods_to_drain
from lightsout.config import OperatorConfig
from lightsout.execution import actuator, energy, health, leases, providerid
from lightsout.execution.jobs import LABEL_NODE
from lightsout.execution.results import observe_job
from lightsout.k8s.api import Api
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.machine import fsm, healthjudge
from lightsout.planning.machine.passes import Readings, pass_decision
from lightsout.planning.types import (
    Action,
    DrainStatus,
    ObservedJob,
    Phase,
)
from lightsout.state import references
from lightsout.state.references import Unresolved

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class MachineView:
    """What the watch caches hold about one machine at the start of a pass."""

    node: Obj
    spec: NodeSpec
    group_spec: GroupSpec | None = None
    jobs: Sequence[Obj] = ()
    #: Pods of each action Job, by Job name.
    job_pods: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    #: `FailedMount` events of those pods, by Job name (a real kubelet says only there that a
    #: pod's Secret or ConfigMap is missing).
    job_events: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    core_node: Obj | None = None
    lease: Obj | None = None
    #: False when the Lease's namespace is not watched: the pass reads the Lease live.
    lease_cached: bool = True
    #: Pods on the core Node (filled unless the machine is Off): what a drain waits for, and
    #: whose cpu requests set the machine's energy draw.
    pods_on_node: Sequence[Obj] = ()
    #: Per power action, the first object its Job needs that is missing (`state.references`).
    unresolved: Mapping[Action, Unresolved] = field(default_factory=dict)
    #: Results of health-check pods that named this machine (`health.pod_record`).
    health: Sequence[Obj] = ()
    #: Why the machine is left out of its Group's health check (`Caches.health_problem`).
    health_problem: Unresolved | None = None


#: Index ids (kopf handler ids) of the watch caches the reconcilers read; see `handlers/node.py`.
#: Those of machines, Groups, core Nodes and pods feed the autoscaler's planner too.
#: Where kubelets keep their heartbeat Leases (one per core Node, named after it).
KUBE_NODE_LEASE = "kube-node-lease"
MACHINES = "lightsout_machines"  # (namespace, name) → Lights-Out Node
MACHINE_REFS = "lightsout_machine_refs"  # REF_* keys → (namespace, name) of machines
GROUPS = "lightsout_groups"  # (namespace, name) → Group
JOBS = "lightsout_jobs"  # (namespace, machine name) → action Job
JOB_PODS = "lightsout_job_pods"  # (namespace, Job name) → pod of an action Job
CORE_NODES = "lightsout_core_nodes"  # name → core Node
LEASES = "lightsout_leases"  # (namespace, name) → Lease named lightsout.*
PODS = "lightsout_pods"  # core Node name (None: not bound) → pod (a drain reads one Node's)
#: (namespace, name) → the key names of a Secret / ConfigMap (never a value); shared with the
#: autoscaler, which flattens them into its snapshot.
SECRETS = "lightsout_secret_keys"
CONFIG_MAPS = "lightsout_configmap_keys"
HEALTH = "lightsout_health"  # (namespace, machine name) → a health-check pod's result
MOUNT_FAILURES = "lightsout_mount_failures"  # (namespace, pod name) → its FailedMount events
CACHES = (
    MACHINES,
    MACHINE_REFS,
    GROUPS,
    JOBS,
    JOB_PODS,
    CORE_NODES,
    LEASES,
    PODS,
    SECRETS,
    CONFIG_MAPS,
    HEALTH,
    MOUNT_FAILURES,
)
REF_CORE, REF_GROUP, REF_SECRET, REF_CONFIG_MAP = "core", "group", "secret", "configmap"
#: The actions whose Jobs the state machine may start.
POWER_ACTIONS = tuple(a for a in Action if a.target is not None)


@dataclass(frozen=True)
class Caches:
    """Read-only lookups in the watch caches (kopf indexes: key → the objects stored under it).

    Only called on the event loop (kopf changes the indexes there), and every object handed out
    is the dict the index holds, which kopf replaces on change and never mutates: a pass in a
    worker thread can read its `MachineView` while the caches move on.
    """

    indexes: Mapping[str, Mapping[Any, Iterable[Any]]]
    config: OperatorConfig

    def _all(self, index: str, key: Any) -> list[Any]:
        return list(self.indexes[index].get(key, ()))

    def _one(self, index: str, key: Any) -> Any:
        return next(iter(self.indexes[index].get(key, ())), None)

    def machine(self, namespace: str, name: str) -> Obj | None:
        found: Obj | None = self._one(MACHINES, (namespace, name))
        return found

    def group(self, namespace: str, name: str) -> Obj | None:
        found: Obj | None = self._one(GROUPS, (namespace, name))
        return found

    def machines_of_group(self, namespace: str, group: str) -> list[tuple[str, str]]:
        return self._all(MACHINE_REFS, (REF_GROUP, namespace, group))

    def machines_on(self, core_name: str) -> list[tuple[str, str]]:
        return self._all(MACHINE_REFS, (REF_CORE, core_name))

    def machines_naming(self, kind: str, namespace: str, name: str) -> list[tuple[str, str]]:
        """Machines whose spec names this Secret (`REF_SECRET`) or ConfigMap, directly or (a
        playbook overlay) through their Group."""
        found = self._all(MACHINE_REFS, (kind, namespace, name))
        if kind == REF_CONFIG_MAP:
            for (ns, group_name), groups in self.indexes[GROUPS].items():
                if ns == namespace and any(_overlay(g) == name for g in groups):
                    found += self.machines_of_group(ns, group_name)
        return found

    def machine_of_pod(self, namespace: str, pod: str) -> str | None:
        """The machine whose action Job has this pod (a few pods at most are cached)."""
        for (ns, _job), pods in self.indexes[JOB_PODS].items():
            for found in pods if ns == namespace else ():
                meta = found.get("metadata") or {}
                if meta.get("name") == pod:
                    machine = (meta.get("labels") or {}).get(LABEL_NODE)
                    return str(machine) if machine else None
        return None

    def _pod_events(self, namespace: str, pods: Iterable[Obj]) -> list[Obj]:
        return [
            event
            for pod in pods
            for event in self._all(MOUNT_FAILURES, (namespace, pod["metadata"].get("name")))
        ]

    def keys(self, index: str, namespace: str, name: str) -> frozenset[str] | None:
        """The key names of a cached Secret or ConfigMap, None when it does not exist."""
        found: frozenset[str] | None = self._one(index, (namespace, name))
        return found

    def _check(self, node: Obj, group: Obj | None, action: str) -> Unresolved | None:
        namespace = str(node["metadata"].get("namespace") or "")
        return references.unresolved(
            node,
            group,
            action,
            # A cluster-wide operator has no Secret index (`handlers.watch_secrets`).
            (lambda name: self.keys(SECRETS, namespace, name)) if SECRETS in self.indexes else None,
            lambda name: self.keys(CONFIG_MAPS, namespace, name),
        )

    def unresolved(self, node: Obj, group: Obj | None) -> dict[Action, Unresolved]:
        problems = {action: self._check(node, group, str(action)) for action in POWER_ACTIONS}
        return {action: problem for action, problem in problems.items() if problem is not None}

    def health_problem(
        self, node: Obj, group: Obj | None, group_spec: GroupSpec | None
    ) -> Unresolved | None:
        """What keeps the machine out of its Group's health check (a Secret or ConfigMap its
        check pod would mount is missing), None when it is checked or there is no check."""
        if group_spec is None or not group_spec.health_check.enabled:
            return None
        return self._check(node, group, health.COMPONENT)

    def view(self, namespace: str, name: str) -> MachineView | None:
        """Everything one pass over this machine reads, or None when the machine is gone.
        Raises `inputs.InvalidSpecError` when its or its Group's spec does not read."""
        node = self.machine(namespace, name)
        if node is None:
            return None
        spec = inputs.node_spec(node)
        group = self.group(namespace, spec.group)
        group_spec = None if group is None else inputs.group_spec(group)
        jobs = self._all(JOBS, (namespace, name))
        core_name = spec.kubernetes_node_name
        lease_namespace = self.config.lease_namespace or namespace
        powered = (node.get("status") or {}).get("phase") != Phase.OFF
        job_pods = {
            job["metadata"]["name"]: self._all(JOB_PODS, (namespace, job["metadata"]["name"]))
            for job in jobs
        }
        return MachineView(
            node=node,
            spec=spec,
            group_spec=group_spec,
            jobs=jobs,
            job_pods=job_pods,
            job_events={
                job: events
                for job, pods in job_pods.items()
                if (events := self._pod_events(namespace, pods))
            },
            core_node=self._one(CORE_NODES, core_name),
            lease=self._one(LEASES, (lease_namespace, leases.lease_name(namespace, name))),
            # A Lease namespace of its own is not among the watched ones (it may be outside
            # what a namespaced operator sees): those passes read the Lease live.
            lease_cached=self.config.lease_namespace is None,
            pods_on_node=self._all(PODS, core_name) if powered else (),
            unresolved=self.unresolved(node, group),
            health=self._all(HEALTH, (namespace, name)),
            health_problem=self.health_problem(node, group, group_spec),
        )


def _overlay(group: Obj) -> str | None:
    """The playbook overlay ConfigMap a Group names (None when its spec does not read)."""
    try:
        playbooks = inputs.group_spec(group).playbooks
    except inputs.InvalidSpecError:
        return None
    return playbooks.config_map_name if playbooks else None


@dataclass
class Reconciler:
    """Carries the per-machine drain progress between passes (what a PDB blocked last)."""

    config: OperatorConfig
    api: Api
    drains: dict[str, DrainStatus] = field(default_factory=dict)

    def forget(self, key: str) -> None:
        self.drains.pop(key, None)

    def reconcile(self, view: MachineView) -> float | None:
        """One pass; returns seconds until the next pass if nothing wakes the machine sooner."""
        node, spec, group = view.node, view.spec, view.group_spec
        if node["metadata"].get("deletionTimestamp"):
            return None
        ctx = actuator.KubeMachine(self.api, node, spec, group, self.config)
        key = f"{ctx.namespace}/{ctx.name}"
        now = dt.datetime.now(dt.UTC)
        machine = inputs.machine_state(node, spec, group)
        observed = [o for job in view.jobs if (o := _observe(view, job, now)) is not None]
        observed_job = fsm.select_job(observed, machine.operation)
        provider_id = providerid.wanted(node, spec)
        core_node = providerid.ensure(self.api, view.core_node, provider_id)
        drain = None
        if machine.phase == Phase.DRAINING and core_node is not None:
            last = self.drains.get(key)
            # The cache may not have seen a pod bound just before the cordon: "drained" (which
            # powers the machine off) is only believed after a live list agrees.
            left = len(pods_to_drain(view.pods_on_node)) or ctx.pods_remaining()
            drain = DrainStatus(
                pods_remaining=left,
                blocked_by=last.blocked_by if last and left else None,
                blocked_message=last.blocked_message if last and left else "",
            )
        held = view.lease
        if not view.lease_cached:
            held = self.api.get_lease(ctx.lease_namespace, ctx.lease_name)
        lease = leases.lease_state(held, self.config.identity, now)
        status = node.get("status") or {}
        checked = healthjudge.assess(status, health.newest(view.health, spec.group), lease)
        if view.health_problem is not None:
            checked = healthjudge.not_checked(checked, view.health_problem)
        else:
            checked = healthjudge.included_again(checked, status)
        # Read only while a power-off waits for the kubelet to stop (its evidence of a shut
        # down OS): one GET per pass of such a machine, none for the others.
        pending = machine.operation is not None and machine.operation.cut_pending
        if pending or (observed_job is not None and observed_job.values.get("cut_pending")):
            kubelet = self.api.get_lease(KUBE_NODE_LEASE, spec.kubernetes_node_name)
        else:
            kubelet = None
        obs = inputs.observations(
            job=observed_job,
            core_node=core_node,
            labels=ctx.labels,
            taints=ctx.taints,
            drain=drain,
            lease=lease,
            lease_expires=leases.lease_expiry(held),
            power_state=checked.power_state,
            power_state_at=checked.power_state_at,
            unresolved=view.unresolved,
            kubelet=leases.kubelet_heartbeat(kubelet),
        )
        readings = Readings(
            health=checked,
            spec=spec,
            status=status,
            utilisation=energy.cpu_utilisation(node, core_node, view.pods_on_node),
            draw=energy.draw(node),
            group=group,
            provider_ids=providerid.ids(core_node, provider_id),
        )
        decision = pass_decision(machine, obs, readings, now)
        carried = interpreter.carry_out(ctx, machine, decision, now)
        if carried.drain is not None:
            self.drains[key] = carried.drain  # what a PDB blocked, for the next pass
        return carried.requeue_after


def _observe(view: MachineView, job: Obj, now: dt.datetime) -> ObservedJob | None:
    name = job["metadata"]["name"]
    return observe_job(job, view.job_pods.get(name, ()), now, view.job_events.get(name, ()))
