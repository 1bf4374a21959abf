"""A Group's price of electricity over time: one price, or a time-of-use tariff over it.

`price_at` is the price in force at a moment: the Group's price series' where it has one (a
day-ahead tariff from a ConfigMap, `state.series`, already per kWh with its markup),
else the first of `spec.electricity.rates` that applies then (its day and its time of day, read
in the tariff's time zone), else the base `pricePerKWh`. `next_change` is the first later moment
at which that price differs (None: it never does); a machine's pass checkpoints its energy
account then (`machine.passes`), so each stretch of time is counted at its own price, live and
in the replay alike.

A solar surplus (`spec.electricity.solarSurplus`, a `Series` of W: `state.series.surplus`)
makes the Group's draw free up to its level: the Group pays for its machines' draw above the
surplus, `max(0, G - S)`, and each machine for its share of that in proportion to its draw
(`paid_watts`: every machine pays the same fraction `1 - S/G` of its draw; no order among
machines to keep). A deferrable Job's run is weighed by what it adds (`added_watts`), with the
surplus read now held to the end of the current price interval and no further (`persisting`:
a surplus has no forecast). `cost` and `next_change` take the surplus beside the prices, so the
accounts, the deferral and the replay price it one way.

Rates are wall-clock times: across a daylight-saving change a rate follows the clock (a rate
from 02:00 on the night that hour is skipped starts at 03:00; in the hour that repeats, the
price follows the clock back too).
"""

from __future__ import annotations

import bisect
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from lightsout.models.group import Electricity, TariffRate
from lightsout.models.windows import zone
from lightsout.state.series import Series

#: Python's `weekday()` order.
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: A weekly tariff repeats within a week; one day more covers a rate that runs past midnight.
_HORIZON_DAYS = 8


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def _applies(rate: TariffRate, day: int, minute: int) -> bool:
    """Whether `rate` applies at `minute` past midnight of weekday `day` (0: Monday)."""
    start, end = _minutes(rate.from_), _minutes(rate.to)
    if start < end:
        return _DAYS[day] in rate.days and start <= minute < end
    # Past midnight (or a whole day, `to` equal to `from`): from `from` on one of its days to
    # `to` on the day after.
    return (_DAYS[day] in rate.days and minute >= start) or (
        _DAYS[(day - 1) % 7] in rate.days and minute < end
    )


def rate_at(electricity: Electricity, moment: datetime) -> TariffRate | None:
    """The rate in force at `moment` (None: the base price)."""
    if not electricity.rates:
        return None
    local = moment.astimezone(_zone(electricity.time_zone))
    minute = local.hour * 60 + local.minute
    return next((r for r in electricity.rates if _applies(r, local.weekday(), minute)), None)


def price_at(
    electricity: Electricity | None, moment: datetime, series: Series | None = None
) -> float:
    """The price of a kWh at `moment` (0 without a price)."""
    if electricity is None:
        return 0.0
    if series is not None and (priced := series.at(moment)) is not None:
        return priced
    rate = rate_at(electricity, moment)
    return electricity.price_per_kwh if rate is None else rate.price_per_kwh


def paid_watts(watts: float, surplus: float | None, beside: float = 0.0) -> float:
    """What of `watts` one machine draws is paid for while the Group's solar surplus is
    `surplus` W (None: none known) and its other machines draw `beside` W: its share, in
    proportion to its draw, of the Group's draw above the surplus (so a machine alone pays
    for `max(0, watts - surplus)`)."""
    if surplus is None or surplus <= 0.0 or watts <= 0.0:
        return watts
    return watts * max(0.0, 1.0 - surplus / (max(beside, 0.0) + watts))


def added_watts(watts: float, surplus: float | None, beside: float = 0.0) -> float:
    """What drawing `watts` more, beside the Group's `beside` W, adds to the draw the Group
    pays for (the surplus covers what it has left over first)."""
    if surplus is None or surplus <= 0.0:
        return watts
    beside = max(beside, 0.0)
    return max(0.0, beside + watts - surplus) - max(0.0, beside - surplus)


def paid_share(watts: float, surplus: float | None, beside: float = 0.0) -> float:
    """`paid_watts` over `watts`: the fraction of the price a machine drawing `watts` pays
    (1 without a surplus)."""
    return 1.0 if watts <= 0.0 else paid_watts(watts, surplus, beside) / watts


def surplus_at(surplus: Series | None, moment: datetime) -> float | None:
    """The surplus in W at `moment` (None: none known then)."""
    return None if surplus is None else surplus.at(moment)


def persisting(
    surplus: Series | None,
    now: datetime,
    electricity: Electricity | None,
    series: Series | None = None,
) -> Series | None:
    """The surplus read at `now`, held to the end of the current price interval (with one
    price at every hour, to the end of its reading) and no further: what a deferrable Job's
    start is weighed with."""
    watts = surplus_at(surplus, now)
    if surplus is None or watts is None:
        return None
    until = _price_change(electricity, now, series) or surplus.next_change(now)
    return Series((now,), (watts,), until - now) if until is not None and until > now else None


def cost(
    electricity: Electricity,
    watts: float,
    start: datetime,
    end: datetime,
    series: Series | None = None,
    *,
    surplus: Series | None = None,
    beside: float = 0.0,
    marginal: bool = False,
) -> float:
    """What drawing `watts` from `start` to `end` costs, each stretch at its own price: with a
    `surplus` of W, the machine's share (`paid_watts`, the Group's other machines drawing
    `beside`), or with `marginal` what the draw adds to the Group's (`added_watts`)."""
    paid = added_watts if marginal else paid_watts
    total, at = 0.0, start
    while at < end:
        change = next_change(electricity, at, series, surplus)
        until = end if change is None or change > end else change
        price = price_at(electricity, at, series)
        drawn = paid(watts, surplus_at(surplus, at), beside)
        total += drawn / 1000.0 * (until - at).total_seconds() / 3600.0 * price
        at = until
    return total


def next_change(
    electricity: Electricity | None,
    moment: datetime,
    series: Series | None = None,
    surplus: Series | None = None,
) -> datetime | None:
    """The first moment after `moment` at which the price differs from the one at `moment`,
    or (with a `surplus`) the surplus does."""
    price = _price_change(electricity, moment, series)
    found = surplus.next_change(moment) if surplus is not None else None
    if price is None or found is None:
        return price or found
    return min(price, found)


def _price_change(
    electricity: Electricity | None, moment: datetime, series: Series | None = None
) -> datetime | None:
    if electricity is None:
        return None
    if series is None:
        return _rates_change(electricity, moment)
    now, at = price_at(electricity, moment, series), moment
    while True:
        found = [c for c in (_rates_change(electricity, at), series.next_change(at)) if c]
        if not found:
            return None
        at = min(found)
        if price_at(electricity, at, series) != now:
            return at


def _rates_change(electricity: Electricity, moment: datetime) -> datetime | None:
    """The first moment after `moment` at which the rates' price differs."""
    if not electricity.rates:
        return None
    today = moment.astimezone(_zone(electricity.time_zone)).date()
    clocks = tuple(sorted({c for r in electricity.rates for c in (r.from_, r.to)}))
    boundaries = _boundaries(clocks, electricity.time_zone, today)
    now = price_at(electricity, moment)
    for candidate in boundaries[bisect.bisect_right(boundaries, moment) :]:
        if price_at(electricity, candidate) != now:
            return candidate
    return None


@lru_cache(maxsize=256)
def _boundaries(clocks: tuple[str, ...], name: str, today: date) -> list[datetime]:
    """Every moment within the horizon from `today` at which a rate may start or end, in
    order: when the clock reads one of `clocks`, and when the clocks change (the wall time,
    and so the rate in force, jumps then too)."""
    tz = _zone(name)
    found: set[datetime] = set(_transitions(name, today))
    for offset in range(_HORIZON_DAYS):
        day = today + timedelta(days=offset)
        for clock in clocks:
            minutes = _minutes(clock)
            found.update(_instants(datetime.combine(day, time(minutes // 60, minutes % 60)), tz))
    return sorted(found)


@lru_cache(maxsize=256)
def _transitions(name: str, start: date) -> tuple[datetime, ...]:
    """The instants the clocks of zone `name` change within the horizon from `start`, to the
    second."""
    tz = _zone(name)
    hour = timedelta(hours=1)
    at = datetime.combine(start - timedelta(days=1), time(), tzinfo=tz).astimezone(UTC)
    end = at + timedelta(days=_HORIZON_DAYS + 1)
    found = []
    while at < end:
        if at.astimezone(tz).utcoffset() != (at + hour).astimezone(tz).utcoffset():
            low, high = at, at + hour
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(microsecond=0))
        at += hour
    return tuple(found)


def _instants(wall: datetime, tz: ZoneInfo) -> set[datetime]:
    """When the clock in `tz` reads the naive `wall` time: once, twice (the hour the clocks go
    back repeats) or never (the hour they skip), then the instant the clock jumps past it."""
    candidates = {wall.replace(tzinfo=tz, fold=fold).astimezone(UTC) for fold in (0, 1)}
    found = {c for c in candidates if c.astimezone(tz).replace(tzinfo=None) == wall}
    if found:
        return found
    # Skipped: between the two readings lies the jump; find it to the second.
    low, high = min(candidates), max(candidates)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return {high.replace(microsecond=0)}


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return zone(name)
