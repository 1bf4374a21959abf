"""One machine's reconcile pass, decided: the state machine's decision and what the pass read
beside it, for the operator and the replay alike.

The state machine (`fsm.decide`) decides from `Observations`. A pass reads more than that: the
newest health check (judged by `healthjudge.assess`: the `Healthy` condition, a new
`status.lastHealthCheck`, the watts and inspection it reported), the core Node's providerID,
the machine's CPU use, draw and price. `pass_decision` adds what those say to the decision: the
conditions, the new record, the draw the watts teach (`learning.learn_draw`), the verdict on
the declared capacity (`inspection.judge`) and the energy account's checkpoint
(`energystatus.checkpoint`). The operator (`execution.reconcile`) reads them from the API;
the replay (`simulate.replay`) from its own simulated checks; both then carry the one decision
out through the effect interpreter, so a change here shows in `lightsout simulate` too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.energy import tariff
from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.status import account_from_status, checkpoint
from lightsout.planning.learning import learn_draw
from lightsout.planning.machine import fsm, inspection
from lightsout.planning.machine.common import set_condition
from lightsout.planning.machine.effects import Decision, Requeue
from lightsout.planning.machine.healthjudge import Assessment
from lightsout.planning.types import (
    ConditionType,
    Learned,
    MachineState,
    Observations,
    ObservedPowerState,
)
from lightsout.state.series import Series
from lightsout.state.status import NodeStatusView


@dataclass(frozen=True)
class ProviderIDs:
    """The providerID the machine should carry and the one its core Node carries ("" none)."""

    wanted: str
    seen: str


@dataclass(frozen=True)
class Readings:
    """What a pass read besides the state machine's `Observations`."""

    health: Assessment
    #: The machine's spec and status, which inspection is judged against.
    spec: NodeSpec
    status: NodeStatusView
    #: Share of the machine's CPU its pods request, 0 to 1 (what a busy reading is worth).
    utilisation: float
    #: Its draw as the planner reads it (learned, else declared) and its Group (the price).
    draw: Draw
    group: GroupSpec | None
    provider_ids: ProviderIDs | None = None
    #: The Group's price series per kWh, where it has one (`state.series`).
    prices: Series | None = None
    #: The Group's solar surplus in W, where one is known (`state.series.surplus`), and what
    #: its other machines draw (the surplus is shared by draw: `tariff.paid_watts`).
    surplus: Series | None = None
    beside: float = 0.0


def pass_decision(
    machine: MachineState, obs: Observations, readings: Readings, now: dt.datetime
) -> Decision:
    """The decision of one pass: the state machine's, with what the readings add."""
    decision = fsm.decide(machine, obs, now)
    decision = provider_id_reported(decision, readings.provider_ids)
    decision = with_health(decision, readings.health, machine, readings.utilisation)
    decision = with_inspection(decision, readings.spec, readings.status)
    return with_energy(decision, readings, now)


def with_energy(decision: Decision, readings: Readings, now: dt.datetime) -> Decision:
    """The decision plus the account checkpointed when the machine's rate changes in this
    pass (its new phase, cpu use, draw or price), and a pass when the Group's tariff changes
    its price next, or its solar surplus changes or goes stale (so that each stretch is counted
    at its own price)."""
    account = checkpoint(
        account_from_status(readings.status.energy),
        readings.draw,
        readings.group,
        decision.phase,
        readings.utilisation,
        now=now,
        prices=readings.prices,
        surplus=readings.surplus,
        beside=readings.beside,
    )
    decision = decision if account is None else replace(decision, energy=account)
    electricity = readings.group.electricity if readings.group is not None else None
    change = tariff.next_change(electricity, now, readings.prices, readings.surplus)
    if change is None:
        return decision
    return with_pass_within(decision, (change - now).total_seconds())


def with_pass_within(decision: Decision, seconds: float) -> Decision:
    """The decision, with its next pass no later than `seconds` from now."""
    current = decision.requeue_after
    if current is not None and current <= seconds:
        return decision
    kept = tuple(e for e in decision.effects if not isinstance(e, Requeue))
    return replace(decision, effects=(*kept, Requeue(max(seconds, 0.0))))


def provider_id_reported(decision: Decision, ids: ProviderIDs | None) -> Decision:
    """The decision plus the ProviderIDConflict condition, once the core Node carries one."""
    if ids is None or not ids.seen:
        return decision
    if ids.seen == ids.wanted:
        condition = set_condition(ConditionType.PROVIDER_ID_CONFLICT, False, "Matches", ids.seen)
    else:
        condition = set_condition(
            ConditionType.PROVIDER_ID_CONFLICT,
            True,
            "DifferentProviderID",
            f"core Node carries providerID {ids.seen!r}, not {ids.wanted!r}; it is left as it "
            f"is (set spec.providerID to {ids.seen!r} to make this the machine's own)",
        )
    return replace(decision, effects=(*decision.effects, condition))


def with_inspection(decision: Decision, spec: NodeSpec, status: NodeStatusView) -> Decision:
    """The decision plus the InspectionMismatch verdict on the declared spec against what the
    controller reported (the new check's report when this pass brings one)."""
    inspected = (decision.measured or {}).get("inspected") or status.inspected
    judged = inspection.judge(spec, inspected, status.condition(ConditionType.INSPECTION_MISMATCH))
    effects = tuple(e for e in (judged.condition, judged.event) if e is not None)
    return replace(decision, effects=(*decision.effects, *effects)) if effects else decision


def learned_draw(
    decision: Decision, checked: Assessment, machine: MachineState, utilisation: float
) -> Learned | None:
    """The learned record with the draw a new reading teaches (None: nothing new)."""
    power = (checked.measured or {}).get("power")
    state = checked.observed_power_state
    if not isinstance(power, Mapping) or state not in (
        ObservedPowerState.ON,
        ObservedPowerState.OFF,
    ):
        return decision.learned
    before = decision.learned or machine.learned
    after = learn_draw(before, float(power["watts"]), state is ObservedPowerState.ON, utilisation)
    return after if after != before else decision.learned


def with_health(
    decision: Decision, checked: Assessment, machine: MachineState, utilisation: float
) -> Decision:
    """The decision plus what a new health check found (the state machine's own power
    observation, from an action's result, wins over the check's), and the draw its measured
    watts teach."""
    if checked.record is None and checked.condition is None:
        return decision
    condition = () if checked.condition is None else (checked.condition,)
    return replace(
        decision,
        effects=(*decision.effects, *condition),
        observed_power_state=decision.observed_power_state or checked.observed_power_state,
        health_check=checked.record,
        measured=checked.measured,
        learned=learned_draw(decision, checked, machine, utilisation),
    )
