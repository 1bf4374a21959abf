"""One reconcile pass for one machine, from what the watch caches hold about it.

Called by the Node reconciler's workers (`handlers/node.py`), in a worker thread, with a
`MachineView`: the machine's Lights-Out Node and its and its Group's spec read into the API
models (once per pass), its action Jobs and their pods, its core Node, its Lease and (while
draining) the pods on its core Node, all copied from kopf indexes on the event loop before the
pass. A pass makes the few reads the caches cannot answer (`observe.LiveReads`), turns it all
into what the state machine observes and what the pass reads beside (`observe.observe`, pure),
decides with `planning.machine.passes.pass_decision` (the replay's decision too) → write status
→ carry out effects, and returns when the machine wants its next pass (None: only when
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lightsout.actuation import inputs, interpreter
from lightsout.config import OperatorConfig
from lightsout.execution import actuator, health, leases, providerid
from lightsout.execution.jobs import LABEL_NODE
from lightsout.execution.observe import (
    LiveReads,
    MachineView,
    needed,
    observe,
)
from lightsout.k8s.api import Api
from lightsout.models.group import GroupSpec
from lightsout.planning.energy.status import account_from_status
from lightsout.planning.machine.passes import pass_decision
from lightsout.planning.types import (
    Action,
    DrainStatus,
    Phase,
)
from lightsout.state import references, series
from lightsout.state.references import Unresolved
from lightsout.state.status import group_status, node_status

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


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
#: (namespace, name) → a ConfigMap labelled `lightsout.dev/series`, whole: a Group's price or
#: carbon series (`state.series`).
SERIES = "lightsout_series"
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
        return cast(Obj | None, self._one(MACHINES, (namespace, name)))

    def group(self, namespace: str, name: str) -> Obj | None:
        return cast(Obj | None, self._one(GROUPS, (namespace, name)))

    def machines_of_group(self, namespace: str, group: str) -> list[tuple[str, str]]:
        return self._all(MACHINE_REFS, (REF_GROUP, namespace, group))

    def beside(self, namespace: str, name: str, group: str) -> float:
        """What the Group's other machines draw, by the rates their accounts hold."""
        total = 0.0
        for ref in self.machines_of_group(namespace, group):
            other = self.machine(*ref) if ref != (namespace, name) else None
            account = account_from_status(node_status(other).energy)
            total += account.rate.watts if account is not None else 0.0
        return total

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
        return cast(frozenset[str] | None, self._one(index, (namespace, name)))

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
        maps = series.config_maps(
            [m for found in self.indexes.get(SERIES, {}).values() for m in found]
        )
        electricity = group_spec.electricity if group_spec is not None else None
        core_name = spec.kubernetes_node_name
        lease_namespace = self.config.lease_namespace or namespace
        powered = node_status(node).phase is not Phase.OFF
        job_pods = {
            job["metadata"]["name"]: self._all(JOB_PODS, (namespace, job["metadata"]["name"]))
            for job in jobs
        }
        surplus = series.surplus(electricity, namespace, maps, group_status(group).solar_surplus)
        return MachineView(
            node=node,
            spec=spec,
            group_spec=group_spec,
            prices=series.resolve(electricity, namespace, maps, group=spec.group).prices,
            surplus=surplus,
            # The other machines' draw matters only to share a surplus (and walks the Group).
            beside=self.beside(namespace, name, spec.group) if surplus is not None else 0.0,
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
        need = needed(view, now)
        held = view.lease
        if not view.lease_cached:
            held = self.api.get_lease(ctx.lease_namespace, ctx.lease_name)
        reads = LiveReads(
            core_node=providerid.ensure(self.api, view.core_node, providerid.wanted(node, spec)),
            lease=held,
            kubelet_lease=self.api.get_lease(KUBE_NODE_LEASE, spec.kubernetes_node_name)
            if need.kubelet
            else None,
            pods_left=ctx.pods_remaining() if need.drain_count else None,
        )
        seen = observe(
            view,
            reads,
            identity=self.config.identity,
            last_drain=self.drains.get(key),
            now=now,
            need=need,
        )
        decision = pass_decision(seen.machine, seen.observations, seen.readings, now)
        carried = interpreter.carry_out(ctx, seen.machine, decision, now)
        if carried.drain is not None:
            self.drains[key] = carried.drain  # what a PDB blocked, for the next pass
        return carried.requeue_after
