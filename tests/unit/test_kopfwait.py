"""kopf's wait for its indexes at start-up, with the operator's shared wait (`handlers.kopfwait`):
every waiting worker is let go once all toggles are on, and a toggle change wakes one wait, not
every waiting worker (which made start-up grow with the square of the objects)."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.aiokits import aiotoggles

import lightsout.handlers  # noqa: F401 - applies the shared wait, as the operator does
from lightsout.handlers import kopfwait

pytestmark = pytest.mark.unit


class CountingSet(aiotoggles.ToggleSet):
    """A toggle set that counts how often its state is read (once per wake of a waiter)."""

    reads = 0

    def is_on(self) -> bool:
        self.reads += 1
        return super().is_on()


def test_the_operator_waits_through_the_shared_wait() -> None:
    assert aiotoggles.ToggleSet.wait_for is kopfwait.shared_wait_for


def test_waiting_workers_go_once_every_toggle_is_on_and_wake_one_wait_per_change() -> None:
    workers = 200

    async def scenario() -> tuple[int, int, int]:
        indexed = CountingSet(all)
        blocker = await indexed.make_toggle(name="a kind not listed yet")
        released = 0

        async def worker(number: int) -> None:
            nonlocal released
            own = await indexed.make_toggle(name=f"object {number}")
            await own.turn_to(True)
            await indexed.wait_for(True)
            released += 1

        tasks = [asyncio.create_task(worker(n)) for n in range(workers)]
        for _ in range(5):
            await asyncio.sleep(0)
        held = released
        await blocker.turn_to(True)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
        return held, released, indexed.reads

    held, released, reads = asyncio.run(scenario())
    assert (held, released) == (0, workers)
    # Two changes per worker (its toggle made, turned on) and the blocker's: each wakes the one
    # shared wait. kopf's own wait read the set once per waiting worker per change (~40,000).
    assert reads <= 2 * workers + 10


def test_a_set_turned_off_again_is_waited_for_afresh() -> None:
    async def scenario() -> bool:
        indexed = aiotoggles.ToggleSet(all)
        toggle = await indexed.make_toggle(True, name="one")
        await indexed.wait_for(True)  # already on: returns at once
        await toggle.turn_to(False)
        waiting = asyncio.create_task(indexed.wait_for(True))
        await asyncio.sleep(0)
        still_waiting = not waiting.done()
        await toggle.turn_to(True)
        await asyncio.wait_for(waiting, timeout=5)
        return still_waiting

    assert asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_wait_to_the_others() -> None:
    async def scenario() -> bool:
        indexed = aiotoggles.ToggleSet(all)
        toggle = await indexed.make_toggle(name="one")
        first = asyncio.create_task(indexed.wait_for(True))
        second = asyncio.create_task(indexed.wait_for(True))
        await asyncio.sleep(0)
        first.cancel()
        await toggle.turn_to(True)
        await asyncio.wait_for(second, timeout=5)
        return first.cancelled()

    assert asyncio.run(scenario())
