"""The power state machine's phases with an action in flight: PoweringOn, PoweringOff,
Provisioning and Deprovisioning (their Job: running, succeeded, failed, lost, retried,
cancelled), Booting (waiting for the core Node) and Draining. The transition table is `fsm`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from lightsout.planning.machine import outages
from lightsout.planning.machine.common import (
    BOOT_POLL_SECONDS,
    DRAIN_BLOCKED_POLL_SECONDS,
    DRAIN_POLL_SECONDS,
    JOB_POLL_SECONDS,
    SOON_SECONDS,
    Reason,
    act_on_intent,
    attempt_failed,
    attempt_note,
    cleanup,
    credentials_refused,
    drain_forced,
    name_credentials,
    node_registered,
    outage,
    power_off,
    refused,
    retry_backoff,
    rides_out,
    set_condition,
    start_action,
)
from lightsout.planning.machine.effects import (
    AcquireLease,
    Cordon,
    Decision,
    DeleteCoreNode,
    DeleteJob,
    Drain,
    Effect,
    Event,
    ReleaseLease,
    Requeue,
    StartJob,
    Uncordon,
)
from lightsout.planning.types import (
    ACTION_PHASE,
    PHASE_ACTION,
    ConditionType,
    EventType,
    JobPhase,
    MachineState,
    NodeRemovalPolicy,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)


def handle_booting(m: MachineState, obs: Observations, now: datetime) -> Decision:
    node = m.kubernetes_node_name
    if m.desired is ObservedPowerState.OFF:
        why = "desired power state changed to Off while booting"
        return power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)
    if obs.node_exists and obs.node_ready:
        return node_registered(m, f"core Node {node} registered and Ready")
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
            set_condition(ConditionType.REGISTERED, False, reason, message),
            Requeue(max(SOON_SECONDS, min(BOOT_POLL_SECONDS, remaining))),
        )
        return Decision(Phase.BOOTING, Reason.WAITING_FOR_NODE, message, effects, op)
    message = f"core Node {node} did not become Ready within {m.boot_timeout_seconds}s of power-on"
    if op is None or op.target is not ObservedPowerState.ON:
        # Booting without a power-on on record (entered from Unknown): count it as attempt 0
        # so the first real power-on is attempt 1.
        op = Operation(m.on_action, m.intent_generation, 0, started=since)
    failed = op.finish(OperationResult.FAILED, now, message, power_state=op.power_state)
    registered = set_condition(
        ConditionType.REGISTERED, False, Reason.REGISTRATION_TIMEOUT, message
    )
    if m.ephemeral and failed.attempt >= m.max_retries + 1:
        # The last attempt of a clone that never joined: it is destroyed (with its ISO, and its
        # token and address released) before the machine is Failed, so nothing is left behind.
        text = f"{message} (gave up after {failed.attempt} attempts); deprovisioning the clone"
        failing = set_condition(
            ConditionType.POWER_ACTION_SUCCEEDED, False, Reason.REGISTRATION_TIMEOUT, text
        )
        return start_action(
            m, now, m.off_action, Reason.REGISTRATION_TIMEOUT, text, extra=(registered, failing)
        )
    return attempt_failed(m, failed, Reason.REGISTRATION_TIMEOUT, message, (registered,))


def handle_draining(m: MachineState, obs: Observations, now: datetime) -> Decision:
    node = m.kubernetes_node_name
    if m.desired is ObservedPowerState.ON:
        message = "desired power state changed to On while draining; uncordoning"
        effects: tuple[Effect, ...] = (
            Uncordon(),
            set_condition(ConditionType.DRAINING, False, Reason.DRAIN_CANCELLED, message),
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
        done = set_condition(ConditionType.DRAINING, False, Reason.DRAINED, message)
        return start_action(m, now, m.off_action, Reason.DRAINED, message, extra=(done,))
    force = drain_forced(m, now)
    keep_going: tuple[Effect, ...] = (
        AcquireLease(),
        *(() if obs.node_cordoned else (Cordon(),)),
        Drain(force=force),
    )
    left = "an unknown number of" if drain is None else str(drain.pods_remaining)
    blocked = ""
    if drain is not None and drain.blocked_by:
        blocked = f"eviction blocked by PodDisruptionBudget {drain.blocked_by}"
        if drain.blocked_message:
            blocked += f" ({drain.blocked_message})"
    elapsed = (now - (m.phase_since or now)).total_seconds()
    if force and blocked:
        message = (
            f"{blocked}; past the drain deadline the UPS's battery sets, so the {left} pods "
            f"left on core Node {node} are deleted (each with its grace period)"
        )
        reason = Reason.DRAIN_FORCED
    elif elapsed >= m.drain_timeout_seconds:
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
            set_condition(ConditionType.DRAINING, True, Reason.DRAINING, message),
            Requeue(DRAIN_POLL_SECONDS),
        )
        return Decision(Phase.DRAINING, Reason.DRAINING, message, effects, m.operation)
    effects = (
        *keep_going,
        set_condition(ConditionType.DRAINING, False, reason, message),
        Event(EventType.WARNING, reason, message),
        Requeue(DRAIN_BLOCKED_POLL_SECONDS),
    )
    return Decision(Phase.DRAINING, reason, message, effects, m.operation)


def handle_in_action(m: MachineState, obs: Observations, now: datetime) -> Decision:
    """PoweringOn, PoweringOff, Provisioning, Deprovisioning: one power action in flight."""
    op = m.operation
    if op is None or ACTION_PHASE.get(op.action) is not m.phase:
        return act_on_intent(m, obs, now, f"status has no {PHASE_ACTION[m.phase]} operation")
    if op.result is OperationResult.RUNNING:
        return running(m, obs, now, op)
    if op.result is OperationResult.FAILED:
        return retry_pending(m, obs, now, op)
    # Succeeded in status but the phase did not move on: finish the step from the record.
    recorded = ObservedJob(
        op.action,
        op.intent_generation,
        op.attempt,
        JobPhase.SUCCEEDED,
        power_state=op.power_state,
        values=op.values,
    )
    return succeeded(m, obs, now, op, recorded)


def running(m: MachineState, obs: Observations, now: datetime, op: Operation) -> Decision:
    job = obs.job if obs.job is not None and op.matches(obs.job) else None
    intent_changed = m.desired is not op.target and not cleanup(m, op)
    what = f"{op.action} Job (attempt {op.attempt})"
    if job is None:
        if intent_changed:
            return cancel(m, now, op, "before its Job was created")
        age = (now - op.started).total_seconds()
        timeout = (
            m.shutdown_timeout_seconds
            if op.target is ObservedPowerState.OFF
            else m.boot_timeout_seconds
        )
        if age > timeout:
            message = f"{what} has not been seen for {int(age)}s (timeout {timeout}s)"
            failed = op.finish(OperationResult.FAILED, now, message)
            return attempt_failed(m, failed, Reason.JOB_LOST, message)
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
            return cancel(m, now, op, "while its Job was being deleted")
        message = f"{what} was deleted before it finished ({job.state.lower()})"
        failed = op.finish(OperationResult.FAILED, now, message)
        return attempt_failed(m, failed, Reason.JOB_LOST, message)
    if job.state is JobPhase.PENDING and intent_changed:
        return cancel(m, now, op, "before its pod started")
    if job.state is JobPhase.STUCK:
        # No container ran, so nothing was sent to the machine: the attempt failed, and its Job
        # goes now rather than at its deadline.
        message = f"{what} failed: {job.message}"
        failed = op.finish(OperationResult.FAILED, now, message)
        delete = (DeleteJob(op.action, op.intent_generation, op.attempt),)
        return attempt_failed(m, failed, Reason.POD_START_FAILED, message, delete)
    if job.active:
        message = f"{what} is {job.state.lower()}"
        if job.message:
            message += f": {job.message}"
        if intent_changed:
            message += f"; desired power state is now {m.desired}, acting on it once it finishes"
        effects = (AcquireLease(), Requeue(JOB_POLL_SECONDS))
        return Decision(m.phase, Reason.WAITING_FOR_JOB, message, effects, op)
    if job.state is JobPhase.SUCCEEDED:
        return succeeded(m, obs, now, op, job)
    task = f" at task '{job.failed_task}'" if job.failed_task else ""
    message = f"{op.action} playbook failed{task}: {job.message or 'no message'}"
    refused = job.failed_task is not None and outages.credentials_refused(message)
    if refused:
        message = name_credentials(m, message)
    failed = op.finish(
        OperationResult.FAILED,
        now,
        message,
        failed_task=job.failed_task,
        power_state=job.power_state,
        values=job.values,
    )
    if refused:
        return credentials_refused(failed, message)
    cause = Reason.BMC_UNAVAILABLE if outage(failed) else Reason.JOB_FAILED
    return attempt_failed(m, failed, cause, message)


def succeeded(
    m: MachineState, obs: Observations, now: datetime, op: Operation, job: ObservedJob
) -> Decision:
    if op.target is ObservedPowerState.OFF and job.values.get("cut_pending") is True:
        return confirm_os_down(m, obs, now, op, job)
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
        return attempt_failed(m, failed, Reason.POWER_STATE_MISMATCH, message, drifted=True)
    message = f"{op.action} Job (attempt {op.attempt}) succeeded"
    if job.message:
        message += f": {job.message}"
    forced = forced_power_off(job) if target is ObservedPowerState.OFF else None
    warn_forced: tuple[Effect, ...] = ()
    if forced:
        message += f"; {forced}"
        # The machine is off as asked, but its OS may not have shut down cleanly: worth a warning.
        warn_forced = (Event(EventType.WARNING, Reason.FORCED_POWER_OFF, f"{op.action}: {forced}"),)
    done = op.finish(
        OperationResult.SUCCEEDED, now, message, power_state=reported, values=job.values
    )
    succeeded = set_condition(
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
    if cleanup(m, op):
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
        set_condition(ConditionType.REGISTERED, False, Reason.JOB_SUCCEEDED, "machine powered off"),
        set_condition(ConditionType.DRIFTED, False, Reason.JOB_SUCCEEDED, "power-off confirmed"),
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


def confirm_os_down(
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
        return act_on_intent(m, obs, now, why)
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
        return start_action(
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
        return start_action(
            m, now, op.action, Reason.OS_DOWN_CONFIRMED, message,
            generation=op.intent_generation,
            os_down=(running, m.shutdown_timeout_seconds),
        )  # fmt: skip
    message = f"{running}; the power stays on (force is false)"
    failed = done.finish(OperationResult.FAILED, now, message, values=done.values)
    return attempt_failed(m, failed, Reason.OS_STILL_RUNNING, message)


def forced_power_off(job: ObservedJob) -> str | None:
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


def retry_pending(m: MachineState, obs: Observations, now: datetime, op: Operation) -> Decision:
    if m.desired is not op.target and not cleanup(m, op):
        return act_on_intent(
            m,
            obs,
            now,
            f"desired power state changed to {m.desired}; {op.action} retries abandoned",
        )
    if refused(op):
        # A refusal recorded before refusals ended the action (an upgraded operator).
        return credentials_refused(op, op.message)
    allowed = m.max_retries + 1
    if op.attempt >= allowed and not rides_out(m, op, now):
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
        message = f"{op.message}; retrying in {int(remaining)}s ({attempt_note(m, op, now)})"
        effects = (AcquireLease(), Requeue(max(SOON_SECONDS, remaining)))
        reason = Reason.BMC_UNAVAILABLE if outage(op) else Reason.RETRY_SCHEDULED
        return Decision(m.phase, reason, message, effects, op)
    message = f"retrying {op.action} ({attempt_note(m, op, now)}) after: {op.message}"
    return start_action(
        m, now, op.action, Reason.RETRYING, message, generation=op.intent_generation
    )


def cancel(m: MachineState, now: datetime, op: Operation, when: str) -> Decision:
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
