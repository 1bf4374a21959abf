"""The one effect interpreter: a state machine's `Decision` carried out through a `MachinePort`.

The operator's reconcile pass (`execution.reconcile`, with `actuator.KubeMachine`) and the
replay (`lightsout.simulate`, with `memory.MemoryMachine`) both call `carry_out`; nothing else
turns effects into actions. The order is the contract of `planning.machine.effects`:

1. a Lease held by another operator: nothing (its holder owns the machine's status too);
2. `AcquireLease`: take or renew it, and stop when another holder won;
3. a provision: lease the clone's address first (none free: the attempt fails, no clone);
4. `PrepareCoreNode`: the core Node with its startup taint (refused: the attempt fails, no
   power-on);
5. the status (a lost race stops the pass: the newer object brings another);
6. an event for every phase change, and what the old phase held is freed (`settle`);
7. the other effects, in the decision's order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from lightsout.actuation.port import MachinePort
from lightsout.planning.energy.account import is_powered
from lightsout.planning.machine import fsm
from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import (
    AcquireLease,
    ApplyNodeMetadata,
    Cordon,
    Decision,
    DeleteCoreNode,
    DeleteJob,
    Drain,
    Event,
    PrepareCoreNode,
    ReleaseLease,
    SetDesiredPowerState,
    StartJob,
    Uncordon,
)
from lightsout.planning.types import Action, DrainStatus, EventType, MachineState

#: Seconds before deciding again after a status write lost a race (its watch event usually
#: comes first).
CONFLICT_RETRY = 0.5
#: Seconds before trying again to take a Lease another writer won.
LEASE_RETRY = 2.0
#: Seconds before looking again at a machine whose Lease another holder has, when the state
#: machine named no time (the holder's releasing the Lease also wakes it).
HELD_ELSEWHERE_RETRY = 30.0
#: The shortest wait before the next pass.
MIN_REQUEUE = 0.2


@dataclass(frozen=True)
class Carried:
    """What carrying out one decision came to."""

    #: Seconds until the machine's next pass if nothing wakes it sooner (None: only a change).
    requeue_after: float | None = None
    #: What a `Drain` left and what blocked it (None: no drain this pass).
    drain: DrainStatus | None = None
    #: The decision as carried out (a failed address or core Node step replaces it).
    decision: Decision | None = None


def carry_out(
    port: MachinePort, machine: MachineState, decision: Decision, now: dt.datetime
) -> Carried:
    """Carry out `decision` for `machine` through `port`, in the order above."""
    if decision.reason == Reason.LEASE_HELD_ELSEWHERE:
        # What we read may be stale, and writing it back would hide an action in flight (the
        # planner would power on a second machine).
        return Carried(max(decision.requeue_after or HELD_ELSEWHERE_RETRY, MIN_REQUEUE))
    holding = False
    if any(isinstance(e, AcquireLease) for e in decision.effects):
        if not port.acquire_lease(now):
            return Carried(LEASE_RETRY)
        holding = True
    # Before the core Node and the status that names the provision's Job: with no free
    # address, no clone (and no core Node waiting for one).
    provision = any(
        isinstance(e, StartJob) and e.action is Action.PROVISION for e in decision.effects
    )
    if provision and (problem := port.allocate_address()) is not None:
        decision = _failed_instead(
            decision, fsm.address_pool_exhausted(machine, decision, problem, now)
        )
    # Before the status that names the on-action's Job: if the Node cannot be created or
    # tainted, that status must say so, and the Job must not be created.
    prepare = any(isinstance(e, PrepareCoreNode) for e in decision.effects)
    if prepare and (problem := port.prepare_core_node()) is not None:
        decision = _failed_instead(decision, fsm.core_node_failed(machine, decision, problem, now))
    previous = port.phase
    if not port.write_status(machine, decision, now):
        # The machine changed since this pass read it (a new intent, another writer, our own
        # last write not seen yet): decide again from the newer object.
        return Carried(CONFLICT_RETRY, decision=decision)
    if previous != decision.phase and not any(isinstance(e, Event) for e in decision.effects):
        # Every phase transition is an event, even when the state machine had nothing to add.
        message = f"{decision.phase}: {decision.message}"
        port.post_event(Event(EventType.NORMAL, decision.reason, message))
    port.settle(previous, str(decision.phase))
    drained: DrainStatus | None = None
    for effect in decision.effects:
        if isinstance(effect, ReleaseLease):
            port.release_lease(now)
            holding = False
        elif isinstance(effect, Drain):
            drained = port.drain(effect.force)
        else:
            _one(port, effect)
    delay = decision.requeue_after
    if holding and (renew := port.renew_lease_every) is not None:
        # Renew well before the Lease expires, so no other operator takes over mid-action.
        delay = min(delay or float("inf"), renew)
    return Carried(
        None if delay is None else max(delay, MIN_REQUEUE), drain=drained, decision=decision
    )


def _failed_instead(decided: Decision, failed: Decision) -> Decision:
    """The failed attempt's decision, keeping what the pass read that the failure does not
    change: a new health check's record and measurements, and the energy checkpoint while the
    machine is powered in both phases (the same rate; else the next pass checkpoints)."""
    same_rate = is_powered(decided.phase) == is_powered(failed.phase)
    return replace(
        failed,
        energy=decided.energy if same_rate else None,
        health_check=decided.health_check,
        measured=decided.measured,
    )


def _one(port: MachinePort, effect: object) -> None:
    """One effect without a result (the Lease, the drain, conditions and requeues are the
    caller's: conditions are part of the status, a requeue is its return value)."""
    if isinstance(effect, StartJob):
        port.start_job(effect)
    elif isinstance(effect, DeleteJob):
        port.delete_job(effect)
    elif isinstance(effect, Cordon | Uncordon):
        port.cordon(isinstance(effect, Cordon))
    elif isinstance(effect, ApplyNodeMetadata):
        port.apply_metadata()
    elif isinstance(effect, DeleteCoreNode):
        port.delete_core_node(effect.unregistered_only)
    elif isinstance(effect, SetDesiredPowerState):
        port.set_desired(effect.state)
    elif isinstance(effect, Event):
        port.post_event(effect)
