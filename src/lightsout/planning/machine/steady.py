"""The power state machine's phases at rest: Off, Ready and Failed, with drift (a machine found in
the other power state by a health check) and its adoption. The transition table is `fsm`'s.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from lightsout.planning.machine.common import (
    _TRANSIENT_REASONS,
    SOON_SECONDS,
    Reason,
    act_on_intent,
    fresh,
    node_registered,
    observed_off,
    observed_on,
    power_off,
    power_on,
    refused,
    release_if_held,
    set_condition,
)
from lightsout.planning.machine.effects import (
    AcquireLease,
    ApplyNodeMetadata,
    Decision,
    DeleteCoreNode,
    Effect,
    Event,
    Requeue,
    SetDesiredPowerState,
)
from lightsout.planning.types import (
    ConditionType,
    EventType,
    MachineState,
    NodeRemovalPolicy,
    Observations,
    ObservedPowerState,
    Phase,
)


def handle_off(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.desired is ObservedPowerState.ON:
        if m.reason == Reason.DRIFT_ADOPTED:
            return adopted_on(m, obs)
        return power_on(m, now, Reason.POWER_ON_REQUESTED, "desired power state is On")
    if observed_on(m, obs, now):
        if obs.power_state is ObservedPowerState.ON and fresh(m, obs):
            seen = "the health check found the machine powered On"
        else:
            seen = f"core Node {m.kubernetes_node_name} is Ready"
        message = f"{seen} although its desired power state is Off (phase {m.phase})"
        return drift(m, obs, now, message, ObservedPowerState.ON)
    return steady(m, obs, Reason.OBSERVED_OFF, "machine is off")


def handle_ready(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.desired is ObservedPowerState.OFF:
        if m.reason == Reason.DRIFT_ADOPTED:
            return adopted_off(m, obs, now)
        return power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, "desired power state is Off")
    if observed_off(m, obs):
        message = (
            "the health check found the machine powered Off although its desired power state "
            f"is On (phase {m.phase})"
        )
        return drift(m, obs, now, message, ObservedPowerState.OFF)
    node = m.kubernetes_node_name
    if not (obs.node_exists and obs.node_ready):
        message = f"core Node {node} is {'not Ready' if obs.node_exists else 'missing'}"
        effects: tuple[Effect, ...] = (
            set_condition(ConditionType.REGISTERED, False, Reason.NODE_NOT_READY, message),
            Event(EventType.WARNING, Reason.NODE_NOT_READY, message),
            *release_if_held(obs),
        )
        return Decision(Phase.READY, Reason.NODE_NOT_READY, message, effects, m.operation)
    if m.reason in (Reason.NODE_NOT_READY, Reason.DRIFT_DETECTED):
        return back_to_normal(m, obs, f"core Node {node} is Ready again")
    metadata: tuple[Effect, ...] = () if obs.node_metadata_applied else (ApplyNodeMetadata(),)
    return steady(m, obs, Reason.NODE_REGISTERED, f"core Node {node} is Ready", metadata)


def handle_failed(m: MachineState, obs: Observations, now: datetime) -> Decision:
    if m.reason == Reason.DRIFT_ADOPTED:
        if m.desired is ObservedPowerState.ON:
            return adopted_on(m, obs)
        return adopted_off(m, obs, now)
    op = m.operation
    if op is None or m.intent_generation > op.intent_generation:
        decision = act_on_intent(
            m, obs, now, f"new intent (generation {m.intent_generation}) after a failure"
        )
        # Starting over: corrections made before the failure no longer count.
        return replace(decision, drift_corrections=())
    if m.desired is ObservedPowerState.ON and obs.node_exists and obs.node_ready:
        return node_registered(m, f"core Node {m.kubernetes_node_name} became Ready; recovered")
    if m.adopt_drift:
        # A machine left Failed (corrections exhausted, retries spent) is adopted in the state
        # a fresh health check finds it in once the Group's policy says Adopt.
        if (
            m.desired is ObservedPowerState.OFF
            and obs.power_state is ObservedPowerState.ON
            and fresh(m, obs)
        ):
            message = "the health check found the machine powered On while Failed"
            return drift(m, obs, now, message, ObservedPowerState.ON)
        if m.desired is ObservedPowerState.ON and observed_off(m, obs):
            message = "the health check found the machine powered Off while Failed"
            return drift(m, obs, now, message, ObservedPowerState.OFF)
    hint = "gave up; any change to the Node's spec starts over"
    reason = Reason.AUTHENTICATION_FAILED if refused(op) else Reason.RETRIES_EXHAUSTED
    return steady(m, obs, reason, op.message or hint)


def steady(
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
        effects = (*effects, set_condition(ConditionType.DRIFTED, False, reason, message))
    return Decision(m.phase, reason, message, (*effects, *release_if_held(obs)), m.operation)


def back_to_normal(m: MachineState, obs: Observations, message: str) -> Decision:
    effects: tuple[Effect, ...] = (
        set_condition(ConditionType.REGISTERED, True, Reason.NODE_REGISTERED, message),
        set_condition(ConditionType.DRIFTED, False, Reason.DRIFT_RESOLVED, message),
        Event(EventType.NORMAL, Reason.NODE_REGISTERED, message),
        *release_if_held(obs),
    )
    return Decision(Phase.READY, Reason.NODE_REGISTERED, message, effects, m.operation)


def drift(
    m: MachineState, obs: Observations, now: datetime, message: str, seen: ObservedPowerState
) -> Decision:
    noticed: tuple[Effect, ...] = (
        set_condition(ConditionType.DRIFTED, True, Reason.DRIFT_DETECTED, message),
        Event(EventType.WARNING, Reason.DRIFT_DETECTED, message),
    )
    if m.adopt_drift:
        # The intent follows the machine: the next pass, seeing the new desiredPowerState with
        # this reason, takes the machine as it is (no power order; see adopted_on/handle_off).
        text = f"{message}; adopting it (driftPolicy Adopt): desiredPowerState set to {seen}"
        effects: tuple[Effect, ...] = (
            *noticed,
            Event(EventType.NORMAL, Reason.DRIFT_ADOPTED, text),
            SetDesiredPowerState(seen),
            *release_if_held(obs),
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
                *release_if_held(obs),
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
            decision = power_on(m, now, Reason.DRIFT_CORRECTION, fix, noticed)
        else:
            decision = power_off(m, obs, now, Reason.DRIFT_CORRECTION, fix, extra=noticed)
        return replace(decision, observed_power_state=seen, drift_corrections=(*recent, now))
    effects = (*noticed, *release_if_held(obs))
    return Decision(
        m.phase, Reason.DRIFT_DETECTED, message, effects, m.operation, observed_power_state=seen
    )


def adopted_on(m: MachineState, obs: Observations) -> Decision:
    """desiredPowerState was set On because the machine was found On: no power-on is sent;
    it boots (or is Ready) like a machine found running, with the usual boot timeout."""
    node = m.kubernetes_node_name
    if obs.node_exists and obs.node_ready:
        return node_registered(m, f"adopted the machine found On; core Node {node} is Ready")
    message = f"adopted the machine found On (no power-on sent); waiting for core Node {node}"
    effects: tuple[Effect, ...] = (
        AcquireLease(),
        set_condition(ConditionType.DRIFTED, False, Reason.DRIFT_ADOPTED, message),
        Event(EventType.NORMAL, Reason.WAITING_FOR_NODE, message),
        Requeue(SOON_SECONDS),
    )
    return Decision(Phase.BOOTING, Reason.WAITING_FOR_NODE, message, effects, m.operation)


def adopted_off(m: MachineState, obs: Observations, now: datetime) -> Decision:
    """desiredPowerState was set Off because the machine was found Off: no power-off is sent
    (a clone is still deprovisioned: a VM Lights-Out made must not be left behind)."""
    if m.ephemeral:
        why = "adopted the clone found Off: deprovisioning it"
        return power_off(m, obs, now, Reason.POWER_OFF_REQUESTED, why)
    message = "adopted the machine found Off (no power-off sent)"
    delete_node = obs.node_exists and m.node_removal_policy is NodeRemovalPolicy.DELETE
    effects: tuple[Effect, ...] = (
        *((DeleteCoreNode(),) if delete_node else ()),
        set_condition(ConditionType.REGISTERED, False, Reason.OBSERVED_OFF, message),
        set_condition(ConditionType.DRIFTED, False, Reason.DRIFT_ADOPTED, message),
        *release_if_held(obs),
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
