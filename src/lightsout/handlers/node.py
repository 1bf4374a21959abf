"""Reconciles `nodes.lightsout.dev` (and counts Groups) through one bounded work queue.

The watch caches are kopf indexes (ids in `execution.reconcile`): Lights-Out Nodes and their
references (core Node name, Group, Secrets, overlay ConfigMap), Groups, action Jobs and their
pods, the `FailedMount` events of pods, core Nodes, machine Leases, every pod by the core Node
it is bound to, and the key names (never the values) of the Secrets and ConfigMaps of the
watched namespaces. Those of machines, Groups, core Nodes and pods are the autoscaler's
planner's too (`handlers/autoscale.py`): each kind is cached once. The handlers here only turn
watch events into queue keys: `("node", namespace, name)` for a machine whose Node, Group,
action Job, Job pod (or its FailedMount event), core Node, Lease, named Secret or ConfigMap or
(unless it is Off) core Node's pods changed, `("group", namespace, name)` for a Group whose
machine counts may have changed (a second later, so a burst makes one count).

A fixed pool of `LIGHTSOUT_WORKERS` workers (default 4) takes keys off the queue
(`execution.workqueue`): one pass per key at a time, pending keys de-duplicated, a failed pass
retried with exponential backoff, the state machine's "look again in N seconds" kept as a timer
of the queue. A pass copies what the caches hold about its machine on the event loop and runs
`execution.reconcile.Reconciler.reconcile` in a thread of the pool's own executor. With nothing
to do, nothing runs and nothing is requested from the API.

kopf holds back every handler until every index has listed its objects, and lists every object
as an event: each machine gets its first pass only once the caches are complete, the same rule
as the autoscaler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION
from lightsout.actuation import inputs
from lightsout.config import OperatorConfig
from lightsout.execution import health
from lightsout.execution import reconcile as rc
from lightsout.execution.extravars import credentials_secret
from lightsout.execution.healthsync import HealthCronJobs
from lightsout.execution.jobs import LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NODE, MANAGED_BY
from lightsout.execution.leases import ANNOTATION_MACHINE, LEASE_PREFIX
from lightsout.execution.results import MOUNT_FAILED
from lightsout.execution.workqueue import Workers, WorkQueue
from lightsout.handlers import group as groups
from lightsout.handlers.lifecycle import shared_api
from lightsout.k8s.api import Api, key_names
from lightsout.models.group import SERIES_LABEL
from lightsout.planning.types import Phase
from lightsout.state.parse import dig
from lightsout.state.status import node_status

log = logging.getLogger(__name__)
Key = tuple[str, str, str]
NODE, GROUP = "node", "group"
#: Seconds a Group's recount waits, so the machines' changes of one burst make one count.
GROUP_COUNT_DELAY = 1.0
OURS = {LABEL_MANAGED_BY: MANAGED_BY}
NOT_OURS = {LABEL_MANAGED_BY: kopf.ABSENT}
HEALTH_PODS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: health.COMPONENT}


def slim(body: kopf.Body) -> dict[str, Any]:
    """The object as the API sent it (kind and apiVersion included), but for managedFields:
    most of an object's size and nothing a pass or the planner reads."""
    raw = dict(body)
    raw["metadata"] = {
        k: v for k, v in dict(raw.get("metadata") or {}).items() if k != "managedFields"
    }
    return raw


# ---------------------------------------------------------------- the watch caches
@kopf.index(API_GROUP, API_VERSION, "nodes", id=rc.MACHINES)
@kopf.index(API_GROUP, API_VERSION, "groups", id=rc.GROUPS)
# ConfigMaps labelled `lightsout.dev/series`, whole: the Groups' price and carbon series
# (`state.series`), read by a machine's pass (its energy priced by the series) and the planner.
# Only those: no other ConfigMap's data is kept.
@kopf.index("", "v1", "configmaps", labels={SERIES_LABEL: kopf.PRESENT}, id=rc.SERIES)
async def by_name(body: kopf.Body, name: str, namespace: str | None, **_: Any) -> Any:
    """Lights-Out Nodes, Groups and series ConfigMaps, each by (namespace, name)."""
    return {(namespace or "", name): slim(body)}


@kopf.index(API_GROUP, API_VERSION, "nodes", id=rc.MACHINE_REFS)
async def machine_refs(spec: kopf.Spec, name: str, namespace: str | None, **_: Any) -> Any:
    ns = namespace or ""
    ref = (ns, name)
    found = {
        (rc.REF_CORE, str(spec.get("kubernetesNodeName") or name)): ref,
        (rc.REF_GROUP, ns, str(spec.get("group") or "")): ref,
    }
    with contextlib.suppress(inputs.InvalidSpecError):  # its pass says so
        for secret_name in credentials_secret(inputs.node_spec({"spec": dict(spec)})):
            if secret_name:
                found[(rc.REF_SECRET, ns, secret_name)] = ref
    overlay = (spec.get("playbooks") or {}).get("configMapName")
    if overlay:
        found[(rc.REF_CONFIG_MAP, ns, str(overlay))] = ref
    return found


@kopf.index("batch", "v1", "jobs", labels=OURS, id=rc.JOBS)
async def jobs(body: kopf.Body, namespace: str | None, **_: Any) -> Any:
    machine = _job_machine(body)
    return None if machine is None else {(namespace or "", machine): slim(body)}


@kopf.index("", "v1", "pods", labels=OURS, id=rc.JOB_PODS)
async def job_pods(body: kopf.Body, labels: kopf.Labels, namespace: str | None, **_: Any) -> Any:
    job = labels.get("job-name") or labels.get("batch.kubernetes.io/job-name")
    return None if not job else {(namespace or "", job): slim(body)}


# Secrets and ConfigMaps: the names of their keys only. kopf hands the whole object to the
# index function and keeps only what it returns, so no value outlives this call. Not the
# extravars ConfigMaps of our own Jobs (one per attempt): no machine references them. The
# Secret watch is registered by `handlers.watch_secrets`, for a namespaced operator only.
@kopf.index("", "v1", "configmaps", labels=NOT_OURS, id=rc.CONFIG_MAPS)
async def key_names_of(body: kopf.Body, name: str, namespace: str | None, **_: Any) -> Any:
    return {(namespace or "", name): key_names(body)}


# A real kubelet keeps a pod whose Secret or ConfigMap volume is missing in ContainerCreating
# and says why only in `FailedMount` events on the pod: kept (who, reason, message) so the
# Job's attempt fails at once with that cause (`execution.results`). Events of the watched
# namespaces only; the filter runs in kopf, so only these few are kept.
@kopf.index("", "v1", "events", field="reason", value=MOUNT_FAILED, id=rc.MOUNT_FAILURES)
async def mount_failures(body: kopf.Body, namespace: str | None, **_: Any) -> Any:
    about = body.get("involvedObject") or {}
    if about.get("kind") != "Pod":
        return None
    return {
        (namespace or "", str(about.get("name"))): {
            "involvedObject": {k: about.get(k) for k in ("kind", "name", "uid")},
            "reason": body.get("reason"),
            "message": body.get("message"),
        }
    }


@kopf.index("", "v1", "pods", labels=HEALTH_PODS, id=rc.HEALTH)
async def health_results(body: kopf.Body, namespace: str | None, **_: Any) -> Any:
    found = health.pod_record(body)
    return None if found is None else {(namespace or "", found[0]): found[1]}


@kopf.index("", "v1", "nodes", id=rc.CORE_NODES)
async def core_nodes(body: kopf.Body, name: str, **_: Any) -> Any:
    return {name: slim(body)}


@kopf.index("coordination.k8s.io", "v1", "leases", id=rc.LEASES)
async def machine_leases(body: kopf.Body, name: str, namespace: str | None, **_: Any) -> Any:
    return {(namespace or "", name): slim(body)} if name.startswith(f"{LEASE_PREFIX}.") else None


# Every pod, filed under the core Node it is bound to (None: not bound yet): a drain reads one
# Node's, the autoscaler's planner every one (pending ones too).
@kopf.index("", "v1", "pods", id=rc.PODS)
async def pods(body: kopf.Body, spec: kopf.Spec, **_: Any) -> Any:
    return {spec.get("nodeName") or None: slim(body)}


def _job_machine(job: Mapping[str, Any]) -> str | None:
    meta = job.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "Node" and str(owner.get("apiVersion", "")).startswith(API_GROUP):
            return str(owner.get("name"))
    node = (meta.get("labels") or {}).get(LABEL_NODE)
    return str(node) if node else None


# ---------------------------------------------------------------- the queue and its workers
@dataclass
class Reconcilers:
    """The operator's one work queue, its workers and the executor their passes run in."""

    config: OperatorConfig
    caches: rc.Caches
    api: Api
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    reconciler: rc.Reconciler = field(init=False)
    cronjobs: HealthCronJobs = field(init=False)
    executor: ThreadPoolExecutor = field(init=False)
    workers: Workers[Key] = field(init=False)
    #: The generation of each Group last seen: only a spec change concerns its machines.
    group_generations: dict[tuple[str, str], object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reconciler = rc.Reconciler(self.config, self.api)
        self.cronjobs = HealthCronJobs(self.config, self.api)
        self.executor = ThreadPoolExecutor(self.config.workers, thread_name_prefix="lightsout")
        self.workers = Workers(self.queue, self._pass, size=self.config.workers)

    def machine(self, namespace: str, name: str) -> None:
        self.queue.add((NODE, namespace, name))

    def count_group(self, namespace: str, name: str) -> None:
        if name:
            self.queue.add_after((GROUP, namespace, name), GROUP_COUNT_DELAY)

    def group_spec_changed(self, namespace: str, name: str, generation: object) -> bool:
        """True once per new generation of a Group (its counts in status change it often)."""
        last = self.group_generations.get((namespace, name))
        self.group_generations[(namespace, name)] = generation
        return last != generation

    async def _pass(self, key: Key) -> float | None:
        kind, namespace, name = key
        loop = asyncio.get_running_loop()
        if kind == GROUP:
            group = self.caches.group(namespace, name)
            if group is None:  # its CronJob goes with it (owner reference)
                self.cronjobs.forget(namespace, name)
                return None
            try:
                spec = inputs.group_spec(group)
            except inputs.InvalidSpecError as error:
                log.warning("%s; left as it is until it changes", error)
                return None
            members = [
                m
                for ns, n in self.caches.machines_of_group(namespace, name)
                if (m := self.caches.machine(ns, n)) is not None
            ]
            await loop.run_in_executor(
                self.executor, groups.recount, self.api, group, spec, members
            )
            # A machine whose check pod could not mount its Secret or overlay is left out (its
            # status says why: `Caches.health_problem`).
            checked = health.checkable(
                members, lambda m: self.caches.health_problem(m, group, spec)
            )
            await loop.run_in_executor(self.executor, self.cronjobs.sync, group, spec, checked)
            return None
        try:
            view = self.caches.view(namespace, name)
        except inputs.InvalidSpecError as error:
            # The API server's schema refuses such specs: an object kept from before a CRD
            # upgrade. Retrying cannot help; its next change brings another pass.
            log.warning("%s; machine %s/%s not reconciled until it changes", error, namespace, name)
            return None
        if view is None:  # deleted: nothing to keep for it
            self.queue.discard(key)
            self.reconciler.forget(f"{namespace}/{name}")
            return None
        return await loop.run_in_executor(self.executor, self.reconciler.reconcile, view)

    async def stop(self) -> None:
        await self.workers.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _reconcilers(memo: kopf.Memo) -> Reconcilers | None:
    found: Reconcilers | None = getattr(memo, "reconcilers", None)
    return found


@kopf.on.startup()
async def start_reconcilers(memo: kopf.Memo, **kwargs: Any) -> None:
    config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig.from_env()
    # kopf hands every index to start-up handlers as a keyword argument named by its id.
    caches = rc.Caches({i: kwargs[i] for i in rc.CACHES if i in kwargs}, config)
    reconcilers = Reconcilers(config, caches, shared_api(memo))
    reconcilers.workers.start()
    memo.reconcilers = reconcilers


@kopf.on.cleanup()
async def stop_reconcilers(memo: kopf.Memo, **_: Any) -> None:
    reconcilers = _reconcilers(memo)
    if reconcilers is not None:
        with contextlib.suppress(asyncio.CancelledError):
            await reconcilers.stop()


# ---------------------------------------------------------------- watch events → keys
@kopf.on.event(API_GROUP, API_VERSION, "nodes", id="queue_machine")
async def machine_changed(
    name: str, namespace: str | None, spec: kopf.Spec, memo: kopf.Memo, **_: Any
) -> None:
    if (r := _reconcilers(memo)) is not None:
        r.machine(namespace or "", name)
        r.count_group(namespace or "", str(spec.get("group") or ""))


@kopf.on.event(API_GROUP, API_VERSION, "groups", id="queue_group")
async def group_changed(
    name: str, namespace: str | None, meta: kopf.Meta, memo: kopf.Memo, **_: Any
) -> None:
    if (r := _reconcilers(memo)) is None:
        return
    r.count_group(namespace or "", name)
    # Labels, taints and the drift policy of its machines come from the spec; the counts this
    # operator writes into its status would otherwise send every machine through a pass.
    if r.group_spec_changed(namespace or "", name, meta.get("generation")):
        for ns, machine in r.caches.machines_of_group(namespace or "", name):
            r.machine(ns, machine)


@kopf.on.event("batch", "v1", "jobs", labels=OURS, id="queue_job")
async def job_changed(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if (r := _reconcilers(memo)) is not None and (machine := _job_machine(body)):
        r.machine(namespace or "", machine)


@kopf.on.event("", "v1", "nodes", id="queue_core_node")
async def core_node_changed(name: str, memo: kopf.Memo, **_: Any) -> None:
    if (r := _reconcilers(memo)) is not None:
        for ns, machine in r.caches.machines_on(name):
            r.machine(ns, machine)


@kopf.on.event("", "v1", "pods", id="queue_pod")
async def pod_changed(
    body: kopf.Body,
    labels: kopf.Labels,
    spec: kopf.Spec,
    namespace: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    r = _reconcilers(memo)
    if r is None:
        return
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and (machine := labels.get(LABEL_NODE)):
        r.machine(namespace or "", machine)  # an action Job's pod: its result may be in
    if labels.get(LABEL_COMPONENT) == health.COMPONENT and (found := health.pod_record(body)):
        r.machine(namespace or "", found[0])  # a health check of this machine ended
    for ns, machine in r.caches.machines_on(str(spec.get("nodeName") or "")):
        if node_status(r.caches.machine(ns, machine)).phase is not Phase.OFF:
            # A pod left a draining machine, or the cpu requested of a running one (its energy
            # draw) may have changed; a pass that finds nothing new writes nothing.
            r.machine(ns, machine)


@kopf.on.event("", "v1", "events", field="reason", value=MOUNT_FAILED, id="queue_mount_failure")
async def mount_failed(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    about = body.get("involvedObject") or {}
    if (
        (r := _reconcilers(memo)) is not None
        and about.get("kind") == "Pod"
        and (machine := r.caches.machine_of_pod(namespace or "", str(about.get("name"))))
    ):
        r.machine(namespace or "", machine)  # its action Job's pod cannot mount a volume


# The Secret watch is registered by `handlers.watch_secrets`, for a namespaced operator only.
@kopf.on.event("", "v1", "configmaps", labels=NOT_OURS, id="queue_configmap")
async def reference_changed(
    resource: kopf.Resource, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """A Secret or ConfigMap machines name changed: it may be what a held-back action of theirs
    waits for, and whether their Group's health check can include them."""
    ref = rc.REF_SECRET if resource.plural == "secrets" else rc.REF_CONFIG_MAP
    if (r := _reconcilers(memo)) is not None:
        for ns, machine in r.caches.machines_naming(ref, namespace or "", name):
            r.machine(ns, machine)
            r.count_group(ns, str(dig(r.caches.machine(ns, machine), "spec", "group") or ""))


@kopf.on.event("coordination.k8s.io", "v1", "leases", id="queue_lease")
async def lease_changed(
    name: str,
    annotations: kopf.Annotations,
    spec: kopf.Spec,
    type: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    if not name.startswith(f"{LEASE_PREFIX}.") or (r := _reconcilers(memo)) is None:
        return
    if type != "DELETED" and spec.get("holderIdentity") == r.config.identity:
        # Our own pass took or renewed it: that pass goes on by itself. Re-queueing here made
        # every pass during a long action renew the Lease and queue the next one (hundreds of
        # passes a minute per machine). Another holder's change or release still wakes it.
        return
    # `lightsout.<namespace>.<machine>`; namespaces hold no dots, machine names may.
    held = annotations.get(ANNOTATION_MACHINE) or name.split(".", 1)[1].replace(".", "/", 1)
    machine_namespace, _sep, machine = str(held).partition("/")
    if machine:
        r.machine(machine_namespace, machine)
