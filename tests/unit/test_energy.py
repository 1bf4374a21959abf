"""Energy accounting (`planning.energy`): a scripted day against figures computed by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from lightsout.models.enums import Phase
from lightsout.planning.energy import Draw, Ledger, cost, is_powered, total
from lightsout.planning.policy import DEFAULT_WATTS

pytestmark = pytest.mark.unit

MIDNIGHT = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
SERVER = Draw.declared(on=120.0, idle=40.0, off=5.0)


def at(hours: float) -> dt.datetime:
    return MIDNIGHT + dt.timedelta(hours=hours)


def test_a_day_off_on_off_matches_the_hand_computed_figures() -> None:
    # Off 00-08, on 08-18 at half its cpu, off 18-24.
    ledger = Ledger(counted_to=MIDNIGHT)
    ledger = ledger.advance(at(8), SERVER, powered=False)
    ledger = ledger.advance(at(18), SERVER, powered=True, cpu_utilisation=0.5)
    ledger = ledger.advance(at(24), SERVER, powered=False)
    # used: 14 h x 5 W + 10 h x (40 + 80 x 0.5) W = 70 + 800; saved: 14 h x (40 - 5) W.
    assert ledger.used_wh == pytest.approx(870.0)
    assert ledger.saved_wh == pytest.approx(490.0)
    assert ledger.counted_to == at(24)
    assert cost(ledger.used_wh, 0.30) == pytest.approx(0.261)
    assert cost(ledger.saved_wh, 0.30) == pytest.approx(0.147)


def test_checkpoint_and_resume_count_the_same_as_one_pass() -> None:
    whole = Ledger(counted_to=MIDNIGHT).advance(at(10), SERVER, powered=False)
    # A restart at 03:00 reloads the ledger from status and counts the rest.
    checkpoint = Ledger(counted_to=MIDNIGHT).advance(at(3), SERVER, powered=False)
    reloaded = Ledger(checkpoint.counted_to, checkpoint.used_wh, checkpoint.saved_wh)
    assert reloaded.advance(at(10), SERVER, powered=False) == whole


def test_a_clock_that_goes_backwards_counts_nothing() -> None:
    ledger = Ledger(counted_to=at(5)).advance(at(6), SERVER, powered=True)
    assert ledger.advance(at(4), SERVER, powered=True) == ledger


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


def test_group_total_sums_its_machines() -> None:
    a = Ledger(MIDNIGHT).advance(at(2), SERVER, powered=False)
    b = Ledger(MIDNIGHT).advance(at(2), Draw.declared(on=10.0, idle=10.0, off=0.0), powered=True)
    group = total([a, b], counted_to=at(2))
    assert group.used_wh == pytest.approx(2 * 5.0 + 2 * 10.0)
    assert group.saved_wh == pytest.approx(2 * 35.0)
