"""Reads the solar surplus sensor of each Group that names one
(`spec.electricity.solarSurplus.homeAssistant`) into the Group's `status.solarSurplus`.

One task, started by `handlers.autoscale` and run by the replica that holds the autoscaler's
Lease (so one operator reads and writes), reads each such Group's sensor through its own
`SurplusReader` (the token is a Secret of the Group's namespace, read as
`execution.homeassistant` does): at once when it starts leading or the Group's sensor block
changes, then every `pollSeconds` (a minute by default).

A read (`sensor_watts`, pure): the entity's state is the surplus, in the unit its
`unit_of_measurement` says, `W` or `kW` (any other unit, or none, is refused naming it); a
negative state is no surplus; `unavailable`, `unknown` or a state that is not a number is an
error. The Group's status holds the last good reading (`watts`, `readAt`) and the last error;
it is written when the surplus moved by `STEP_WATTS` or more, the error changed, or the
reading written is `RENEW_POLLS` poll periods old (a reading counts for
`models.group.SURPLUS_FRESH_POLLS` of them: `state.series.surplus`), with the
`SolarSurplusReady` condition. A failed read keeps the last good reading, which goes stale by
itself; `SolarSurplusUnreadable` (Warning, once per distinct message) and `SolarSurplusRead`
(when it reads again) events say so on the Group. The write wakes the planner, and each
machine's pass reads the surplus at its next pass (at the latest when the reading it priced
with goes stale): this module decides nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field

from lightsout.actuation.inputs import merged_conditions
from lightsout.execution.homeassistant import (
    EntityState,
    HomeAssistantReader,
    ReadError,
    number,
)
from lightsout.execution.sensors import GroupKey, GroupSensors, Obj, SensorKey
from lightsout.models.enums import ConditionStatus, ConditionType
from lightsout.models.group import Electricity, HomeAssistantSurplus, SolarSurplusStatus
from lightsout.planning.energy.mains import Condition
from lightsout.state.status import group_status
from lightsout.text import clip_middle

log = logging.getLogger(__name__)

#: Seconds one read may take.
READ_TIMEOUT = 5.0
#: The `unit_of_measurement`s read, and their factor to W.
WATTS_PER = {"w": 1.0, "kw": 1000.0}
#: A surplus that moved less than this since the status was written is not written again...
STEP_WATTS = 10.0
#: ...until the reading written is this many poll periods old (it counts for
#: `SURPLUS_FRESH_POLLS`: renewed a poll before it goes stale).
RENEW_POLLS = 2
COMPONENT = "lightsout-surplus"
UNREADABLE, READ = "SolarSurplusUnreadable", "SolarSurplusRead"


def sensor_watts(entity: str, state: EntityState) -> float:
    """The surplus in W that `state` says (see the module docstring); ReadError says why
    not."""
    said = state.known(entity, "it has no surplus now")
    factor = WATTS_PER.get((state.unit or "").strip().lower())
    if factor is None:
        unit = "has no unit_of_measurement" if not state.unit else f"is in {state.unit!r}"
        raise ReadError(
            f"{entity} {clip_middle(unit, 60)}: only a surplus in W or kW is read (give the "
            "sensor unit_of_measurement W or kW)"
        )
    value = number(said)
    if value is None:
        raise ReadError(f"{entity} is {clip_middle(said, 40)!r}, not a number of {state.unit}")
    return max(value * factor, 0.0)


def observe(
    old: SolarSurplusStatus | None,
    source: str,
    watts: float | None,
    error: str | None,
    now: dt.datetime,
) -> SolarSurplusStatus:
    """The status after one read: its surplus (rounded to the watt) or, when it failed, its
    error beside the last good reading."""
    if watts is not None:
        return SolarSurplusStatus(
            entity=source, watts=round(watts), read_at=now.replace(microsecond=0)
        )
    kept = old if old is not None and old.entity == source else SolarSurplusStatus()
    return SolarSurplusStatus(
        entity=source, watts=kept.watts, read_at=kept.read_at, error=error or "not read"
    )


def worth_writing(
    old: SolarSurplusStatus | None, new: SolarSurplusStatus, poll_seconds: int, now: dt.datetime
) -> bool:
    """Whether `new` is to be written over `old` (see the module docstring)."""
    if old is None or old.entity != new.entity or old.error != new.error:
        return True
    if new.error is not None or new.watts is None or new.read_at is None:
        return False  # unreadable again, the same words: nothing to add
    if old.watts is None or old.read_at is None or abs(new.watts - old.watts) >= STEP_WATTS:
        return True
    return (now - old.read_at).total_seconds() >= RENEW_POLLS * poll_seconds


def condition(status: SolarSurplusStatus) -> Condition:
    """The Group's `SolarSurplusReady` condition."""
    read = status.error is None
    said = f"{status.watts or 0:.0f} W" if read else status.error
    return Condition(
        ConditionType.SOLAR_SURPLUS_READY,
        ConditionStatus.TRUE if read else ConditionStatus.FALSE,
        "Read" if read else "Unreadable",
        f"{status.entity}: {said}",
    )


@dataclass
class SurplusReader(HomeAssistantReader):
    """The reader of one Group's surplus sensor; `read` never raises."""

    source: HomeAssistantSurplus

    async def read(self) -> tuple[float | None, str | None]:
        """One read: the surplus in W, or why not in words."""
        return await self.attempt(self._read)

    def _read(self) -> float:
        entity = self.source.entity
        return sensor_watts(entity, self.states([entity])[entity])


@dataclass
class SurplusSensors(GroupSensors[SurplusReader]):
    """The reading task's state (`sensors.GroupSensors`), and the status last written per
    Group and sensor (newer than the watch cache's for a moment)."""

    _: KW_ONLY
    written: dict[SensorKey, SolarSurplusStatus] = field(default_factory=dict)

    task = "the Groups' solar surplus sensors"
    component = COMPONENT

    def sensor_of(self, electricity: Electricity) -> tuple[str, float] | None:
        found = electricity.solar_surplus
        if found is None or found.home_assistant is None:
            return None
        return found.home_assistant.model_dump_json(), found.home_assistant.poll_seconds

    async def poll(self, key: SensorKey, group: Obj, electricity: Electricity) -> bool:
        """Read the Group's sensor once and write its status when worth it; whether read."""
        assert electricity.solar_surplus is not None  # sensor_of found it
        sensor = electricity.solar_surplus.home_assistant
        assert sensor is not None
        reader = self.readers.get(key)
        if reader is None:
            reader = SurplusReader(self.api, key[0][0], sensor, READ_TIMEOUT)
            self.readers[key] = reader
        watts, error = await reader.read()
        now = dt.datetime.now(dt.UTC)
        old = self.written.get(key) or group_status(group).solar_surplus
        new = observe(old, f"{sensor.entity}@{sensor.address}", watts, error, now)
        if not worth_writing(old, new, sensor.poll_seconds, now):
            return error is None
        try:
            await asyncio.to_thread(self._write, key[0], group, new, now)
        except Exception:
            log.exception("writing the solar surplus of group %s/%s failed", *key[0][:2])
            return False
        self.written[key] = new
        if new.error is not None and (old is None or old.error != new.error):
            log.warning("group %s/%s: %s: %s", key[0][0], key[0][1], UNREADABLE, new.error)
            await self.post(group, "Warning", UNREADABLE, f"{new.entity}: {new.error}")
        elif new.error is None and (old is None or old.error is not None):
            message = f"read {new.watts or 0:.0f} W from {new.entity}"
            await self.post(group, "Normal", READ, message)
        return error is None

    def _write(self, key: GroupKey, group: Obj, new: SolarSurplusStatus, now: dt.datetime) -> None:
        current = group_status(group).conditions
        patch = {
            # Nulls clear what the reading no longer has (an error gone).
            "solarSurplus": new.model_dump(mode="json", by_alias=True),
            "conditions": merged_conditions(current, (condition(new),), None, now),
        }
        self.api.patch_status(key[0], "groups", key[1], patch)

    def forgotten(self, kept: Mapping[SensorKey, object]) -> None:
        self.written = {key: said for key, said in self.written.items() if key in kept}
