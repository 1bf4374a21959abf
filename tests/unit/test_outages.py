"""A BMC that does not answer: which failures are outages, how long they are ridden out, and
how many attempts (so requests) an outage of a given length can cost
(`planning.machine.outages`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lightsout.planning.machine import outages
from lightsout.planning.machine.common import Reason, retry_backoff
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import JobPhase, Phase
from tests.unit.test_fsm import ON, T0, at, job, machine, obs, op, summary

pytestmark = pytest.mark.unit

TASK = "Fail with the BMC's answer"
REFUSED = "On of system s1 on https://bmc:443 failed: HTTP 503: Service Unavailable"
DROPPED = (
    "On of system s1 on https://bmc:443 failed: Request failed: <urlopen error "
    "('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))>"
)


@pytest.mark.parametrize(
    ("message", "outage"),
    [
        (REFUSED, True),
        (DROPPED, True),
        ("Request failed: <urlopen error [Errno 111] Connection refused>", True),
        ("Request failed: <urlopen error The read operation timed out>", True),
        ("HTTP 429: Too Many Requests", True),
        ("HTTP 504: Gateway Timeout", True),
        ("HTTP 401: Unauthorized (check the credentials Secret)", False),
        ("HTTP 400: power off disabled", False),
        ("HTTP 5030", False),
        ("System s1 not found on https://bmc:443", False),
    ],
)
def test_which_failures_are_outages(message: str, outage: bool) -> None:
    assert outages.unavailable(message) is outage


def test_an_outage_is_ridden_out_for_the_window_only() -> None:
    window = outages.OUTAGE_WINDOW_SECONDS
    assert outages.rides_out(T0, at(window - 1))
    assert not outages.rides_out(T0, at(window))
    assert outages.rides_out(None, at(10 * window))


@pytest.mark.parametrize(
    ("window", "attempts"),
    # Attempts start at 0, 30, 90, 210, 450, 930, 1530, 2130 s (30 s doubling, 600 s cap).
    [(1, 1), (30, 1), (31, 2), (60, 2), (91, 3), (300, 4), (1800, 7), (2131, 8)],
)
def test_attempts_within_an_outage_follow_the_backoff(window: float, attempts: int) -> None:
    assert outages.attempts_within(window, retry_backoff) == attempts


def test_an_outage_past_max_retries_is_retried_with_its_own_reason() -> None:
    """maxRetries 0: a refused order is retried all the same, and the status says why."""
    failed = job(state=JobPhase.FAILED, failed_task=TASK, message=REFUSED)
    decision = decide(
        machine(Phase.POWERING_ON, ON, max_retries=0, operation=op()), obs(job=failed), at(20)
    )
    assert decision.phase is Phase.POWERING_ON
    assert decision.reason == Reason.BMC_UNAVAILABLE
    assert "HTTP 503" in decision.message
    assert "retrying in 30s (attempt 2; a BMC outage does not use up maxRetries)" in (
        decision.message
    )
    assert "Event:Warning:BMCUnavailable" in summary(decision)
    # While it waits for the backoff, the reason stays; then attempt 2 starts.
    assert decision.operation is not None
    waiting = machine(Phase.POWERING_ON, ON, max_retries=0, operation=decision.operation)
    assert decide(waiting, obs(), at(40)).reason == Reason.BMC_UNAVAILABLE
    retried = decide(waiting, obs(), at(51))
    assert "StartJob:startup:g5:a2" in summary(retried)


def test_an_outage_past_the_window_counts_like_any_failure() -> None:
    failed = job(state=JobPhase.FAILED, failed_task=TASK, message=REFUSED)
    late = T0 + timedelta(seconds=outages.OUTAGE_WINDOW_SECONDS)
    decision = decide(
        machine(Phase.POWERING_ON, ON, max_retries=0, operation=op()), obs(job=failed), late
    )
    assert decision.phase is Phase.FAILED
    assert decision.reason == Reason.RETRIES_EXHAUSTED


def test_a_refusal_that_is_not_an_outage_spends_max_retries() -> None:
    failed = job(state=JobPhase.FAILED, failed_task=TASK, message="HTTP 400: power off disabled")
    decision = decide(
        machine(Phase.POWERING_ON, ON, max_retries=0, operation=op()), obs(job=failed), at(20)
    )
    assert decision.phase is Phase.FAILED
    assert decision.reason == Reason.RETRIES_EXHAUSTED
