"""A power-off the playbook had to force, as the state machine tells it.

The shutdown/deprovision playbooks report `forced_after_seconds` (the seconds the OS was given
before the power was forced off) when the machine did not go off by itself. The machine still
ends Off with reason JobSucceeded, but the status message says the OS was cut off and a
Warning event `ForcedPowerOff` names how long it had. Machines and observations are built with
test_fsm's helpers.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import Decision, Event
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import (
    Action,
    EventType,
    JobPhase,
    Observations,
    ObservedPowerState,
    Phase,
)
from tests.unit.test_fsm import (
    DEPROVISION,
    OFF,
    ON,
    POWERED_OFF,
    PROVISION,
    SHUTDOWN,
    at,
    job,
    machine,
    obs,
    op,
    summary,
)

pytestmark = pytest.mark.unit

HARD = "the OS did not shut down within 120 s and the machine was powered off hard"


def values(**more: Any) -> dict[str, Any]:
    return {"power_state": "Off", "driver": "proxmox", "changed": True, **more}


def seen_done(
    action: Action, power: ObservedPowerState, reported: dict[str, Any], gen: int = 5
) -> Observations:
    """Observations of a finished `action` Job that reported `power` and these values."""
    return obs(
        job=job(action, gen=gen, state=JobPhase.SUCCEEDED, power_state=power, values=reported)
    )


def shutdown_succeeded(reported: dict[str, Any]) -> Decision:
    """A shutdown Job that ended Off with these values, decided on."""
    return decide(
        machine(Phase.POWERING_OFF, OFF, gen=6, operation=op(SHUTDOWN, gen=6)),
        obs(
            job=job(
                SHUTDOWN,
                gen=6,
                state=JobPhase.SUCCEEDED,
                power_state=OFF,
                message="shutdown.yml succeeded",
                values=reported,
            )
        ),
        at(60),
    )


def warnings(decision: Decision) -> list[str]:
    return [
        e.message for e in decision.effects if isinstance(e, Event) and e.type is EventType.WARNING
    ]


def test_a_forced_shutdown_ends_off_and_says_so() -> None:
    decision = shutdown_succeeded(values(forced_after_seconds=120))
    assert (decision.phase, decision.reason) == (Phase.OFF, Reason.JOB_SUCCEEDED)
    assert summary(decision) == [*POWERED_OFF, "Event:Warning:ForcedPowerOff"]
    assert decision.message == f"shutdown Job (attempt 1) succeeded: shutdown.yml succeeded; {HARD}"
    assert warnings(decision) == [f"shutdown: {HARD}"]
    # status.lastOperation keeps the message and the value for whoever reads it later.
    assert decision.operation is not None
    assert decision.operation.message == decision.message
    assert decision.operation.values["forced_after_seconds"] == 120


def test_a_power_off_without_a_graceful_attempt_says_none_was_possible() -> None:
    decision = shutdown_succeeded(values(forced_after_seconds=0))
    hard = "the machine was powered off hard (no graceful shutdown possible)"
    assert decision.message.endswith(f"; {hard}")
    assert warnings(decision) == [f"shutdown: {hard}"]


@pytest.mark.parametrize(
    "reported",
    [values(), values(forced_after_seconds="120"), values(forced_after_seconds=True)],
    ids=["graceful", "not-a-number", "a-bool"],
)
def test_a_clean_or_unreadable_report_warns_of_nothing(reported: dict[str, Any]) -> None:
    decision = shutdown_succeeded(reported)
    assert summary(decision) == POWERED_OFF
    assert "hard" not in decision.message


def test_a_forced_deprovision_of_a_clone_says_so() -> None:
    decision = decide(
        machine(Phase.DEPROVISIONING, OFF, gen=6, ephemeral=True, operation=op(DEPROVISION, gen=6)),
        seen_done(DEPROVISION, OFF, values(forced_after_seconds=120), gen=6),
        at(60),
    )
    assert (decision.phase, decision.reason) == (Phase.OFF, Reason.JOB_SUCCEEDED)
    assert decision.message.endswith(f"; {HARD}")
    assert warnings(decision) == [f"deprovision: {HARD}"]


def test_a_never_joined_clone_stopped_hard_is_failed_and_says_both() -> None:
    decision = decide(
        machine(Phase.DEPROVISIONING, ON, ephemeral=True, operation=op(DEPROVISION)),
        seen_done(DEPROVISION, OFF, values(forced_after_seconds=120)),
        at(620),
    )
    assert (decision.phase, decision.reason) == (Phase.FAILED, Reason.REGISTRATION_TIMEOUT)
    assert "did not become Ready" in decision.message and decision.message.endswith(HARD)
    assert summary(decision) == [
        "ReleaseLease",
        "Event:Warning:RetriesExhausted",
        "Event:Warning:ForcedPowerOff",
    ]
    assert warnings(decision)[-1] == f"deprovision: {HARD}"


def test_a_power_on_job_is_never_said_to_have_forced_anything() -> None:
    decision = decide(
        machine(Phase.PROVISIONING, ON, ephemeral=True, operation=op(PROVISION)),
        seen_done(PROVISION, ON, values(power_state="On", forced_after_seconds=120)),
        at(60),
    )
    assert decision.phase is Phase.BOOTING
    assert warnings(decision) == []
    assert "hard" not in decision.message
