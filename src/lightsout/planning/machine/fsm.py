"""The power state machine: one pure transition function, `decide(machine, obs, now)`.

This module holds the transition table below, `decide` and what applies to every phase (the
Lease, Job adoption, the references a Job needs, one Job at a time); the phases' own handlers
are in `steady` (Off, Ready, Failed, drift) and `transitions` (the phases with an action in
flight, Booting and Draining), and what they share (reasons, timings, starting an action,
counting a failed attempt) in `common`.

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
from datetime import datetime

from lightsout.planning.learning import learn
from lightsout.planning.machine.common import (
    JOB_POLL_SECONDS,
    LEASE_EXPIRY_MARGIN_SECONDS,
    LEASE_RETRY_SECONDS,
    SOON_SECONDS,
    Reason,
    attempt_failed,
    release_if_held,
    set_condition,
)
from lightsout.planning.machine.effects import (
    AcquireLease,
    Decision,
    DeleteCoreNode,
    Effect,
    Event,
    PrepareCoreNode,
    Requeue,
    SetDesiredPowerState,
    StartJob,
)
from lightsout.planning.machine.steady import (
    handle_failed,
    handle_off,
    handle_ready,
)
from lightsout.planning.machine.transitions import (
    handle_booting,
    handle_draining,
    handle_in_action,
)
from lightsout.planning.types import (
    ACTION_PHASE,
    PHASE_ACTION,
    ConditionType,
    EventType,
    LeaseState,
    MachineState,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)
from lightsout.state.references import ReferenceReason


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
        ok = set_condition(
            ConditionType.REFERENCES_RESOLVED, True, Reason.REFERENCES_RESOLVED, text
        )
        return replace(decision, effects=(*decision.effects, ok))
    message = f"{problem.message}; {start.action} waits for it (no Job started, no attempt spent)"
    acting = m.phase in PHASE_ACTION or m.phase is Phase.DRAINING
    effects: tuple[Effect, ...] = (
        *((AcquireLease(),) if acting else release_if_held(obs)),
        set_condition(ConditionType.REFERENCES_RESOLVED, False, problem.reason, message),
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
    outcome = attempt_failed(machine, failed, Reason.CORE_NODE_FAILED, text + message)
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
    outcome = attempt_failed(machine, failed, Reason.ADDRESS_POOL_EXHAUSTED, message)
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


_HANDLERS: Mapping[Phase, Callable[[MachineState, Observations, datetime], Decision]] = {
    Phase.OFF: handle_off,
    Phase.POWERING_ON: handle_in_action,
    Phase.PROVISIONING: handle_in_action,
    Phase.BOOTING: handle_booting,
    Phase.READY: handle_ready,
    Phase.DRAINING: handle_draining,
    Phase.POWERING_OFF: handle_in_action,
    Phase.DEPROVISIONING: handle_in_action,
    Phase.FAILED: handle_failed,
}
