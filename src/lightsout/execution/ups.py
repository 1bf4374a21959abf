"""Reads the UPSes Groups name (`spec.battery.source`) and keeps each Group's `status.battery`.

One task, run by the replica that holds the autoscaler's Lease (so one operator reads and
posts), reads every UPS named by some Group each `pollSeconds` (the shortest of its Groups'):
a NUT server through one `aionut` client per UPS (NUT's network protocol: `LIST VAR`), Home
Assistant's entities through one `ups_homeassistant.HomeAssistantUps` per Group namespace and
source block (its token is a Secret of the Group's namespace: Groups of another namespace
naming the same UPS are read with their own). Each reading, or the error that stopped it,
goes through `planning.energy.mains.observe`; the Group's status is written when
`worth_writing` says so (any change of the mains or flags, not every poll's runtime second),
with its `PowerSourceReachable` and `OnBattery` conditions and an event for
each change. The write wakes the planner, which decides from the Group's status
(`planning.autoscaler.battery`): this module decides nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aionut import AIONUTClient, NUTError

from lightsout.actuation.inputs import InvalidSpecError, group_spec, merged_conditions
from lightsout.execution.ups_homeassistant import HomeAssistantUps
from lightsout.k8s.api import Api
from lightsout.models.battery import BatteryPolicy, BatteryStatus
from lightsout.planning.autoscaler.battery import source_name
from lightsout.planning.energy import mains
from lightsout.state.status import group_status
from lightsout.state.types import ObjectKey

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
#: Seconds one read may take (aionut tries twice, so about twice this at worst).
READ_TIMEOUT = 3.0
#: Seconds between looks at the Groups when none names a UPS.
IDLE = 5.0


async def read(client: AIONUTClient, ups: str) -> mains.Reading:
    """One read of a UPS: its variables, or the error in words."""
    try:
        return mains.Reading(await client.list_vars(ups))
    except NUTError as error:
        # aionut's timeout carries no message: name the class then.
        return mains.Reading({}, str(error) or type(error).__name__)
    except (OSError, ValueError, asyncio.IncompleteReadError) as error:
        return mains.Reading({}, f"{type(error).__name__}: {error}")


class Reader(Protocol):
    """One UPS source as the task reads it: `read` never raises (the error is in the Reading)."""

    async def read(self) -> mains.Reading: ...

    def close(self) -> None: ...


@dataclass
class NutReader:
    """A UPS on a NUT server, through one persistent aionut client."""

    client: AIONUTClient
    ups: str

    async def read(self) -> mains.Reading:
        return await read(self.client, self.ups)

    def close(self) -> None:
        self.client.shutdown()


@dataclass
class PowerSources:
    """The reading task's state: a reader per UPS, when each is read next, and the status
    last written per Group (newer than the watch cache's copy for a moment after a write)."""

    api: Api
    groups: Callable[[], Sequence[Obj]]
    leading: Callable[[], bool]
    #: Per reader key (`_reader_key`): one per NUT UPS, one per namespace and Home Assistant
    #: source block.
    readers: dict[Hashable, Reader] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    written: dict[tuple[ObjectKey, str], BatteryStatus] = field(default_factory=dict)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            fed = self._fed()
            if not self.leading() or not fed:
                self.written.clear()  # another replica writes; trust the caches on return
                await asyncio.sleep(IDLE)
                continue
            keys: set[Hashable] = set()
            for source, groups in fed.items():
                keys |= {_reader_key(obj, policy) for obj, policy in groups}
                if self.due.get(source, 0.0) > loop.time():
                    continue
                self.due[source] = loop.time() + min(p.poll_seconds for _, p in groups)
                await self._poll(source, groups)
            self._forget(set(fed), keys)
            wake = min(self.due.values(), default=loop.time() + IDLE)
            await asyncio.sleep(max(0.2, wake - loop.time()))

    async def _poll(self, source: str, groups: list[tuple[Obj, BatteryPolicy]]) -> None:
        """Read the source once per reader its Groups need, and write each Group's status."""
        readings: dict[Hashable, tuple[mains.Reading, dt.datetime]] = {}
        for obj, policy in groups:
            key = _reader_key(obj, policy)
            if key not in readings:
                reading = await self._reader(key, obj, policy).read()
                readings[key] = (reading, dt.datetime.now(dt.UTC))
            reading, now = readings[key]
            try:
                await asyncio.to_thread(self._write, obj, source, reading, now)
            except Exception:
                log.exception("writing the battery status of a Group failed")

    def _fed(self) -> dict[str, list[tuple[Obj, BatteryPolicy]]]:
        """Source → the Groups it feeds, with their (valid) battery policies."""
        out: dict[str, list[tuple[Obj, BatteryPolicy]]] = {}
        for obj in self.groups():
            try:
                policy = group_spec(obj).battery
            except InvalidSpecError:
                continue  # the planner's snapshot says what is wrong with it
            if policy is not None:
                out.setdefault(source_name(policy), []).append((obj, policy))
        return out

    def _reader(self, key: Hashable, obj: Obj, policy: BatteryPolicy) -> Reader:
        reader = self.readers.get(key)
        if reader is None:
            nut, home_assistant = policy.source.nut, policy.source.home_assistant
            if nut is not None:
                client = AIONUTClient(nut.host, nut.port, timeout=READ_TIMEOUT)
                reader = NutReader(client, nut.ups)
            else:
                assert home_assistant is not None  # PowerSource's one-of rule
                namespace = str(obj["metadata"].get("namespace") or "")
                reader = HomeAssistantUps(self.api, namespace, home_assistant, READ_TIMEOUT)
            self.readers[key] = reader
        return reader

    def _write(self, obj: Obj, source: str, reading: mains.Reading, now: dt.datetime) -> None:
        meta = obj["metadata"]
        key = ObjectKey(str(meta.get("namespace") or ""), str(meta["name"]))
        status = group_status(obj)
        old = self.written.get((key, str(meta.get("uid")))) or status.battery
        new = mains.observe(old, source, reading, now)
        if not mains.worth_writing(old, new):
            return
        patch = {
            # Nulls clear what the reading no longer has (an error gone); the outage record is
            # the plan applier's and is left alone.
            "battery": new.model_dump(mode="json", by_alias=True, exclude={"outage"}),
            "conditions": merged_conditions(status.conditions, mains.conditions(new), None, now),
        }
        self.api.patch_status(key.namespace, "groups", key.name, patch)
        self.written[(key, str(meta.get("uid")))] = new
        for change in mains.changes(old, new):
            kind = "Warning" if change.warning else "Normal"
            try:
                self.api.post_event(
                    {**obj, "kind": "Group"}, kind, change.reason, change.message, "lightsout-ups"
                )
            except Exception:  # an event lost is not worth a lost status
                log.exception("posting %s on group %s failed", change.reason, key)
            log.info("group %s: %s: %s", key, change.reason, change.message)

    def _forget(self, sources: set[str], keys: set[Hashable]) -> None:
        for gone in [k for k in self.readers if k not in keys]:
            with contextlib.suppress(Exception):
                self.readers.pop(gone).close()
        for source in [s for s in self.due if s not in sources]:
            self.due.pop(source)

    def close(self) -> None:
        for reader in self.readers.values():
            with contextlib.suppress(Exception):
                reader.close()
        self.readers.clear()


def _reader_key(obj: Obj, policy: BatteryPolicy) -> Hashable:
    """Groups with one key share one reader: a NUT UPS is read once for all, Home Assistant
    once per namespace and source block (the token is the namespace's Secret)."""
    source = policy.source
    if source.home_assistant is None:
        return source_name(policy)
    namespace = str(obj["metadata"].get("namespace") or "")
    return (source_name(policy), namespace, source.home_assistant.model_dump_json())
