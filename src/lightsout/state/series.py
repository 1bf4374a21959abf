"""Series of values by interval (day-ahead electricity prices, grid carbon intensity), and a
Group's series read from the ConfigMaps its `spec.electricity` names.

The text is what a ConfigMap key (or a trace file) holds, the shape the day-ahead markets and
grid operators publish: one `start,value` line per interval, the start an ISO 8601 time with
its offset (`2024-03-11T00:00:00Z`), an optional header line (`start_utc,price_eur_mwh`) and
`#` comments. Each interval lasts until the next one starts; the last lasts as long as the one
before it (hourly or quarter-hourly alike). `parse` refuses what does not read, naming the
line; nothing is guessed.

`Series.at` is the value in force at a moment (None outside the series: no forecast there),
`next_change` the first later moment at which that differs (the end of the series included,
where the value becomes unknown), and `integral` a draw priced (or weighted by carbon) over a
period, each interval at its own value.

`resolve` turns `spec.electricity.series` / `.carbon` and the labelled ConfigMaps the caller
has (`SERIES_LABEL`: the operator caches those only) into `Series`, the prices already per kWh
with the markup added; or says, naming the ConfigMap, the key and the line, why it cannot: then
the Group has no series (its tariff prices energy, and deferrable Jobs run at once:
`planning.autoscaler.deferral`). A Home Assistant price sensor is no exception: the operator's
leader writes what it reads into a ConfigMap of its own (`execution.prices`), and
its series is read from there, so the operator's passes and planner, `lightsout status` and
`plan` and the replay all read every series one way.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from pydantic import ValidationError

from lightsout.models.group import (
    PRICES_KEY,
    SERIES_LABEL,
    SURPLUS_FRESH_POLLS,
    ConfigMapKeyRef,
    Electricity,
    HomeAssistantPrices,
    SolarSurplusStatus,
    prices_config_map,
)

#: At most this many intervals: a year of quarter-hours, far more than a ConfigMap holds.
MAX_POINTS = 35_136


class SeriesError(ValueError):
    """The text is not a series; the message names the line and what is wrong with it."""


@dataclass(frozen=True)
class Series:
    """Values by interval, in order, each from its start to the next one's."""

    starts: tuple[datetime, ...]
    values: tuple[float, ...]
    #: The last interval's length (the one before it).
    last: timedelta

    @property
    def first(self) -> datetime:
        return self.starts[0]

    @property
    def end(self) -> datetime:
        return self.starts[-1] + self.last

    def at(self, moment: datetime) -> float | None:
        """The value in force at `moment`; None before the first interval or after the last."""
        if moment < self.starts[0] or moment >= self.end:
            return None
        return self.values[bisect.bisect_right(self.starts, moment) - 1]

    def next_change(self, moment: datetime) -> datetime | None:
        """The first moment after `moment` whose value differs: a later interval's start, or the
        series' end; None when `moment` is at or past the end."""
        if moment >= self.end:
            return None
        if moment < self.starts[0]:
            return self.starts[0]
        index = bisect.bisect_right(self.starts, moment) - 1
        now = self.values[index]
        for later in range(index + 1, len(self.starts)):
            if self.values[later] != now:
                return self.starts[later]
        return self.end

    def covers(self, start: datetime, end: datetime) -> bool:
        return self.starts[0] <= start and end <= self.end

    def integral(self, watts: float, start: datetime, end: datetime) -> float:
        """`watts` drawn from `start` to `end`, in kWh times each interval's value (a price
        per kWh gives a cost, gCO2/kWh gives grams); a stretch outside the series counts 0."""
        total, at = 0.0, start
        while at < end:
            change = self.next_change(at)
            until = end if change is None or change > end else change
            value = self.at(at) or 0.0
            total += watts / 1000.0 * (until - at).total_seconds() / 3600.0 * value
            if change is None:
                break
            at = until
        return total

    def scaled(self, factor: float, offset: float = 0.0) -> Series:
        """Every value times `factor` plus `offset` (EUR/MWh to EUR/kWh with a markup)."""
        return Series(self.starts, tuple(v * factor + offset for v in self.values), self.last)


def parse(text: str) -> Series:
    """The series `text` holds (see the module docstring); SeriesError names what is wrong."""
    starts: list[datetime] = []
    values: list[float] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2:
            raise SeriesError(f"line {number}: {raw.strip()!r} is not `start,value`")
        start = instant(fields[0])
        if start is None:
            if not starts and not values and _is_header(fields[1]):
                continue  # a header line: `start_utc,price_eur_mwh`
            raise SeriesError(f"line {number}: {fields[0]!r} is not an ISO 8601 time with offset")
        try:
            value = float(fields[1])
        except ValueError:
            raise SeriesError(f"line {number}: {fields[1]!r} is not a number") from None
        if not math.isfinite(value):
            raise SeriesError(f"line {number}: {fields[1]!r} is not a finite number")
        if starts and start <= starts[-1]:
            raise SeriesError(f"line {number}: {fields[0]} does not come after the line before")
        starts.append(start)
        values.append(value)
        if len(starts) > MAX_POINTS:
            raise SeriesError(f"more than {MAX_POINTS} intervals")
    if len(starts) < 2:
        raise SeriesError("fewer than two intervals: the length of an interval is unknown")
    return Series(tuple(starts), tuple(values), starts[-1] - starts[-2])


def instant(text: str) -> datetime | None:
    """An ISO 8601 time with its offset (`Z` too) as a UTC datetime; None when `text` is not
    one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None  # a time without its offset is read differently in every zone
    return moment.astimezone(UTC)


def _is_header(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


#: ConfigMaps by (namespace, name): their `data`.
ConfigMaps = Mapping[tuple[str, str], Mapping[str, str]]


@dataclass(frozen=True)
class Resolved:
    """A Group's series, as far as they could be read."""

    prices: Series | None = None
    carbon: Series | None = None
    #: Why a series it names is not there (None: every series it names is).
    problem: str | None = None


def resolve(
    electricity: Electricity | None, namespace: str, maps: ConfigMaps, *, group: str
) -> Resolved:
    """The series `electricity` (of Group `group`) names, from `maps` (the labelled
    ConfigMaps); a Home Assistant price sensor's from the ConfigMap the operator writes its
    prices into (`prices_config_map`)."""
    if electricity is None:
        return Resolved()
    problems: list[str] = []
    prices = carbon = None
    if electricity.series is not None:
        source = electricity.series
        found: Series | None
        if source.home_assistant is not None:
            found = _sensor_prices(source.home_assistant, namespace, group, maps, problems)
            per_kwh = 1.0  # the operator wrote them per kWh, after the sensor's unit
        else:
            assert source.config_map_key_ref is not None  # PriceSeries' one-of rule
            found = _read(source.config_map_key_ref, namespace, maps, "series", problems)
            per_kwh = 0.001 if source.unit == "PerMWh" else 1.0
        if found is not None:
            prices = found.scaled(per_kwh, source.markup_per_kwh)
    if electricity.carbon is not None:
        carbon = _read(electricity.carbon.config_map_key_ref, namespace, maps, "carbon", problems)
    return Resolved(prices, carbon, "; ".join(problems) or None)


def _sensor_prices(
    sensor: HomeAssistantPrices,
    namespace: str,
    group: str,
    maps: ConfigMaps,
    problems: list[str],
) -> Series | None:
    ref = ConfigMapKeyRef(name=prices_config_map(group), key=PRICES_KEY)
    if (namespace, ref.name) not in maps:
        named = f"{namespace}/{ref.name}" if namespace else ref.name
        problems.append(
            f"spec.electricity.series: the Home Assistant sensor {sensor.entity} has not been "
            f"read yet (the operator writes its prices into ConfigMap {named}): see the "
            "Group's events"
        )
        return None
    return _read(ref, namespace, maps, "series", problems)


def _read(
    ref: ConfigMapKeyRef, namespace: str, maps: ConfigMaps, field: str, problems: list[str]
) -> Series | None:
    named = f"{namespace}/{ref.name}" if namespace else ref.name
    where = f"spec.electricity.{field}: ConfigMap {named}"
    data = maps.get((namespace, ref.name))
    if data is None:
        problems.append(f"{where} not found (or without the label {SERIES_LABEL})")
        return None
    text = data.get(ref.key)
    if text is None:
        problems.append(f"{where} has no key {ref.key}")
        return None
    try:
        return _parsed(text)
    except SeriesError as error:
        problems.append(f"{where} key {ref.key}: {error}")
        return None


@lru_cache(maxsize=64)
def _parsed(text: str) -> Series:
    """`parse`, once per text: every machine's pass and every plan resolve their Group's series,
    and a day-ahead series changes once a day."""
    return parse(text)


def solar_surplus_of(raw: object) -> SolarSurplusStatus | None:
    """A Group's `status.solarSurplus` as the API model reads it (None: absent, or unreadable),
    for `state.status` (`GroupStatusView.solar_surplus`) and `surplus` below."""
    if raw is None:
        return None
    try:
        return SolarSurplusStatus.model_validate(raw)
    except ValidationError:
        return None


def surplus(
    electricity: Electricity | None,
    namespace: str,
    maps: ConfigMaps,
    status: SolarSurplusStatus | Mapping[str, object] | None,
) -> Series | None:
    """The Group's solar surplus in W as a series (None: it names none, or none is known).

    From a ConfigMap key (`solarSurplus.configMapKeyRef`: the replay's, or a record of the
    user's), as `parse` reads it; from a Home Assistant sensor, the Group's
    `status.solarSurplus` (`status`, as `state.status` reads it, or as stored) as the
    operator's leader last wrote it: one interval from its `readAt`, `SURPLUS_FRESH_POLLS` poll
    periods long, so that a reading not renewed counts no more (stale: no surplus). Nothing
    here is a problem of the Group's series: without a surplus its machines are priced as
    usual."""
    found = electricity.solar_surplus if electricity is not None else None
    if found is None:
        return None
    if found.config_map_key_ref is not None:
        return _read(found.config_map_key_ref, namespace, maps, "solarSurplus", [])
    assert found.home_assistant is not None  # SolarSurplus' one-of rule
    read = solar_surplus_of(status) if isinstance(status, Mapping) else status
    if read is None or read.watts is None or read.read_at is None:
        return None
    if read.read_at.tzinfo is None or not math.isfinite(read.watts):
        return None  # a time without its offset is read differently in every zone
    fresh = timedelta(seconds=SURPLUS_FRESH_POLLS * found.home_assistant.poll_seconds)
    return Series((read.read_at.astimezone(UTC),), (max(read.watts, 0.0),), fresh)


def config_maps(objects: object) -> dict[tuple[str, str], Mapping[str, str]]:
    """(namespace, name) → data of the ConfigMaps in `objects` (a list of API objects)."""
    out: dict[tuple[str, str], Mapping[str, str]] = {}
    if not isinstance(objects, list | tuple):
        return out
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        data = obj.get("data") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping):
            continue
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        out[key] = {str(k): str(v) for k, v in (data or {}).items()}
    return out


__all__ = [
    "MAX_POINTS",
    "ConfigMaps",
    "Resolved",
    "Series",
    "SeriesError",
    "config_maps",
    "instant",
    "parse",
    "resolve",
    "surplus",
]
