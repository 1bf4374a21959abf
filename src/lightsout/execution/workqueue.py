"""A work queue of object keys and the fixed pool of workers that drains it.

The Node and Group reconcilers (`handlers/node.py`) put keys here: watch events add a key now,
the state machine's timers add it later (`add_after`), a failed pass adds it back after an
exponential backoff (`add_rate_limited`). `Workers` runs at most `size` passes at once, and
never two passes of one key at once. The semantics are client-go's `workqueue`:

- a key is *pending* from `add` until a worker takes it with `get`; adding a pending key again
  changes nothing (de-duplication), so a burst of events makes one pass;
- a key taken by a worker is *processing* until `done`; adding it meanwhile marks it pending
  again, and `done` hands it out once more, so no change is lost and no key runs twice at once;
- `add_after(key, delay)` keeps only the earliest timer of a key, and an immediate `add` drops
  the timer (the pass it causes asks for its own next timer);
- `add_rate_limited` waits `base_delay * 2**failures` (capped at `max_delay`); `forget` resets
  the count after a successful pass.

The queue holds each key at most once in each of its structures, so it is bounded by the
number of objects watched. It is not thread-safe: the operator calls it from its event loop
only (kopf's handlers and the workers' coroutines), and a pass's blocking work runs in a thread
of the caller's executor. The clock is injected, so the unit tests drive time by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


def backoff(failures: int, base: float, cap: float) -> float:
    """Seconds to wait before the next try when `failures` tries failed before this failure
    (0: this is the first): `base`, doubling, never more than `cap`. An API server away for
    minutes so gets one try per `cap` seconds from each retrying loop, never a storm."""
    return min(base * float(2 ** min(failures, 32)), cap)


@dataclass
class WorkQueue[K: Hashable]:
    """Pending keys (de-duplicated), keys in processing, timers and per-key failure counts."""

    clock: Callable[[], float] = time.monotonic
    base_delay: float = 1.0
    max_delay: float = 120.0
    #: Called whenever a key may have become ready (the workers' wake-up).
    notify: Callable[[], None] = lambda: None
    _ready: deque[K] = field(default_factory=deque)
    _pending: set[K] = field(default_factory=set)
    _processing: set[K] = field(default_factory=set)
    _due: dict[K, float] = field(default_factory=dict)
    _timers: list[tuple[float, int, K]] = field(default_factory=list)
    _failures: dict[K, int] = field(default_factory=dict)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, key: K) -> None:
        """Process `key` as soon as a worker is free (and it is not being processed)."""
        self._due.pop(key, None)
        if key in self._pending:
            return
        self._pending.add(key)
        if key not in self._processing:
            self._ready.append(key)
        self.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Process `key` in `delay` seconds, unless an earlier timer or an `add` comes first."""
        if delay <= 0:
            self.add(key)
            return
        if key in self._pending:
            return  # it runs anyway, and that pass sets its own timer
        due = self.clock() + delay
        if self._due.get(key, due + 1) <= due:
            return
        self._due[key] = due
        heapq.heappush(self._timers, (due, next(self._order), key))
        if len(self._timers) > 2 * len(self._due) + 64:
            self._timers = [(d, next(self._order), k) for k, d in self._due.items()]
            heapq.heapify(self._timers)
        self.notify()

    def add_rate_limited(self, key: K) -> float:
        """Retry `key` after its backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = backoff(failures, self.base_delay, self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key's last pass went well: its next failure starts the backoff over."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def discard(self, key: K) -> None:
        """Drop a timer and the failure count of a key whose object is gone."""
        self._due.pop(key, None)
        self._failures.pop(key, None)

    def get(self) -> K | None:
        """The next ready key (now processing), or None when none is ready."""
        self._fire_timers()
        if not self._ready:
            return None
        key = self._ready.popleft()
        self._pending.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """The worker finished `key`; if it was added meanwhile, it is ready again."""
        self._processing.discard(key)
        if key in self._pending:
            self._ready.append(key)
            self.notify()

    def wait_time(self) -> float | None:
        """Seconds until a key is ready: 0 when one is, None when nothing is scheduled."""
        if self._ready:
            return 0.0
        self._drop_stale_timers()
        if not self._timers:
            return None
        return max(0.0, self._timers[0][0] - self.clock())

    def __len__(self) -> int:
        """Keys waiting: pending ones and those with a timer."""
        return len(self._pending | self._due.keys())

    def _drop_stale_timers(self) -> None:
        while self._timers and self._due.get(self._timers[0][2]) != self._timers[0][0]:
            heapq.heappop(self._timers)

    def _fire_timers(self) -> None:
        now = self.clock()
        self._drop_stale_timers()
        while self._timers and self._timers[0][0] <= now:
            _, _, key = heapq.heappop(self._timers)
            self.add(key)
            self._drop_stale_timers()


@dataclass
class Workers[K: Hashable]:
    """At most `size` passes at once over the queue's keys, as asyncio tasks on one loop.

    `handler(key)` does one pass (its blocking part in a thread of its own choosing). Its return
    value becomes the key's timer; an exception requeues the key with backoff.
    """

    queue: WorkQueue[K]
    handler: Callable[[K], Awaitable[float | None]]
    size: int = 4
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _running: set[asyncio.Task[None]] = field(default_factory=set)
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.queue.notify = self._wake.set

    def start(self) -> None:
        self._task = asyncio.create_task(self._dispatch(), name="lightsout-workqueue")

    @property
    def busy(self) -> int:
        return len(self._running)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop taking keys and wait (up to `timeout`) for the passes under way."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._running:
            await asyncio.wait(self._running, timeout=timeout)

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            while len(self._running) < self.size and (key := self.queue.get()) is not None:
                task = asyncio.create_task(self._one(key))
                self._running.add(task)
            # A full pool waits for a pass to end (its `done` wakes us), not for timers.
            timeout = self.queue.wait_time() if len(self._running) < self.size else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _one(self, key: K) -> None:
        try:
            delay = await self.handler(key)
        except asyncio.CancelledError:
            raise
        except Exception:
            retry = self.queue.add_rate_limited(key)
            log.exception("pass over %s failed; retrying in %.1fs", key, retry)
        else:
            self.queue.forget(key)
            if delay is not None:
                self.queue.add_after(key, delay)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._running.discard(task)
            self.queue.done(key)
            self._wake.set()
