"""The leader's loop over the Groups' Home Assistant sensors named in `spec.electricity`: what
the price sensor task (`execution.prices`) and the solar surplus task (`execution.surplus`)
share.

A task runs while this replica holds the autoscaler's Lease (so one operator reads and writes).
Each round it takes the Groups from the watch cache, keeps those whose electricity block names
its kind of sensor (`sensor_of`; a spec that does not validate is left to the planner's
snapshot, which says what is wrong with it), reads each that is due (`poll`, the task's own),
and reads it again `pollSeconds` later, or `retry` seconds at most after a failed poll. A Group
is known by namespace, name and uid, and by its sensor block as JSON, so a changed block is
read at once and a Group deleted and created again starts afresh; the readers and memories of
those gone are dropped (`forgotten`). On losing the Lease everything is forgotten, so a
replica that leads again reads at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from lightsout.actuation.inputs import InvalidSpecError, group_spec
from lightsout.execution.homeassistant import HomeAssistantReader
from lightsout.k8s.api import Api
from lightsout.models.group import Electricity

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
#: A Group as a task knows it: namespace, name, uid.
GroupKey = tuple[str, str, str]
#: A Group and its sensor block (as JSON): one reader and one timer each.
SensorKey = tuple[GroupKey, str]
#: Seconds between looks at the Groups (a new one's sensor is read within this).
IDLE = 5.0


@dataclass
class GroupSensors[R: HomeAssistantReader]:
    """One task's state: a reader per Group and sensor block, and when each is read next."""

    api: Api
    _: KW_ONLY
    #: The Groups, as the watch cache holds them.
    groups: Callable[[], Iterable[Obj]]
    leading: Callable[[], bool]
    readers: dict[SensorKey, R] = field(default_factory=dict)
    due: dict[SensorKey, float] = field(default_factory=dict)

    #: What a round that failed is logged as.
    task = "the Groups' sensors"
    #: Seconds before a failed poll is tried again (sooner with a shorter pollSeconds).
    retry = 60.0
    #: The component events are posted as.
    component = "lightsout"

    def sensor_of(self, electricity: Electricity) -> tuple[str, float] | None:
        """What identifies the Group's sensor block of this task's kind, and its poll period in
        seconds (None: it names none)."""
        raise NotImplementedError

    async def poll(self, key: SensorKey, group: Obj, electricity: Electricity) -> bool:
        """Read the Group's sensor once and act on it; whether it went well."""
        raise NotImplementedError

    def forgotten(self, kept: Mapping[SensorKey, object]) -> None:
        """Drop the task's own memories of the sensors not in `kept` (all, when empty)."""

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.leading():
                self.close()  # another replica reads; start afresh on return
                self.due.clear()
                self.forgotten({})
                await asyncio.sleep(IDLE)
                continue
            try:
                await self._round(loop)
            except Exception:  # a bug: said, and the next round tries again
                log.exception("reading %s failed", self.task)
            wake = min(self.due.values(), default=loop.time() + IDLE)
            await asyncio.sleep(min(IDLE, max(0.2, wake - loop.time())))

    async def _round(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read each sensor that is due, and forget the Groups that are gone."""
        sensors = self._sensors()
        for key, (group, electricity, every) in sensors.items():
            if self.due.get(key, 0.0) > loop.time():
                continue
            ok = await self.poll(key, group, electricity)
            self.due[key] = loop.time() + (every if ok else min(self.retry, every))
        self._forget(sensors)

    def _sensors(self) -> dict[SensorKey, tuple[Obj, Electricity, float]]:
        out: dict[SensorKey, tuple[Obj, Electricity, float]] = {}
        for group in self.groups():
            meta = group.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            try:
                electricity = group_spec(group).electricity
            except InvalidSpecError:
                continue  # the planner's snapshot says what is wrong with it
            if electricity is None or (found := self.sensor_of(electricity)) is None:
                continue
            key = (str(meta.get("namespace") or ""), str(meta["name"]), str(meta.get("uid")))
            out[(key, found[0])] = (group, electricity, found[1])
        return out

    async def post(self, group: Obj, kind: str, reason: str, message: str) -> None:
        """An event on the Group; one lost is not worth a stopped task."""
        try:
            await asyncio.to_thread(
                self.api.post_event,
                {**group, "kind": "Group"},
                kind,
                reason,
                message,
                self.component,
            )
        except Exception:
            log.exception("posting %s on a group failed", reason)

    def _forget(self, sensors: Mapping[SensorKey, object]) -> None:
        """Drop the readers, timers and memories of Groups (or sensor blocks) that are gone."""
        for key in (self.readers.keys() | self.due.keys()) - sensors.keys():
            self.due.pop(key, None)
            if (reader := self.readers.pop(key, None)) is not None:
                reader.close()
        self.forgotten(sensors)

    def close(self) -> None:
        while self.readers:
            self.readers.popitem()[1].close()
