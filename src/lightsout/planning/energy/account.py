"""Energy accounting: how much a machine drew, and how much powering it off saved.

Pure arithmetic over a machine's declared draw (`spec.power`: off / idle / on watts) and the
time it spent powered on or off. Used by whatever checkpoints the figures into a Node's and a
Group's status and exports them as metrics (the observability issue), and by the replay
simulator; it has no clock of its own: every call is handed `now`.

The model, stated once:

- A powered machine draws `idle + (on - idle) * u`, `u` its requested-cpu utilisation (0..1).
  Transitional phases (powering on, booting, draining, powering off, provisioning) count as
  powered: the machine is running while they last.
- A machine that is off draws its standby `off` watts (BMC, wake-on-LAN NIC).
- Saved energy is measured against the same machine left on all the time: while it is on, the
  baseline draws what it draws (the load runs either way), so nothing is saved; while it is
  off, the baseline would have idled, so `idle - off` is saved for every hour off.

An `Account` is what a Node's (and a Group's) `status.energy` holds: the figures counted up to
`counted_to`, and the `Rate` in force from then on (watts drawn, watts saved, price per kWh).
Between two checkpoints the rate is constant, so any reader (the status command, the metrics,
the Group's sum) gets the figures at any later time with `at(now)` without a write, and the
reconcile pass only checkpoints when the rate changes (a phase change, the requested cpu, the
declared watts, the price). "Today" and "this month" are UTC days and months; an interval that
crosses midnight counts into the new day only from midnight on. A restart that reloads the
account from status loses nothing: the gap while the operator was away is counted at the rate
it last recorded. The replay keeps a second `Account` per machine, of its true draw, counted
the same way (`Account.counted`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from lightsout.models.enums import Phase
from lightsout.planning.policy import DEFAULT_WATTS

_SECONDS_PER_HOUR = 3600.0
_UNPOWERED = frozenset({Phase.OFF})


@dataclass(frozen=True, slots=True)
class Draw:
    """A machine's draw in watts, with the gaps of its declared profile filled in."""

    off: float
    idle: float
    on: float

    @classmethod
    def declared(cls, on: float | None, idle: float | None, off: float | None) -> Draw:
        """Fill what the spec leaves out: idle defaults to on (and on to idle), off to zero."""
        idle_w = idle if idle is not None else on
        on_w = on if on is not None else idle_w
        if idle_w is None or on_w is None:
            # Nothing declared: the planner's default draw for a machine of unknown profile.
            idle_w = on_w = DEFAULT_WATTS
        off_w = off if off is not None else 0.0
        # The API server refuses off > idle > on; clamp anyway so garbage never goes negative.
        idle_w = min(idle_w, on_w)
        return cls(off=min(off_w, idle_w), idle=idle_w, on=on_w)

    def watts(self, powered: bool, cpu_utilisation: float = 0.0) -> float:
        """What the machine draws in that state."""
        if not powered:
            return self.off
        share = min(max(cpu_utilisation, 0.0), 1.0)
        return self.idle + (self.on - self.idle) * share

    def saving_watts(self, powered: bool) -> float:
        """What being in that state saves against idling all the time."""
        return 0.0 if powered else self.idle - self.off


def is_powered(phase: Phase | None) -> bool:
    """Whether a machine in this phase is drawing running power.

    Failed and Unknown count as powered: the machine's real state is not known, and assuming it
    runs never overstates the savings.
    """
    return phase not in _UNPOWERED


def cost(watt_hours: float, price_per_kwh: float) -> float:
    """The price of that energy, in the Group's currency."""
    return watt_hours / 1000.0 * price_per_kwh


@dataclass(frozen=True, slots=True)
class Rate:
    """What a machine draws, saves (against idling) and pays per kWh from a checkpoint on."""

    watts: float = 0.0
    saving_watts: float = 0.0
    price_per_kwh: float = 0.0

    @classmethod
    def of(
        cls, draw: Draw, powered: bool, cpu_utilisation: float = 0.0, price_per_kwh: float = 0.0
    ) -> Rate:
        return cls(
            watts=draw.watts(powered, cpu_utilisation),
            saving_watts=draw.saving_watts(powered),
            price_per_kwh=price_per_kwh,
        )


@dataclass(frozen=True, slots=True)
class Amounts:
    """Energy used and saved (Wh) and what each cost (in the Group's currency)."""

    used_wh: float = 0.0
    saved_wh: float = 0.0
    used_cost: float = 0.0
    saved_cost: float = 0.0

    def plus(self, hours: float, rate: Rate) -> Amounts:
        used, saved = rate.watts * hours, rate.saving_watts * hours
        return Amounts(
            self.used_wh + used,
            self.saved_wh + saved,
            self.used_cost + cost(used, rate.price_per_kwh),
            self.saved_cost + cost(saved, rate.price_per_kwh),
        )

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(
            self.used_wh + other.used_wh,
            self.saved_wh + other.saved_wh,
            self.used_cost + other.used_cost,
            self.saved_cost + other.saved_cost,
        )


@dataclass(frozen=True, slots=True)
class Period:
    """The amounts of one calendar period (a UTC day or month) from its `start`."""

    start: datetime
    amounts: Amounts = field(default_factory=Amounts)


def day_start(moment: datetime) -> datetime:
    """Midnight (UTC) of the day `moment` falls in."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    """Midnight (UTC) of the first day of the month `moment` falls in."""
    return day_start(moment).replace(day=1)


def _hours(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds(), 0.0) / _SECONDS_PER_HOUR


def _roll(period: Period, boundary: datetime, start: datetime, end: datetime, rate: Rate) -> Period:
    """Count [start, end] into the period that `end` falls in (which begins at `boundary`)."""
    if period.start < boundary:
        # A new day (month) began: the part before its start belonged to the one that ended.
        return Period(boundary, Amounts().plus(_hours(max(start, boundary), end), rate))
    return Period(period.start, period.amounts.plus(_hours(start, end), rate))


@dataclass(frozen=True, slots=True)
class Account:
    """A machine's (or a Group's) energy figures counted up to `counted_to`, and the rate in
    force from then on: what `status.energy` checkpoints."""

    counted_to: datetime
    rate: Rate
    since: datetime
    total: Amounts
    today: Period
    month: Period

    @classmethod
    def opened(cls, now: datetime, rate: Rate) -> Account:
        """A new account: nothing counted before `now`."""
        return cls(now, rate, now, Amounts(), Period(day_start(now)), Period(month_start(now)))

    def at(self, now: datetime) -> Account:
        """The figures at `now`, the interval since `counted_to` counted at the rate in force.
        A clock that went backwards counts nothing and keeps the later checkpoint."""
        if now <= self.counted_to:
            return self
        start = self.counted_to
        return replace(
            self,
            counted_to=now,
            total=self.total.plus(_hours(start, now), self.rate),
            today=_roll(self.today, day_start(now), start, now, self.rate),
            month=_roll(self.month, month_start(now), start, now, self.rate),
        )

    def checkpoint(self, now: datetime, rate: Rate) -> Account:
        """Count up to `now` at the old rate, then switch to `rate`."""
        return replace(self.at(now), rate=rate)

    def counted(self, now: datetime, rate: Rate) -> Account:
        """Count up to `now` at `rate`, the rate that was in force since `counted_to` (for a
        caller that learns the rate of an interval as it ends: the replay's true draw)."""
        return replace(self, rate=rate).at(now)


def combine(accounts: Iterable[Account], now: datetime, price_per_kwh: float) -> Account:
    """A Group's account at `now`: the sum of its machines' accounts, each counted to `now`;
    its rate is the sum of theirs (at the Group's price), so `at` extrapolates it the same way."""
    today, month = Period(day_start(now)), Period(month_start(now))
    total = Amounts()
    watts = saving = 0.0
    since = now
    for account in accounts:
        current = account.at(now)
        total += current.total
        if current.today.start == today.start:
            today = Period(today.start, today.amounts + current.today.amounts)
        if current.month.start == month.start:
            month = Period(month.start, month.amounts + current.month.amounts)
        watts += current.rate.watts
        saving += current.rate.saving_watts
        since = min(since, current.since)
    return Account(now, Rate(watts, saving, price_per_kwh), since, total, today, month)
