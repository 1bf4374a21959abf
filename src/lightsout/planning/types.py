"""Vocabulary of the power state machine: enums and the frozen inputs of `fsm.decide`.

Handlers (through the state layer) fill `MachineState` from a Node's spec and status and
`Observations` from the watched Job, core Node, drain progress and Lease; `fsm.decide` reads
them. `lightsout.execution` imports the enums from here (execution sits above planning), so the
names below are also the values written into labels and status.

Phase, Action, ObservedPowerState (the observed one: On/Off/Unknown) and the condition enums are
`lightsout.models.enums`' own, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from lightsout.models.enums import (
    Action,
    ConditionStatus,
    ConditionType,
    NodeRemovalPolicy,
    ObservedPowerState,
    OperationResult,
    Phase,
)

# Re-exported: the API's own enums are the state machine's vocabulary (one definition).
from lightsout.models.node import (
    DEFAULT_BOOT_TIMEOUT_SECONDS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_SHUTDOWN_TIMEOUT_SECONDS,
)
from lightsout.state.corenode import GROUP_LABEL, NODE_LABEL
from lightsout.state.learned import Learned
from lightsout.state.parse import as_enum, format_time, parse_time
from lightsout.state.references import Unresolved
from lightsout.text import clip_middle

__all__ = [
    "ACTION_PHASE",
    "GROUP_LABEL",
    "NODE_LABEL",
    "PHASE_ACTION",
    "STARTUP_TAINT_KEY",
    "TRANSITIONING",
    "Action",
    "ConditionStatus",
    "ConditionType",
    "DrainStatus",
    "EventType",
    "JobPhase",
    "Learned",
    "LeaseState",
    "MachineState",
    "NodeRemovalPolicy",
    "Observations",
    "ObservedJob",
    "ObservedPowerState",
    "Operation",
    "OperationResult",
    "Phase",
    "operation_from_status",
    "operation_to_status",
]


#: The taint the operator puts on a machine's core Node before powering the machine on (creating
#: the Node when it does not exist) and removes once the machine is Ready: no pod lands on a
#: machine before it carries its Group's and its own labels and taints. Effect NoSchedule.
STARTUP_TAINT_KEY = "lightsout.dev/unregistered"
#: The phase a machine is in while each power action runs (or waits for its retry).
ACTION_PHASE: Mapping[Action, Phase] = {
    Action.STARTUP: Phase.POWERING_ON,
    Action.PROVISION: Phase.PROVISIONING,
    Action.SHUTDOWN: Phase.POWERING_OFF,
    Action.DEPROVISION: Phase.DEPROVISIONING,
}
#: Inverse of ACTION_PHASE: the action a transitional phase belongs to.
PHASE_ACTION: Mapping[Phase, Action] = {phase: action for action, phase in ACTION_PHASE.items()}
#: The phases on the way between Off and Ready, either way: an action Job (and the boot or the
#: drain around it) drives the machine.
TRANSITIONING = frozenset(Phase) - {Phase.OFF, Phase.READY, Phase.FAILED, Phase.UNKNOWN}


class JobPhase(StrEnum):
    """What an action Job is doing, as read by `execution.results.parse_job_outcome`.

    `Pending` means no container of the Job has started yet, so deleting the Job cannot
    interrupt a power command half-way; the FSM only cancels Jobs in this state (and `Stuck`
    ones, which are pending for good).
    """

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    #: Its pod cannot start (image missing, a volume or config error, unschedulable): no
    #: container ran, so the attempt has failed and the Job may be deleted at once.
    STUCK = "Stuck"


class LeaseState(StrEnum):
    """Who holds a machine's coordination Lease, from the point of view of one holder."""

    FREE = "Free"
    HELD_BY_ME = "HeldByMe"
    HELD_BY_OTHER = "HeldByOther"
    EXPIRED = "Expired"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class Operation:
    """`status.lastOperation`: one attempt of one power action for one intent.

    `intent_generation` is the Node's `metadata.generation` when the intent was decided; with
    `action` and `attempt` it names the Job deterministically, which is what lets a restarted
    operator find and re-adopt the Job instead of starting a second one.
    """

    action: Action
    intent_generation: int
    attempt: int
    started: datetime
    result: OperationResult = OperationResult.RUNNING
    finished: datetime | None = None
    failed_task: str | None = None
    message: str = ""
    #: The power state the playbook reported (`values.power_state`), if any.
    power_state: ObservedPowerState | None = None
    #: Everything the playbook reported through set_stats (`lightsout` key), e.g. the `vmid`
    #: and `host` of a clone: kept in `status.lastOperation.values` for people and tools.
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> ObservedPowerState | None:
        return self.action.target

    @property
    def cut_pending(self) -> bool:
        """A power-off Job left the power on until the OS is confirmed down (a driver without a
        meter: the shutdown was delivered and the probe went silent)."""
        return self.values.get("cut_pending") is True

    def matches(self, job: ObservedJob) -> bool:
        """Whether `job` is the Job of this operation (same action, intent and attempt)."""
        return (self.action, self.intent_generation, self.attempt) == (
            job.action,
            job.generation,
            job.attempt,
        )

    def finish(
        self,
        result: OperationResult,
        now: datetime,
        message: str,
        *,
        failed_task: str | None = None,
        power_state: ObservedPowerState | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> Operation:
        """The operation ended; `values` None keeps what was reported before (if anything)."""
        return replace(
            self,
            result=result,
            finished=now,
            message=message,
            failed_task=failed_task,
            power_state=power_state,
            values=self.values if values is None else dict(values),
        )


#: `status.lastOperation.message` keeps the runner's whole message (at most 2048 bytes) and
#: what the state machine says around it; `status.message` and conditions keep 1024.
OPERATION_MESSAGE_LIMIT = 4096


def operation_from_status(raw: Any) -> Operation | None:
    """`status.lastOperation` as an `Operation`; None when absent or unreadable."""
    if not isinstance(raw, Mapping):
        return None
    action = as_enum(Action, raw.get("action"), None)
    started = parse_time(raw.get("started"))
    if action is None or started is None:
        return None
    try:
        generation = int(raw.get("intent", 0))
        attempt = int(raw.get("attempt", 1))
    except (TypeError, ValueError):
        return None
    raw_values = raw.get("values")
    values: Mapping[str, Any] = raw_values if isinstance(raw_values, Mapping) else {}
    power = values.get("power_state")
    return Operation(
        action=action,
        intent_generation=generation,
        attempt=attempt,
        started=started,
        result=as_enum(OperationResult, raw.get("result"), OperationResult.RUNNING),
        finished=parse_time(raw.get("finished")),
        failed_task=raw.get("failedTask") or None,
        message=str(raw.get("message") or ""),
        power_state=as_enum(ObservedPowerState, power, None) if power else None,
        values=dict(values),
    )


def operation_to_status(op: Operation | None, job_name: str | None) -> dict[str, Any] | None:
    """`status.lastOperation` of `op`, run by the Job `job_name` (None: no operation)."""
    if op is None:
        return None
    out: dict[str, Any] = {
        "action": str(op.action),
        "intent": op.intent_generation,
        "attempt": op.attempt,
        "started": format_time(op.started),
        "finished": op.finished and format_time(op.finished),
        "result": str(op.result),
        "failedTask": op.failed_task,
        "message": clip_middle(op.message, OPERATION_MESSAGE_LIMIT),
        "job": job_name,
    }
    values = dict(op.values)
    if op.power_state is not None:
        values["power_state"] = str(op.power_state)
    if values:
        out["values"] = values
    return out


@dataclass(frozen=True)
class ObservedJob:
    """An action Job as observed in the cluster (identity from its labels, state parsed)."""

    action: Action
    generation: int
    attempt: int
    state: JobPhase
    failed_task: str | None = None
    message: str = ""
    power_state: ObservedPowerState | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    #: The Job is being deleted (`deletionTimestamp` set): foreground deletion keeps it, active,
    #: until its pods are gone. It still holds back a new power Job, but is never adopted.
    deleting: bool = False

    @property
    def active(self) -> bool:
        return self.state in (JobPhase.PENDING, JobPhase.RUNNING)


@dataclass(frozen=True)
class DrainStatus:
    """Progress of evicting the pods of the core Node (DaemonSet and mirror pods excluded)."""

    pods_remaining: int
    #: `namespace/name` of the PodDisruptionBudget refusing an eviction, if any.
    blocked_by: str | None = None
    blocked_message: str = ""


@dataclass(frozen=True)
class MachineState:
    """What the operator knows about one machine from its Node resource (spec + status)."""

    name: str
    kubernetes_node_name: str
    phase: Phase
    desired: ObservedPowerState
    #: `metadata.generation` the current intent belongs to (see `Operation`).
    intent_generation: int
    phase_since: datetime | None = None
    #: `status.reason`/`status.message` of the last decision: events fire only when
    #: (phase, reason) changes, so a machine waiting on a PDB does not spam an event per poll.
    reason: str | None = None
    message: str = ""
    operation: Operation | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    boot_timeout_seconds: int = DEFAULT_BOOT_TIMEOUT_SECONDS
    shutdown_timeout_seconds: int = DEFAULT_SHUTDOWN_TIMEOUT_SECONDS
    drain_timeout_seconds: int = 900
    #: The drain deadline the battery planner set (`lightsout.dev/drain-by`): past it, pods a
    #: PDB protects are deleted rather than waited for (`planning.autoscaler.battery`).
    drain_by: datetime | None = None
    #: Proxmox clones: provision on power-on, deprovision on power-off.
    ephemeral: bool = False
    node_removal_policy: NodeRemovalPolicy = NodeRemovalPolicy.DELETE
    #: Group `healthCheck.driftPolicy == Correct`: drive a drifted machine back to its intent,
    #: at most `max_corrections` times within `correction_window_seconds` (then Failed).
    correct_drift: bool = False
    learned: Learned = field(default_factory=Learned)
    max_corrections: int = 3
    correction_window_seconds: int = 86_400
    #: `status.driftCorrections`: when the drift of this machine was corrected.
    drift_corrections: tuple[datetime, ...] = ()
    #: Group `healthCheck.driftPolicy == Adopt`: the desired power state follows the machine.
    adopt_drift: bool = False
    #: The power state a drift was just adopted into, while the spec read is still the one
    #: the adoption was decided on (`status.observedGeneration == metadata.generation`): the
    #: operator's own patch of `desiredPowerState` has not reached its cache yet.
    adopting: ObservedPowerState | None = None
    #: The driver's `force`: a power-off without proof that the OS went down cuts the power
    #: after `shutdown_timeout_seconds` rather than failing.
    force_power_off: bool = False
    #: Where the credentials the endpoint checks come from (`outages.credentials_source`:
    #: Secret namespace/name and key names, never a value); '' when the driver sends none.
    credentials: str = ""

    @property
    def on_action(self) -> Action:
        return Action.PROVISION if self.ephemeral else Action.STARTUP

    @property
    def off_action(self) -> Action:
        return Action.DEPROVISION if self.ephemeral else Action.SHUTDOWN


@dataclass(frozen=True)
class Observations:
    """What the operator sees in the cluster right now for one machine.

    `job` is the newest action Job labelled for this machine (largest generation, then
    attempt), whether or not it belongs to `MachineState.operation`.
    """

    job: ObservedJob | None = None
    node_exists: bool = False
    node_ready: bool = False
    node_cordoned: bool = False
    node_metadata_applied: bool = False
    #: The core Node exists with the startup taint and no kubelet has ever registered it: the
    #: one Lights-Out created before a power-on that has not booted (yet, or at all).
    node_unregistered: bool = False
    drain: DrainStatus | None = None
    lease: LeaseState = LeaseState.FREE
    #: When another holder's Lease ends unless renewed (None: unknown, or not held elsewhere).
    lease_expires: datetime | None = None
    #: Last power state reported by a health check, and when; used for Unknown and drift.
    power_state: ObservedPowerState = ObservedPowerState.UNKNOWN
    power_state_observed_at: datetime | None = None
    #: Per power action, the first object its Job needs that does not exist (or lacks a key):
    #: such an action is held back, with no Job and no attempt spent.
    unresolved: Mapping[Action, Unresolved] = field(default_factory=dict)
    #: The heartbeat of the machine's kubelet (its Lease in kube-node-lease), read only while a
    #: power-off waits for it (`Operation.cut_pending`); None: no such Lease.
    kubelet: KubeletHeartbeat | None = None


@dataclass(frozen=True)
class KubeletHeartbeat:
    """A kubelet's Lease in `kube-node-lease`: it renews `renewed` every few seconds while its
    OS runs; the node lifecycle controller counts it gone `duration_seconds` after."""

    renewed: datetime | None
    duration_seconds: int = 40

    def stopped(self, now: datetime) -> bool:
        """No renewal for a whole lease duration: the kubelet, and so its OS, is not running."""
        return self.renewed is None or (now - self.renewed).total_seconds() >= self.duration_seconds
