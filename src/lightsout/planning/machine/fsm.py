"""The power state machine: one pure transition function, `decide(machine, obs, now)`.

The Node handler calls `decide` on every reconcile with the machine's spec/status
(`MachineState`), what it sees in the cluster (`Observations`) and the time; it persists the
returned `Decision` (phase, reason, message, lastOperation) and applies its effects in order
(see `lightsout.planning.machine.effects` for that contract). Nothing here does I/O, so a restarted
operator reaches the same decision from the same objects: that is how it re-adopts a running Job
instead of sending a power command twice for one intent.

Transitions (D = spec.desiredPowerState; on-action is `startup`, or `provision` for ephemeral
VMs; off-action is `shutdown`/`deprovision`; PoweringOn/PoweringOff also stand for
Provisioning/Deprovisioning; "retry" means: back to the action's phase with RetryScheduled
while attempts remain, else Failed with RetriesExhausted; every StartJob comes after an
AcquireLease, and every transitional phase renews the Lease on each reconcile):

| Phase | When | Next | Reason (effects) |
|---|---|---|---|
| any | Lease held by another holder | unchanged | LeaseHeldElsewhere (Requeue only) |
| any | active Job not described by status | its action's phase | JobAdopted (no StartJob) |
| any | active Job being deleted, or of an attempt that has ended | as decided | not adopted |
| any | a StartJob while any power Job is active | unchanged | WaitingForJob (held back) |
| any | a StartJob whose Group/Secret/ConfigMap is missing | unchanged | GroupNotFound, ... |
| Unknown | operation Running in status | its action's phase | as that phase decides |
| Unknown | core Node Ready or health On | Booting (D On), Ready (D Off) | as that phase decides |
| Unknown | no evidence | Off | ObservedOff, then as Off |
| Off | D On | PoweringOn | PowerOnRequested (PrepareCoreNode, StartJob on-action) |
| any | PrepareCoreNode refused by the API | retry | CoreNodeFailed (no StartJob) |
| any | ends Failed/Off, core Node never registered | as decided | DeleteCoreNode, CoreNodeRemoved |
| Off | D Off, machine seen running | Off, Draining if Correct | DriftDetected / DriftCorrection |
| Off, Ready | drift, Correct, maxCorrections used in window | Failed | DriftCorrectionsExhausted |
| Off, Ready, Failed | drift, Adopt | unchanged | DriftAdopted (SetDesiredPowerState: as seen) |
| Off, Ready, Failed | DriftAdopted, spec not yet patched | unchanged | DriftAdopted (patch again) |
| Off | D On after DriftAdopted | Booting (no Job), Ready if core Node Ready | WaitingForNode |
| Ready | D Off after DriftAdopted | Off (no Job; a clone is deprovisioned) | ObservedOff |
| PoweringOn | Job pending or running | unchanged | WaitingForJob |
| PoweringOn | Job not visible yet | unchanged | WaitingForJob (StartJob again, same name) |
| PoweringOn | D changed, Job not started | unchanged | ActionCancelled (DeleteJob) |
| PoweringOn | cancelled, Job gone | per new intent | PowerOnRequested/PowerOffRequested |
| PoweringOn | D changed, Job running | unchanged | WaitingForJob (let it finish) |
| PoweringOn | Job succeeded, power On/unreported | Booting | JobSucceeded |
| PoweringOn | Job succeeded, power Off | retry | PowerStateMismatch (Drifted=True) |
| PoweringOn | Job failed | retry | JobFailed (quotes the failed task) |
| PoweringOn | Job failed: BMC did not answer | retry (maxRetries kept) | BMCUnavailable |
| PoweringOn | Job failed: credentials refused (401, 403) | Failed | AuthenticationFailed |
| Provisioning | Group's address pool exhausted | retry | AddressPoolExhausted (no StartJob) |
| PoweringOn | Job's pod cannot start | retry | PodStartFailed (DeleteJob; names the cause) |
| PoweringOn | Job deleted by anyone before it finished | retry | JobLost (not re-created) |
| PoweringOn | Job gone past the action timeout | retry | JobLost |
| PoweringOn | retry backoff over | unchanged | Retrying (StartJob attempt+1) |
| Booting | core Node Ready | Ready | NodeRegistered (labels/taints, startup taint off, Uncordon) |
| Booting | not Ready yet, within bootTimeout | unchanged | WaitingForNode |
| Booting | bootTimeout since power-on passed | retry | RegistrationTimeout |
| Booting | same, Ephemeral, last attempt | Deprovisioning | RegistrationTimeout (StartJob) |
| Deprovisioning | that Job succeeded, D On | Failed | RegistrationTimeout (DeleteCoreNode) |
| Booting, Ready | D Off, core Node Ready | Draining | PowerOffRequested (Cordon, Drain) |
| Booting, Ready | D Off, core Node not Ready | PoweringOff | PowerOffRequested |
| Ready | core Node NotReady or missing | unchanged | NodeNotReady |
| Ready | health check says Off | Ready, PoweringOn if Correct | DriftDetected / DriftCorrection |
| Draining | pods left | unchanged | Draining (Drain again) |
| Draining | eviction refused by a PDB | unchanged | DrainBlocked (names the PDB) |
| Draining | drainTimeout passed | unchanged | DrainTimeout (never forced) |
| Draining | drained, or core Node gone | PoweringOff | Drained (StartJob off-action) |
| Draining | D On | Ready | DrainCancelled (Uncordon) |
| PoweringOff | Job succeeded, power Off | Off | JobSucceeded (DeleteCoreNode per policy) |
| PoweringOff | same, Job reports forced_after_seconds | as above | same + Warning ForcedPowerOff |
| PoweringOff | Job succeeded, power On/unreported | retry | PowerStateMismatch (Drifted=True) |
| PoweringOff | Job succeeded, cut_pending, kubelet renews | unchanged | WaitingForHeartbeat |
| PoweringOff | cut_pending, kubelet Lease expired, gone | unchanged | OSDownConfirmed, StartJob |
| PoweringOff | cut_pending, renewed past shutdownTimeout, force | unchanged | OSDownConfirmed |
| PoweringOff | cut_pending, renewed past shutdownTimeout | retry | OSStillRunning |
| PoweringOff | Job failed/lost, retry due, D changed | as PoweringOn | |
| Failed | new generation (any spec edit) | per D, attempt 1 | PowerOnRequested/PowerOffRequested |
| Failed | D On and core Node Ready | Ready | NodeRegistered |
| Failed | otherwise | unchanged | RetriesExhausted (AuthenticationFailed after a refusal) |

Startup taint: every StartJob of an on-action comes after a `PrepareCoreNode` (the core Node is
created, or patched, with the machine's labels and taints plus `lightsout.dev/unregistered:
NoSchedule`), so no pod can land on the machine before it carries them; `ApplyNodeMetadata`
at Ready removes that taint (and a Ready machine whose Node still has it gets it again).

Retries: an attempt that fails (Job failed, wrong power state, registration timeout, Job lost)
is retried while `attempt <= maxRetries`, after `retry_backoff(attempt)` seconds (30 s doubling
up to 10 min); the retry is a new Job (`attempt + 1`) for the same intent generation. Then the
machine is Failed, which is not a dead end: any new generation starts over at attempt 1. A
playbook that failed because the BMC (or hypervisor API) refused with 503/429/502/504 or did not
answer (`planning.machine.outages`) is retried after the same backoff without spending `maxRetries`,
with reason BMCUnavailable, for 30 minutes in the action's phase; the backoff keeps such an
outage to a handful of attempts (`outages.attempts_within`), never a request storm. A playbook
that failed because the endpoint refused the credentials (HTTP 401/403, IPMI's "incorrect
password": `outages.credentials_refused`) is not retried at all: the machine is Failed at once
with reason AuthenticationFailed and a message naming the Secret and keys the credentials come
from (`MachineState.credentials`), since every retry would get the same answer.

Never under a running OS: a driver that cuts the power without a graceful path of its own and
without a meter (a Home Assistant switch without a power sensor) reports `cut_pending` once the
OS shutdown was delivered and the probe went silent, leaving the power on. The machine stays
PoweringOff until its kubelet's Lease in kube-node-lease has not been renewed for a whole lease
duration (or there is none: not a cluster node), then the power-off runs again (the next
attempt number) with that evidence, and only then is the power cut. A kubelet still renewing
`shutdownTimeoutSeconds` after the Job ended means the OS runs: the attempt fails (or, with the
driver's `force`, the power is cut with ForcedPowerOff).

Drain timeout: eviction is never forced past a PodDisruptionBudget, because powering off a
machine whose pods a PDB protects is exactly the outage a PDB exists to prevent. After
`drain_timeout_seconds` the machine stays Draining with a DrainTimeout warning and keeps
retrying; setting desiredPowerState back to On cancels the drain.

References: a StartJob is only let through when every object its Job needs exists
(`Observations.unresolved`, from `state.references`); otherwise the machine stays in its phase
with the reference's reason (GroupNotFound, SecretNotFound, SecretKeyMissing, ConfigMapNotFound,
PlaybookNotFound; condition ReferencesResolved=False), no Job, no attempt counted, and the next
pass (the watch of the missing object wakes it) tries again.

Events are only emitted when (phase, reason) changes, so polling a blocked drain or a running
Job does not post an event per reconcile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from enum import StrEnum

from lightsout.planning.learning import learn
from lightsout.planning.machine import outages
from lightsout.planning.machine.effects import (
    AcquireLease,
    ApplyNodeMetadata,
    Cordon,
    Decision,
    DeleteCoreNode,
    DeleteJob,
    Drain,
    Effect,
    Event,
    PrepareCoreNode,
    ReleaseLease,
    Requeue,
    SetCondition,
    SetDesiredPowerState,
    StartJob,
    Uncordon,
)
from lightsout.planning.types import (
    ACTION_PHASE,
    PHASE_ACTION,
    Action,
    ConditionStatus,
    ConditionType,
    EventType,
    JobPhase,
    LeaseState,
    MachineState,
    NodeRemovalPolicy,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)
from lightsout.state.references import ReferenceReason

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


def retry_backoff(failed_attempt: int) -> int:
    """Seconds to wait before retrying after attempt `failed_attempt` failed."""
    exponent = max(failed_attempt, 1) - 1
    return int(min(RETRY_BASE_SECONDS * 2**exponent, RETRY_MAX_SECONDS))


def select_job(jobs: Iterable[ObservedJob], operation: Operation | None) -> ObservedJob | None:
    """Which of a machine's action Jobs goes into `Observations.job`.

    An active power Job wins (newest first), so a Job the status does not know about is
    re-adopted rather than duplicated; then the Job of the recorded operation; then the newest.
    Jobs being deleted must be passed too: a cancelled Job stays active until its pod is gone,
    and no new power Job may start before that.
    """
    candidates = list(jobs)
    active = [j for j in candidates if j.active and j.action.target is not None]
    if active:
        return max(active, key=lambda j: (j.generation, j.attempt))
    if operation is not None:
        for job in candidates:
            if operation.matches(job):
                return job
    return max(candidates, key=lambda j: (j.generation, j.attempt), default=None)


def decide(machine: MachineState, obs: Observations, now: datetime) -> Decision:
    """Decide the next phase of `machine` and the effects that lead there."""
    if obs.lease is LeaseState.HELD_BY_OTHER:
        # Someone else (another replica, a person, a tool) is acting on this machine: touch
        # nothing, not even status conditions, and look again later.
        message = "another holder owns this machine's Lease; waiting for it to be released"
        look = LEASE_RETRY_SECONDS
        if obs.lease_expires is not None:
            # Take over as the hold ends (a holder that is gone renews nothing), not up to 30 s
            # later; a holder that renews is looked at again at most every 30 s.
            until = (obs.lease_expires - now).total_seconds() + LEASE_EXPIRY_MARGIN_SECONDS
            look = min(LEASE_RETRY_SECONDS, max(SOON_SECONDS, until))
        decision = Decision(
            machine.phase,
            Reason.LEASE_HELD_ELSEWHERE,
            message,
            (Requeue(look),),
            machine.operation,
        )
        return _finish(machine, decision, now)
    adopted = _adopt_active_job(machine, obs.job, now)
    if adopted is not None:
        return _finish(machine, adopted, now)
    if machine.adopting is not None:
        return _finish(machine, _adoption_pending(machine, machine.adopting), now)
    subject = _resolve_unknown(machine, obs, now) if machine.phase is Phase.UNKNOWN else machine
    decision = _HANDLERS[subject.phase](subject, obs, now)
    decision = _one_job_at_a_time(machine, obs, decision)
    decision = _finish(machine, _prepare_core_node(_references(subject, obs, decision)), now)
    return _forget_unregistered_node(machine, obs, decision)


def _references(m: MachineState, obs: Observations, decision: Decision) -> Decision:
    """Let a StartJob through only when every object its Job needs exists.

    A missing Secret or ConfigMap would leave the Job's pod in ContainerCreating until its
    deadline, and a missing Group would power a machine on without its Group's policy; neither
    is worth an attempt. The machine stays in its phase (keeping its operation, so no retry is
    spent) and the watch of the missing object brings the next pass.
    """
    start = next((e for e in decision.effects if isinstance(e, StartJob)), None)
    if start is None:
        return decision
    problem = obs.unresolved.get(start.action)
    if problem is None:
        if m.reason not in set(ReferenceReason):
            return decision
        # It was held back by a reference (its reason says so): the condition turns True.
        text = f"every object the {start.action} Job needs exists"
        ok = _condition(ConditionType.REFERENCES_RESOLVED, True, Reason.REFERENCES_RESOLVED, text)
        return replace(decision, effects=(*decision.effects, ok))
    message = f"{problem.message}; {start.action} waits for it (no Job started, no attempt spent)"
    acting = m.phase in PHASE_ACTION or m.phase is Phase.DRAINING
    effects: tuple[Effect, ...] = (
        *((AcquireLease(),) if acting else _release_if_held(obs)),
        _condition(ConditionType.REFERENCES_RESOLVED, False, problem.reason, message),
        Event(EventType.WARNING, problem.reason, message),
    )
    return Decision(m.phase, problem.reason, message, effects, m.operation)


def _prepare_core_node(decision: Decision) -> Decision:
    """Every on-action Job is preceded by `PrepareCoreNode`: the machine's core Node exists and
    carries its labels, taints and the startup taint before the machine can boot, so the
    scheduler never sees it without them (whichever path asked for the power-on: a new intent,
    a retry, a drift correction, a Job not visible yet)."""
    effects: list[Effect] = []
    for effect in decision.effects:
        if isinstance(effect, StartJob) and effect.action.target is ObservedPowerState.ON:
            effects.append(PrepareCoreNode())
        effects.append(effect)
    return replace(decision, effects=tuple(effects))


def core_node_failed(
    machine: MachineState, decision: Decision, message: str, now: datetime
) -> Decision:
    """`decision` asked for `PrepareCoreNode` and the API refused: the on-action is not started
    (a machine never boots without its startup taint); the attempt fails like a failed Job, so
    it is retried after the backoff and, past `maxRetries`, the machine is Failed with
    `message` (the API's answer) as its reason."""
    op = decision.operation
    if op is None:
        op = Operation(machine.on_action, machine.intent_generation, 1, started=now)
    text = f"core Node {machine.kubernetes_node_name} not prepared, machine not powered on: "
    failed = op.finish(OperationResult.FAILED, now, text + message)
    outcome = _attempt_failed(machine, failed, Reason.CORE_NODE_FAILED, text + message)
    return _finish(machine, outcome, now)


def address_pool_exhausted(
    machine: MachineState, decision: Decision, message: str, now: datetime
) -> Decision:
    """`decision` asked for a provision and the Group's address pool has no free address: no
    clone is made; the attempt fails like a failed Job (retried after the backoff, then
    Failed with `message`)."""
    op = decision.operation
    if op is None:
        op = Operation(machine.on_action, machine.intent_generation, 1, started=now)
    failed = op.finish(OperationResult.FAILED, now, message)
    outcome = _attempt_failed(machine, failed, Reason.ADDRESS_POOL_EXHAUSTED, message)
    return _finish(machine, outcome, now)


def _forget_unregistered_node(
    machine: MachineState, obs: Observations, decision: Decision
) -> Decision:
    """A machine that ends Failed or Off leaves no core Node that only Lights-Out made.

    Every power-on creates the core Node first (with the startup taint); when the machine never
    boots, the node lifecycle controller marks that Node Unknown and unreachable, and it would
    sit in `kubectl get nodes` for a machine that is not there. Whatever `nodeRemovalPolicy`
    says (it is about Nodes a kubelet registered), such a Node goes, and the message and an
    event say so. A kubelet that registers later creates its Node again.
    """
    if decision.phase not in (Phase.FAILED, Phase.OFF) or not obs.node_unregistered:
        return decision
    if any(isinstance(e, (DeleteCoreNode, PrepareCoreNode)) for e in decision.effects):
        return decision
    note = (
        f"removed core Node {machine.kubernetes_node_name}, which Lights-Out made before "
        "power-on and no kubelet registered"
    )
    # Before the rest: a message ends with what to do about a failure.
    message = decision.message if note in decision.message else f"{note}. {decision.message}"
    effects: tuple[Effect, ...] = (
        *decision.effects,
        DeleteCoreNode(unregistered_only=True),
        Event(EventType.NORMAL, Reason.CORE_NODE_REMOVED, note),
    )
    return replace(decision, message=message, effects=effects)


def _one_job_at_a_time(machine: MachineState, obs: Observations, decision: Decision) -> Decision:
    """Hold back a new power Job while any power Job of this machine is still active.

    This covers a cancelled Job that is still being deleted (DeleteJob uses foreground
    propagation, so the Job stays visible until its pod is gone) and status that disagrees
    with the cluster. Whatever the reason, two power commands never overlap.
    """
    job = obs.job
    if job is None or not job.active or job.action.target is None:
        return decision
    if not any(isinstance(e, StartJob) for e in decision.effects):
        return decision
    message = (
        f"waiting for the {job.action} Job (generation {job.generation}, attempt "
        f"{job.attempt}) to finish or go away before starting another power action"
    )
    effects: tuple[Effect, ...] = (AcquireLease(), Requeue(JOB_POLL_SECONDS))
    return Decision(machine.phase, Reason.WAITING_FOR_JOB, message, effects, machine.operation)


def _finish(machine: MachineState, decision: Decision, now: datetime) -> Decision:
    changed_phase = decision.phase is not machine.phase
    effects = decision.effects
    if not changed_phase and decision.reason == machine.reason:
        effects = tuple(e for e in effects if not isinstance(e, Event))
    return replace(
        decision,
        effects=effects,
        phase_since=now if changed_phase else (machine.phase_since or now),
        learned=learn(machine, decision.phase, decision.operation, now),
    )


# --- re-adoption and Unknown ---------------------------------------------------------------


def _adopt_active_job(
    machine: MachineState, job: ObservedJob | None, now: datetime
) -> Decision | None:
    """A power Job is in flight that the status does not account for: follow it, start nothing.

    Either the status does not name the Job (lost status, a crash, a Job created by someone
    else) or it names it but sits in another phase; in both cases the Job's action decides the
    phase until it finishes.

    Never a Job that is going away (foreground deletion keeps it active, with no pod, until
    its pods are gone) nor the Job of an attempt whose end the status records: adopting
    either would bring a machine that has given up back into the action, and the next pass,
    finding the Job gone, would create it again for an attempt that has ended. Such a Job
    still holds back a new power Job (`_one_job_at_a_time`).
    """
    if job is None or not job.active or job.action.target is None or job.deleting:
        return None
    if _attempt_ended(machine.operation, job):
        return None
    phase = ACTION_PHASE[job.action]
    known = machine.operation is not None and machine.operation.matches(job)
    if known and machine.phase in (phase, Phase.UNKNOWN):
        return None
    message = (
        f"adopted the running {job.action} Job (generation {job.generation}, attempt "
        f"{job.attempt}); waiting for it instead of starting another power command"
    )
    if known and machine.operation is not None:
        operation = replace(machine.operation, result=OperationResult.RUNNING, finished=None)
    else:
        operation = Operation(job.action, job.generation, job.attempt, started=now)
    effects: tuple[Effect, ...] = (
        AcquireLease(),
        Event(EventType.NORMAL, Reason.JOB_ADOPTED, message),
        Requeue(JOB_POLL_SECONDS),
    )
    return Decision(phase, Reason.JOB_ADOPTED, message, effects, operation)


def _attempt_ended(op: Operation | None, job: ObservedJob) -> bool:
    """Whether the status records that `job`'s attempt is over: it is the recorded operation's
    Job and that has a result, or an earlier attempt of the same action and intent, or a Job of
    an earlier intent."""
    if op is None:
        return False
    if job.generation != op.intent_generation:
        return job.generation < op.intent_generation
    if job.action is not op.action:
        return False
    return job.attempt < op.attempt or (
        job.attempt == op.attempt and op.result is not OperationResult.RUNNING
    )


def _resolve_unknown(machine: MachineState, obs: Observations, now: datetime) -> MachineState:
    """Pick the phase the evidence supports; the handler of that phase then decides."""
    op = machine.operation
    if op is not None and op.result is OperationResult.RUNNING and op.action in ACTION_PHASE:
        phase, reason = ACTION_PHASE[op.action], Reason.RESUMED
        message = f"resuming {op.action} (attempt {op.attempt}) recorded in status"
    elif (obs.node_exists and obs.node_ready) or obs.power_state is ObservedPowerState.ON:
        phase = Phase.BOOTING if machine.desired is ObservedPowerState.ON else Phase.READY
        reason, message = Reason.OBSERVED_ON, "machine observed running"
    else:
        phase, reason = Phase.OFF, Reason.OBSERVED_OFF
        message = "no core Node registered and no health check says On; taking the machine as off"
    return replace(machine, phase=phase, phase_since=now, reason=reason, message=message)


# --- steady phases --------------------------------------------------------------------------


def _off(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.desired is ObservedPowerState.ON:
        if m.reason == Reason.DRIFT_ADOPTED:
            return _adopted_on(m, obs)
        return _power_on(m, now, Reason.POWER_ON_REQUESTED, "desired power state is On")
    if _observed_on(m, obs, now):
        if obs.power_state is ObservedPowerState.ON and _fresh(m, obs):
            seen = "the health check found the machine powered On"
        else:
            seen = f"core Node {m.kubernetes_node_name} is Ready"
        message = f"{seen} although its desired power state is Off (phase {m.phase})"
        return _drift(m, obs, now, message, ObservedPowerState.ON)
    return _steady(m, obs, Reason.OBSERVED_OFF, "machine is off")


def _ready(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.desired is ObservedPowerState.OFF:
        if m.reason == Reason.DRIFT_ADOPTED:
            return _adopted_off(m, obs, now)
        return _power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, "desired power state is Off")
    if _observed_off(m, obs):
        message = (
            "the health check found the machine powered Off although its desired power state "
            f"is On (phase {m.phase})"
        )
        return _drift(m, obs, now, message, ObservedPowerState.OFF)
    node = m.kubernetes_node_name
    if not (obs.node_exists and obs.node_ready):
        message = f"core Node {node} is {'not Ready' if obs.node_exists else 'missing'}"
        effects: tuple[Effect, ...] = (
            _condition(ConditionType.REGISTERED, False, Reason.NODE_NOT_READY, message),
            Event(EventType.WARNING, Reason.NODE_NOT_READY, message),
            *_release_if_held(obs),
        )
        return Decision(Phase.READY, Reason.NODE_NOT_READY, message, effects, m.operation)
    if m.reason in (Reason.NODE_NOT_READY, Reason.DRIFT_DETECTED):
        return _back_to_normal(m, obs, f"core Node {node} is Ready again")
    metadata: tuple[Effect, ...] = () if obs.node_metadata_applied else (ApplyNodeMetadata(),)
    return _steady(m, obs, Reason.NODE_REGISTERED, f"core Node {node} is Ready", metadata)


def _failed(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.reason == Reason.DRIFT_ADOPTED:
        if m.desired is ObservedPowerState.ON:
            return _adopted_on(m, obs)
        return _adopted_off(m, obs, now)
    op = m.operation
    if op is None or m.intent_generation > op.intent_generation:
        decision = _act_on_intent(
            m, obs, now, f"new intent (generation {m.intent_generation}) after a failure"
        )
        # Starting over: corrections made before the failure no longer count.
        return replace(decision, drift_corrections=())
    if m.desired is ObservedPowerState.ON and obs.node_exists and obs.node_ready:
        return _registered(m, f"core Node {m.kubernetes_node_name} became Ready; recovered")
    if m.adopt_drift:
        # A machine left Failed (corrections exhausted, retries spent) is adopted in the state
        # a fresh health check finds it in once the Group's policy says Adopt.
        if (
            m.desired is ObservedPowerState.OFF
            and obs.power_state is ObservedPowerState.ON
            and _fresh(m, obs)
        ):
            message = "the health check found the machine powered On while Failed"
            return _drift(m, obs, now, message, ObservedPowerState.ON)
        if m.desired is ObservedPowerState.ON and _observed_off(m, obs):
            message = "the health check found the machine powered Off while Failed"
            return _drift(m, obs, now, message, ObservedPowerState.OFF)
    hint = "gave up; any change to the Node's spec starts over"
    reason = Reason.AUTHENTICATION_FAILED if _refused(op) else Reason.RETRIES_EXHAUSTED
    return _steady(m, obs, reason, op.message or hint)


def _steady(
    m: MachineState,
    obs: Observations,
    default_reason: Reason,
    default_message: str,
    effects: tuple[Effect, ...] = (),
) -> Decision:
    if m.reason and m.reason not in _TRANSIENT_REASONS:
        reason, message = m.reason, m.message or default_message
    else:
        reason, message = default_reason, default_message
    if m.reason == Reason.DRIFT_DETECTED:
        reason, message = Reason.DRIFT_RESOLVED, "power state matches the desired state again"
        effects = (*effects, _condition(ConditionType.DRIFTED, False, reason, message))
    return Decision(m.phase, reason, message, (*effects, *_release_if_held(obs)), m.operation)


def _back_to_normal(m: MachineState, obs: Observations, message: str) -> Decision:
    effects: tuple[Effect, ...] = (
        _condition(ConditionType.REGISTERED, True, Reason.NODE_REGISTERED, message),
        _condition(ConditionType.DRIFTED, False, Reason.DRIFT_RESOLVED, message),
        Event(EventType.NORMAL, Reason.NODE_REGISTERED, message),
        *_release_if_held(obs),
    )
    return Decision(Phase.READY, Reason.NODE_REGISTERED, message, effects, m.operation)


def _drift(
    m: MachineState, obs: Observations, now: datetime, message: str, seen: ObservedPowerState
) -> Decision:
    noticed: tuple[Effect, ...] = (
        _condition(ConditionType.DRIFTED, True, Reason.DRIFT_DETECTED, message),
        Event(EventType.WARNING, Reason.DRIFT_DETECTED, message),
    )
    if m.adopt_drift:
        # The intent follows the machine: the next pass, seeing the new desiredPowerState with
        # this reason, takes the machine as it is (no power order; see _adopted_on/_off).
        text = f"{message}; adopting it (driftPolicy Adopt): desiredPowerState set to {seen}"
        effects: tuple[Effect, ...] = (
            *noticed,
            Event(EventType.NORMAL, Reason.DRIFT_ADOPTED, text),
            SetDesiredPowerState(seen),
            *_release_if_held(obs),
            Requeue(SOON_SECONDS),
        )
        return Decision(
            m.phase, Reason.DRIFT_ADOPTED, text, effects, m.operation, observed_power_state=seen
        )
    if m.correct_drift:
        window = timedelta(seconds=m.correction_window_seconds)
        recent = tuple(t for t in m.drift_corrections if now - t < window)
        if len(recent) >= m.max_corrections:
            # Someone keeps undoing the correction: fighting them in a loop would power the
            # machine on and off for as long as they keep at it.
            text = (
                f"{message}; not corrected again: already corrected {len(recent)} times within "
                f"{m.correction_window_seconds}s (maxCorrections {m.max_corrections}) and it "
                f"keeps coming back {seen}; set the Group's driftPolicy to Adopt to keep it "
                "that way, or edit the Node to start over"
            )
            effects = (
                *noticed,
                Event(EventType.WARNING, Reason.DRIFT_CORRECTIONS_EXHAUSTED, text),
                *_release_if_held(obs),
            )
            return Decision(
                Phase.FAILED,
                Reason.DRIFT_CORRECTIONS_EXHAUSTED,
                text,
                effects,
                m.operation,
                observed_power_state=seen,
                drift_corrections=recent,
            )
        count = f"correction {len(recent) + 1} of {m.max_corrections}"
        fix = f"{message}; correcting it (driftPolicy Correct, {count})"
        if m.desired is ObservedPowerState.ON:
            decision = _power_on(m, now, Reason.DRIFT_CORRECTION, fix, noticed)
        else:
            decision = _power_off(m, obs, now, Reason.DRIFT_CORRECTION, fix, extra=noticed)
        return replace(decision, observed_power_state=seen, drift_corrections=(*recent, now))
    effects = (*noticed, *_release_if_held(obs))
    return Decision(
        m.phase, Reason.DRIFT_DETECTED, message, effects, m.operation, observed_power_state=seen
    )


def _adoption_pending(m: MachineState, seen: ObservedPowerState) -> Decision:
    """The pass after a DriftAdopted status write can read the spec from before the patch
    of desiredPowerState that came with it (status and spec are two writes, and the watch
    delivers them apart): acting on the old desired state would undo the adoption (a Failed
    machine found On would be called Off). Wait for the patch, sending it again in case it
    was lost (the same value again changes nothing)."""
    message = (
        m.message or f"adopting the machine found {seen}: waiting for desiredPowerState {seen}"
    )
    effects: tuple[Effect, ...] = (SetDesiredPowerState(seen), Requeue(SOON_SECONDS))
    return Decision(
        m.phase, Reason.DRIFT_ADOPTED, message, effects, m.operation, observed_power_state=seen
    )


def _adopted_on(m: MachineState, obs: Observations) -> Decision:
    """desiredPowerState was set On because the machine was found On: no power-on is sent;
    it boots (or is Ready) like a machine found running, with the usual boot timeout."""
    node = m.kubernetes_node_name
    if obs.node_exists and obs.node_ready:
        return _registered(m, f"adopted the machine found On; core Node {node} is Ready")
    message = f"adopted the machine found On (no power-on sent); waiting for core Node {node}"
    effects: tuple[Effect, ...] = (
        AcquireLease(),
        _condition(ConditionType.DRIFTED, False, Reason.DRIFT_ADOPTED, message),
        Event(EventType.NORMAL, Reason.WAITING_FOR_NODE, message),
        Requeue(SOON_SECONDS),
    )
    return Decision(Phase.BOOTING, Reason.WAITING_FOR_NODE, message, effects, m.operation)


def _adopted_off(m: MachineState, obs: Observations, now: datetime) -> Decision:
    """desiredPowerState was set Off because the machine was found Off: no power-off is sent
    (a clone is still deprovisioned: a VM Lights-Out made must not be left behind)."""
    if m.ephemeral:
        why = "adopted the clone found Off: deprovisioning it"
        return _power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)
    message = "adopted the machine found Off (no power-off sent)"
    delete_node = obs.node_exists and m.node_removal_policy is NodeRemovalPolicy.DELETE
    effects: tuple[Effect, ...] = (
        *((DeleteCoreNode(),) if delete_node else ()),
        _condition(ConditionType.REGISTERED, False, Reason.OBSERVED_OFF, message),
        _condition(ConditionType.DRIFTED, False, Reason.DRIFT_ADOPTED, message),
        *_release_if_held(obs),
        Event(EventType.NORMAL, Reason.OBSERVED_OFF, message),
    )
    return Decision(
        Phase.OFF,
        Reason.OBSERVED_OFF,
        message,
        effects,
        m.operation,
        observed_power_state=ObservedPowerState.OFF,
    )


# --- transitional phases --------------------------------------------------------------------


def _booting(m: MachineState, obs: Observations, now: datetime) -> Decision:
    node = m.kubernetes_node_name
    if m.desired is ObservedPowerState.OFF:
        why = "desired power state changed to Off while booting"
        return _power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)
    if obs.node_exists and obs.node_ready:
        return _registered(m, f"core Node {node} registered and Ready")
    op = m.operation
    # The boot timeout runs from the confirmed power-on (the Job's end), not the Job's start:
    # a slow BMC or a Proxmox clone must not eat into the time the OS gets to boot.
    since = m.phase_since or now
    if (
        op is not None
        and op.target is ObservedPowerState.ON
        and op.result is OperationResult.SUCCEEDED
    ):
        since = op.finished or since
    remaining = (since + timedelta(seconds=m.boot_timeout_seconds) - now).total_seconds()
    if remaining > 0:
        detail = "exists, not Ready yet" if obs.node_exists else "not registered yet"
        reason = Reason.NODE_NOT_READY if obs.node_exists else Reason.WAITING_FOR_NODE
        message = f"waiting for core Node {node} ({detail}); boot timeout in {int(remaining)}s"
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            _condition(ConditionType.REGISTERED, False, reason, message),
            Requeue(max(SOON_SECONDS, min(BOOT_POLL_SECONDS, remaining))),
        )
        return Decision(Phase.BOOTING, Reason.WAITING_FOR_NODE, message, effects, op)
    message = f"core Node {node} did not become Ready within {m.boot_timeout_seconds}s of power-on"
    if op is None or op.target is not ObservedPowerState.ON:
        # Booting without a power-on on record (entered from Unknown): count it as attempt 0
        # so the first real power-on is attempt 1.
        op = Operation(m.on_action, m.intent_generation, 0, started=since)
    failed = op.finish(OperationResult.FAILED, now, message, power_state=op.power_state)
    registered = _condition(ConditionType.REGISTERED, False, Reason.REGISTRATION_TIMEOUT, message)
    if m.ephemeral and failed.attempt >= m.max_retries + 1:
        # The last attempt of a clone that never joined: it is destroyed (with its ISO, and its
        # token and address released) before the machine is Failed, so nothing is left behind.
        text = f"{message} (gave up after {failed.attempt} attempts); deprovisioning the clone"
        failing = _condition(
            ConditionType.POWER_ACTION_SUCCEEDED, False, Reason.REGISTRATION_TIMEOUT, text
        )
        return _start(
            m, now, m.off_action, Reason.REGISTRATION_TIMEOUT, text, extra=(registered, failing)
        )
    return _attempt_failed(m, failed, Reason.REGISTRATION_TIMEOUT, message, (registered,))


def _draining(m: MachineState, obs: Observations, now: datetime) -> Decision:
    node = m.kubernetes_node_name
    if m.desired is ObservedPowerState.ON:
        message = "desired power state changed to On while draining; uncordoning"
        effects: tuple[Effect, ...] = (
            Uncordon(),
            _condition(ConditionType.DRAINING, False, Reason.DRAIN_CANCELLED, message),
            ReleaseLease(),
            Event(EventType.NORMAL, Reason.DRAIN_CANCELLED, message),
        )
        return Decision(Phase.READY, Reason.DRAIN_CANCELLED, message, effects, m.operation)
    drain, ready = obs.drain, obs.node_exists and obs.node_ready
    if not ready or (drain is not None and drain.pods_remaining <= 0):
        if ready:
            message = f"core Node {node} drained; starting {m.off_action}"
        else:
            state = "not Ready" if obs.node_exists else "gone"
            message = f"core Node {node} is {state}, nothing left to drain; starting {m.off_action}"
        done = _condition(ConditionType.DRAINING, False, Reason.DRAINED, message)
        return _start(m, now, m.off_action, Reason.DRAINED, message, extra=(done,))
    keep_going: tuple[Effect, ...] = (
        AcquireLease(),
        *(() if obs.node_cordoned else (Cordon(),)),
        Drain(),
    )
    left = "an unknown number of" if drain is None else str(drain.pods_remaining)
    blocked = ""
    if drain is not None and drain.blocked_by:
        blocked = f"eviction blocked by PodDisruptionBudget {drain.blocked_by}"
        if drain.blocked_message:
            blocked += f" ({drain.blocked_message})"
    elapsed = (now - (m.phase_since or now)).total_seconds()
    if elapsed >= m.drain_timeout_seconds:
        message = (
            f"core Node {node} still has {left} pods after {m.drain_timeout_seconds}s of "
            f"draining{'; ' + blocked if blocked else ''}; eviction is never forced, still "
            "retrying (set desiredPowerState On to cancel)"
        )
        reason = Reason.DRAIN_TIMEOUT
    elif blocked:
        message, reason = f"{blocked}; {left} pods left on core Node {node}", Reason.DRAIN_BLOCKED
    else:
        message = f"draining core Node {node}: {left} pods left"
        effects = (
            *keep_going,
            _condition(ConditionType.DRAINING, True, Reason.DRAINING, message),
            Requeue(DRAIN_POLL_SECONDS),
        )
        return Decision(Phase.DRAINING, Reason.DRAINING, message, effects, m.operation)
    effects = (
        *keep_going,
        _condition(ConditionType.DRAINING, False, reason, message),
        Event(EventType.WARNING, reason, message),
        Requeue(DRAIN_BLOCKED_POLL_SECONDS),
    )
    return Decision(Phase.DRAINING, reason, message, effects, m.operation)


def _in_action(m: MachineState, obs: Observations, now: datetime) -> Decision:
    """PoweringOn, PoweringOff, Provisioning, Deprovisioning: one power action in flight."""
    op = m.operation
    if op is None or ACTION_PHASE.get(op.action) is not m.phase:
        return _act_on_intent(m, obs, now, f"status has no {PHASE_ACTION[m.phase]} operation")
    if op.result is OperationResult.RUNNING:
        return _running(m, obs, now, op)
    if op.result is OperationResult.FAILED:
        return _retry_pending(m, obs, now, op)
    # Succeeded in status but the phase did not move on: finish the step from the record.
    recorded = ObservedJob(
        op.action,
        op.intent_generation,
        op.attempt,
        JobPhase.SUCCEEDED,
        power_state=op.power_state,
        values=op.values,
    )
    return _succeeded(m, obs, now, op, recorded)


def _running(m: MachineState, obs: Observations, now: datetime, op: Operation) -> Decision:
    job = obs.job if obs.job is not None and op.matches(obs.job) else None
    intent_changed = m.desired is not op.target and not _cleanup(m, op)
    what = f"{op.action} Job (attempt {op.attempt})"
    if job is None:
        if intent_changed:
            return _cancel(m, now, op, "before its Job was created")
        age = (now - op.started).total_seconds()
        timeout = (
            m.shutdown_timeout_seconds
            if op.target is ObservedPowerState.OFF
            else m.boot_timeout_seconds
        )
        if age > timeout:
            message = f"{what} has not been seen for {int(age)}s (timeout {timeout}s)"
            failed = op.finish(OperationResult.FAILED, now, message)
            return _attempt_failed(m, failed, Reason.JOB_LOST, message)
        # Not visible yet (watch lag, or a crash between writing status and creating the
        # Job): ask for it again; the name is deterministic so this cannot make a second one.
        evidence = op.values.get("os_down_evidence")
        forced = op.values.get("os_down_forced_after")
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            StartJob(
                op.action,
                op.intent_generation,
                op.attempt,
                evidence if isinstance(evidence, str) else "",
                forced if isinstance(forced, int) else 0,
            ),
            Requeue(JOB_POLL_SECONDS),
        )
        return Decision(m.phase, Reason.WAITING_FOR_JOB, f"waiting for {what}", effects, op)
    if job.deleting and job.active:
        # Someone deleted the Job of the attempt in flight (kubectl, a namespace going away):
        # the attempt is over, whatever its pod did. Waiting for it to vanish would read as
        # "not visible yet" and create it again; the retry is a new attempt, held back until
        # this Job is gone.
        if intent_changed:
            return _cancel(m, now, op, "while its Job was being deleted")
        message = f"{what} was deleted before it finished ({job.state.lower()})"
        failed = op.finish(OperationResult.FAILED, now, message)
        return _attempt_failed(m, failed, Reason.JOB_LOST, message)
    if job.state is JobPhase.PENDING and intent_changed:
        return _cancel(m, now, op, "before its pod started")
    if job.state is JobPhase.STUCK:
        # No container ran, so nothing was sent to the machine: the attempt failed, and its Job
        # goes now rather than at its deadline.
        message = f"{what} failed: {job.message}"
        failed = op.finish(OperationResult.FAILED, now, message)
        delete = (DeleteJob(op.action, op.intent_generation, op.attempt),)
        return _attempt_failed(m, failed, Reason.POD_START_FAILED, message, delete)
    if job.active:
        message = f"{what} is {job.state.lower()}"
        if job.message:
            message += f": {job.message}"
        if intent_changed:
            message += f"; desired power state is now {m.desired}, acting on it once it finishes"
        effects = (AcquireLease(), Requeue(JOB_POLL_SECONDS))
        return Decision(m.phase, Reason.WAITING_FOR_JOB, message, effects, op)
    if job.state is JobPhase.SUCCEEDED:
        return _succeeded(m, obs, now, op, job)
    task = f" at task '{job.failed_task}'" if job.failed_task else ""
    message = f"{op.action} playbook failed{task}: {job.message or 'no message'}"
    refused = job.failed_task is not None and outages.credentials_refused(message)
    if refused:
        message = _name_credentials(m, message)
    failed = op.finish(
        OperationResult.FAILED,
        now,
        message,
        failed_task=job.failed_task,
        power_state=job.power_state,
        values=job.values,
    )
    if refused:
        return _credentials_refused(failed, message)
    cause = Reason.BMC_UNAVAILABLE if _outage(failed) else Reason.JOB_FAILED
    return _attempt_failed(m, failed, cause, message)


def _succeeded(
    m: MachineState, obs: Observations, now: datetime, op: Operation, job: ObservedJob
) -> Decision:
    if op.target is ObservedPowerState.OFF and job.values.get("cut_pending") is True:
        return _confirm_os_down(m, obs, now, op, job)
    # "Unknown" from the playbook means it could not tell: treated as not reported.
    reported = job.power_state if job.power_state is not ObservedPowerState.UNKNOWN else None
    target = op.target
    # Exit 0 is not proof: the playbook must report the power state it left the machine in.
    # After power-on an unreported state is tolerated (registration will prove it); after
    # power-off nothing else can prove it, so it must be reported.
    if (reported is not None and reported is not target) or (
        target is ObservedPowerState.OFF and reported is None
    ):
        seen = f"reports power state {reported}" if reported else "did not report a power state"
        message = f"{op.action} playbook succeeded but the machine {seen}, expected {target}"
        failed = op.finish(
            OperationResult.FAILED, now, message, power_state=reported, values=job.values
        )
        return _attempt_failed(m, failed, Reason.POWER_STATE_MISMATCH, message, drifted=True)
    message = f"{op.action} Job (attempt {op.attempt}) succeeded"
    if job.message:
        message += f": {job.message}"
    forced = _forced_power_off(job) if target is ObservedPowerState.OFF else None
    warn_forced: tuple[Effect, ...] = ()
    if forced:
        message += f"; {forced}"
        # The machine is off as asked, but its OS may not have shut down cleanly: worth a warning.
        warn_forced = (Event(EventType.WARNING, Reason.FORCED_POWER_OFF, f"{op.action}: {forced}"),)
    done = op.finish(
        OperationResult.SUCCEEDED, now, message, power_state=reported, values=job.values
    )
    succeeded = _condition(
        ConditionType.POWER_ACTION_SUCCEEDED, True, Reason.JOB_SUCCEEDED, message
    )
    soon: tuple[Effect, ...] = () if m.desired is target else (Requeue(SOON_SECONDS),)
    if target is ObservedPowerState.ON:
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            succeeded,
            Event(EventType.NORMAL, Reason.JOB_SUCCEEDED, message),
            *(soon or (Requeue(BOOT_POLL_SECONDS),)),
        )
        return Decision(
            Phase.BOOTING,
            Reason.JOB_SUCCEEDED,
            message,
            effects,
            done,
            observed_power_state=reported,
        )
    delete_node = obs.node_exists and (
        m.ephemeral or m.node_removal_policy is NodeRemovalPolicy.DELETE
    )
    if _cleanup(m, op):
        # The clone that never joined is gone: the power-on has failed for good.
        text = (
            f"core Node {m.kubernetes_node_name} did not become Ready within "
            f"{m.boot_timeout_seconds}s of power-on; the clone was deprovisioned"
        )
        if forced:
            text += f"; {forced}"
        failed_for_good: tuple[Effect, ...] = (
            *((DeleteCoreNode(),) if obs.node_exists else ()),
            ReleaseLease(),
            Event(EventType.WARNING, Reason.RETRIES_EXHAUSTED, text),
            *warn_forced,
        )
        return Decision(
            Phase.FAILED,
            Reason.REGISTRATION_TIMEOUT,
            text,
            failed_for_good,
            done,
            observed_power_state=ObservedPowerState.OFF,
        )
    effects = (
        *((DeleteCoreNode(),) if delete_node else ()),
        succeeded,
        _condition(ConditionType.REGISTERED, False, Reason.JOB_SUCCEEDED, "machine powered off"),
        _condition(ConditionType.DRIFTED, False, Reason.JOB_SUCCEEDED, "power-off confirmed"),
        ReleaseLease(),
        Event(EventType.NORMAL, Reason.JOB_SUCCEEDED, message),
        *warn_forced,
        *soon,
    )
    return Decision(
        Phase.OFF,
        Reason.JOB_SUCCEEDED,
        message,
        effects,
        done,
        observed_power_state=ObservedPowerState.OFF,
    )


def _confirm_os_down(
    m: MachineState, obs: Observations, now: datetime, op: Operation, job: ObservedJob
) -> Decision:
    """The power-off Job delivered the OS shutdown, saw the probe go silent and left the power
    on (`cut_pending`: nothing measures the draw). Silence alone is no proof that the OS is
    down, so the power is cut (by the next attempt, given the evidence) only once the kubelet
    has stopped renewing its Lease; one still renewing `shutdown_timeout_seconds` after the Job
    ended is a running OS."""
    said = str(job.values.get("evidence") or "the shutdown command was delivered").rstrip(". ")
    done = op
    if op.result is not OperationResult.SUCCEEDED:
        text = f"{op.action} Job (attempt {op.attempt}) left the power on: {said}"
        done = op.finish(
            OperationResult.SUCCEEDED, now, text, power_state=job.power_state, values=job.values
        )
    if m.desired is not op.target:
        why = f"desired power state changed to {m.desired} before the power was cut"
        return _act_on_intent(m, obs, now, why)
    node, heartbeat = m.kubernetes_node_name, obs.kubelet
    if heartbeat is None or heartbeat.renewed is None:
        seen = f"core Node {node} has no kubelet Lease (kube-node-lease/{node})"
    else:
        quiet = int((now - heartbeat.renewed).total_seconds())
        seen = (
            f"the kubelet of core Node {node} last renewed its Lease at "
            f"{heartbeat.renewed:%H:%M:%S} UTC ({quiet} s ago)"
        )
    if heartbeat is None or heartbeat.stopped(now):
        evidence = f"{said}; {seen}"
        message = f"{evidence}: the OS is down, cutting the power"
        return _start(
            m, now, op.action, Reason.OS_DOWN_CONFIRMED, message,
            generation=op.intent_generation, os_down=(evidence, 0),
        )  # fmt: skip
    waited = (now - (done.finished or now)).total_seconds()
    if waited < m.shutdown_timeout_seconds:
        message = f"{said}; {seen}: waiting for it to stop before the power is cut"
        assert heartbeat.renewed is not None  # stopped() is True without a renewal
        until = (heartbeat.renewed - now).total_seconds() + heartbeat.duration_seconds
        effects: tuple[Effect, ...] = (
            AcquireLease(),
            Event(EventType.NORMAL, Reason.WAITING_FOR_HEARTBEAT, message),
            Requeue(min(JOB_POLL_SECONDS, max(SOON_SECONDS, until + SOON_SECONDS))),
        )
        return Decision(m.phase, Reason.WAITING_FOR_HEARTBEAT, message, effects, done)
    running = (
        f"{said}; but {seen}, {int(waited)} s after the probe went silent: the OS is running "
        "(check that the probe watches a port only the running OS answers on)"
    )
    if m.force_power_off:
        message = f"{running}; force is set: cutting the power"
        return _start(
            m, now, op.action, Reason.OS_DOWN_CONFIRMED, message,
            generation=op.intent_generation,
            os_down=(running, m.shutdown_timeout_seconds),
        )  # fmt: skip
    message = f"{running}; the power stays on (force is false)"
    failed = done.finish(OperationResult.FAILED, now, message, values=done.values)
    return _attempt_failed(m, failed, Reason.OS_STILL_RUNNING, message)


def _forced_power_off(job: ObservedJob) -> str | None:
    """What a power-off Job's `forced_after_seconds` value (the seconds the OS was given before
    the power was forced off; absent after a clean shutdown) means, for messages."""
    seconds = job.values.get("forced_after_seconds")
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return None
    reason = job.values.get("forced_reason")
    if isinstance(reason, str) and reason:
        # The role says what was missing (a plug: no shutdown delivered, no meter): say that,
        # not a shutdown that may never have been sent.
        return (
            f"the power was cut without evidence that the OS went down, {seconds} s after the "
            f"shutdown was asked for ({reason})"
        )
    if seconds <= 0:
        return "the machine was powered off hard (no graceful shutdown possible)"
    return f"the OS did not shut down within {seconds} s and the machine was powered off hard"


def _retry_pending(m: MachineState, obs: Observations, now: datetime, op: Operation) -> Decision:
    if m.desired is not op.target and not _cleanup(m, op):
        return _act_on_intent(
            m,
            obs,
            now,
            f"desired power state changed to {m.desired}; {op.action} retries abandoned",
        )
    if _refused(op):
        # A refusal recorded before refusals ended the action (an upgraded operator).
        return _credentials_refused(op, op.message)
    allowed = m.max_retries + 1
    if op.attempt >= allowed and not _rides_out(m, op, now):
        # maxRetries was lowered while a retry was pending.
        message = f"{op.message} (gave up after {op.attempt} attempts)"
        effects: tuple[Effect, ...] = (
            ReleaseLease(),
            Event(EventType.WARNING, Reason.RETRIES_EXHAUSTED, message),
        )
        return Decision(Phase.FAILED, Reason.RETRIES_EXHAUSTED, message, effects, op)
    due = (op.finished or op.started) + timedelta(seconds=retry_backoff(op.attempt))
    if now < due:
        remaining = (due - now).total_seconds()
        message = f"{op.message}; retrying in {int(remaining)}s ({_attempt_note(m, op, now)})"
        effects = (AcquireLease(), Requeue(max(SOON_SECONDS, remaining)))
        reason = Reason.BMC_UNAVAILABLE if _outage(op) else Reason.RETRY_SCHEDULED
        return Decision(m.phase, reason, message, effects, op)
    message = f"retrying {op.action} ({_attempt_note(m, op, now)}) after: {op.message}"
    return _start(m, now, op.action, Reason.RETRYING, message, generation=op.intent_generation)


def _attempt_failed(
    m: MachineState,
    failed: Operation,
    cause: Reason,
    message: str,
    extra: tuple[Effect, ...] = (),
    *,
    drifted: bool = False,
) -> Decision:
    conditions: tuple[Effect, ...] = (
        _condition(ConditionType.POWER_ACTION_SUCCEEDED, False, cause, message),
        *((_condition(ConditionType.DRIFTED, True, cause, message),) if drifted else ()),
        *extra,
    )
    allowed = m.max_retries + 1
    now = failed.finished or failed.started
    if failed.attempt < allowed or _rides_out(m, failed, now):
        delay = retry_backoff(failed.attempt)
        text = f"{message}; retrying in {delay}s ({_attempt_note(m, failed, now)})"
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


def _name_credentials(m: MachineState, message: str) -> str:
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


def _credentials_refused(failed: Operation, message: str) -> Decision:
    """The endpoint refused the credentials: Failed after this attempt, whatever `maxRetries`
    says (each retry would be refused the same way, minutes apart)."""
    effects: tuple[Effect, ...] = (
        _condition(
            ConditionType.POWER_ACTION_SUCCEEDED, False, Reason.AUTHENTICATION_FAILED, message
        ),
        ReleaseLease(),
        Event(EventType.WARNING, Reason.AUTHENTICATION_FAILED, message),
    )
    return Decision(Phase.FAILED, Reason.AUTHENTICATION_FAILED, message, effects, failed)


def _refused(failed: Operation) -> bool:
    """The attempt's playbook failed because the endpoint refused the credentials."""
    return failed.failed_task is not None and outages.credentials_refused(failed.message)


def _outage(failed: Operation) -> bool:
    """The attempt's playbook failed because the BMC (or hypervisor API) did not answer."""
    return failed.failed_task is not None and outages.unavailable(failed.message)


def _rides_out(m: MachineState, failed: Operation, now: datetime) -> bool:
    """A failed attempt that met an unavailable BMC is retried without spending maxRetries
    while the action is young enough (`planning.machine.outages`)."""
    return _outage(failed) and outages.rides_out(m.phase_since, now)


def _attempt_note(m: MachineState, failed: Operation, now: datetime) -> str:
    allowed = m.max_retries + 1
    if failed.attempt < allowed or not _rides_out(m, failed, now):
        return f"attempt {failed.attempt + 1} of {allowed}"
    return f"attempt {failed.attempt + 1}; a BMC outage does not use up maxRetries"


def _cancel(m: MachineState, now: datetime, op: Operation, when: str) -> Decision:
    """The intent changed before the action's container started: delete its Job.

    The new intent is acted on at the next reconcile, once the Job is gone; the machine's real
    state is uncertain after an earlier attempt, so the new intent is then carried out in full
    (a power-off of a machine that is already off is harmless and confirms it).
    """
    message = f"desired power state changed to {m.desired} {when}; {op.action} cancelled"
    cancelled = op.finish(OperationResult.FAILED, now, f"cancelled: {message}")
    effects: tuple[Effect, ...] = (
        DeleteJob(op.action, op.intent_generation, op.attempt),
        AcquireLease(),
        Event(EventType.NORMAL, Reason.ACTION_CANCELLED, message),
        Requeue(SOON_SECONDS),
    )
    return Decision(m.phase, Reason.ACTION_CANCELLED, message, effects, cancelled)


# --- building blocks ------------------------------------------------------------------------


def _act_on_intent(m: MachineState, obs: Observations, now: datetime, why: str) -> Decision:
    """Drive the machine toward `desired` from a state we cannot vouch for."""
    if m.desired is ObservedPowerState.ON:
        if obs.node_exists and obs.node_ready:
            return _registered(m, f"{why}; core Node {m.kubernetes_node_name} is Ready")
        return _power_on(m, now, Reason.POWER_ON_REQUESTED, why)
    return _power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)


def _power_on(
    m: MachineState, now: datetime, reason: Reason, why: str, extra: tuple[Effect, ...] = ()
) -> Decision:
    return _start(m, now, m.on_action, reason, f"{why}; starting {m.on_action}", extra=extra)


def _power_off(
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
            Drain(),
            _condition(ConditionType.DRAINING, True, Reason.DRAINING, message),
            Event(EventType.NORMAL, reason, message),
            Requeue(DRAIN_POLL_SECONDS),
        )
        return Decision(Phase.DRAINING, reason, message, effects, m.operation)
    message = f"{why}; core Node {node} not Ready, nothing to drain; starting {m.off_action}"
    return _start(m, now, m.off_action, reason, message, extra=extra)


def _start(
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


def _registered(m: MachineState, message: str) -> Decision:
    effects: tuple[Effect, ...] = (
        ApplyNodeMetadata(),
        Uncordon(),
        _condition(ConditionType.REGISTERED, True, Reason.NODE_REGISTERED, message),
        _condition(ConditionType.DRIFTED, False, Reason.NODE_REGISTERED, message),
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


def _cleanup(m: MachineState, op: Operation) -> bool:
    """Whether `op` is the deprovision of a clone that never joined: an off-action started for
    an On intent of the same generation (a new intent would carry a new generation)."""
    return (
        m.ephemeral
        and op.action is Action.DEPROVISION
        and m.desired is ObservedPowerState.ON
        and op.intent_generation == m.intent_generation
    )


def _observed_on(m: MachineState, obs: Observations, now: datetime) -> bool:
    settled = m.phase_since is None or (now - m.phase_since).total_seconds() >= (
        DRIFT_GRACE_SECONDS
    )
    return (obs.node_ready and settled) or (
        obs.power_state is ObservedPowerState.ON and _fresh(m, obs)
    )


def _observed_off(m: MachineState, obs: Observations) -> bool:
    return obs.power_state is ObservedPowerState.OFF and _fresh(m, obs)


def _fresh(m: MachineState, obs: Observations) -> bool:
    """A health result counts only if taken after the machine entered its current phase."""
    seen = obs.power_state_observed_at
    return seen is not None and (m.phase_since is None or seen > m.phase_since)


def _release_if_held(obs: Observations) -> tuple[Effect, ...]:
    return (ReleaseLease(),) if obs.lease is LeaseState.HELD_BY_ME else ()


def _condition(kind: ConditionType, status: bool, reason: str, message: str) -> SetCondition:
    value = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    return SetCondition(kind, value, reason, message)


_HANDLERS: Mapping[Phase, Callable[[MachineState, Observations, datetime], Decision]] = {
    Phase.OFF: _off,
    Phase.POWERING_ON: _in_action,
    Phase.PROVISIONING: _in_action,
    Phase.BOOTING: _booting,
    Phase.READY: _ready,
    Phase.DRAINING: _draining,
    Phase.POWERING_OFF: _in_action,
    Phase.DEPROVISIONING: _in_action,
    Phase.FAILED: _failed,
}
