"""The autoscaler's writes through `lightsout.k8s`: `KubeScale`, the `ScalePort` the plan applier
(`actuation.plans.PlanApplier`) writes a plan through, the pending-pod and decision metrics of
each plan, and the leader Lease.

`KubeScale` patches `spec.desiredPowerState` conditionally (the `resourceVersion` the plan was
made from, so a person's edit in between wins with a 409), the Group's `status.lastScaleUp` /
`lastScaleDown`, and the `lightsout.dev/unneeded-since` annotation; it posts the events.

`LeaderLease` makes one operator replica the planner: the `lightsout-autoscaler` Lease in the
operator's namespace, taken with optimistic concurrency through `execution.leases`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lightsout.actuation.inputs import merged_conditions
from lightsout.actuation.plans import Applied
from lightsout.execution import leases
from lightsout.execution.actuator import write_desired
from lightsout.k8s.api import Api, ConflictError
from lightsout.metrics.families import AUTOSCALER_DECISIONS, PENDING_OLDEST, PENDING_PODS
from lightsout.models.battery import Outage
from lightsout.models.enums import DesiredPowerState
from lightsout.planning.autoscaler.decisions import PowerOn, ScaleAction
from lightsout.planning.machine.effects import Event, SetCondition
from lightsout.planning.types import ObservedPowerState
from lightsout.state.parse import format_time
from lightsout.state.status import group_status
from lightsout.state.types import DRAIN_BY, START_AT, UNNEEDED_SINCE, ObjectKey, Snapshot

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
LEADER_LEASE = "lightsout-autoscaler"


@dataclass
class KubeScale:
    """The `ScalePort` of one plan through the Kubernetes API, over the watch caches' objects
    the plan's snapshot was built from."""

    api: Api
    machines: Mapping[ObjectKey, Obj]
    pods: Mapping[ObjectKey, Obj]
    groups: Mapping[ObjectKey, Obj] = field(default_factory=dict)
    #: Deferrable Jobs, as the autoscaler's cache holds them.
    jobs: Mapping[ObjectKey, Obj] = field(default_factory=dict)

    def _objects(self, kind: str) -> Mapping[ObjectKey, Obj]:
        return {"Node": self.machines, "Pod": self.pods, "Group": self.groups, "Job": self.jobs}[
            kind
        ]

    def set_desired(self, machine: ObjectKey, state: ObservedPowerState) -> bool:
        try:
            # Carrying the resourceVersion the plan was made from: a person's edit in between
            # wins with a 409 instead of being overwritten.
            write_desired(
                self.api, self.machines[machine], DesiredPowerState(state.value), conditional=True
            )
        except ConflictError:
            return False
        return True

    def record_scale(
        self, group: ObjectKey, up: bool, actions: Sequence[ScaleAction], now: datetime
    ) -> None:
        field_name = "lastScaleUp" if up else "lastScaleDown"
        reason = "; ".join(f"{a.machine.name}: {a.reason}" for a in actions)
        body = {
            field_name: {
                "time": format_time(now),
                "reason": reason[:32768],
                "nodes": sorted({a.machine.name for a in actions}),
            }
        }
        self._patch_group(group, body, f"recording {field_name} of group {group}")

    def record_outage(self, group: ObjectKey, outage: Outage | None) -> bool:
        value = None if outage is None else outage.model_dump(mode="json", by_alias=True)
        body = {"battery": {"outage": value}}
        return self._patch_group(group, body, f"recording the outage of group {group}")

    def _patch_group(self, group: ObjectKey, status: Mapping[str, Any], doing: str) -> bool:
        """Merge `status` into the Group's; False when that failed (logged: `doing` failed)."""
        try:
            self.api.patch_status(group.namespace, "groups", group.name, status)
        except Exception:
            log.exception("%s failed", doing)
            return False
        return True

    def drain_mark(self, machine: ObjectKey) -> str | None:
        return self._annotation(machine, DRAIN_BY)

    def mark_drain_by(self, machine: ObjectKey, deadline: str | None) -> None:
        patch = {"metadata": {"annotations": {DRAIN_BY: deadline}}}
        self.api.patch_resource(machine.namespace, "nodes", machine.name, patch)

    def _annotation(self, machine: ObjectKey, name: str) -> str | None:
        obj = self.machines.get(machine)
        found = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        mark = found.get(name)
        return None if mark is None else str(mark)

    def unneeded_mark(self, machine: ObjectKey) -> str | None:
        return self._annotation(machine, UNNEEDED_SINCE)

    def mark_unneeded(self, machine: ObjectKey, since: str | None) -> None:
        patch = {"metadata": {"annotations": {UNNEEDED_SINCE: since}}}
        self.api.patch_resource(machine.namespace, "nodes", machine.name, patch)

    def set_group_condition(self, group: ObjectKey, condition: SetCondition, now: datetime) -> bool:
        current = group_status(self.groups.get(group)).conditions
        body = {"conditions": merged_conditions(current, [condition], None, now)}
        return self._patch_group(group, body, f"setting {condition.type} on group {group}")

    def release_job(self, job: ObjectKey) -> bool:
        try:
            self.api.release_job(job.namespace, job.name, {START_AT: None})
        except Exception:
            log.exception("releasing Job %s failed; the next plan tries again", job)
            return False
        return True

    def mark_job_start(self, job: ObjectKey, start: str) -> None:
        try:
            self.api.annotate_job(job.namespace, job.name, {START_AT: start})
        except Exception:  # only what `kubectl get` shows: the plan stands without it
            log.exception("marking the start of Job %s failed", job)

    def uid(self, kind: str, key: ObjectKey) -> str | None:
        obj = self._objects(kind).get(key)
        return None if obj is None else str(obj["metadata"].get("uid"))

    def post_event(self, kind: str, key: ObjectKey, event: Event) -> None:
        obj = self._objects(kind)[key]
        self.api.post_event(
            obj, str(event.type), event.reason, event.message, component="lightsout-autoscaler"
        )


def gauge_pending(snapshot: Snapshot | None, now: datetime) -> None:
    """The pending-pod gauges from the leader's snapshot; None (leadership lost) zeroes them."""
    waiting = [
        (now - pod.unschedulable_since).total_seconds()
        for pod in (snapshot.pods if snapshot else ())
        if pod.pending_unschedulable and pod.unschedulable_since is not None
    ]
    PENDING_PODS.set(len(waiting))
    PENDING_OLDEST.set(max(waiting, default=0.0))


def count(applied: Applied) -> None:
    """The decisions of one applied plan, by kind, reason and outcome."""
    for action, outcome in applied.outcomes:
        if isinstance(action, PowerOn):
            kind, reason = "scale_up", "pending_pods" if action.pods else "min_nodes"
        else:
            kind, reason = "scale_down", "unneeded"
        AUTOSCALER_DECISIONS.labels(kind=kind, reason=reason, outcome=outcome).inc()


# ---------------------------------------------------------------------- leadership
@dataclass
class LeaderLease:
    """One planner among operator replicas: holds the `lightsout-autoscaler` Lease."""

    api: Api
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
        written = leases.take(
            self.api,
            self.namespace,
            LEADER_LEASE,
            self.identity,
            now,
            duration_seconds=self.duration_seconds,
        )
        if written is None:
            # Another replica holds it or wrote it first; it leads until its hold runs out.
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
        # A Lease that changed meanwhile is left as it is: its writer holds it now.
        leases.give_back(self.api, self.namespace, LEADER_LEASE, self.identity, now)
        self._lease = None
