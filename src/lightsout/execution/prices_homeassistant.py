"""Reads a Home Assistant price sensor (`spec.electricity.series.homeAssistant`) into prices per
kWh by interval, the series `execution.prices` writes into the Group's prices ConfigMap.

Called by `execution.prices.PriceSensors`, which keeps one `HomeAssistantPriceReader` per Group
and calls `read` once per poll. A read:

1. The token and `GET <url>/api/states/<entity>` as `execution.homeassistant` does them (the
   token kept, a refused one not sent again until the Secret changes).
2. The state becomes prices (`sensor_prices`, pure). The days are read from the Nord Pool
   integration's `raw_today` and `raw_tomorrow` (lists of `{start, end, value}`, start and end
   ISO 8601 times with their offset) when the sensor has `raw_today`, else from `today` and
   `tomorrow` when those are lists of entries (Tibber's shape, `{startsAt, total}`); in
   either, an entry's start is `start` or `startsAt` and its value `value` or `total`.
   Tomorrow's list is empty until the day-ahead auction publishes (about 13:00 CET); with
   `tomorrow_valid: false` it is left out whatever it holds. The intervals of both days must
   follow one another, each starting where the one before ends (where an entry says its
   `end`): a day of 23 or 25 hours when the clocks change is nothing special, since every
   time carries its offset.
3. The `unit_of_measurement` says what a value is: `<currency>/kWh` is taken as it is,
   `<currency>/MWh` divided by 1000, any other unit is refused, naming it. The currency is not
   converted: it must be the Group's `spec.electricity.currency` (a sensor in cents, `c/kWh`,
   or in another currency would price every hour wrong).
4. Errors come back in words that say what to fix and never hold the token: those of
   `execution.homeassistant`, a sensor `unavailable` or without the attributes (named), an
   entry that does not read (`raw_today[3].start '…' is not an ISO 8601 time with offset`),
   a unit refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from lightsout.execution.homeassistant import (
    EntityState,
    HomeAssistantReader,
    ReadError,
)
from lightsout.models.group import HomeAssistantPrices
from lightsout.state.parse import format_time
from lightsout.state.series import MAX_POINTS, Series, instant
from lightsout.text import clip_middle

#: The attributes a price sensor's two days are read from: the Nord Pool integration's when it
#: has them, else lists of entries as Tibber's API gives them.
NORD_POOL_DAYS = ("raw_today", "raw_tomorrow")
ENTRY_DAYS = ("today", "tomorrow")
#: Set to false by the Nord Pool integration while tomorrow's list is not complete.
TOMORROW_VALID = "tomorrow_valid"
#: An entry's start and its value, by the names either shape gives them.
STARTS = ("start", "startsAt")
VALUES = ("value", "total")
#: The energy after the `/` of `unit_of_measurement` (lower case) → the factor to a price per
#: kWh.
PER_KWH = {"kwh": 1.0, "mwh": 0.001}


@dataclass(frozen=True)
class SensorPrices:
    """What one read of a price sensor found: its prices per kWh, and the unit it gave."""

    entity: str
    unit: str
    series: Series

    def csv(self) -> str:
        """The prices as a series' ConfigMap key holds them (`state.series.parse` reads it)."""
        lines = [
            f"# {self.entity} in {self.unit}, per kWh: written by Lights-Out from Home Assistant",
            "start,price_per_kwh",
        ]
        lines += [
            f"{format_time(start)},{value:.12g}"
            for start, value in zip(self.series.starts, self.series.values, strict=True)
        ]
        return "\n".join(lines) + "\n"

    def describe(self) -> str:
        first, end = format_time(self.series.first), format_time(self.series.end)
        return f"{len(self.series.starts)} prices from {first} to {end} ({self.unit})"


@dataclass(frozen=True)
class _Entry:
    where: str  # `raw_today[3]`
    start: datetime
    end: datetime | None
    value: float


def sensor_prices(entity: str, state: EntityState, currency: str) -> SensorPrices:
    """The prices `state` lists, in `currency` (see the module docstring); ReadError says what
    does not read."""
    attributes = state.attributes
    if NORD_POOL_DAYS[0] in attributes:
        days = NORD_POOL_DAYS
    elif _lists_entries(attributes.get(ENTRY_DAYS[0])):
        days = ENTRY_DAYS
    else:
        state.known(entity, "it has no prices now")
        raise ReadError(
            f"{entity} has no attribute raw_today (the Nord Pool integration's) nor today as a "
            "list of {startsAt, total} (Tibber's): name a sensor that lists today's prices"
        )
    per_kwh = _per_kwh(entity, state.unit, currency)
    today, tomorrow = days
    entries = _entries(entity, today, attributes[today])
    if attributes.get(tomorrow) is not None and attributes.get(TOMORROW_VALID) is not False:
        entries += _entries(entity, tomorrow, attributes[tomorrow])
    for before, after in pairwise(entries):
        if after.start <= before.start:
            raise ReadError(
                f"{entity}'s {after.where} starts at {format_time(after.start)}, not after "
                f"{before.where} ({format_time(before.start)})"
            )
        if before.end is not None and before.end != after.start:
            raise ReadError(
                f"{entity}'s {before.where} ends at {format_time(before.end)} but {after.where} "
                f"starts at {format_time(after.start)}: the series cannot hold a gap or an overlap"
            )
    if len(entries) < 2:
        raise ReadError(
            f"{entity} lists fewer than two prices in {today} and {tomorrow}: the length of an "
            "interval is unknown"
        )
    if len(entries) > MAX_POINTS:
        raise ReadError(f"{entity} lists more than {MAX_POINTS} prices")
    starts = tuple(entry.start for entry in entries)
    values = tuple(entry.value * per_kwh for entry in entries)
    return SensorPrices(entity, str(state.unit), Series(starts, values, starts[-1] - starts[-2]))


def _lists_entries(found: object) -> bool:
    """A `today` that lists entries (the Nord Pool integration's own is bare numbers)."""
    return isinstance(found, list) and bool(found) and all(isinstance(e, Mapping) for e in found)


def _per_kwh(entity: str, unit: str | None, currency: str) -> float:
    sensor_currency, slash, energy = (unit or "").partition("/")
    factor = PER_KWH.get(energy.strip().lower()) if slash and sensor_currency.strip() else None
    if factor is None:
        said = "has no unit_of_measurement" if not unit else f"is in {clip_middle(unit, 40)!r}"
        raise ReadError(
            f"{entity} {said}: only a price per kWh or per MWh (EUR/kWh, EUR/MWh) is read"
        )
    if sensor_currency.strip().upper() != currency.upper():
        raise ReadError(
            f"{entity} is in {clip_middle(str(unit), 40)!r}, the Group's prices in {currency} "
            "(spec.electricity.currency): a price is not converted, show the sensor's prices in "
            f"{currency} (not cents)"
        )
    return factor


def _entries(entity: str, attribute: str, found: object) -> list[_Entry]:
    if not isinstance(found, list):
        raise ReadError(
            f"{entity}'s attribute {attribute} is not a list of prices ({{start, end, value}})"
        )
    return [_entry(entity, f"{attribute}[{index}]", item) for index, item in enumerate(found)]


def _entry(entity: str, where: str, item: object) -> _Entry:
    if not isinstance(item, Mapping):
        raise ReadError(f"{entity}'s {where} is not an entry with a start and a value")
    start_key = _first_key(item, STARTS)
    value_key = _first_key(item, VALUES)
    if start_key is None or value_key is None:
        missing = " nor ".join(STARTS if start_key is None else VALUES)
        raise ReadError(f"{entity}'s {where} has no {missing}")
    start = _time(entity, f"{where}.{start_key}", item[start_key])
    end = _time(entity, f"{where}.end", item["end"]) if item.get("end") is not None else None
    value = item[value_key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        shown = clip_middle(repr(value), 40)
        raise ReadError(f"{entity}'s {where}.{value_key} {shown} is not a finite number")
    return _Entry(where, start, end, float(value))


def _first_key(item: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    return next((key for key in keys if item.get(key) is not None), None)


def _time(entity: str, where: str, text: object) -> datetime:
    moment = instant(text) if isinstance(text, str) else None
    if moment is None:
        shown = clip_middle(repr(text), 60)
        raise ReadError(f"{entity}'s {where} {shown} is not an ISO 8601 time with offset")
    return moment


@dataclass
class HomeAssistantPriceReader(HomeAssistantReader):
    """The reader of one Group's price sensor; `read` never raises."""

    source: HomeAssistantPrices

    async def read(self, currency: str) -> tuple[SensorPrices | None, str | None]:
        """One read: the sensor's prices in `currency`, or why not in words."""
        return await self.attempt(lambda: self._read(currency))

    def _read(self, currency: str) -> SensorPrices:
        entity = self.source.entity
        return sensor_prices(entity, self.states([entity])[entity], currency)
