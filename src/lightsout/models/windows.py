"""A Group's schedule windows (`spec.windows`): cron openings of a fixed length, each setting
a floor (`minNodes`) and/or a ceiling (`maxNodes`) while it is open.

The arithmetic the model validates with and the planner reads: a window's openings are the
runs of its `schedule` in its `timeZone`, stepped by `lightsout.models.schedule` exactly as
kube-controller-manager steps a CronJob's. `in_force` is the window open at a moment (the last
opening at or before it, while it is shorter ago than `durationSeconds`); `overlap` finds two
windows open at once, which the Group's validation refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lightsout.models import schedule as cron_schedule

#: Openings checked for overlap per window (a year of a daily window, three days of a
#: per-minute one) and how far ahead: a finite check, from a fixed date so it is reproducible.
OVERLAP_OPENINGS = 1000
OVERLAP_FROM = datetime(2026, 1, 1, tzinfo=UTC)
OVERLAP_HORIZON = timedelta(days=400)


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ValueError naming it when there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(
            f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)"
        ) from error


@lru_cache(maxsize=256)
def parsed(schedule: str, time_zone: str) -> cron_schedule.Schedule:
    """The schedule as the API server reads a CronJob's; ValueError with its reason."""
    return cron_schedule.parse(schedule, zone(time_zone))


@dataclass(frozen=True, slots=True)
class WindowTimes:
    """What a window needs to be stepped: its name, schedule, zone and length."""

    name: str
    schedule: str
    time_zone: str
    duration_seconds: int

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.duration_seconds)

    def openings(self, after: datetime, until: datetime, limit: int = 10_000) -> Iterator[datetime]:
        """Openings strictly after `after` and at or before `until`, at most `limit`."""
        sched = parsed(self.schedule, self.time_zone)
        at = after
        for _ in range(limit):
            found = sched.next(at)
            if found is None or found > until:
                return
            yield found
            at = found

    def next_opening(self, after: datetime) -> datetime | None:
        """The first opening strictly after `after`."""
        return parsed(self.schedule, self.time_zone).next(after)

    def open_at(self, at: datetime) -> datetime | None:
        """The opening in force at `at` (the last one at or before it, while `at` is within
        `durationSeconds` of it); None when the window is closed."""
        return max(self.openings(at - self.duration, at), default=None)

    def closes_local(self, opening: datetime) -> datetime:
        """When the opening at `opening` closes, in the window's zone."""
        return (opening + self.duration).astimezone(zone(self.time_zone))

    def span(self, opening: datetime) -> str:
        """`18:00-23:00 Europe/Berlin` for the opening at `opening`."""
        opens = opening.astimezone(zone(self.time_zone))
        return f"{opens:%H:%M}-{self.closes_local(opening):%H:%M} {self.time_zone}"


@lru_cache(maxsize=256)
def overlap(windows: tuple[WindowTimes, ...]) -> str | None:
    """Why two of `windows` are open at once (None if they never are), checked over
    `OVERLAP_HORIZON` from `OVERLAP_FROM`, at most `OVERLAP_OPENINGS` openings each."""
    if len(windows) < 2:
        return None
    intervals: list[tuple[datetime, datetime, WindowTimes]] = []
    until = OVERLAP_FROM + OVERLAP_HORIZON
    for window in windows:
        start = OVERLAP_FROM - window.duration
        intervals.extend(
            (at, at + window.duration, window)
            for at in window.openings(start, until, OVERLAP_OPENINGS)
        )
    intervals.sort(key=lambda item: (item[0], item[2].name))
    latest: tuple[datetime, datetime, WindowTimes] | None = None
    for item in intervals:
        if latest is not None and item[0] < latest[1] and item[2] is not latest[2]:
            first, second = latest[2], item[2]
            tz = zone(second.time_zone)
            return (
                f"windows {first.name} and {second.name} overlap: {second.name} opens at "
                f"{item[0].astimezone(tz):%Y-%m-%d %H:%M} {second.time_zone} while {first.name} "
                f"({first.span(latest[0])}) is open"
            )
        if latest is None or item[1] > latest[1]:
            latest = item
    return None


__all__ = ["WindowTimes", "overlap", "parsed", "zone"]
