"""Machine figures derived from the Nodes as the operator watches them.

`MachineTracker.observe` is fed every Node event (by `handlers.metrics`) and turns what changed
in a Node into figures: a Job that finished since the last look counts once in
`lightsout_actions_total` with its duration; a machine reaching the phase its desired state asks
for observes the time since that desired state was first seen. `PhaseCollector` reports how many
machines are in each phase, per Group, at scrape time.

Only changes seen by this process count: after a restart, history already in a Node's status is
remembered as seen, not counted again (counters restart from zero with the process anyway).
A machine seen for the first time gets its driver's action series at zero (`_zero_actions`):
Prometheus' rate() and increase() count no rise in a series whose first sample is already 1,
so a first failure would otherwise never show on the dashboard.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from lightsout.metrics.families import ACTION_DURATION, ACTIONS, TRANSITION_DURATION
from lightsout.models.drivers import DRIVER_KINDS
from lightsout.models.enums import Action, OperationResult, Phase, ProxmoxMode
from lightsout.models.node import MeasuredPower
from lightsout.planning.energy.account import Account
from lightsout.planning.energy.status import account_from_status
from lightsout.planning.types import Operation, operation_from_status
from lightsout.state.parse import dig
from lightsout.state.status import node_status

_FINISHED = {OperationResult.SUCCEEDED: "succeeded", OperationResult.FAILED: "failed"}
_POWER_ACTIONS = (Action.STARTUP, Action.SHUTDOWN)
_GOAL = {"On": Phase.READY.value, "Off": Phase.OFF.value}


@dataclass
class _Seen:
    namespace: str
    group: str
    phase: str
    #: The last finished action (its Job: action, intent, attempt) already counted (or found
    #: finished at first sight).
    last_job: tuple[Action, int, int] | None
    desired: str
    #: When this process saw `desired` set; None when it was already set at first sight.
    desired_since: datetime | None
    #: The energy account checkpointed in its status, and the Group's currency.
    energy: Account | None = None
    currency: str = ""
    #: status.power: the draw last measured (watts) and who measured it.
    measured: MeasuredPower | None = None


def _driver(spec: Mapping[str, Any]) -> str:
    driver = spec.get("driver") or {}
    return next((kind for kind in DRIVER_KINDS if kind in driver), "unknown")


def _zero_actions(spec: Mapping[str, Any]) -> None:
    """Create the machine's action series (its driver, the actions it runs) at zero."""
    driver = _driver(spec)
    ephemeral = dig(spec, "driver", "proxmox", "mode") == ProxmoxMode.EPHEMERAL
    actions = (Action.PROVISION, Action.DEPROVISION) if ephemeral else _POWER_ACTIONS
    for action in actions:
        ACTION_DURATION.labels(driver=driver, action=action.value)
        for result in _FINISHED.values():
            ACTIONS.labels(driver=driver, action=action.value, result=result)


class MachineTracker:
    """What this process has seen of each machine; safe to feed from several threads."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()

    def observe(self, node: Mapping[str, Any], now: datetime) -> None:
        meta = node.get("metadata") or {}
        spec, status = node.get("spec") or {}, node_status(node)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        phase = str(status.phase or Phase.UNKNOWN)
        desired = str(spec.get("desiredPowerState") or "Off")
        op = operation_from_status(status.last_operation)
        done = op if op is not None and op.result in _FINISHED else None
        done_job = None if done is None else (done.action, done.intent_generation, done.attempt)
        account, currency = account_from_status(status.energy), status.currency or ""
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                # First sight: its finished Job and desired state are history, counted as seen.
                _zero_actions(spec)
                seen = self._seen[key] = _Seen(key[0], "", phase, done_job, desired, None)
            seen.group, seen.phase = str(spec.get("group") or ""), phase
            seen.energy, seen.currency, seen.measured = account, currency, status.power
            if done is not None and done_job != seen.last_job:
                seen.last_job = done_job
                self._count_action(spec, done)
            if desired != seen.desired:
                seen.desired, seen.desired_since = desired, now
            elif seen.desired_since is not None and phase == _GOAL.get(desired):
                TRANSITION_DURATION.labels(desired=desired).observe(
                    max((now - seen.desired_since).total_seconds(), 0.0)
                )
                seen.desired_since = None

    @staticmethod
    def _count_action(spec: Mapping[str, Any], op: Operation) -> None:
        driver, action = _driver(spec), str(op.action)
        ACTIONS.labels(driver=driver, action=action, result=_FINISHED[op.result]).inc()
        if op.finished:
            ACTION_DURATION.labels(driver=driver, action=action).observe(
                max((op.finished - op.started).total_seconds(), 0.0)
            )

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._seen.pop((namespace, name), None)

    def machines(self) -> list[tuple[str, str, str, str, Account | None, str]]:
        """(namespace, name, Group, phase, energy account, currency) of every machine."""
        with self._lock:
            return [
                (ns, name, s.group, s.phase, s.energy, s.currency)
                for (ns, name), s in sorted(self._seen.items())
            ]

    def measured(self) -> list[tuple[str, str, str, float, str]]:
        """(namespace, name, Group, watts, source) of every machine with a measured draw."""
        with self._lock:
            return [
                (ns, name, s.group, s.measured.watts, s.measured.source)
                for (ns, name), s in sorted(self._seen.items())
                if s.measured is not None
            ]

    def phases(self) -> dict[tuple[str, str], Counter[str]]:
        """Machines per phase, per (namespace, Group)."""
        out: dict[tuple[str, str], Counter[str]] = {}
        with self._lock:
            for seen in self._seen.values():
                out.setdefault((seen.namespace, seen.group), Counter())[seen.phase] += 1
        return out


class PhaseCollector(Collector):
    """`lightsout_machines{namespace, group, phase}`: every phase listed, zeros included, so a
    dashboard's series do not vanish when the last machine leaves a phase."""

    def __init__(self, tracker: MachineTracker) -> None:
        self.tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "lightsout_machines",
            "Machines by phase, per Group.",
            labels=["namespace", "group", "phase"],
        )
        for (namespace, group), counts in sorted(self.tracker.phases().items()):
            for phase in Phase:
                family.add_metric([namespace, group, phase.value], counts.get(phase.value, 0))
        yield family
