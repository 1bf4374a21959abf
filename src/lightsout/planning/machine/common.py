"""What every phase of the power state machine shares: its reasons, its timings, and the
building blocks its phase handlers decide with (starting an action, counting a failed attempt,
setting a condition).

`fsm` holds the transition table and `decide`; `steady` the phases at rest (Off, Ready, Failed)
and `transitions` those with an action in flight.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from lightsout.planning.machine import outages
from lightsout.planning.machine.effects import (
    AcquireLease,
    ApplyNodeMetadata,
    Cordon,
    Decision,
    Drain,
    Effect,
    Event,
    ReleaseLease,
    Requeue,
    SetCondition,
    StartJob,
    Uncordon,
)
from lightsout.planning.types import (
    ACTION_PHASE,
    Action,
    ConditionStatus,
    ConditionType,
    EventType,
    LeaseState,
    MachineState,
    Observations,
    ObservedPowerState,
    Operation,
    Phase,
)

JOB_POLL_SECONDS = 30.0
BOOT_POLL_SECONDS = 15.0
DRAIN_POLL_SECONDS = 10.0
DRAIN_BLOCKED_POLL_SECONDS = 30.0
LEASE_RETRY_SECONDS = 30.0
#: Seconds after another holder's Lease would end before looking again (clock skew, a late
#: renewal in flight).
LEASE_EXPIRY_MARGIN_SECONDS = 1.0
#: Chaining to the next step right after a transition (e.g. acting on a changed intent).
SOON_SECONDS = 1.0
RETRY_BASE_SECONDS = 30
RETRY_MAX_SECONDS = 600
#: A core Node keeps reporting Ready for a while after its machine loses power (the node
#: lifecycle controller's grace period), so "Ready while Off" only counts as drift after this.
DRIFT_GRACE_SECONDS = 120


class Reason(StrEnum):
    """`status.reason` values (and event reasons) chosen by `decide`."""

    POWER_ON_REQUESTED = "PowerOnRequested"
    POWER_OFF_REQUESTED = "PowerOffRequested"
    JOB_ADOPTED = "JobAdopted"
    WAITING_FOR_JOB = "WaitingForJob"
    JOB_SUCCEEDED = "JobSucceeded"
    JOB_FAILED = "JobFailed"
    JOB_LOST = "JobLost"
    WAITING_FOR_NODE = "WaitingForNode"
    NODE_REGISTERED = "NodeRegistered"
    NODE_NOT_READY = "NodeNotReady"
    REGISTRATION_TIMEOUT = "RegistrationTimeout"
    POWER_STATE_MISMATCH = "PowerStateMismatch"
    RETRY_SCHEDULED = "RetryScheduled"
    RETRYING = "Retrying"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    DRAINING = "Draining"
    DRAINED = "Drained"
    DRAIN_BLOCKED = "DrainBlocked"
    DRAIN_TIMEOUT = "DrainTimeout"
    #: Past the drain deadline set on battery: pods a PDB protects are deleted.
    DRAIN_FORCED = "DrainForced"
    DRAIN_CANCELLED = "DrainCancelled"
    ACTION_CANCELLED = "ActionCancelled"
    LEASE_HELD_ELSEWHERE = "LeaseHeldElsewhere"
    CORE_NODE_FAILED = "CoreNodeFailed"
    CORE_NODE_REMOVED = "CoreNodeRemoved"
    DRIFT_DETECTED = "DriftDetected"
    DRIFT_CORRECTION = "DriftCorrection"
    DRIFT_RESOLVED = "DriftResolved"
    DRIFT_ADOPTED = "DriftAdopted"
    DRIFT_CORRECTIONS_EXHAUSTED = "DriftCorrectionsExhausted"
    OBSERVED_ON = "ObservedOn"
    OBSERVED_OFF = "ObservedOff"
    RESUMED = "Resumed"
    REFERENCES_RESOLVED = "ReferencesResolved"
    POD_START_FAILED = "PodStartFailed"
    ADDRESS_POOL_EXHAUSTED = "AddressPoolExhausted"
    FORCED_POWER_OFF = "ForcedPowerOff"
    BMC_UNAVAILABLE = "BMCUnavailable"
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    WAITING_FOR_HEARTBEAT = "WaitingForHeartbeat"
    OS_DOWN_CONFIRMED = "OSDownConfirmed"
    OS_STILL_RUNNING = "OSStillRunning"


#: Reasons that describe a passing wait rather than the machine; a steady phase replaces them.
_TRANSIENT_REASONS = frozenset({Reason.LEASE_HELD_ELSEWHERE})


def drain_forced(m: MachineState, now: datetime) -> bool:
    """Past the machine's drain deadline (`lightsout.dev/drain-by`, set while its UPS runs low):
    its pods are deleted rather than evicted, so the OS shuts down before the battery is empty."""
    return m.drain_by is not None and now >= m.drain_by


def retry_backoff(failed_attempt: int) -> int:
    """Seconds to wait before retrying after attempt `failed_attempt` failed."""
    exponent = max(failed_attempt, 1) - 1
    return int(min(RETRY_BASE_SECONDS * 2**exponent, RETRY_MAX_SECONDS))


def attempt_failed(
    m: MachineState,
    failed: Operation,
    cause: Reason,
    message: str,
    extra: tuple[Effect, ...] = (),
    *,
    drifted: bool = False,
) -> Decision:
    conditions: tuple[Effect, ...] = (
        set_condition(ConditionType.POWER_ACTION_SUCCEEDED, False, cause, message),
        *((set_condition(ConditionType.DRIFTED, True, cause, message),) if drifted else ()),
        *extra,
    )
    allowed = m.max_retries + 1
    now = failed.finished or failed.started
    if failed.attempt < allowed or rides_out(m, failed, now):
        delay = retry_backoff(failed.attempt)
        text = f"{message}; retrying in {delay}s ({attempt_note(m, failed, now)})"
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            *conditions,
            Event(EventType.WARNING, cause, message),
            Requeue(float(delay)),
        )
        # An outage keeps its own reason while it lasts: what a person needs to read.
        reason = Reason.BMC_UNAVAILABLE if cause is Reason.BMC_UNAVAILABLE else None
        phase = ACTION_PHASE[failed.action]
        return Decision(phase, reason or Reason.RETRY_SCHEDULED, text, effects, failed)
    text = f"{message} (gave up after {failed.attempt} attempts)"
    effects = (
        *conditions,
        ReleaseLease(),
        Event(EventType.WARNING, cause, message),
        Event(EventType.WARNING, Reason.RETRIES_EXHAUSTED, text),
    )
    return Decision(Phase.FAILED, Reason.RETRIES_EXHAUSTED, text, effects, failed)


def attempt_note(m: MachineState, failed: Operation, now: datetime) -> str:
    allowed = m.max_retries + 1
    if failed.attempt < allowed or not rides_out(m, failed, now):
        return f"attempt {failed.attempt + 1} of {allowed}"
    return f"attempt {failed.attempt + 1}; a BMC outage does not use up maxRetries"


def rides_out(m: MachineState, failed: Operation, now: datetime) -> bool:
    """A failed attempt that met an unavailable BMC is retried without spending maxRetries
    while the action is young enough (`planning.machine.outages`)."""
    return outage(failed) and outages.rides_out(m.phase_since, now)


def outage(failed: Operation) -> bool:
    """The attempt's playbook failed because the BMC (or hypervisor API) did not answer."""
    return failed.failed_task is not None and outages.unavailable(failed.message)


def refused(failed: Operation) -> bool:
    """The attempt's playbook failed because the endpoint refused the credentials."""
    return failed.failed_task is not None and outages.credentials_refused(failed.message)


def credentials_refused(failed: Operation, message: str) -> Decision:
    """The endpoint refused the credentials: Failed after this attempt, whatever `maxRetries`
    says (each retry would be refused the same way, minutes apart)."""
    effects: tuple[Effect, ...] = (
        set_condition(
            ConditionType.POWER_ACTION_SUCCEEDED, False, Reason.AUTHENTICATION_FAILED, message
        ),
        ReleaseLease(),
        Event(EventType.WARNING, Reason.AUTHENTICATION_FAILED, message),
    )
    return Decision(Phase.FAILED, Reason.AUTHENTICATION_FAILED, message, effects, failed)


def name_credentials(m: MachineState, message: str) -> str:
    """A refusal's message with where the credentials come from and what to do: the Job's pod
    only sees the Secret's files, so the operator adds the Secret's name from the spec."""
    if m.credentials:
        where = f"the endpoint refused the credentials from {m.credentials}"
    else:
        where = "the endpoint asks for credentials this driver does not send"
    return (
        f"{message}; {where}: not retried (the answer would be the same); fix them, then edit "
        "the Node's spec to try again"
    )


def act_on_intent(m: MachineState, obs: Observations, now: datetime, why: str) -> Decision:
    """Drive the machine toward `desired` from a state we cannot vouch for."""
    if m.desired is ObservedPowerState.ON:
        if obs.node_exists and obs.node_ready:
            return node_registered(m, f"{why}; core Node {m.kubernetes_node_name} is Ready")
        return power_on(m, now, Reason.POWER_ON_REQUESTED, why)
    return power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)


def power_on(
    m: MachineState, now: datetime, reason: Reason, why: str, extra: tuple[Effect, ...] = ()
) -> Decision:
    return start_action(m, now, m.on_action, reason, f"{why}; starting {m.on_action}", extra=extra)


def power_off(
    m: MachineState,
    obs: Observations,
    now: datetime,
    reason: Reason,
    why: str,
    *,
    extra: tuple[Effect, ...] = (),
) -> Decision:
    node = m.kubernetes_node_name
    if obs.node_exists and obs.node_ready:
        message = f"{why}; cordoning and draining core Node {node}"
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            *extra,
            *(() if obs.node_cordoned else (Cordon(),)),
            Drain(force=drain_forced(m, now)),
            set_condition(ConditionType.DRAINING, True, Reason.DRAINING, message),
            Event(EventType.NORMAL, reason, message),
            Requeue(DRAIN_POLL_SECONDS),
        )
        return Decision(Phase.DRAINING, reason, message, effects, m.operation)
    message = f"{why}; core Node {node} not Ready, nothing to drain; starting {m.off_action}"
    return start_action(m, now, m.off_action, reason, message, extra=extra)


def start_action(
    m: MachineState,
    now: datetime,
    action: Action,
    reason: Reason,
    message: str,
    *,
    extra: tuple[Effect, ...] = (),
    generation: int | None = None,
    os_down: tuple[str, int] = ("", 0),
) -> Decision:
    """Start `action`'s Job for the current intent (a retry passes its own `generation`; the
    power-off after a `cut_pending` one passes `os_down`, its evidence and forced seconds)."""
    if generation is None:
        generation = m.intent_generation
    op, attempt = m.operation, 1
    if op is not None and op.action is action and op.intent_generation == generation:
        attempt = op.attempt + 1  # never reusing the name of an earlier Job of the intent
    # The evidence is kept with the attempt, so a Job made again (not visible yet) carries it.
    kept = {"os_down_evidence": os_down[0], "os_down_forced_after": os_down[1]}
    values = kept if os_down[0] else {}
    operation = Operation(action, generation, attempt, started=now, values=values)
    effects: tuple[Effect, ...] = (
        AcquireLease(),
        *extra,
        StartJob(action, generation, attempt, *os_down),
        Event(EventType.NORMAL, reason, message),
        Requeue(JOB_POLL_SECONDS),
    )
    return Decision(ACTION_PHASE[action], reason, message, effects, operation)


def node_registered(m: MachineState, message: str) -> Decision:
    effects: tuple[Effect, ...] = (
        ApplyNodeMetadata(),
        Uncordon(),
        set_condition(ConditionType.REGISTERED, True, Reason.NODE_REGISTERED, message),
        set_condition(ConditionType.DRIFTED, False, Reason.NODE_REGISTERED, message),
        ReleaseLease(),
        Event(EventType.NORMAL, Reason.NODE_REGISTERED, message),
    )
    return Decision(
        Phase.READY,
        Reason.NODE_REGISTERED,
        message,
        effects,
        m.operation,
        observed_power_state=ObservedPowerState.ON,
    )


def cleanup(m: MachineState, op: Operation) -> bool:
    """Whether `op` is the deprovision of a clone that never joined: an off-action started for
    an On intent of the same generation (a new intent would carry a new generation)."""
    return (
        m.ephemeral
        and op.action is Action.DEPROVISION
        and m.desired is ObservedPowerState.ON
        and op.intent_generation == m.intent_generation
    )


def observed_on(m: MachineState, obs: Observations, now: datetime) -> bool:
    settled = m.phase_since is None or (now - m.phase_since).total_seconds() >= (
        DRIFT_GRACE_SECONDS
    )
    return (obs.node_ready and settled) or (
        obs.power_state is ObservedPowerState.ON and fresh(m, obs)
    )


def observed_off(m: MachineState, obs: Observations) -> bool:
    return obs.power_state is ObservedPowerState.OFF and fresh(m, obs)


def fresh(m: MachineState, obs: Observations) -> bool:
    """A health result counts only if taken after the machine entered its current phase."""
    seen = obs.power_state_observed_at
    return seen is not None and (m.phase_since is None or seen > m.phase_since)


def release_if_held(obs: Observations) -> tuple[Effect, ...]:
    return (ReleaseLease(),) if obs.lease is LeaseState.HELD_BY_ME else ()


def set_condition(kind: ConditionType, status: bool, reason: str, message: str) -> SetCondition:
    value = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    return SetCondition(kind, value, reason, message)
