"""Reads a UPS through Home Assistant (`spec.battery.source.homeAssistant`) into the same
`planning.energy.mains.Reading` a NUT server gives, so everything after the read is NUT's path.

Called by `execution.ups.PowerSources`, which keeps one `HomeAssistantUps` per Group namespace
and source block (the token is a Secret of the Group's namespace) and calls `read` once per
poll. A read:

1. The token and `GET <url>/api/states/<entity>` as `execution.homeassistant` does them (the
   token kept, a refused one not sent again until the Secret changes): the status entity,
   then the charge, runtime and load entities that are set. Each answer's `state` is a string.
2. The states become NUT's variables (`variables`, pure): the status entity's is `ups.status`
   and must be NUT's flags (upper-case words: `OL`, `OB DISCHRG LB`; the NUT integration's
   "Status" text, `On Battery`, is refused by name); the charge is `battery.charge`, the
   runtime `battery.runtime` in seconds after its `unit_of_measurement`, the load `ups.load`.
   A figure that is not a number, or in a unit not known, is left out: that field is unknown,
   as for a variable upsd does not serve.
3. Errors come back as a Reading's error, in words that say what to fix and never hold the
   token: those of `execution.homeassistant` (the Secret, Home Assistant unreachable, the token
   refused naming its Secret, an entity it does not have), and an entity `unavailable` or
   `unknown` (named: Home Assistant cannot read the UPS). The Group's mains are then Unknown,
   `PowerSourceReachable` False: no battery decision is made on a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lightsout.execution.homeassistant import (
    EntityState,
    HomeAssistantReader,
    ReadError,
    number,
)
from lightsout.models.battery import HomeAssistantSource
from lightsout.planning.energy import mains
from lightsout.text import clip_middle

#: NUT's `ups.status`: upper-case flags separated by spaces.
NUT_FLAGS = re.compile(r"[A-Z]+(?: +[A-Z]+)*")
#: A duration sensor's units (Home Assistant lets a user show the runtime in any), in seconds.
SECONDS_PER = {"s": 1.0, "ms": 0.001, "min": 60.0, "h": 3600.0, "d": 86400.0}


def variables(source: HomeAssistantSource, states: Mapping[str, EntityState]) -> dict[str, str]:
    """NUT's variables from the entities' states (ReadError when the status cannot be told)."""
    for name, state in states.items():
        state.known(name, "it cannot read the UPS")
    flags = states[source.status_entity].state.strip()
    if not NUT_FLAGS.fullmatch(flags):
        shown = clip_middle(flags, 60)
        raise ReadError(
            f"{source.status_entity} is {shown!r}, not NUT status flags (OL, OB, LB ...): name "
            "the NUT integration's status data sensor (sensor.<ups>_status_data), not its "
            "status text"
        )
    out = {"ups.status": flags}
    figures: tuple[tuple[str, str | None, Callable[[EntityState], float | None]], ...] = (
        ("battery.charge", source.charge_entity, _percent),
        ("battery.runtime", source.runtime_entity, _seconds),
        ("ups.load", source.load_entity, _percent),
    )
    for variable, entity, convert in figures:
        found = states.get(entity) if entity else None
        value = None if found is None else convert(found)
        if value is not None:
            out[variable] = f"{value:g}"
    return out


def _percent(state: EntityState) -> float | None:
    return number(state.state) if state.unit in (None, "", "%") else None


def _seconds(state: EntityState) -> float | None:
    per = SECONDS_PER.get(state.unit or "s")
    value = number(state.state)
    return None if per is None or value is None else value * per


@dataclass
class HomeAssistantUps(HomeAssistantReader):
    """The reader of one UPS source block for the Groups of one namespace; `read` never
    raises."""

    source: HomeAssistantSource

    async def read(self) -> mains.Reading:
        """One read: NUT's variables, or the error in words."""
        found, error = await self.attempt(self._read)
        return mains.Reading({}, error) if found is None else mains.Reading(found)

    def _read(self) -> dict[str, str]:
        source = self.source
        figures = (source.charge_entity, source.runtime_entity, source.load_entity)
        entities = list(dict.fromkeys([source.status_entity, *(e for e in figures if e)]))
        return variables(source, self.states(entities))
