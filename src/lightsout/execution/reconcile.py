"""One reconcile pass for one machine, from what the watch caches hold about it.

Called by the Node reconciler's workers (`handlers/node.py`), in a worker thread, with a
`MachineView`: the machine's Lights-Out Node and its and its Group's spec read into the API
models (once per pass), its action Jobs and their pods, its core Node, its Lease and (while
draining) the pods on its core Node, all copied from kopf indexes on the event loop before the
pass. A pass: `planning.fsm.decide` → write status →
carry out effects, and returns when the machine wants its next pass (None: only when something
it watches changes; there is no periodic re-read).

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
from dataclasses import dataclass, field, replace
from typing import Any

from lightsout.config import OperatorConfig
from lightsout.execution import (
    actuator,
    addresses,
    energy,
    health,
    inputs,
    join,
    leases,
    providerid,
)
from lightsout.execution.jobs import LABEL_NODE, job_name
from lightsout.execution.nodeops import pods_to_drain
from lightsout.execution.results import observe_job
from lightsout.k8s import api
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning import fsm
from lightsout.planning.effects import (
    AcquireLease,
    Decision,
    Event,
    PrepareCoreNode,
    ReleaseLease,
    SetCondition,
    StartJob,
)
from lightsout.planning.types import (
    Action,
    DrainStatus,
    EventType,
    MachineState,
    Phase,
    PowerState,
)
from lightsout.state import references
from lightsout.state.references import Unresolved
from lightsout.text import clip_middle

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
#: Seconds before deciding again after a status write lost a race (its watch event usually
#: comes first).
CONFLICT_RETRY = 0.5
#: Seconds before trying again to take a Lease another writer won.
LEASE_RETRY = 2.0
#: Seconds before looking again at a machine whose Lease another holder has, when the state
#: machine named no time (the holder's releasing the Lease also wakes it).
HELD_ELSEWHERE_RETRY = 30.0


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
MACHINES = "lightsout_machines"  # (namespace, name) → Lights-Out Node
MACHINE_REFS = "lightsout_machine_refs"  # REF_* keys → (namespace, name) of machines
GROUPS = "lightsout_groups"  # (namespace, name) → Group
JOBS = "lightsout_jobs"  # (namespace, machine name) → action Job
JOB_PODS = "lightsout_job_pods"  # (namespace, Job name) → pod of an action Job
CORE_NODES = "lightsout_core_nodes"  # name → core Node
LEASES = "lightsout_leases"  # (namespace, name) → Lease named lightsout.*
NODE_PODS = "lightsout_node_pods"  # core Node name → pod bound to it (what a drain reads)
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
    NODE_PODS,
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
            pods_on_node=self._all(NODE_PODS, core_name) if powered else (),
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
    drains: dict[str, DrainStatus] = field(default_factory=dict)

    def forget(self, key: str) -> None:
        self.drains.pop(key, None)

    def reconcile(self, view: MachineView) -> float | None:
        """One pass; returns seconds until the next pass if nothing wakes the machine sooner."""
        node, spec, group = view.node, view.spec, view.group_spec
        if node["metadata"].get("deletionTimestamp"):
            return None
        labels, taints = inputs.wanted_metadata(node, spec, group)
        ctx = actuator.MachineContext(
            node=node, spec=spec, group_spec=group, config=self.config, labels=labels, taints=taints
        )
        key = f"{ctx.namespace}/{ctx.name}"
        now = dt.datetime.now(dt.UTC)
        machine = inputs.machine_state(node, spec, group)
        observed = [
            o
            for job in view.jobs
            if (
                o := observe_job(
                    job,
                    view.job_pods.get(job["metadata"]["name"], ()),
                    now,
                    view.job_events.get(job["metadata"]["name"], ()),
                )
            )
            is not None
        ]
        observed_job = fsm.select_job(observed, machine.operation)
        provider_id = providerid.wanted(node, spec)
        core_node = providerid.ensure(view.core_node, provider_id)
        drain = None
        if machine.phase == Phase.DRAINING and core_node is not None:
            last = self.drains.get(key)
            # The cache may not have seen a pod bound just before the cordon: "drained" (which
            # powers the machine off) is only believed after a live list agrees.
            left = len(pods_to_drain(view.pods_on_node)) or actuator.pods_remaining(ctx)
            drain = DrainStatus(
                pods_remaining=left,
                blocked_by=last.blocked_by if last and left else None,
                blocked_message=last.blocked_message if last and left else "",
            )
        if view.lease_cached:
            lease = leases.lease_state(view.lease, self.config.identity, now)
        else:
            lease = actuator.read_lease_state(ctx, now)
        checked = health.assess(
            node.get("status") or {},
            health.newest(view.health, spec.group),
            lease,
        )
        if view.health_problem is not None:
            checked = health.not_checked(checked, view.health_problem)
        else:
            checked = health.included_again(checked, node.get("status") or {})
        obs = inputs.observations(
            job=observed_job,
            core_node=core_node,
            labels=labels,
            taints=taints,
            drain=drain,
            lease=lease,
            power_state=checked.power_state,
            power_state_at=checked.power_state_at,
            unresolved=view.unresolved,
        )
        decision = providerid.report(fsm.decide(machine, obs, now), core_node, provider_id)
        utilisation = energy.cpu_utilisation(spec, core_node, view.pods_on_node)
        return self.apply(
            ctx, machine, _with_health(decision, checked), now, cpu_utilisation=utilisation
        )

    def apply(
        self,
        ctx: actuator.MachineContext,
        machine: MachineState,
        decision: Decision,
        now: dt.datetime,
        *,
        cpu_utilisation: float = 0.0,
    ) -> float | None:
        """Lease first (stop if lost), then the core Node before a power-on, then status, then
        the other effects in order."""
        if decision.reason == fsm.Reason.LEASE_HELD_ELSEWHERE:
            # The holder owns this machine's status too: what we read may be stale, and writing
            # it back would hide an action in flight (the planner would power on a second
            # machine).
            return max(decision.requeue_after or HELD_ELSEWHERE_RETRY, 0.2)
        holding = False
        if any(isinstance(e, AcquireLease) for e in decision.effects):
            if not actuator.acquire_lease(ctx, now):
                return LEASE_RETRY
            holding = True
        if any(isinstance(e, StartJob) and e.action is Action.PROVISION for e in decision.effects):
            # Before the core Node and the status that names the provision's Job: with no free
            # address, no clone (and no core Node waiting for one).
            try:
                addresses.allocate(ctx.node, ctx.spec, ctx.group_spec)
            except addresses.PoolExhaustedError as exc:
                log.warning("machine %s/%s: %s", ctx.namespace, ctx.name, exc)
                decision = fsm.address_pool_exhausted(machine, decision, str(exc), now)
        if any(isinstance(e, PrepareCoreNode) for e in decision.effects):
            # Before the status that names the on-action's Job: if the Node cannot be created
            # or tainted, that status must say so, and the Job must not be created.
            try:
                actuator.prepare_core_node(ctx)
            except Exception as exc:
                log.warning("machine %s/%s: core Node not prepared", ctx.namespace, ctx.name)
                decision = fsm.core_node_failed(machine, decision, api.error_message(exc), now)
        previous_phase = (ctx.node.get("status") or {}).get("phase")
        try:
            wanted = wanted_status(
                ctx,
                machine.desired,
                machine.intent_generation,
                decision,
                now,
                cpu_utilisation=cpu_utilisation,
            )
            write_status(ctx, wanted, decision.reason)
        except api.ConflictError:
            # The Node changed since the cache gave it to this pass (a new intent, another
            # writer, our own last write not seen yet): decide again from the newer object.
            return CONFLICT_RETRY
        if previous_phase != decision.phase and not any(
            isinstance(e, Event) for e in decision.effects
        ):
            # Every phase transition is an event, even when the state machine had nothing to
            # add.
            actuator.post_event(
                ctx,
                Event(EventType.NORMAL, decision.reason, f"{decision.phase}: {decision.message}"),
            )
        join.settle(ctx.node, ctx.spec, previous_phase, str(decision.phase))
        addresses.settle(ctx.node, ctx.spec, previous_phase, str(decision.phase))
        key = f"{ctx.namespace}/{ctx.name}"
        for effect in decision.effects:
            if isinstance(effect, AcquireLease | SetCondition | PrepareCoreNode):
                continue
            if isinstance(effect, ReleaseLease):
                actuator.release_lease(ctx, now)
                holding = False
                continue
            result = actuator.apply_effect(ctx, effect)
            if result is not None:
                self.drains[key] = result
        delay = decision.requeue_after
        if holding:
            # Renew well before the Lease expires, so no other operator takes over mid-action.
            delay = min(delay or float("inf"), ctx.config.lease_seconds / 3)
        return None if delay is None else max(delay, 0.2)


def _with_health(decision: Decision, checked: health.Assessment) -> Decision:
    """The decision plus what a new health check found (the state machine's own power
    observation, from an action's result, wins over the check's)."""
    if checked.record is None and checked.condition is None:
        return decision
    effects = (
        decision.effects
        if checked.condition is None
        else (
            *decision.effects,
            checked.condition,
        )
    )
    return replace(
        decision,
        effects=effects,
        observed_power_state=decision.observed_power_state or checked.observed_power_state,
        health_check=checked.record,
    )


def _merge_conditions(
    current: list[dict[str, Any]], decision: Decision, generation: int, now: dt.datetime
) -> list[dict[str, Any]]:
    by_type = {c.get("type"): dict(c) for c in current if isinstance(c, Mapping)}
    stamp = inputs.format_time(now)
    for effect in decision.effects:
        if not isinstance(effect, SetCondition):
            continue
        old = by_type.get(str(effect.type))
        changed = old is None or old.get("status") != str(effect.status)
        by_type[str(effect.type)] = {
            "type": str(effect.type),
            "status": str(effect.status),
            "reason": effect.reason,
            "message": clip_middle(effect.message),
            "observedGeneration": generation,
            "lastTransitionTime": stamp
            if changed or old is None
            else old.get("lastTransitionTime", stamp),
        }
    return [by_type[k] for k in sorted(by_type, key=str)]


def wanted_status(
    ctx: actuator.MachineContext,
    desired: PowerState,
    intent_generation: int,
    decision: Decision,
    now: dt.datetime,
    *,
    cpu_utilisation: float = 0.0,
) -> dict[str, Any]:
    """The machine's status after `decision`, as `write_status` patches it (messages clipped
    in the middle, so the end, which says what to do, always survives)."""
    status = ctx.node.get("status") or {}
    generation = int(ctx.node["metadata"].get("generation") or 1)
    op = decision.operation
    job = job_name(ctx.name, str(op.action), op.intent_generation, op.attempt) if op else None
    new: dict[str, Any] = {
        "phase": str(decision.phase),
        "phaseSince": inputs.format_time(decision.phase_since or now),
        "reason": decision.reason,
        "message": clip_middle(decision.message),
        "observedGeneration": generation,
        "intent": {"desired": str(desired), "generation": intent_generation},
        "attempts": decision.attempts,
        "lastOperation": inputs.operation_to_status(op, job),
        "providerID": providerid.wanted(ctx.node, ctx.spec),
        "conditions": _merge_conditions(
            list(status.get("conditions") or []), decision, generation, now
        ),
        # None removes it (merge patch): the clone is gone.
        "clone": inputs.clone_to_status(status.get("clone"), op),
    }
    if decision.observed_power_state is not None:
        new["observedPowerState"] = str(decision.observed_power_state)
    # Counted up to now at the rate in force since the last checkpoint, which this pass's phase
    # and requested cpu replace; unchanged rate: nothing to write.
    checkpoint = energy.checkpoint(
        ctx.node, ctx.spec.power, ctx.group_spec, decision.phase, cpu_utilisation, now=now
    )
    if checkpoint is not None:
        new["energy"] = checkpoint
    if decision.health_check is not None:
        new["lastHealthCheck"] = dict(decision.health_check)
    if decision.learned is not None:
        new["learned"] = inputs.learned_to_status(decision.learned)
    if decision.drift_corrections is not None:
        # None removes the list (merge patch) once no correction counts any more.
        new["driftCorrections"] = [
            inputs.format_time(t) for t in decision.drift_corrections
        ] or None
    return new


def write_status(ctx: actuator.MachineContext, new: Mapping[str, Any], reason: str) -> None:
    """Patch what changed from the Node's status to `new` (`wanted_status`), conditional on
    the Node's resourceVersion (a `ConflictError` when it changed since the read)."""
    status = ctx.node.get("status") or {}
    changed = inputs.status_patch(status, new)
    if not changed:
        return
    log.debug("status of %s/%s: %s changed", ctx.namespace, ctx.name, ", ".join(sorted(changed)))
    api.patch_status(
        ctx.namespace, "nodes", ctx.name, changed, ctx.node["metadata"].get("resourceVersion")
    )
    if status.get("phase") != new["phase"]:
        log.info(
            "machine %s/%s: %s -> %s (%s)",
            ctx.namespace,
            ctx.name,
            status.get("phase"),
            new["phase"],
            reason,
        )
