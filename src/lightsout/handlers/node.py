"""Reconciles `nodes.lightsout.dev`: one machine's power state machine.

One kopf daemon per Node runs a loop that sleeps until something about the machine changes
(its resource, its action Job, its core Node — each watched by kopf and turned into a wake-up
here) or until the state machine asked to be requeued, then runs one reconcile pass:
read → `planning.fsm.decide` → write status → carry out effects. Nothing is awaited in memory:
a pass starts from what the API says, so an operator killed at any instant resumes correctly
and re-adopts a running Job by its deterministic name.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION
from lightsout.config import OperatorConfig
from lightsout.execution import actuator, inputs, providerid
from lightsout.execution.jobs import job_name, job_selector
from lightsout.execution.results import observe_job
from lightsout.k8s import api
from lightsout.planning import fsm
from lightsout.planning.effects import AcquireLease, Decision, Event, ReleaseLease, SetCondition
from lightsout.planning.types import DrainStatus, EventType, Phase, PowerState

log = logging.getLogger(__name__)

_triggers: dict[str, threading.Event] = {}
_core_to_key: dict[str, str] = {}
_drains: dict[str, DrainStatus] = {}
_lock = threading.Lock()
STABLE_REQUEUE = 300.0
ERROR_REQUEUE = 5.0


def _trigger(key: str) -> threading.Event:
    with _lock:
        return _triggers.setdefault(key, threading.Event())


def wake(key: str | None) -> None:
    if key is not None:
        _trigger(key).set()


@kopf.daemon(API_GROUP, API_VERSION, "nodes", cancellation_timeout=10.0)
def machine_loop(
    stopped: kopf.DaemonStopped, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    assert namespace is not None, "nodes.lightsout.dev is namespaced"
    key = f"{namespace}/{name}"
    config: OperatorConfig = memo.config
    trigger = _trigger(key)
    trigger.set()
    delay = 0.0
    while not stopped:
        woke = trigger.wait(timeout=min(delay, 1.0)) if delay > 0 else True
        if not woke:
            delay -= 1.0
            continue
        trigger.clear()
        try:
            delay = reconcile(namespace, name, config)
        except Exception:
            log.exception("reconciling %s failed; retrying in %ss", key, ERROR_REQUEUE)
            delay = ERROR_REQUEUE
    with _lock:
        _triggers.pop(key, None)


@kopf.on.event(API_GROUP, API_VERSION, "nodes")
def node_changed(name: str, namespace: str | None, **_: Any) -> None:
    wake(f"{namespace}/{name}")


@kopf.on.event("batch", "v1", "jobs", labels={"app.kubernetes.io/managed-by": "lightsout"})
def job_changed(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    node = labels.get("lightsout.dev/node")
    if node:
        wake(f"{namespace}/{node}")


@kopf.on.event("", "v1", "nodes")
def core_node_changed(name: str, **_: Any) -> None:
    with _lock:
        key = _core_to_key.get(name)
    wake(key)


def reconcile(namespace: str, name: str, config: OperatorConfig) -> float:
    """One pass for one machine; returns seconds until the next pass if nothing wakes it."""
    node = api.get_resource(namespace, "nodes", name)
    if node is None or node["metadata"].get("deletionTimestamp"):
        return STABLE_REQUEUE
    spec = node.get("spec") or {}
    group = (
        api.get_resource(namespace, "groups", spec.get("group", "")) if spec.get("group") else None
    )
    labels, taints = inputs.wanted_metadata(node, group)
    ctx = actuator.MachineContext(
        node=node, group=group, config=config, labels=labels, taints=taints
    )
    key = f"{namespace}/{name}"
    with _lock:
        _core_to_key[ctx.core_name] = key
    now = dt.datetime.now(dt.UTC)
    machine = inputs.machine_state(node, group)
    observed = [
        o
        for job in api.list_jobs(namespace, job_selector(name))
        if (o := observe_job(job, api.job_pods(namespace, job["metadata"]["name"]))) is not None
    ]
    observed_job = fsm.select_job(observed, machine.operation)
    core_node = providerid.ensure(api.get_node(ctx.core_name), node)
    drain = None
    if machine.phase == Phase.DRAINING and core_node is not None:
        last = _drains.get(key)
        left = actuator.pods_remaining(ctx)
        drain = DrainStatus(
            pods_remaining=left,
            blocked_by=last.blocked_by if last and left else None,
            blocked_message=last.blocked_message if last and left else "",
        )
    lease = actuator.read_lease_state(ctx, now)
    obs = inputs.observations(
        job=observed_job,
        core_node=core_node,
        labels=labels,
        taints=taints,
        drain=drain,
        lease=lease,
        power_state=_observed_power(node),
    )
    decision = providerid.report(fsm.decide(machine, obs, now), core_node, node)
    return apply(ctx, machine.desired, machine.intent_generation, decision, now)


def _observed_power(node: Mapping[str, Any]) -> PowerState:
    value = (node.get("status") or {}).get("observedPowerState")
    try:
        return PowerState(str(value))
    except ValueError:
        return PowerState.UNKNOWN


def apply(
    ctx: actuator.MachineContext,
    desired: PowerState,
    intent_generation: int,
    decision: Decision,
    now: dt.datetime,
) -> float:
    """Lease first (stop if lost), then status, then the other effects in order."""
    if decision.reason == fsm.Reason.LEASE_HELD_ELSEWHERE:
        # The holder owns this machine's status too: what we read may be stale, and writing it
        # back would hide an action in flight (the planner would power on a second machine).
        return max(decision.requeue_after or STABLE_REQUEUE, 0.2)
    holding = False
    if any(isinstance(e, AcquireLease) for e in decision.effects):
        if not actuator.acquire_lease(ctx, now):
            return 2.0
        holding = True
    previous_phase = (ctx.node.get("status") or {}).get("phase")
    try:
        write_status(ctx, desired, intent_generation, decision, now)
    except api.ConflictError:
        # The Node changed since this pass read it (a new intent, another writer): decide
        # again from a fresh read rather than act on a stale one.
        return 0.2
    if previous_phase != decision.phase and not any(isinstance(e, Event) for e in decision.effects):
        # Every phase transition is an event, even when the state machine had nothing to add.
        actuator.post_event(
            ctx, Event(EventType.NORMAL, decision.reason, f"{decision.phase}: {decision.message}")
        )
    key = f"{ctx.namespace}/{ctx.name}"
    for effect in decision.effects:
        if isinstance(effect, AcquireLease | SetCondition):
            continue
        if isinstance(effect, ReleaseLease):
            actuator.release_lease(ctx, now)
            holding = False
            continue
        result = actuator.apply_effect(ctx, effect)
        if result is not None:
            _drains[key] = result
    delay = decision.requeue_after
    if delay is None:
        delay = STABLE_REQUEUE
    if holding:
        # Renew well before the Lease expires, so no other operator takes over mid-action.
        delay = min(delay, ctx.config.lease_seconds / 3)
    return max(delay, 0.2)


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
            "message": effect.message[:1024],
            "observedGeneration": generation,
            "lastTransitionTime": stamp
            if changed or old is None
            else old.get("lastTransitionTime", stamp),
        }
    return [by_type[k] for k in sorted(by_type, key=str)]


def write_status(
    ctx: actuator.MachineContext,
    desired: PowerState,
    intent_generation: int,
    decision: Decision,
    now: dt.datetime,
) -> None:
    status = ctx.node.get("status") or {}
    generation = int(ctx.node["metadata"].get("generation") or 1)
    op = decision.operation
    job = job_name(ctx.name, str(op.action), op.intent_generation, op.attempt) if op else None
    new: dict[str, Any] = {
        "phase": str(decision.phase),
        "phaseSince": inputs.format_time(decision.phase_since or now),
        "reason": decision.reason,
        "message": decision.message[:1024],
        "observedGeneration": generation,
        "intent": {"desired": str(desired), "generation": intent_generation},
        "attempts": decision.attempts,
        "lastOperation": inputs.operation_to_status(op, job),
        "providerID": providerid.wanted(ctx.node),
        "conditions": _merge_conditions(
            list(status.get("conditions") or []), decision, generation, now
        ),
        # None removes it (merge patch): the clone is gone.
        "clone": inputs.clone_to_status(status.get("clone"), op),
    }
    if decision.observed_power_state is not None:
        new["observedPowerState"] = str(decision.observed_power_state)
    changed = inputs.status_patch(status, new)
    if not changed:
        return
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
            decision.reason,
        )
