"""A machine's status after one pass's decision: what the port (`execution.actuator`) patches.

Every field the pass decided: its place in the state machine (`state.status.machine_status`,
as the replay writes it), the operation, the conditions merged with those already there and
what the readings added (`actuation.inputs.checked_status`, as the in-memory port keeps it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from lightsout.actuation import inputs
from lightsout.execution import providerid
from lightsout.execution.jobs import job_name
from lightsout.models.node import NodeSpec
from lightsout.planning.machine.effects import Decision
from lightsout.planning.types import ObservedPowerState, operation_to_status
from lightsout.state.parse import format_time
from lightsout.state.status import machine_status, node_status

Obj = Mapping[str, Any]


def wanted_status(
    node: Obj,
    spec: NodeSpec,
    decision: Decision,
    now: dt.datetime,
    intent: tuple[ObservedPowerState, int],
) -> dict[str, Any]:
    """The machine's status after `decision`, as `write_status` patches it."""
    status = node_status(node)
    meta = node["metadata"]
    generation = int(meta.get("generation") or 1)
    op = decision.operation
    job = (
        job_name(str(meta["name"]), str(op.action), op.intent_generation, op.attempt)
        if op
        else None
    )
    new = machine_status(
        decision.phase,
        decision.phase_since or now,
        intent,
        reason=decision.reason,
        message=decision.message,
        learned=decision.learned,
    )
    new |= {
        "observedGeneration": generation,
        "attempts": decision.attempts,
        "lastOperation": operation_to_status(op, job),
        "providerID": providerid.wanted(node, spec),
        "conditions": inputs.merge_conditions(status.conditions, decision, generation, now),
        # None removes it (merge patch): the clone is gone.
        "clone": inputs.clone_to_status(status.clone, op),
    }
    if decision.observed_power_state is not None:
        new["observedPowerState"] = str(decision.observed_power_state)
    new.update(inputs.checked_status(decision))
    if decision.drift_corrections is not None:
        # None removes the list (merge patch) once no correction counts any more.
        new["driftCorrections"] = [format_time(t) for t in decision.drift_corrections] or None
    return new
