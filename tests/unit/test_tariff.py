"""Time-of-use tariffs (`planning.energy.tariff`): the price in force at a moment, when it next
changes, and energy counted at each stretch's own price, by the operator's pass and the replay
alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from lightsout.actuation.inputs import node_spec
from lightsout.commands.status import price_in_force
from lightsout.models.group import Electricity, GroupSpec
from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.status import account_from_status, checkpoint
from lightsout.planning.energy.tariff import cost, next_change, price_at
from lightsout.planning.machine.effects import Decision, Requeue
from lightsout.planning.machine.healthjudge import Assessment
from lightsout.planning.machine.passes import Readings, with_energy
from lightsout.planning.types import ObservedPowerState, Phase
from lightsout.simulate.replay.engine import Options, Policy, Simulator
from lightsout.simulate.traces.trace import Durations, Trace
from lightsout.state.status import node_status
from lightsout.state.types import ObjectKey
from tests.unit.test_simulate import node

pytestmark = pytest.mark.unit

BERLIN = ZoneInfo("Europe/Berlin")
#: Nights at 0.20 (22:00-06:00), weekends at 0.25 all day, 0.30 otherwise.
HOUSEHOLD = {
    "pricePerKWh": 0.30,
    "timeZone": "Europe/Berlin",
    "rates": [
        {"days": ["sat", "sun"], "pricePerKWh": 0.25},
        {"from": "22:00", "to": "06:00", "pricePerKWh": 0.20},
    ],
}


def tariff(**spec: Any) -> Electricity:
    return Electricity.model_validate({**HOUSEHOLD, **spec})


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)  # type: ignore[misc]


def test_the_first_rate_that_applies_sets_the_price_else_the_base() -> None:
    household = tariff()
    assert price_at(household, berlin(2026, 11, 27, 13)) == 0.30  # a Friday afternoon
    assert price_at(household, berlin(2026, 11, 27, 23)) == 0.20  # Friday night
    assert price_at(household, berlin(2026, 11, 27, 5, 59)) == 0.20  # Thursday's night
    assert price_at(household, berlin(2026, 11, 27, 6)) == 0.30  # ends at 06:00
    # Saturday: the weekend rate is listed first, so it wins over the night.
    assert price_at(household, berlin(2026, 11, 28, 23)) == 0.25
    # The weekend rate lasts whole days (from and to both 00:00): Sunday 23:59 is the
    # weekend's, Monday 01:00 Sunday's night.
    assert price_at(household, berlin(2026, 11, 29, 23, 59)) == 0.25
    assert price_at(household, berlin(2026, 11, 30, 1)) == 0.20
    assert price_at(Electricity(pricePerKWh=0.4), berlin(2026, 11, 27, 23)) == 0.4
    assert price_at(None, berlin(2026, 11, 27, 23)) == 0.0


def test_each_change_of_a_week_is_found_in_order() -> None:
    household = tariff()
    at, seen = berlin(2026, 11, 27, 13), []
    for _ in range(6):
        change = next_change(household, at)
        assert change is not None
        seen.append((change.astimezone(BERLIN).strftime("%a %H:%M"), price_at(household, change)))
        at = change
    assert seen == [
        ("Fri 22:00", 0.20),
        ("Sat 00:00", 0.25),
        ("Mon 00:00", 0.20),
        ("Mon 06:00", 0.30),
        ("Mon 22:00", 0.20),
        ("Tue 06:00", 0.30),
    ]
    assert next_change(Electricity(pricePerKWh=0.4), at) is None


def test_rates_follow_the_clock_across_daylight_saving() -> None:
    cheap = tariff(rates=[{"from": "02:30", "to": "05:00", "pricePerKWh": 0.10}])
    # The night 02:00-03:00 is skipped: the rate starts when the clock jumps to 03:00.
    spring = next_change(cheap, berlin(2026, 3, 29, 1))
    assert spring == datetime(2026, 3, 29, 1, tzinfo=UTC)  # 03:00 CEST
    assert price_at(cheap, spring) == 0.10
    # The hour 02:00-03:00 repeats: the rate is left at the first 02:30 ... and, as the clock
    # goes back to 02:00, comes back for half an hour.
    early = tariff(rates=[{"from": "01:00", "to": "02:30", "pricePerKWh": 0.10}])
    at, seen = datetime(2026, 10, 24, 23, tzinfo=UTC), []  # 01:00 CEST
    for _ in range(3):
        change = next_change(early, at)
        assert change is not None
        seen.append((change.isoformat(), price_at(early, change)))
        at = change
    assert seen == [
        ("2026-10-25T00:30:00+00:00", 0.30),
        ("2026-10-25T01:00:00+00:00", 0.10),
        ("2026-10-25T01:30:00+00:00", 0.30),
    ]


def test_a_rate_needs_a_real_zone_and_days() -> None:
    with pytest.raises(ValidationError, match="unknown time zone 'Europe/Bonn'"):
        tariff(timeZone="Europe/Bonn")
    with pytest.raises(ValidationError, match="days"):
        tariff(rates=[{"days": ["monday"], "from": "22:00", "to": "06:00", "pricePerKWh": 0.2}])


DRAW = Draw.declared(on=100.0, idle=100.0, off=0.0)


def test_a_pass_checkpoints_at_each_change_and_asks_to_be_run_then() -> None:
    group = GroupSpec.model_validate({"electricity": HOUSEHOLD})
    friday = berlin(2026, 11, 27, 13)
    opened = checkpoint(None, DRAW, group, Phase.READY, 0.0, now=friday)
    assert opened is not None and opened["pricePerKWh"] == 0.30
    # Nothing changes before 22:00, but the pass asks to be run then.
    readings = _readings(group, opened)
    decision = with_energy(Decision(Phase.READY, "Ready", "ready"), readings, friday)
    assert decision.energy is None
    assert decision.requeue_after == 9 * 3600
    # A Requeue the state machine wanted sooner is kept.
    soon = Decision(Phase.READY, "Ready", "ready", (Requeue(30),))
    assert with_energy(soon, readings, friday).requeue_after == 30
    # At 22:00 the rate changes: 9 h at 100 W and 0.30 counted, the night's price in force.
    night = checkpoint(
        account_from_status(opened), DRAW, group, Phase.READY, 0.0, now=friday + timedelta(hours=9)
    )
    assert night is not None
    assert night["pricePerKWh"] == 0.20
    assert night["usedCost"] == pytest.approx(0.9 * 0.30)


def _readings(group: GroupSpec, energy: dict[str, Any]) -> Readings:
    from lightsout.planning.machine.passes import Readings

    manifest = node("a")
    return Readings(
        health=Assessment(None, None, ObservedPowerState.UNKNOWN, None, None),
        spec=node_spec(manifest),
        status=node_status({"status": {"energy": energy}}),
        utilisation=0.0,
        draw=DRAW,
        group=group,
    )


def test_the_replay_counts_a_day_of_an_always_on_machine_at_each_hours_price() -> None:
    """The replay's passes are the operator's: a machine on all day is checkpointed at each
    change of the tariff, and its account's cost is the hours at each price."""
    group = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "lab"},
        "spec": {"maxNodes": 1, "electricity": {**HOUSEHOLD, "currency": "EUR"}},
    }
    start = datetime(2026, 11, 27, 0, tzinfo=UTC)  # Friday 01:00 in Berlin
    trace = Trace(
        name="tariff",
        start=start,
        duration_seconds=24 * 3600,
        machines=(group, node("a", watts=(100, 100, 0))),
        pods=(),
        durations={"a": Durations(10, 50, 20)},
    )
    sim = Simulator(trace, Options(policy=Policy.ALWAYS_ON))
    sim.run()
    a = sim.machines[ObjectKey("", "a")]
    account = account_from_status(a.status["energy"])
    assert account is not None
    end = sim.clock.time(sim.end)
    counted = account.at(end)
    # Powered from about a minute in (its power-on and boot) to 01:00 on Saturday (Berlin):
    # the night until 06:00, the day to 22:00, the night to midnight, then the weekend: 7 h at
    # 0.20 (less the first minute), 16 h at 0.30, 1 h at 0.25.
    hours = counted.total.used_wh / 100
    assert 23.9 < hours <= 24
    night_hours = hours - 16 - 1
    assert counted.total.used_cost == pytest.approx(
        0.1 * (night_hours * 0.20 + 16 * 0.30 + 1 * 0.25), rel=1e-4
    )


def test_lightsout_status_says_the_price_in_force_and_until_when() -> None:
    friday_night = berlin(2026, 11, 27, 23)
    assert price_in_force({"electricity": HOUSEHOLD}, friday_night) == (
        "0.2 EUR/kWh until 00:00 Europe/Berlin"  # then the weekend's
    )
    flat = {"electricity": {"pricePerKWh": 0.3, "currency": "CHF"}}
    assert price_in_force(flat, friday_night) == "0.3 CHF/kWh"
    assert price_in_force({}, friday_night) == "-"
    assert price_in_force({"electricity": {"pricePerKWh": -1}}, friday_night) == "-"


def test_a_period_costs_each_stretch_at_its_own_price() -> None:
    household = tariff()
    # Friday 20:00 to Saturday 01:00 in Berlin at 1 kW: 2 h at 0.30, 2 h at 0.20, 1 h at 0.25.
    start, end = berlin(2026, 11, 27, 20), berlin(2026, 11, 28, 1)
    assert cost(household, 1000.0, start, end) == pytest.approx(0.60 + 0.40 + 0.25)
    assert cost(household, 1000.0, end, start) == 0.0
