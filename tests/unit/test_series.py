"""Price and carbon series (`state.series`): what a ConfigMap key holds, read strictly; a
Group's series resolved from its ConfigMaps, or why not; prices by series in the tariff; and
deferrable Jobs held for the cheap (or clean) hours a series shows, never beyond it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout.actuation.inputs import node_spec
from lightsout.actuation.memory import MemoryScale
from lightsout.actuation.plans import PlanApplier
from lightsout.commands.status import price_in_force
from lightsout.models.group import Electricity, GroupSpec
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.status import checkpoint
from lightsout.planning.energy.tariff import cost, next_change, price_at
from lightsout.planning.machine.effects import Decision
from lightsout.planning.machine.healthjudge import Assessment
from lightsout.planning.machine.passes import Readings, with_energy
from lightsout.planning.types import ObservedPowerState, Phase
from lightsout.state.series import SeriesError, parse, resolve
from lightsout.state.status import node_status
from lightsout.state.types import ObjectKey
from tests.unit.test_autoscale_objects import at, group, machine, snap, ts
from tests.unit.test_deferral import KEY, job
from tests.unit.test_simulate import node

pytestmark = pytest.mark.unit

GROUP = ObjectKey("lightsout", "lab")

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "electricity"
#: Hourly prices from T0 (12:00): dear, dear, cheap, dear... (EUR/MWh).
DAY_AHEAD = """start_utc,price_eur_mwh
# a comment
2026-03-01T12:00:00Z,120
2026-03-01T13:00:00Z,110
2026-03-01T14:00:00Z,20.5
2026-03-01T15:00:00Z,130
2026-03-01T16:00:00Z,140
"""
GRAMS = """2026-03-01T12:00:00Z,400
2026-03-01T13:00:00Z,150
2026-03-01T14:00:00Z,380
2026-03-01T15:00:00Z,390
"""


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "lightsout",
            "labels": {"lightsout.dev/series": ""},
        },
        "data": data,
    }


def test_a_series_reads_intervals_until_the_next_and_the_last_as_long_as_the_one_before() -> None:
    series = parse(DAY_AHEAD)
    assert series.at(at(0)) == 120 and series.at(at(2 * 3600 + 59)) == 20.5
    assert series.end == at(5 * 3600)  # the last hour lasts an hour
    assert series.at(at(5 * 3600)) is None and series.at(at(-1)) is None
    assert series.next_change(at(10)) == at(3600)
    assert series.next_change(at(4 * 3600)) == at(5 * 3600)  # where the forecast ends
    assert series.next_change(at(5 * 3600)) is None
    # 1 kW for the cheap hour and half of the next: 20.5 + 65 per MWh = 0.0855 per kWh-hour.
    assert series.integral(1000, at(2 * 3600), at(3.5 * 3600)) == pytest.approx(20.5 + 65)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2026-03-01T12:00:00Z,1\n", "fewer than two intervals"),
        ("2026-03-01T12:00:00Z,1\n2026-03-01T12:00:00Z,2\n", "line 2: 2026-03-01T12:00:00Z does"),
        ("2026-03-01T12:00:00Z,1\n2026-03-01T13:00:00,2\n", "line 2: '2026-03-01T13:00:00' is"),
        ("2026-03-01T12:00:00Z,1\n2026-03-01T13:00:00Z,cheap\n", "line 2: 'cheap' is not a"),
        ("2026-03-01T12:00:00Z,1\n2026-03-01T13:00:00Z,nan\n", "line 2: 'nan' is not a finite"),
        ("2026-03-01T12:00:00Z\n", "line 1: '2026-03-01T12:00:00Z' is not `start,value`"),
    ],
)
def test_what_does_not_read_is_refused_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(SeriesError) as error:
        parse(text)
    assert says in str(error.value)


def test_the_shared_day_ahead_prices_read_whole() -> None:
    series = parse((SHARED / "de_lu_price_hourly.csv").read_text())
    assert len(series.starts) == 839  # 35 local days, one of 23 hours
    assert series.last == timedelta(hours=1)


def electricity(**spec: Any) -> Electricity:
    base: dict[str, Any] = {
        "pricePerKWh": 0.30,
        "series": {
            "configMapKeyRef": {"name": "day-ahead", "key": "prices.csv"},
            "unit": "PerMWh",
            "markupPerKWh": 0.18,
        },
    }
    return Electricity.model_validate({**base, **spec})


def test_a_group_gets_its_series_per_kwh_with_the_markup() -> None:
    maps = {("lightsout", "day-ahead"): {"prices.csv": DAY_AHEAD}}
    resolved = resolve(electricity(), "lightsout", maps, group="lab")
    assert resolved.problem is None and resolved.prices is not None
    assert resolved.prices.at(at(2 * 3600)) == pytest.approx(0.0205 + 0.18)
    # Where the series has a price it wins; outside, the base price holds.
    e = electricity()
    assert price_at(e, at(2 * 3600), resolved.prices) == pytest.approx(0.2005)
    assert price_at(e, at(6 * 3600), resolved.prices) == 0.30
    assert next_change(e, at(0), resolved.prices) == at(3600)
    assert next_change(e, at(4 * 3600), resolved.prices) == at(5 * 3600)
    assert next_change(e, at(5 * 3600), resolved.prices) is None
    assert cost(e, 1000, at(2 * 3600), at(3 * 3600), resolved.prices) == pytest.approx(0.2005)


@pytest.mark.parametrize(
    ("maps", "says"),
    [
        ({}, "ConfigMap lightsout/day-ahead not found (or without the label lightsout.dev/series)"),
        ({("lightsout", "day-ahead"): {"other": "x"}}, "has no key prices.csv"),
        (
            {("lightsout", "day-ahead"): {"prices.csv": "start,price\n2026-03-01,1\n"}},
            "key prices.csv: line 2: '2026-03-01' is not an ISO 8601 time with offset",
        ),
    ],
)
def test_a_missing_or_malformed_series_is_named(maps: Any, says: str) -> None:
    resolved = resolve(electricity(), "lightsout", maps, group="lab")
    assert resolved.prices is None
    assert resolved.problem is not None and says in resolved.problem


def nuc() -> Any:
    return machine("nuc", watts=(50, 10, 2), learned={"bootSeconds": 120})


def test_a_job_waits_for_the_cheap_hour_of_the_series() -> None:
    house = group(electricity=electricity().model_dump(by_alias=True, exclude_none=True))
    day_ahead = configmap("day-ahead", {"prices.csv": DAY_AHEAD})
    result = plan(snap(house, nuc(), day_ahead, job()), at(0))
    assert result.waits[KEY].start == at(2 * 3600)


def test_a_job_is_not_held_past_the_end_of_the_forecast() -> None:
    # After the series (17:00) the base price is the lowest of all, but it is no forecast: the
    # Job, due by 18:00, waits only for the cheap hour the series shows.
    spec = electricity(pricePerKWh=0.01).model_dump(by_alias=True, exclude_none=True)
    day_ahead = configmap("day-ahead", {"prices.csv": DAY_AHEAD})
    wait = plan(snap(group(electricity=spec), nuc(), day_ahead, job()), at(0)).waits[KEY]
    assert wait.start == at(2 * 3600)
    # A series that is over: nothing covers a start, the Job runs at once.
    over = configmap("day-ahead", {"prices.csv": DAY_AHEAD.replace("2026-03-01", "2026-02-01")})
    (release,) = plan(snap(group(electricity=spec), nuc(), over, job()), at(0)).releases
    assert "no forecast covers a start before its deadline" in release.reason


def test_a_missing_series_releases_at_once_naming_it() -> None:
    house = group(electricity=electricity().model_dump(by_alias=True, exclude_none=True))
    (release,) = plan(snap(house, nuc(), job()), at(0)).releases
    assert "released at once: spec.electricity.series: ConfigMap lightsout/day-ahead" in (
        release.reason
    )


def test_with_objective_carbon_a_job_waits_for_the_cleanest_hour() -> None:
    spec = electricity(
        carbon={"configMapKeyRef": {"name": "grid", "key": "gco2.csv"}}, objective="Carbon"
    ).model_dump(by_alias=True, exclude_none=True)
    maps = [
        configmap("day-ahead", {"prices.csv": DAY_AHEAD}),
        configmap("grid", {"gco2.csv": GRAMS}),
    ]
    wait = plan(snap(group(electricity=spec), nuc(), *maps, job()), at(0)).waits[KEY]
    assert wait.start == at(3600)  # 150 g/kWh at 13:00, though the cheap hour is at 14:00
    assert "held for cleaner electricity" in wait.reason and "gCO2 on machine nuc" in wait.reason


def test_a_series_time_is_an_instant_whatever_its_offset() -> None:
    series = parse("2026-03-01T13:00:00+01:00,1\n2026-03-01T13:00:00Z,2\n")
    assert series.starts == (
        datetime(2026, 3, 1, 12, tzinfo=UTC),
        datetime(2026, 3, 1, 13, tzinfo=UTC),
    )


def test_the_group_says_whether_its_series_read_once_per_change() -> None:
    house = group(electricity=electricity().model_dump(by_alias=True, exclude_none=True))
    port = MemoryScale(machines={})
    applier = PlanApplier()
    missing = snap(house, nuc())
    applier.apply(port, missing, plan(missing, at(0)), at(0))
    applier.apply(port, missing, plan(missing, at(60)), at(60))
    condition = port.group_conditions[(GROUP, "PriceSeriesReady")]
    assert condition.status == "False"
    assert condition.message.startswith(
        "spec.electricity.series: ConfigMap lightsout/day-ahead not found"
    )
    assert [e.reason for _, _, e in port.events] == ["PriceSeriesUnreadable"]
    fixed = snap(house, nuc(), configmap("day-ahead", {"prices.csv": DAY_AHEAD}))
    applier.apply(port, fixed, plan(fixed, at(120)), at(120))
    condition = port.group_conditions[(GROUP, "PriceSeriesReady")]
    assert condition.status == "True"
    assert condition.message == "prices from 2026-03-01T12:00:00Z to 2026-03-01T17:00:00Z"
    assert [e.reason for _, _, e in port.events] == ["PriceSeriesUnreadable", "PriceSeriesReady"]


def test_a_machines_pass_counts_its_energy_at_the_series_price() -> None:
    prices = resolve(
        electricity(),
        "lightsout",
        {("lightsout", "day-ahead"): {"prices.csv": DAY_AHEAD}},
        group="lab",
    ).prices
    spec = GroupSpec.model_validate(
        {"electricity": electricity().model_dump(by_alias=True, exclude_none=True)}
    )
    draw = Draw.declared(on=1000.0, idle=1000.0, off=0.0)
    opened = checkpoint(None, draw, spec, "Ready", 0.0, now=at(2 * 3600), prices=prices)
    assert opened is not None and opened["pricePerKWh"] == pytest.approx(0.2005)
    # The next pass is asked for when the series' price changes.
    readings = Readings(
        health=Assessment(None, None, ObservedPowerState.UNKNOWN, None, None),
        spec=node_spec(node("nuc")),
        status=node_status({"status": {"energy": opened}}),
        utilisation=0.0,
        draw=draw,
        group=spec,
        prices=prices,
    )
    decision = with_energy(Decision(Phase.READY, "Ready", ""), readings, at(2 * 3600 + 60))
    assert decision.requeue_after == pytest.approx(3600 - 60)


def test_lightsout_status_prices_by_the_series_and_says_when_it_is_unreadable() -> None:
    spec = {"electricity": electricity().model_dump(by_alias=True, exclude_none=True)}
    maps = {("lightsout", "day-ahead"): {"prices.csv": DAY_AHEAD}}
    said = price_in_force(spec, at(2 * 3600), "lightsout", maps)
    assert said == "0.2005 EUR/kWh until 15:00 UTC"
    assert price_in_force(spec, at(2 * 3600), "lightsout", {}) == "0.3 EUR/kWh (series unreadable)"


def test_a_second_job_is_packed_beside_the_first_when_that_costs_less() -> None:
    """Two Jobs on one NUC: the first takes the cheap hour; the second, longer, would alone
    start before it (so that its run fills the cheap hour), but beside the first it pays no
    boot and only its draw above idle: it starts with the first, on the same machine."""
    house = group(electricity=electricity().model_dump(by_alias=True, exclude_none=True))
    day_ahead = configmap("day-ahead", {"prices.csv": DAY_AHEAD})
    first = job(
        "first",
        annotations={
            "lightsout.dev/finish-by": ts(at(5 * 3600)),
            "lightsout.dev/expected-duration": "30m",
        },
    )
    second = job(
        "second",
        annotations={
            "lightsout.dev/finish-by": ts(at(6 * 3600)),
            "lightsout.dev/expected-duration": "90m",
        },
    )
    alone = plan(snap(house, nuc(), day_ahead, second), at(0)).waits[ObjectKey("apps", "second")]
    assert alone.start == at(3 * 3600) - timedelta(minutes=92)
    both = plan(snap(house, nuc(), day_ahead, first, second), at(0)).waits
    assert both[ObjectKey("apps", "first")].start == at(2 * 3600)
    packed = both[ObjectKey("apps", "second")]
    assert packed.start == at(2 * 3600)
    assert "on machine nuc, beside Job first" in packed.reason
