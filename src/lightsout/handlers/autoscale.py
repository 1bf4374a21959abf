"""The built-in autoscaler's kopf glue: watch caches, one planner woken by changes, a leader.

kopf indexes are the watch caches. The planner reads every object of the Node reconciler's
(`handlers/node.py`) caches of pods, core Nodes, Lights-Out Nodes and Groups, each kind cached
once for both, and of its Secret and ConfigMap key names (which machines have everything their
power-on needs). Four indexes are its own: PodDisruptionBudgets and DaemonSets, each object as
the plain dict the API sent; CronJobs (not the operator's own health checks), reduced to what
announces their next run (schedule, zone, suspend, the pod template's spec):
`snapshot_from(..., now=...)` turns each into the pod its next run will create, which the
planner pre-warms capacity for; and the Jobs that may wait for cheap hours (`state.jobs`).
kopf holds back every other handler until all indexes have finished their initial listing, so
the first call of `autoscaler_wake` (an `on.event` handler on
the same kinds) proves that the caches are complete: only then does the planner run, with
`snapshot_from(..., complete=True)`.

One asyncio task, started at operator start-up, is the planner. Every watched change wakes it;
it waits as `planning.autoscaler.wake.PlanningRound` says (the debounce, so a burst of changes makes
one plan, and the rest after a slow plan: the replay follows the same rule), copies the caches,
calls the pure `planning.autoscaler.autoscale.plan` in a thread and hands the result to
`actuation.plans.PlanApplier`. It never polls: between changes it sleeps until the plan's next
deadline (`planning.autoscaler.wake.next_wake`: an unneeded machine's timer, a stabilisation window)
or until its leader Lease needs renewing. Only the replica holding the
`lightsout-autoscaler` Lease plans; the others keep their caches warm and take over when the
Lease expires. Beside it, the leader reads the UPSes the Groups name (`execution.ups`),
their Home Assistant price sensors (`execution.prices`) and solar surplus sensors
(`execution.surplus`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf

from lightsout import API_GROUP, API_VERSION
from lightsout.actuation.plans import PlanApplier
from lightsout.config import OperatorConfig
from lightsout.execution import reconcile as rc
from lightsout.execution.prices import PriceSensors
from lightsout.execution.scaling import KubeScale, LeaderLease, count, gauge_pending
from lightsout.execution.surplus import SurplusSensors
from lightsout.execution.ups import PowerSources
from lightsout.execution.workqueue import backoff
from lightsout.handlers.lifecycle import shared_api, stop_task
from lightsout.handlers.node import NOT_OURS, OURS, slim
from lightsout.k8s.api import Api
from lightsout.models.group import SERIES_LABEL
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan
from lightsout.planning.autoscaler.wake import PlanningRound, next_wake
from lightsout.state import build
from lightsout.state.parse import dig
from lightsout.state.references import contents_entry
from lightsout.state.types import FINISH_BY, KUEUE_QUEUE, MAX_DELAY, ObjectKey, Snapshot, deferrable

log = logging.getLogger(__name__)

#: Seconds before planning again after a pass failed (API unreachable, …), doubling with each
#: failure in a row up to `ERROR_RETRY_MAX`; the Lease is tried again no sooner either.
ERROR_RETRY = 5.0
ERROR_RETRY_MAX = 60.0
#: Seconds past a deadline the loop's timer is set for: an asyncio timer may fire a little
#: early, and a plan a moment before its deadline would find nothing to do and sleep again.
TIMER_SLACK = 0.05

Obj = dict[str, Any]
IndexValue = dict[None, Obj]

# Snapshot key → the kopf index (its handler id) that feeds it: every object it holds.
INDEXES = {
    build.PODS_KEY: rc.PODS,
    build.NODES_KEY: rc.CORE_NODES,
    build.MACHINES_KEY: rc.MACHINES,
    build.GROUPS_KEY: rc.GROUPS,
    build.PDBS_KEY: "autoscaler_pdbs",
    build.DAEMONSETS_KEY: "autoscaler_daemonsets",
    build.CRONJOBS_KEY: "autoscaler_cronjobs",
    build.JOBS_KEY: "autoscaler_jobs",
    build.SERIES_KEY: rc.SERIES,
}
#: The ConfigMaps of prices the operator writes from Home Assistant sensors (`execution.prices`):
#: the only ones of its own whose change wakes the planner.
OUR_PRICES: dict[str, Any] = {**OURS, SERIES_LABEL: kopf.PRESENT}
#: Snapshot key → the Node reconciler's index of Secret / ConfigMap key names (never values).
KEY_NAMES = {build.SECRETS_KEY: rc.SECRETS, build.CONFIGMAPS_KEY: rc.CONFIG_MAPS}


def key_name_entries(indexes: Mapping[str, Any]) -> dict[str, list[Obj]]:
    """Snapshot key → `contents_entry` dicts, from the Node reconciler's indexes of Secret and
    ConfigMap key names (call on the event loop, where kopf changes them)."""
    return {
        key: [
            contents_entry(namespace, name, keys)
            for (namespace, name), found in indexes[index].items()
            for keys in found
        ]
        for key, index in KEY_NAMES.items()
        if index in indexes  # no Secret index in a cluster-wide operator
    }


def _deferrable_job(body: kopf.Body, **_: Any) -> bool:
    meta = body.get("metadata") or {}
    return deferrable(meta.get("annotations") or {}, meta.get("labels") or {})


@kopf.index("policy", "v1", "poddisruptionbudgets", id="autoscaler_pdbs")
@kopf.index("apps", "v1", "daemonsets", id="autoscaler_daemonsets")
# Only Jobs that may wait for cheap hours: held ones the planner releases, finished ones that
# tell how long their CronJob's next run takes (`state.jobs`).
@kopf.index("batch", "v1", "jobs", labels=NOT_OURS, when=_deferrable_job, id="autoscaler_jobs")
async def autoscaler_objects(body: kopf.Body, **_: Any) -> IndexValue:
    return {None: slim(body)}


#: The Job template annotations that make a CronJob's runs deferrable (`types.deferrable`).
DEFERRING = (FINISH_BY, MAX_DELAY)


@kopf.index("batch", "v1", "cronjobs", labels=NOT_OURS, id="autoscaler_cronjobs")
async def autoscaler_cronjobs(body: kopf.Body, **_: Any) -> IndexValue:
    # Only what announces the next run (`state.cron.next_created`): the schedule fields, the
    # Job template's pod spec, whether its Jobs are deferrable (held by the webhook, their
    # runs announce nothing: `state.cron.expected_pods`) and how many Jobs `status.active`
    # lists (a Forbid CronJob with one running starts nothing new); the rest of the status
    # and of the template's metadata are nothing the planner reads.
    spec = body.get("spec") or {}
    pod_spec = dig(spec, "jobTemplate", "spec", "template", "spec")
    fields = ("schedule", "timeZone", "suspend", "concurrencyPolicy", "startingDeadlineSeconds")
    kept = {k: spec[k] for k in fields if k in spec}
    meta = dig(spec, "jobTemplate", "metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in DEFERRING}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k == KUEUE_QUEUE}
    template = {"metadata": {"annotations": annotations, "labels": labels}}
    active = (body.get("status") or {}).get("active") or []
    slim = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"namespace": body.metadata.namespace, "name": body.metadata.name},
        "spec": {
            **kept,
            "jobTemplate": {**template, "spec": {"template": {"spec": pod_spec or {}}}},
        },
        "status": {"active": [{"name": (ref or {}).get("name")} for ref in active]},
    }
    return {None: slim}


@dataclass
class Planner:
    """The single planning task of this operator process."""

    config: OperatorConfig
    indexes: Mapping[str, Any]
    api: Api
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    synced: bool = False
    leading: bool = False
    lease: LeaderLease = field(init=False)
    applier: PlanApplier = field(init=False)
    unneeded: dict[ObjectKey, dt.datetime] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    #: Set when this replica has just taken the Lease: it plans at once, change or not.
    _just_elected: bool = False
    _last_summary: str = ""
    #: How long the last plan took to compute (its writes not counted): see
    #: `planning.autoscaler.wake.PLAN_REST`.
    plan_seconds: float = 0.0
    round: PlanningRound = field(default_factory=PlanningRound)

    def __post_init__(self) -> None:
        self.lease = LeaderLease(
            self.api, self.config.namespace, self.config.identity, self.config.lease_seconds
        )
        self.applier = PlanApplier(dry_run=self.config.autoscaler_dry_run)

    def poke(self) -> None:
        self.synced = True
        self.wake.set()

    def objects(self) -> dict[str, list[Obj]]:
        """Copies of the caches' lists (their dicts are replaced on change, never mutated)."""
        objects = {key: _cached(self.indexes, index) for key, index in INDEXES.items()}
        # The Node reconciler's caches of key names (by namespace and name), shared.
        return {**objects, **key_name_entries(self.indexes)}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        plan_at: float | None = None  # loop time of the next deadline-driven plan
        renew_at: float | None = None  # loop time the leader Lease needs attention
        failures = 0  # passes failed in a row
        while True:
            due = [t for t in (plan_at, renew_at) if t is not None]
            timeout = max(0.0, min(due) - loop.time()) if due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)
            if self.wake.is_set():
                await asyncio.sleep(self.round.change_planned_at(loop.time()) - loop.time())
            changed = self.wake.is_set()
            self.wake.clear()
            if not self.synced:
                continue
            deadline_passed = plan_at is not None and loop.time() >= plan_at
            try:
                leading = await asyncio.to_thread(self._lead)
                renew_at = loop.time() + self.lease.renew_in(dt.datetime.now(dt.UTC))
                failures = 0
                if not leading:
                    plan_at = None
                    continue
                if not (changed or deadline_passed or self._just_elected):
                    continue
                self._just_elected = False
                wake_in, conflicts = await self._plan_and_apply()
                now = loop.time()
                wake = None if wake_in is None else now + wake_in + TIMER_SLACK
                plan_at = self.round.planned(now, self.plan_seconds, wake, conflicts)
            except Exception:
                # The Lease's renewal time passed too: without a later one the loop would try
                # again at once, thousands of requests a minute at an API server that is away.
                delay = backoff(failures, ERROR_RETRY, ERROR_RETRY_MAX)
                failures += 1
                log.exception("autoscaler pass failed; planning again in %ss", delay)
                plan_at = renew_at = loop.time() + delay

    def _lead(self) -> bool:
        leading = self.lease.hold(dt.datetime.now(dt.UTC))
        if leading and not self.leading:
            # A new leader trusts the annotations, not timers it kept while not deciding.
            self.unneeded = {}
            self._just_elected = True
        if self.leading and not leading:
            gauge_pending(None, dt.datetime.now(dt.UTC))  # only the leader reports them
        self.leading = leading
        return leading

    async def _plan_and_apply(self) -> tuple[float | None, bool]:
        """Plan and apply; the seconds from now to the plan's next wake (None: none), and
        whether a write lost a race."""
        objects = self.objects()
        now = dt.datetime.now(dt.UTC)
        snapshot, result = await asyncio.to_thread(self._plan, objects, now)
        pods = {_key(p): p for p in objects[build.PODS_KEY]}
        machines = {_key(m): m for m in objects[build.MACHINES_KEY]}
        groups = {_key(g): g for g in objects[build.GROUPS_KEY]}
        jobs = {_key(j): j for j in objects[build.JOBS_KEY]}
        port = KubeScale(self.api, machines, pods, groups, jobs)
        applied = await asyncio.to_thread(self.applier.apply, port, snapshot, result, now)
        count(applied)
        gauge_pending(snapshot, now)
        self.unneeded = dict(result.unneeded_since)
        if result.summary != self._last_summary or result.actions:
            log.info("autoscaler plan: %s", result.summary)
            self._last_summary = result.summary
        wake_at = next_wake(snapshot, result, now)
        wake_in = None if wake_at is None else (wake_at - dt.datetime.now(dt.UTC)).total_seconds()
        return wake_in, bool(applied.conflicts)

    def _plan(self, objects: Mapping[str, list[Obj]], now: dt.datetime) -> tuple[Snapshot, Plan]:
        started = time.monotonic()
        snapshot = build.snapshot_from(
            objects, complete=True, unneeded_since=self.unneeded, now=now
        )
        planned = plan(snapshot, now)
        self.plan_seconds = time.monotonic() - started
        return snapshot, planned

    def release(self) -> None:
        self.lease.release(dt.datetime.now(dt.UTC))


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


@kopf.on.startup()
async def start_autoscaler(memo: kopf.Memo, **kwargs: Any) -> None:
    config = getattr(memo, "config", None) or OperatorConfig.from_env()
    if not config.autoscaler_enabled:
        memo.autoscaler = None
        return
    # kopf hands every index to start-up handlers as a keyword argument named by its id.
    wanted = (*INDEXES.values(), *KEY_NAMES.values())
    indexes = {i: kwargs[i] for i in wanted if i in kwargs}
    planner = Planner(config=config, indexes=indexes, api=shared_api(memo))
    planner.task = asyncio.create_task(planner.run(), name="lightsout-autoscaler")
    memo.autoscaler = planner

    def groups() -> list[Obj]:
        return _cached(indexes, rc.GROUPS)

    def leading() -> bool:
        return planner.leading

    memo.sensor_tasks = [
        # The UPSes the Groups name: their readings land in the Groups' status, which wakes the
        # planner like any other change.
        _reading(PowerSources(planner.api, groups=groups, leading=leading), "lightsout-ups"),
        # The Home Assistant price sensors: into ConfigMaps of prices, which the caches, and so
        # the planner and the machines' passes, read as series.
        _reading(
            PriceSensors(
                planner.api,
                groups=groups,
                series_maps=lambda: _cached(indexes, rc.SERIES),
                leading=leading,
            ),
            "lightsout-prices",
        ),
        # The solar surplus sensors: into the Groups' status, which the planner's snapshot and
        # the machines' passes read.
        _reading(SurplusSensors(planner.api, groups=groups, leading=leading), "lightsout-surplus"),
    ]


class _Reader(Protocol):
    """A leader's reading task (`run` until cancelled; `close` its connections)."""

    async def run(self) -> None: ...

    def close(self) -> None: ...


def _reading(reader: _Reader, name: str) -> tuple[_Reader, asyncio.Task[None]]:
    """The reader and its task, started: every replica runs it, only the leader reads."""
    return reader, asyncio.create_task(reader.run(), name=name)


def _cached(indexes: Mapping[str, Any], index: str) -> list[Obj]:
    """Every object a kopf index holds (its dicts are replaced on change, never mutated)."""
    return [obj for found in indexes[index].values() for obj in found]


@kopf.on.cleanup()
async def stop_autoscaler(memo: kopf.Memo, **_: Any) -> None:
    planner: Planner | None = getattr(memo, "autoscaler", None)
    if planner is None or planner.task is None:
        return
    for reader, task in memo.sensor_tasks:
        await stop_task(task)
        reader.close()
    await stop_task(planner.task)
    # Hand over at once instead of making the next replica wait for the Lease to expire.
    await asyncio.to_thread(planner.release)


@kopf.on.event("", "v1", "pods", id="autoscaler_wake")
@kopf.on.event("", "v1", "nodes", id="autoscaler_wake")
@kopf.on.event(API_GROUP, API_VERSION, "nodes", id="autoscaler_wake")
@kopf.on.event(API_GROUP, API_VERSION, "groups", id="autoscaler_wake")
@kopf.on.event("policy", "v1", "poddisruptionbudgets", id="autoscaler_wake")
@kopf.on.event("apps", "v1", "daemonsets", id="autoscaler_wake")
@kopf.on.event("batch", "v1", "cronjobs", labels=NOT_OURS, id="autoscaler_wake")
@kopf.on.event("batch", "v1", "jobs", labels=NOT_OURS, when=_deferrable_job, id="autoscaler_wake")
@kopf.on.event("", "v1", "configmaps", labels=NOT_OURS, id="autoscaler_wake")
@kopf.on.event("", "v1", "configmaps", labels=OUR_PRICES, id="autoscaler_wake")
async def autoscaler_wake(memo: kopf.Memo, **_: Any) -> None:
    planner: Planner | None = getattr(memo, "autoscaler", None)
    if planner is not None:
        planner.poke()
