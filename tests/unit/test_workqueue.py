"""The reconcilers' work queue: de-duplication, one key one worker, timers, backoff, and the
worker pool's bound. A fake clock drives the queue's timers; the pool tests run real asyncio
with passes that block on events the test releases."""

from __future__ import annotations

import asyncio

import pytest

from lightsout.execution.workqueue import Workers, WorkQueue

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drain(queue: WorkQueue[str]) -> list[str]:
    """Take every ready key and finish it at once."""
    out = []
    while (key := queue.get()) is not None:
        out.append(key)
        queue.done(key)
    return out


def test_pending_keys_are_deduplicated_and_come_out_in_order() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=Clock())
    for key in ["a", "b", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert drain(queue) == ["a", "b", "c"]
    assert queue.get() is None
    assert queue.wait_time() is None


def test_a_key_is_never_handed_to_two_workers_and_no_change_is_lost() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=Clock())
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")  # changed while a worker has it
    queue.add("a")
    assert queue.get() is None, "the second pass waits for the first"
    queue.done("a")
    assert queue.get() == "a", "the change seen meanwhile gets its own pass"
    queue.done("a")
    assert queue.get() is None


def test_timers_fire_when_due_and_only_the_earliest_counts() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 30)
    queue.add_after("a", 10)
    queue.add_after("a", 20)
    queue.add_after("b", 15)
    assert queue.get() is None
    assert queue.wait_time() == 10
    clock.now += 10
    assert drain(queue) == ["a"]
    assert queue.wait_time() == 5
    clock.now += 5
    assert drain(queue) == ["b"]
    assert queue.wait_time() is None, "a's later timers were superseded by the earliest"


def test_an_event_replaces_the_timer_and_a_pending_key_needs_no_timer() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 60)
    queue.add("a")
    assert drain(queue) == ["a"]
    clock.now += 60
    assert drain(queue) == [], "the pass the event caused sets its own timer"
    queue.add("b")
    queue.add_after("b", 5)
    clock.now += 5
    assert drain(queue) == ["b"], "once, not twice"


def test_a_timer_set_during_a_pass_fires_after_it() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add("a")
    assert queue.get() == "a"
    queue.add_after("a", 5)  # what a worker does with the pass's requeue
    queue.done("a")
    assert queue.get() is None
    clock.now += 5
    assert drain(queue) == ["a"]


def test_failures_back_off_exponentially_up_to_the_cap_and_forget_resets() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, base_delay=1, max_delay=10)
    delays = []
    for _ in range(6):
        assert queue.get() is None
        delays.append(queue.add_rate_limited("a"))
        clock.now += delays[-1] - 0.01
        assert queue.get() is None, "not before its backoff"
        clock.now += 0.01
        assert drain(queue) == ["a"]
    assert delays == [1, 2, 4, 8, 10, 10]
    assert queue.failures("a") == 6
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1


def test_discard_drops_the_timer_of_a_deleted_object() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("gone", 5)
    queue.add_rate_limited("gone")
    queue.discard("gone")
    clock.now += 600
    assert drain(queue) == []
    assert queue.failures("gone") == 0


def test_many_retimings_do_not_grow_the_timer_heap_without_bound() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for step in range(10_000):
        queue.add_after("a", 10_000 - step)
    assert len(queue._timers) < 200
    clock.now += 1
    assert drain(queue) == ["a"]


async def _pool_run(size: int, keys: list[str], adds_during: int = 0) -> tuple[int, list[str]]:
    """Run passes that each wait a little; return the highest concurrency seen and the order."""
    queue: WorkQueue[str] = WorkQueue()
    running: set[str] = set()
    peak = 0
    seen: list[str] = []

    async def handler(key: str) -> float | None:
        nonlocal peak, adds_during
        assert key not in running, f"{key} handed to two workers at once"
        running.add(key)
        peak = max(peak, len(running))
        seen.append(key)
        if adds_during:
            adds_during -= 1
            queue.add(key)  # an event for the same key while its pass runs
        await asyncio.sleep(0.01)
        running.discard(key)
        return None

    workers = Workers(queue, handler, size=size)
    workers.start()
    for key in keys:
        queue.add(key)
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not len(queue) and not workers.busy:
            break
    await workers.stop()
    return peak, seen


def test_the_pool_runs_at_most_its_size_at_once() -> None:
    peak, seen = asyncio.run(_pool_run(3, [f"k{i}" for i in range(20)]))
    assert peak == 3
    assert sorted(seen) == sorted(f"k{i}" for i in range(20))


def test_the_pool_never_runs_one_key_twice_at_once_and_reruns_it_after() -> None:
    peak, seen = asyncio.run(_pool_run(4, ["a"], adds_during=2))
    assert peak == 1
    assert seen == ["a", "a", "a"]


def test_a_failing_pass_is_retried_with_backoff_and_a_requeue_becomes_a_timer() -> None:
    async def scenario() -> list[str]:
        queue: WorkQueue[str] = WorkQueue(base_delay=0.05)
        calls: list[str] = []

        async def handler(key: str) -> float | None:
            calls.append(key)
            if key == "flaky" and calls.count("flaky") < 3:
                raise RuntimeError("API unreachable")
            if key == "timed" and calls.count("timed") == 1:
                return 0.05
            return None

        workers = Workers(queue, handler, size=2)
        workers.start()
        queue.add("flaky")
        queue.add("timed")
        await asyncio.sleep(0.6)
        await workers.stop()
        assert queue.failures("flaky") == 0, "a good pass forgets the failures"
        return calls

    calls = asyncio.run(scenario())
    assert calls.count("flaky") == 3
    assert calls.count("timed") == 2
