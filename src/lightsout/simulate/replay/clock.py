"""The replay's simulated time: seconds since the trace's start, and the queue of events.

Events at one instant are handled in the order of their `Kind`, then in the order they were
queued. A wake-up (`Clock.wake`) is kept at the soonest time asked for, as a handler's next
run is: a burst of changes wakes it once, and one overtaken by a sooner wake-up is dropped.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterator
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any


class Kind(IntEnum):
    """Event kinds, in the order they are handled at one instant."""

    JOB_DONE = 0
    NODE_READY = 1
    POD_DONE = 2
    CRON = 3
    ARRIVAL = 4
    RECONCILE = 5
    SCHEDULE = 6
    PLAN = 7
    #: A Group's health check reads its machines (after a plan at the same instant).
    HEALTH_CHECK = 8
    #: The trace's mains fail or return (`replay.ups`).
    MAINS = 9
    #: The operator reads the UPS.
    UPS_READ = 10


class Clock:
    def __init__(self, start: datetime) -> None:
        self.start = start
        #: Seconds since the start: the time of the event being handled.
        self.now = 0.0
        self._queue: list[tuple[float, Kind, int, bool, Any]] = []
        self._seq = 0
        #: When each wake-up is due, by (kind, key).
        self._due: dict[tuple[Kind, Hashable], float] = {}

    def time(self, seconds: float | None = None) -> datetime:
        """The moment `seconds` (by default now) after the start."""
        return self.start + timedelta(seconds=self.now if seconds is None else seconds)

    def seconds(self, moment: datetime) -> float:
        return (moment - self.start).total_seconds()

    def push(self, at: float, kind: Kind, payload: Any = None, *, wake: bool = False) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, kind, self._seq, wake, payload))

    def wake(self, at: float, kind: Kind, key: Hashable = None) -> None:
        """Handle `kind` for `key` at `at`, unless it is due as soon already."""
        if at < self._due.get((kind, key), math.inf):
            self._due[kind, key] = at
            self.push(at, kind, key, wake=True)

    def until(self, end: float) -> Iterator[tuple[Kind, Any]]:
        """The events due up to `end`, in order, with `now` at each one's time."""
        while self._queue and self._queue[0][0] <= end:
            self.now, kind, _, wake, payload = heapq.heappop(self._queue)
            if wake:
                if abs(self._due.get((kind, payload), math.inf) - self.now) > 1e-9:
                    continue  # overtaken: a sooner wake-up was asked for since, and handled
                del self._due[kind, payload]
            yield kind, payload
