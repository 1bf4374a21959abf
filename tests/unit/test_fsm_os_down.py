"""A power-off without a meter: the power is cut only once the kubelet has stopped too.

A Home Assistant switch without a power sensor cannot measure that the machine is off. Its
shutdown Job delivers the OS shutdown, sees the probe go silent and reports `cut_pending`,
leaving the power on; the state machine then waits for the kubelet's Lease in kube-node-lease
to expire (a running OS renews it) before the next attempt cuts the power with that evidence.
Machines and observations are built with test_fsm's helpers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import Decision, Event, StartJob
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import (
    EventType,
    JobPhase,
    KubeletHeartbeat,
    OperationResult,
    Phase,
)
from tests.unit.test_fsm import OFF, ON, SHUTDOWN, T0, at, job, machine, obs, op, summary

pytestmark = pytest.mark.unit

SAID = (
    "the probe 10.0.0.9:22 answered at 12:00:00 UTC; the shutdown command was delivered over "
    "SSH to lo@10.0.0.9:22 at 12:00:01 UTC; the probe went silent by 12:00:04 UTC"
)
PENDING = {"power_state": "Off", "driver": "homeassistant", "cut_pending": True, "evidence": SAID}


def left_on(seconds: float, renewed: float | None, *, timeout: int = 300, **kw: Any) -> Decision:
    """The first shutdown Job ended (at T0) with cut_pending; decided `seconds` later with the
    kubelet's Lease last renewed at `renewed` (None: no Lease)."""
    heartbeat = None if renewed is None else KubeletHeartbeat(at(renewed), 40)
    return decide(
        machine(
            Phase.POWERING_OFF,
            kw.pop("desired", OFF),
            operation=op(SHUTDOWN, result=OperationResult.SUCCEEDED, values=PENDING),
            shutdown_timeout_seconds=timeout,
            **kw,
        ),
        obs(kubelet=heartbeat),
        at(seconds),
    )


def started(decision: Decision) -> StartJob:
    (start,) = [e for e in decision.effects if isinstance(e, StartJob)]
    return start


def test_the_job_that_leaves_the_power_on_is_recorded_and_the_kubelet_waited_for() -> None:
    decision = decide(
        machine(Phase.POWERING_OFF, OFF, operation=op(SHUTDOWN)),
        obs(
            job=job(SHUTDOWN, state=JobPhase.SUCCEEDED, power_state=OFF, values=PENDING),
            kubelet=KubeletHeartbeat(at(-5), 40),
        ),
        at(1),
    )
    assert (decision.phase, decision.reason) == (Phase.POWERING_OFF, Reason.WAITING_FOR_HEARTBEAT)
    assert decision.operation is not None
    assert decision.operation.result is OperationResult.SUCCEEDED
    assert decision.operation.values["cut_pending"] is True
    assert summary(decision) == ["AcquireLease", "Event:Normal:WaitingForHeartbeat", "Requeue"]
    assert decision.message == (
        f"{SAID}; the kubelet of core Node worker-1 last renewed its Lease at 11:59:55 UTC "
        "(6 s ago): waiting for it to stop before the power is cut"
    )


@pytest.mark.parametrize(
    ("seconds", "renewed", "cut"),
    [
        (10, 5, False),  # renewed 5 s ago: the OS runs (or has just stopped)
        (44, 5, False),  # 39 s: not yet a whole lease duration
        (45, 5, True),  # 40 s without a renewal: the kubelet has stopped
        (10, None, True),  # no Lease at all: not a cluster node, or the Node is gone
    ],
)
def test_the_power_is_cut_only_once_the_kubelet_stopped_renewing(
    seconds: float, renewed: float | None, cut: bool
) -> None:
    decision = left_on(seconds, renewed)
    assert decision.phase is Phase.POWERING_OFF
    if not cut:
        assert decision.reason is Reason.WAITING_FOR_HEARTBEAT
        assert not any(isinstance(e, StartJob) for e in decision.effects)
        return
    assert decision.reason is Reason.OS_DOWN_CONFIRMED
    # The next attempt of the same intent, carrying what showed the OS went down.
    start = started(decision)
    assert (start.action, start.generation, start.attempt) == (SHUTDOWN, 5, 2)
    assert start.os_down_evidence.startswith(SAID + "; ")
    assert start.os_down_forced_after == 0
    assert decision.operation is not None and decision.operation.attempt == 2
    assert decision.operation.values["os_down_evidence"] == start.os_down_evidence
    assert decision.message.endswith(": the OS is down, cutting the power")


def test_a_lost_job_of_the_cut_is_made_again_with_its_evidence() -> None:
    kept = {"os_down_evidence": "seen", "os_down_forced_after": 0}
    decision = decide(
        machine(Phase.POWERING_OFF, OFF, operation=op(SHUTDOWN, attempt=2, values=kept)),
        obs(),
        at(5),
    )
    assert started(decision) == StartJob(SHUTDOWN, 5, 2, "seen", 0)


def test_a_kubelet_renewing_past_the_shutdown_timeout_is_a_running_os() -> None:
    decision = left_on(61, 60, timeout=60, max_retries=0)
    assert (decision.phase, decision.reason) == (Phase.FAILED, Reason.RETRIES_EXHAUSTED)
    assert not any(isinstance(e, StartJob) for e in decision.effects)
    assert "the OS is running" in decision.message
    assert "the power stays on (force is false)" in decision.message
    assert "Event:Warning:OSStillRunning" in summary(decision)


def test_with_force_a_kubelet_renewing_past_the_timeout_gets_its_power_cut_as_forced() -> None:
    decision = left_on(61, 60, timeout=60, force_power_off=True)
    assert decision.reason is Reason.OS_DOWN_CONFIRMED
    start = started(decision)
    assert start.os_down_forced_after == 60
    assert "the OS is running" in start.os_down_evidence
    assert decision.message.endswith("force is set: cutting the power")


def test_the_cut_that_succeeds_ends_off_and_a_forced_one_warns() -> None:
    def cut(values: dict[str, Any]) -> Decision:
        return decide(
            machine(Phase.POWERING_OFF, OFF, operation=op(SHUTDOWN, attempt=2)),
            obs(
                job=job(
                    SHUTDOWN, attempt=2, state=JobPhase.SUCCEEDED, power_state=OFF, values=values
                )
            ),
            at(50),
        )

    clean = cut({"power_state": "Off", "driver": "homeassistant"})
    assert (clean.phase, clean.reason) == (Phase.OFF, Reason.JOB_SUCCEEDED)
    forced = cut({"power_state": "Off", "driver": "homeassistant", "forced_after_seconds": 60})
    assert Phase.OFF is forced.phase
    reasons = [e.reason for e in forced.effects if isinstance(e, Event)]
    assert Reason.FORCED_POWER_OFF in reasons
    warning = [e for e in forced.effects if isinstance(e, Event) and e.type is EventType.WARNING]
    assert warning
    assert "the OS did not shut down within 60 s" in forced.message
    # A role that says what was missing is quoted instead: no shutdown it never sent.
    missing = "the probe did not answer, so no shutdown command could be delivered"
    told = cut({"power_state": "Off", "forced_after_seconds": 15, "forced_reason": missing})
    assert told.message.endswith(
        "the power was cut without evidence that the OS went down, 15 s after the shutdown "
        f"was asked for ({missing})"
    )
    assert "did not shut down" not in told.message


def test_a_changed_intent_while_waiting_acts_on_it_and_never_cuts() -> None:
    decision = left_on(10, 5, desired=ON)
    assert decision.phase is Phase.POWERING_ON
    assert [e.action for e in decision.effects if isinstance(e, StartJob)] == [
        machine(Phase.OFF, ON).on_action
    ]


def test_the_wait_survives_a_restart_from_status_alone() -> None:
    """The operator's restart reads the recorded operation: the same wait, no new Job."""
    first = left_on(10, 5)
    assert first.operation is not None
    again = decide(
        machine(Phase.POWERING_OFF, OFF, operation=first.operation, reason=first.reason),
        obs(kubelet=KubeletHeartbeat(T0 + timedelta(seconds=15), 40)),
        at(20),
    )
    assert again.reason is Reason.WAITING_FOR_HEARTBEAT
    assert summary(again) == ["AcquireLease", "Requeue"]  # the event was posted once
