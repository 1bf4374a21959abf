"""Energy accounting (`planning.energy.account`): a scripted day against figures computed by
hand."""

from __future__ import annotations

import datetime as dt

import pytest

from lightsout.models.enums import Phase
from lightsout.planning.energy.account import (
    Account,
    Amounts,
    Draw,
    Period,
    Rate,
    combine,
    cost,
    day_start,
    is_powered,
    month_start,
)
from lightsout.planning.policy import DEFAULT_WATTS

pytestmark = pytest.mark.unit

MIDNIGHT = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
SERVER = Draw.declared(on=120.0, idle=40.0, off=5.0)


def at(hours: float) -> dt.datetime:
    return MIDNIGHT + dt.timedelta(hours=hours)


def counted(*steps: tuple[float, Rate]) -> Account:
    """An account opened at midnight and counted to each hour at the rate of the interval."""
    account = Account.opened(MIDNIGHT, Rate())
    for hour, rate in steps:
        account = account.counted(at(hour), rate)
    return account


def test_a_day_off_on_off_matches_the_hand_computed_figures() -> None:
    # Off 00-08, on 08-18 at half its cpu, off 18-24: the replay counts its true draw so.
    off, on_half = Rate.of(SERVER, powered=False), Rate.of(SERVER, True, cpu_utilisation=0.5)
    account = counted((8, off), (18, on_half), (24, off))
    # used: 14 h x 5 W + 10 h x (40 + 80 x 0.5) W = 70 + 800; saved: 14 h x (40 - 5) W.
    assert account.total.used_wh == pytest.approx(870.0)
    assert account.total.saved_wh == pytest.approx(490.0)
    assert account.counted_to == at(24)
    assert cost(account.total.used_wh, 0.30) == pytest.approx(0.261)
    assert cost(account.total.saved_wh, 0.30) == pytest.approx(0.147)


def test_counting_in_steps_counts_the_same_as_one_step() -> None:
    off = Rate.of(SERVER, powered=False)
    whole = counted((10, off))
    stepped = counted((3, off), (10, off))
    assert stepped.total.used_wh == pytest.approx(whole.total.used_wh)
    assert stepped.total.saved_wh == pytest.approx(whole.total.saved_wh)


def test_a_clock_that_goes_backwards_counts_nothing() -> None:
    on = Rate.of(SERVER, powered=True)
    account = Account.opened(at(5), Rate()).counted(at(6), on)
    assert account.counted(at(4), on) == account


def test_busier_machine_draws_more_but_never_past_its_on_watts() -> None:
    assert SERVER.watts(True, 0.0) == 40.0
    assert SERVER.watts(True, 1.0) == 120.0
    assert SERVER.watts(True, 3.0) == 120.0  # requests can exceed allocatable
    assert SERVER.watts(True, -1.0) == 40.0
    assert SERVER.watts(False, 1.0) == 5.0


@pytest.mark.parametrize(
    ("on", "idle", "off", "expected"),
    [
        (None, None, None, Draw(0.0, DEFAULT_WATTS, DEFAULT_WATTS)),
        (60.0, None, None, Draw(0.0, 60.0, 60.0)),
        (None, 30.0, 2.0, Draw(2.0, 30.0, 30.0)),
        (50.0, 80.0, 90.0, Draw(50.0, 50.0, 50.0)),  # garbage is clamped, never negative
    ],
)
def test_undeclared_draw_is_filled_in(
    on: float | None, idle: float | None, off: float | None, expected: Draw
) -> None:
    assert Draw.declared(on=on, idle=idle, off=off) == expected


def test_only_off_counts_as_unpowered() -> None:
    assert not is_powered(Phase.OFF)
    assert all(is_powered(p) for p in Phase if p is not Phase.OFF)
    assert is_powered(None)


# ---------------------------------------------------------------- accounts, as status holds them
PRICE = 0.30
ON_HALF = Rate.of(SERVER, powered=True, cpu_utilisation=0.5, price_per_kwh=PRICE)  # 80 W
OFF = Rate.of(SERVER, powered=False, price_per_kwh=PRICE)  # 5 W drawn, 35 W saved


def test_an_account_checkpointed_through_a_day_matches_the_hand_computed_figures() -> None:
    # Off 00-08, on at half its cpu 08-18, off 18-24; checkpoints only when the rate changes.
    account = Account.opened(MIDNIGHT, OFF)
    account = account.checkpoint(at(8), ON_HALF)
    account = account.checkpoint(at(18), OFF)
    late = account.at(at(23.5))
    # used 8 x 5 + 10 x 80 + 5.5 x 5 = 867.5 Wh; saved (8 + 5.5) x 35 = 472.5 Wh.
    assert late.total.used_wh == pytest.approx(867.5)
    assert late.total.saved_wh == pytest.approx(472.5)
    assert late.total.used_cost == pytest.approx(0.8675 * PRICE)
    assert late.total.saved_cost == pytest.approx(0.4725 * PRICE)
    assert late.today == Period(MIDNIGHT, late.total)
    assert late.month.amounts == late.total


def test_a_restart_at_any_moment_counts_what_one_uninterrupted_run_counts() -> None:
    # The operator is stopped at 10:00 and comes back at 13:00 (no pass in between); the status
    # it reloads says "on at 80 W since 08:00", so the three hours away are counted at 80 W.
    uninterrupted = Account.opened(MIDNIGHT, OFF).checkpoint(at(8), ON_HALF).checkpoint(at(16), OFF)
    before = Account.opened(MIDNIGHT, OFF).checkpoint(at(8), ON_HALF)
    reloaded = Account(
        before.counted_to, before.rate, before.since, before.total, before.today, before.month
    )
    resumed = reloaded.checkpoint(at(16), OFF)
    assert resumed == uninterrupted
    assert resumed.at(at(20)).total.used_wh == pytest.approx(8 * 5 + 8 * 80 + 4 * 5)


def test_today_restarts_at_midnight_and_the_month_on_the_first() -> None:
    # On at 80 W from 22:00 on the 30th of November to 02:00 on the 1st of December.
    evening = dt.datetime(2026, 11, 30, 22, tzinfo=dt.UTC)
    account = Account.opened(evening, ON_HALF)
    night = account.at(evening + dt.timedelta(hours=4))
    assert night.total.used_wh == pytest.approx(4 * 80)
    december = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert night.today == Period(december, Amounts().plus(2.0, ON_HALF))
    assert night.month == Period(december, Amounts().plus(2.0, ON_HALF))
    assert night.today.amounts.used_wh == pytest.approx(160.0)
    # Within one month, the month keeps counting past midnight while the day starts again.
    mid = Account.opened(at(22), ON_HALF).at(at(26))
    assert mid.month.amounts.used_wh == pytest.approx(320.0)
    assert mid.today.amounts.used_wh == pytest.approx(160.0)
    assert mid.today.start == day_start(at(26)) and mid.month.start == month_start(at(26))


def test_a_group_account_sums_its_machines_and_extrapolates_like_them() -> None:
    a = Account.opened(MIDNIGHT, OFF).checkpoint(at(2), ON_HALF)
    b = Account.opened(at(1), OFF)
    group = combine([a, b], at(3), PRICE)
    assert group.total.used_wh == pytest.approx(2 * 5 + 1 * 80 + 2 * 5)
    assert group.rate == Rate(85.0, 35.0, PRICE)
    later = at(7)
    assert group.at(later).total == a.at(later).total + b.at(later).total
    assert combine([], at(3), PRICE).total == Amounts()
