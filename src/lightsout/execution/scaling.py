"""Carries out the built-in autoscaler's `Plan` through `lightsout.k8s`, and its leader Lease.

Called by `lightsout.handlers.autoscale` after each `planning.autoscale.plan`:

- power actions become a conditional merge patch of `spec.desiredPowerState` (carrying the
  `resourceVersion` the plan was made from, so a person's edit in between wins with a 409
  instead of being overwritten), an event on the machine, an event on every pod it is for, and
  the Group's `status.lastScaleUp` / `lastScaleDown`;
- in dry-run (the Group's `spec.dryRun` or `LIGHTSOUT_AUTOSCALER_DRY_RUN`) the same events are
  posted, saying "dry run", and nothing else changes;
- `Plan.unneeded_since` is persisted as the `lightsout.dev/unneeded-since` annotation, so a
  restarted (or newly elected) operator keeps counting a machine's unneeded time;
- a pending pod no machine can host gets a Warning event explaining why, once per reason.

Plans repeat: the planner runs on every change, and the same decision comes back until the
cluster catches up. Events are therefore remembered per (object, message) and never posted
twice, and nothing is patched that already has the value wanted.

`LeaderLease` makes one operator replica the planner: the `lightsout-autoscaler` Lease in the
operator's namespace, taken with optimistic concurrency through `execution.leases`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lightsout.execution import leases
from lightsout.k8s import api
from lightsout.metrics.families import AUTOSCALER_DECISIONS, PENDING_OLDEST, PENDING_PODS
from lightsout.models.enums import Autoscaler
from lightsout.planning.decisions import Plan, PowerOn, ScaleAction
from lightsout.planning.types import LeaseState
from lightsout.state import UNNEEDED_SINCE, ObjectKey, Snapshot

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
LEADER_LEASE = "lightsout-autoscaler"
#: Pod notes that start like this are the planner saying no machine can take the pod.
_NO_MACHINE = ("no machine",)


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Applied:
    """What one `apply` did: patches that lost a race (the caller plans again) and counts."""

    conflicts: int = 0
    powered_on: list[str] = field(default_factory=list)
    powered_off: list[str] = field(default_factory=list)


@dataclass
class PlanApplier:
    """Applies plans; remembers which events it posted so a repeated plan posts nothing new."""

    dry_run: bool = False
    _posted: dict[tuple[str, str], str] = field(default_factory=dict)

    def apply(
        self,
        snapshot: Snapshot,
        machines: Mapping[ObjectKey, Obj],
        pods: Mapping[ObjectKey, Obj],
        plan: Plan,
        now: datetime,
    ) -> Applied:
        done = Applied()
        groups = {group.key: group for group in snapshot.groups}
        scaled: dict[tuple[ObjectKey, str], list[ScaleAction]] = {}
        for action in plan.actions:
            group = groups.get(action.group)
            obj = machines.get(action.machine)
            # The planner never chooses these; this is the last line of defence, not policy.
            if group is None or obj is None or group.autoscaler is not Autoscaler.BUILTIN:
                log.warning("refusing %s of %s: not an autoscaled machine", action, action.machine)
                continue
            if action.dry_run or self.dry_run:
                _count(action, "dry_run")
                self._explain_dry_run(action, obj, pods)
                continue
            applied = self._power(action, obj, done)
            _count(action, "applied" if applied else "conflict")
            if applied:
                kind = "up" if isinstance(action, PowerOn) else "down"
                scaled.setdefault((action.group, kind), []).append(action)
                self._announce(action, obj, pods)
        for (group_key, kind), actions in scaled.items():
            _record_scale(group_key, kind, actions, now)
        gauge_pending(snapshot, now)
        self._persist_unneeded(snapshot, machines, plan)
        self._explain_pods(plan, pods)
        self._forget(pods, machines)
        return done

    # ------------------------------------------------------------------ power actions
    def _power(self, action: ScaleAction, obj: Obj, done: Applied) -> bool:
        desired = "On" if isinstance(action, PowerOn) else "Off"
        meta = obj["metadata"]
        patch = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": {"desiredPowerState": desired},
        }
        try:
            api.patch_resource(meta["namespace"], "nodes", meta["name"], patch)
        except api.ConflictError:
            # Someone (a person, the FSM's status write) changed it since the snapshot: the
            # change wakes the planner again, which decides on the new state.
            done.conflicts += 1
            log.info(
                "autoscaler: %s changed since the plan was made; planning again", action.machine
            )
            return False
        (done.powered_on if desired == "On" else done.powered_off).append(str(action.machine))
        log.info("autoscaler: %s -> %s: %s", action.machine, desired, action.reason)
        return True

    def _announce(self, action: ScaleAction, obj: Obj, pods: Mapping[ObjectKey, Obj]) -> None:
        if isinstance(action, PowerOn):
            self._event(obj, "Normal", "ScaleUp", f"powering on: {action.reason}")
            text = (
                f"powering on machine {action.machine.name} (group {action.group.name}) "
                "for this pod"
            )
            for key in action.pods:
                if (pod := pods.get(key)) is not None:
                    self._event(pod, "Normal", "TriggeredScaleUp", text)
        else:
            self._event(obj, "Normal", "ScaleDown", f"powering off: {action.reason}")

    def _explain_dry_run(
        self, action: ScaleAction, obj: Obj, pods: Mapping[ObjectKey, Obj]
    ) -> None:
        if isinstance(action, PowerOn):
            self._event(obj, "Normal", "DryRunScaleUp", f"dry run: would power on: {action.reason}")
            text = (
                f"dry run: would power on machine {action.machine.name} "
                f"(group {action.group.name}) for this pod"
            )
            for key in action.pods:
                if (pod := pods.get(key)) is not None:
                    self._event(pod, "Normal", "DryRunScaleUp", text)
        else:
            self._event(
                obj, "Normal", "DryRunScaleDown", f"dry run: would power off: {action.reason}"
            )

    # ------------------------------------------------------------------ unneeded time
    def _persist_unneeded(
        self, snapshot: Snapshot, machines: Mapping[ObjectKey, Obj], plan: Plan
    ) -> None:
        groups = {group.key: group for group in snapshot.groups}
        for machine in snapshot.machines:
            obj = machines.get(machine.key)
            if obj is None:
                continue
            annotations = obj["metadata"].get("annotations") or {}
            current = annotations.get(UNNEEDED_SINCE)
            since = plan.unneeded_since.get(machine.key)
            wanted = _utc(since) if since is not None else None
            if current == wanted:
                continue
            meta = obj["metadata"]
            patch = {"metadata": {"annotations": {UNNEEDED_SINCE: wanted}}}
            try:
                api.patch_resource(meta["namespace"], "nodes", meta["name"], patch)
            except api.ConflictError:  # pragma: no cover - merge patches without rv never 409
                continue
            group = groups.get(machine.group_key)
            if wanted is not None and current is None and group is not None:
                # A stable message (no running seconds), so a repeated plan posts it once.
                wait = group.scale_down.unneeded_seconds
                self._event(
                    obj,
                    "Normal",
                    "Unneeded",
                    f"unneeded since {wanted}: no pending pod needs it and its pods fit "
                    f"elsewhere; powered off after {wait}s (scaleDown.unneededSeconds) unless "
                    "it is needed again",
                )

    # ------------------------------------------------------------------ pods left waiting
    def _explain_pods(self, plan: Plan, pods: Mapping[ObjectKey, Obj]) -> None:
        for key, notes in plan.explanations.pods.items():
            text = "; ".join(notes)
            pod = pods.get(key)
            if pod is None:
                continue
            if text.startswith(_NO_MACHINE):
                self._event(pod, "Warning", "NotTriggerScaleUp", text)
            elif (machine := plan.explanations.coming.get(key)) is not None:
                # One event per pod and machine, not one per phase the machine passes through.
                message = f"waiting for machine {machine}, which is already coming up"
                self._event(pod, "Normal", "WaitingForScaleUp", message)

    # ------------------------------------------------------------------ events, once each
    def _event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        who = (str(obj.get("kind")), f"{meta.get('namespace')}/{meta.get('name')}")
        remembered = f"{meta.get('uid')}|{reason}|{message}"
        if self._posted.get(who) == remembered:
            return
        try:
            api.post_event(obj, kind, reason, message, component="lightsout-autoscaler")
        except Exception:  # an event lost is not worth a failed plan
            log.exception("posting %s event on %s failed", reason, who)
            return
        self._posted[who] = remembered

    def _forget(self, pods: Mapping[ObjectKey, Obj], machines: Mapping[ObjectKey, Obj]) -> None:
        """Drop memories of objects that are gone, so the memory stays as big as the cluster."""
        alive = {("Pod", str(key)) for key in pods} | {("Node", str(key)) for key in machines}
        for who in [w for w in self._posted if w not in alive]:
            del self._posted[who]


def gauge_pending(snapshot: Snapshot | None, now: datetime) -> None:
    """The pending-pod gauges from the leader's snapshot; None (leadership lost) zeroes them."""
    waiting = [
        (now - pod.unschedulable_since).total_seconds()
        for pod in (snapshot.pods if snapshot else ())
        if pod.pending_unschedulable and pod.unschedulable_since is not None
    ]
    PENDING_PODS.set(len(waiting))
    PENDING_OLDEST.set(max(waiting, default=0.0))


def _count(action: ScaleAction, outcome: str) -> None:
    if isinstance(action, PowerOn):
        kind, reason = "scale_up", "pending_pods" if action.pods else "min_nodes"
    else:
        kind, reason = "scale_down", "unneeded"
    AUTOSCALER_DECISIONS.labels(kind=kind, reason=reason, outcome=outcome).inc()


def _record_scale(
    group: ObjectKey, kind: str, actions: Sequence[ScaleAction], now: datetime
) -> None:
    field_name = "lastScaleUp" if kind == "up" else "lastScaleDown"
    reason = "; ".join(f"{a.machine.name}: {a.reason}" for a in actions)
    body = {
        field_name: {
            "time": _utc(now),
            "reason": reason[:32768],
            "nodes": sorted({a.machine.name for a in actions}),
        }
    }
    try:
        api.patch_status(group.namespace, "groups", group.name, body)
    except Exception:
        log.exception("recording %s of group %s failed", field_name, group)


# ---------------------------------------------------------------------- when to plan again


# ---------------------------------------------------------------------- leadership
@dataclass
class LeaderLease:
    """One planner among operator replicas: holds the `lightsout-autoscaler` Lease."""

    namespace: str
    identity: str
    duration_seconds: int
    _lease: dict[str, Any] | None = None
    _renewed: datetime | None = None

    @property
    def renew_every(self) -> float:
        return self.duration_seconds / 3

    def renew_in(self, now: datetime) -> float:
        """Seconds until the hold needs renewing (or another try at taking the Lease)."""
        if self._lease is None or self._renewed is None:
            return self.renew_every
        return max(0.05, self.renew_every - (now - self._renewed).total_seconds())

    def hold(self, now: datetime) -> bool:
        """True when this replica holds the Lease (taking or renewing it as needed)."""
        if (
            self._lease is not None
            and self._renewed is not None
            and (now - self._renewed).total_seconds() < self.renew_every
        ):
            return True
        current = api.get_lease(self.namespace, LEADER_LEASE)
        try:
            if current is None:
                body = leases.build_lease(
                    LEADER_LEASE, self.namespace, self.identity, self.duration_seconds, now
                )
                written = api.create_lease(self.namespace, body)
            else:
                state = leases.lease_state(current, self.identity, now)
                if state is LeaseState.HELD_BY_OTHER:
                    self._lease = None
                    return False
                update = leases.acquire(current, self.identity, self.duration_seconds, now)
                if update is None:
                    self._lease = None
                    return False
                written = api.replace_lease(self.namespace, LEADER_LEASE, update)
        except api.ConflictError:
            # Another replica wrote it first; it leads until its hold runs out.
            self._lease = None
            return False
        if self._lease is None:
            log.info(
                "autoscaler: %s now leads (Lease %s/%s)",
                self.identity,
                self.namespace,
                LEADER_LEASE,
            )
        self._lease, self._renewed = written, now
        return True

    def release(self, now: datetime) -> None:
        if self._lease is None:
            return
        current = api.get_lease(self.namespace, LEADER_LEASE)
        body = leases.release(current, self.identity, now) if current else None
        if body is not None:
            with contextlib.suppress(api.ConflictError):
                api.replace_lease(self.namespace, LEADER_LEASE, body)
        self._lease = None
