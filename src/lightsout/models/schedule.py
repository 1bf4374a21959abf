"""A CronJob schedule read and stepped exactly as kube-controller-manager does it.

The CronJob controller parses `spec.schedule` with github.com/robfig/cron/v3 `ParseStandard`
(in `spec.timeZone`, loaded with Go's `time.LoadLocation`) and takes each run from that
library's `SpecSchedule.Next`; the API server refuses what `ParseStandard` refuses. This module
is the same arithmetic in Python, so that `lightsout.state.cron` announces exactly the runs the
controller creates, on daylight-saving nights too (`tests/unit/test_cron_dst.py` holds a table
recorded from robfig/cron v3.0.1 itself, `tests/e2e/test_cron_dst.py` compares with the lab's
controller-manager). What that gives:

- Spring forward: a run at a local time that does not exist that night is skipped, not moved
  to 03:00 as croniter did (`0 2 * * *` in New York makes no run on 8 March 2026; the next is
  on the 9th). So is a daily midnight run where midnight is skipped (Havana, Santiago).
  `*/15`, `@hourly` and hour ranges simply have no run in the missing hour.
- Fall back: a run in the repeated hour happens twice, an hour apart (`0 1 * * *` in New York
  runs at 01:00 EDT and at 01:00 EST on 1 November 2026; `0 2 * * *` in Berlin likewise; also
  `30 1 1 11 *`, which croniter ran once).
- Lord Howe's half-hour jump (02:00 -> 02:30): `15 2 * * *` is skipped that night, as above.
  A jump that does not start at a whole hour (a first made-up zone of the e2e test) is odder:
  the hour is checked again only when the minute wraps to 0, so a run at a skipped minute can
  still happen after the jump, in the hour after the one it names; the controller does so too.
- The parser: five fields or a macro, names for months and weekdays, `?` as `*`, weekdays 0-6
  (7 is refused), no `L`, `W` or `#`. Day-of-month and day-of-week are OR-ed unless either field
  starts with `*` or `?` without a step above 1 (`*/2` counts as a list, so it is OR-ed).
- `@every <duration>` is refused here: its runs count from the CronJob's creation and last run,
  which a schedule alone cannot know.

`Next` walks the fields from month down to second, incrementing the first that does not match
and starting over when one wraps; it mixes wall-clock steps (`time.Date`, `AddDate`) with
absolute ones (`Add`, `Truncate`), and the DST behaviour above follows from that mix. `_next`
takes the same steps with Go's rules for normalising a wall-clock time that does not exist or
exists twice (`_go_date`); it only skips whole blocks of seconds or minutes where the zone's
offset does not change, which cannot change the outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_NAMES = {name: number for number, name in enumerate(_MONTHS, start=1)}
_DAY_NAMES = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# Go's strconv.Atoi: an optional sign and ASCII digits, nothing else.
_INT = re.compile(r"[+-]?[0-9]+")


class ScheduleError(ValueError):
    """The schedule is not one `ParseStandard` accepts (the API server would refuse it)."""


@dataclass(frozen=True, slots=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] | None = None


_MINUTE, _HOUR = _Bounds(0, 59), _Bounds(0, 23)
_DOM, _MONTH, _DOW = _Bounds(1, 31), _Bounds(1, 12, _MONTH_NAMES), _Bounds(0, 6, _DAY_NAMES)


@dataclass(frozen=True, slots=True)
class Schedule:
    """The parsed schedule: the values each field allows, read in `zone`."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    #: Weekdays, Sunday = 0.
    weekdays: frozenset[int]
    #: Whether day-of-month / day-of-week was written as a bare `*` or `?` (then the two day
    #: fields must both match; otherwise either may).
    days_star: bool
    weekdays_star: bool
    zone: ZoneInfo

    def next(self, after: datetime) -> datetime | None:
        """The first run strictly after `after` (an aware datetime), in `zone`; None when no run
        falls within five years (a date like 30 February), as robfig/cron answers."""
        at = _next(self, _seconds(after))
        return None if at is None else datetime.fromtimestamp(at, self.zone)

    def _day_matches(self, day: int, weekday: int) -> bool:
        dom, dow = day in self.days, weekday in self.weekdays
        return dom and dow if self.days_star or self.weekdays_star else dom or dow


_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def parse(text: str, zone: ZoneInfo) -> Schedule:
    """`ParseStandard(text)` in `zone`; raises `ScheduleError` with its reason."""
    if text.startswith(("TZ=", "CRON_TZ=")):
        raise ScheduleError("a time zone in the schedule is not allowed: set spec.timeZone")
    if text.startswith("@"):
        if text.startswith("@every "):
            raise ScheduleError("@every is not supported: its runs count from the CronJob's start")
        if text not in _MACROS:
            raise ScheduleError(f"unrecognized descriptor: {text}")
        text = _MACROS[text]
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: {text!r}")
    minute, hour, dom, month, dow = fields
    days, days_star = _field(dom, _DOM)
    weekdays, weekdays_star = _field(dow, _DOW)
    return Schedule(
        minutes=_field(minute, _MINUTE)[0],
        hours=_field(hour, _HOUR)[0],
        days=days,
        months=_field(month, _MONTH)[0],
        weekdays=weekdays,
        days_star=days_star,
        weekdays_star=weekdays_star,
        zone=zone,
    )


def _field(text: str, bounds: _Bounds) -> tuple[frozenset[int], bool]:
    """The values of a comma-separated list of ranges, and whether one of them was a star."""
    values: set[int] = set()
    star = False
    for part in filter(None, text.split(",")):
        got, part_star = _range(part, bounds)
        values |= got
        star = star or part_star
    return frozenset(values), star


def _range(text: str, bounds: _Bounds) -> tuple[frozenset[int], bool]:
    """`N`, `N-M`, `*` or `?`, with an optional `/step` (`N/step` runs to the field's end)."""
    span, *steps = text.split("/")
    ends = span.split("-")
    star = ends[0] in ("*", "?")
    if star:
        low, high = bounds.low, bounds.high
    else:
        if len(ends) > 2:
            raise ScheduleError(f"too many hyphens: {text}")
        low = _number(ends[0], bounds.names)
        high = _number(ends[1], bounds.names) if len(ends) == 2 else low
    step = 1
    if len(steps) > 1:
        raise ScheduleError(f"too many slashes: {text}")
    if steps:
        step = _number(steps[0], None)
        if len(ends) == 1:
            high = bounds.high
        if step > 1:
            star = False
    if low < bounds.low:
        raise ScheduleError(f"beginning of range ({low}) below minimum ({bounds.low}): {text}")
    if high > bounds.high:
        raise ScheduleError(f"end of range ({high}) above maximum ({bounds.high}): {text}")
    if low > high:
        raise ScheduleError(f"beginning of range ({low}) beyond end of range ({high}): {text}")
    if step == 0:
        raise ScheduleError(f"step of range should be a positive number: {text}")
    return frozenset(range(low, high + 1, step)), star


def _number(text: str, names: dict[str, int] | None) -> int:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if not _INT.fullmatch(text):
        raise ScheduleError(f"failed to parse int from {text}")
    number = int(text)
    if number < 0:
        raise ScheduleError(f"negative number ({number}) not allowed: {text}")
    return number


# --- Go's time arithmetic on seconds since the epoch ----------------------------------------


def _seconds(moment: datetime) -> int:
    """Whole seconds since the epoch, rounded down."""
    return (moment - _EPOCH) // timedelta(seconds=1)


def _local(at: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(at, zone)


def _offset(at: int, zone: ZoneInfo) -> int:
    offset = _local(at, zone).utcoffset()
    return 0 if offset is None else int(offset.total_seconds())


def _go_date(zone: ZoneInfo, year: int, month: int, day: int, clock: int = 0) -> int:
    """Go's `time.Date(year, month, day, 0, 0, clock, 0, zone)`: `clock` seconds into the
    wall-clock day, overflowing fields carried.

    The wall-clock time read as UTC is corrected by the offset in force at the instant it first
    lands on (Go's `Date`), so a time that does not exist or exists twice comes out as Go picks
    it: in New York 02:30 on the spring-forward day is 01:30 EST, in Berlin 03:30 CEST; the
    repeated 01:30 is the first one in New York and the second one in Berlin."""
    year, month0 = year + (month - 1) // 12, (month - 1) % 12
    wall = (date(year, month0 + 1, 1).toordinal() - _EPOCH_DAY + day - 1) * 86400 + clock
    return wall - _offset(wall - _offset(wall, zone), zone)


def _add_date(at: int, zone: ZoneInfo, months: int = 0, days: int = 0) -> int:
    """Go's `t.AddDate(0, months, days)`: the wall-clock date moved, the time of day kept."""
    t = _local(at, zone)
    clock = t.hour * 3600 + t.minute * 60 + t.second
    return _go_date(zone, t.year, t.month + months, t.day + days, clock)


@dataclass(slots=True)
class _Cursor:
    """`Next`'s working time: `at` (seconds since the epoch) and `added`, whether a field has
    moved yet (once one has, the smaller fields start from their first value)."""

    at: int
    zone: ZoneInfo
    added: bool = False

    @property
    def local(self) -> datetime:
        return _local(self.at, self.zone)

    def start(self, at: int) -> None:
        """The first move: `at` is the field's start (`time.Date` or `Truncate`)."""
        if not self.added:
            self.added, self.at = True, at


def _next(schedule: Schedule, after: int) -> int | None:
    """`SpecSchedule.Next`: the first whole second after `after` that the schedule matches.

    Each pass of the loop is robfig's `WRAP` label: the fields are settled from the month down,
    and one that wraps around (month to January, day to the 1st, hour or minute to 0, second to
    0) starts the check over from the month. A field's step is not checked against the larger
    fields unless it wraps, as in `Next`."""
    cursor = _Cursor(after + 1, schedule.zone)
    year_limit = cursor.local.year + 5
    while cursor.local.year <= year_limit:
        if all(settle(schedule, cursor) for settle in (_month, _day, _hour, _minute, _second)):
            return cursor.at
    return None


def _month(schedule: Schedule, c: _Cursor) -> bool:
    """Move to a month the schedule allows; False when the year wrapped."""
    while (t := c.local).month not in schedule.months:
        c.start(_go_date(c.zone, t.year, t.month, 1))
        c.at = _add_date(c.at, c.zone, months=1)
        if c.local.month == 1:
            return False
    return True


def _day(schedule: Schedule, c: _Cursor) -> bool:
    """Move to a day the schedule allows; False when the month wrapped."""
    while not schedule._day_matches((t := c.local).day, (t.weekday() + 1) % 7):
        c.start(_go_date(c.zone, t.year, t.month, t.day))
        c.at = _add_date(c.at, c.zone, days=1)
        # Where midnight does not exist the day starts at 01:00 (or 23:00 the day before).
        hour = c.local.hour
        if hour:
            c.at += (24 - hour) * 3600 if hour > 12 else -hour * 3600
        if c.local.day == 1:
            return False
    return True


def _hour(schedule: Schedule, c: _Cursor) -> bool:
    """Move an hour at a time to an hour the schedule allows; False when the day wrapped."""
    while (t := c.local).hour not in schedule.hours:
        c.start(_go_date(c.zone, t.year, t.month, t.day, t.hour * 3600))
        c.at += 3600
        if c.local.hour == 0:
            return False
    return True


def _minute(schedule: Schedule, c: _Cursor) -> bool:
    """Move a minute at a time to a minute the schedule allows; False when the hour wrapped."""
    while c.local.minute not in schedule.minutes:
        c.start(c.at - c.at % 60)
        minute = c.local.minute
        # robfig adds one minute at a time; while the offset stays put the minutes it would
        # pass over neither match nor reach :00, so go straight to the last of them.
        ahead = 60 * (min((m for m in schedule.minutes if m > minute), default=60) - minute)
        same = _offset(c.at + ahead, c.zone) == _offset(c.at, c.zone)
        c.at += ahead if same else 60
        if c.local.minute == 0:
            return False
    return True


def _second(_: Schedule, c: _Cursor) -> bool:
    """Only second 0 matches: move to the next one, which always wraps (False)."""
    second = c.local.second
    if second == 0:
        return True
    c.added = True
    ahead = 60 - second
    if _offset(c.at + ahead, c.zone) == _offset(c.at, c.zone):
        c.at += ahead
    else:
        c.at += 1
        while c.local.second != 0:
            c.at += 1
    return False
