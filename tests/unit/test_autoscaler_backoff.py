"""The built-in autoscaler's loop while the API server is away: it backs off instead of asking
again at once (it used to: its Lease's renewal time had passed, so the loop never waited, and
thousands of requests a minute went to an API server that was down)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import pytest

from lightsout.config import OperatorConfig
from lightsout.execution.workqueue import backoff
from lightsout.handlers import autoscale

pytestmark = pytest.mark.unit


class AwayLease:
    """A leader Lease held by another replica, to be looked at again in 50 ms; then its API
    server goes away."""

    def __init__(self) -> None:
        self.tries = 0

    def hold(self, _now: dt.datetime) -> bool:
        self.tries += 1
        if self.tries == 1:
            return False
        raise ConnectionError("API server away")

    def renew_in(self, _now: dt.datetime) -> float:
        return 0.05


async def tries_within(seconds: float) -> int:
    planner = autoscale.Planner(OperatorConfig(identity="me"), {}, api=None)  # type: ignore[arg-type]
    lease = AwayLease()
    planner.lease = lease  # type: ignore[assignment]
    planner.poke()
    task = asyncio.create_task(planner.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return lease.tries


def test_an_unreachable_api_server_is_tried_once_per_backoff_not_in_a_loop() -> None:
    # The look at 50 ms fails; the next waits ERROR_RETRY seconds, not 0.
    assert asyncio.run(tries_within(1.0)) == 2, "the next try waits for the backoff"


def test_the_backoff_doubles_up_to_its_cap() -> None:
    delays = [backoff(n, autoscale.ERROR_RETRY, autoscale.ERROR_RETRY_MAX) for n in range(6)]
    assert delays == [5, 10, 20, 40, 60, 60]
    assert backoff(10_000, 1, 120) == 120


class HeldLease:
    """This replica leads, and keeps leading."""

    def hold(self, _now: dt.datetime) -> bool:
        return True

    def renew_in(self, _now: dt.datetime) -> float:
        return 60.0


async def plans_while_events_stream(plan_seconds: float, seconds: float = 1.2) -> int:
    """How many plans a planner makes while a change arrives every 10 ms (thousands of machines
    being first seen), each plan taking `plan_seconds` to compute."""
    planner = autoscale.Planner(OperatorConfig(identity="me"), {}, api=None)  # type: ignore[arg-type]
    planner.lease = HeldLease()  # type: ignore[assignment]
    plans = 0

    async def plan_and_apply() -> tuple[None, bool]:
        nonlocal plans
        plans += 1
        planner.plan_seconds = plan_seconds
        await asyncio.sleep(plan_seconds)
        return None, False  # no deadline, no write lost a race

    planner._plan_and_apply = plan_and_apply  # type: ignore[method-assign]
    task = asyncio.create_task(planner.run())
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        planner.poke()
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return plans


def test_a_slow_plan_rests_the_planner_in_proportion_while_changes_stream() -> None:
    # 1.2 s of changes: a 2 ms plan runs after each debounce (about 10 plans); a 200 ms plan
    # (thousands of machines) rests 600 ms after each: 2 plans instead of about 4.
    assert asyncio.run(plans_while_events_stream(0.002)) >= 8
    assert asyncio.run(plans_while_events_stream(0.2)) == 2
