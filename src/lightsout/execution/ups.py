"""Reads the UPSes Groups name (`spec.battery.source`) and keeps each Group's `status.battery`.

One task, run by the replica that holds the autoscaler's Lease (so one operator reads and
posts), reads every UPS named by some Group each `pollSeconds` (the shortest of its Groups'),
through one `aionut` client per UPS (NUT's network protocol: `LIST VAR`). Each reading, or the
error that stopped it, goes through `planning.energy.mains.observe`; the Group's status is
written when `worth_writing` says so (any change of the mains or flags, not every poll's
runtime second), with its `PowerSourceReachable` and `OnBattery` conditions and an event for
each change. The write wakes the planner, which decides from the Group's status
(`planning.autoscaler.battery`): this module decides nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aionut import AIONUTClient, NUTError
from pydantic import ValidationError

from lightsout.actuation.inputs import merged_conditions
from lightsout.k8s.api import Api
from lightsout.models.battery import BatteryPolicy, BatteryStatus, NutSource
from lightsout.planning.autoscaler.battery import source_name
from lightsout.planning.energy import mains
from lightsout.state.build import battery_status_of
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


@dataclass
class PowerSources:
    """The reading task's state: a client per UPS, when each is read next, and the status
    last written per Group (newer than the watch cache's copy for a moment after a write)."""

    api: Api
    groups: Callable[[], Sequence[Obj]]
    leading: Callable[[], bool]
    clients: dict[str, AIONUTClient] = field(default_factory=dict)
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
            for source, groups in fed.items():
                if self.due.get(source, 0.0) > loop.time():
                    continue
                nut = groups[0][1].source.nut
                self.due[source] = loop.time() + min(p.poll_seconds for _, p in groups)
                reading = await read(self._client(source, nut), nut.ups)
                now = dt.datetime.now(dt.UTC)
                for obj, _policy in groups:
                    try:
                        await asyncio.to_thread(self._write, obj, source, reading, now)
                    except Exception:
                        log.exception("writing the battery status of a Group failed")
            self._forget(set(fed))
            wake = min(self.due.values(), default=loop.time() + IDLE)
            await asyncio.sleep(max(0.2, wake - loop.time()))

    def _fed(self) -> dict[str, list[tuple[Obj, BatteryPolicy]]]:
        """Source → the Groups it feeds, with their (valid) battery policies."""
        out: dict[str, list[tuple[Obj, BatteryPolicy]]] = {}
        for obj in self.groups():
            raw = (obj.get("spec") or {}).get("battery")
            if raw is None:
                continue
            try:
                policy = BatteryPolicy.model_validate(raw)
            except ValidationError:
                continue  # the planner's snapshot says what is wrong with it
            out.setdefault(source_name(policy), []).append((obj, policy))
        return out

    def _client(self, source: str, nut: NutSource) -> AIONUTClient:
        client = self.clients.get(source)
        if client is None:
            client = AIONUTClient(nut.host, nut.port, timeout=READ_TIMEOUT)
            self.clients[source] = client
        return client

    def _write(self, obj: Obj, source: str, reading: mains.Reading, now: dt.datetime) -> None:
        meta = obj["metadata"]
        key = ObjectKey(str(meta.get("namespace") or ""), str(meta["name"]))
        old = self.written.get((key, str(meta.get("uid"))))
        if old is None:
            old = battery_status_of(obj)
        new = mains.observe(old, source, reading, now)
        if not mains.worth_writing(old, new):
            return
        current = (obj.get("status") or {}).get("conditions") or []
        patch = {
            # Nulls clear what the reading no longer has (an error gone); the outage record is
            # the plan applier's and is left alone.
            "battery": new.model_dump(mode="json", by_alias=True, exclude={"outage"}),
            "conditions": merged_conditions(current, mains.conditions(new), None, now),
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

    def _forget(self, sources: set[str]) -> None:
        for gone in [s for s in self.clients if s not in sources]:
            with contextlib.suppress(Exception):
                self.clients.pop(gone).shutdown()
            self.due.pop(gone, None)

    def close(self) -> None:
        for client in self.clients.values():
            with contextlib.suppress(Exception):
                client.shutdown()
        self.clients.clear()
