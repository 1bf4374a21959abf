"""A solar surplus sensor makes the Group's draw free up to its level: the sensor read, the
reading in status and when it goes stale, the price a machine pays, and a deferrable Job
released while the surplus covers its machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lightsout.execution.homeassistant import EntityState, ReadError
from lightsout.execution.surplus import (
    SolarSurplusStatus,
    condition,
    observe,
    sensor_watts,
    worth_writing,
)
from lightsout.models.enums import ConditionStatus
from lightsout.models.group import Electricity, GroupSpec
from lightsout.planning.autoscaler import deferral
from lightsout.planning.energy import tariff
from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.status import rate
from lightsout.state import series
from lightsout.state.series import Series
from lightsout.state.types import ObjectKey
from tests.unit.test_autoscale_objects import APPS, at, machine, ts
from tests.unit.test_deferral import AFTERNOON, fleet, job, planned, released

pytestmark = pytest.mark.unit

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SENSOR = "sensor.solar_surplus"
HOME_ASSISTANT = {
    "url": "http://192.0.2.40:8123",
    "tokenSecretRef": {"name": "ha-token"},
    "entity": SENSOR,
    "pollSeconds": 60,
}
FLAT = Electricity.model_validate(
    {"pricePerKWh": 0.30, "solarSurplus": {"homeAssistant": HOME_ASSISTANT}}
)
Obj = dict[str, Any]


# The sensor.


@pytest.mark.parametrize(
    ("state", "unit", "watts"),
    [("850", "W", 850.0), ("1.2", "kW", 1200.0), ("0", "W", 0.0), ("-300", "W", 0.0)],
)
def test_the_sensor_reads_in_watts_or_kilowatts(state: str, unit: str, watts: float) -> None:
    assert sensor_watts(SENSOR, EntityState(state, unit)) == watts


@pytest.mark.parametrize(
    ("state", "unit", "said"),
    [
        ("850", "Wh", "sensor.solar_surplus is in 'Wh': only a surplus in W or kW is read"),
        ("850", None, "sensor.solar_surplus has no unit_of_measurement"),
        ("unavailable", "W", "sensor.solar_surplus is unavailable in Home Assistant"),
        ("unknown", None, "sensor.solar_surplus is unknown in Home Assistant"),
        ("sunny", "W", "sensor.solar_surplus is 'sunny', not a number of W"),
        ("nan", "W", "not a number of W"),
    ],
)
def test_what_does_not_read_is_said(state: str, unit: str | None, said: str) -> None:
    with pytest.raises(ReadError) as caught:
        sensor_watts(SENSOR, EntityState(state, unit))
    assert said in str(caught.value)


# The reading in status, and when it goes stale.


def test_a_failed_read_keeps_the_last_reading_and_says_why() -> None:
    source = f"{SENSOR}@192.0.2.40:8123"
    good = observe(None, source, 812.4, None, T0)
    assert (good.watts, good.read_at, good.error) == (812, T0, None)
    assert condition(good).status is ConditionStatus.TRUE

    bad = observe(
        good, source, None, "sensor.solar_surplus is unavailable", T0 + timedelta(seconds=60)
    )
    assert (bad.watts, bad.read_at) == (812, T0)
    assert condition(bad).status is ConditionStatus.FALSE
    assert "unavailable" in condition(bad).message


def test_the_status_is_written_on_a_change_or_before_it_goes_stale() -> None:
    source = f"{SENSOR}@192.0.2.40:8123"
    old = observe(None, source, 800, None, T0)
    assert worth_writing(None, old, 60, T0)
    minute = T0 + timedelta(seconds=60)
    assert not worth_writing(old, observe(old, source, 805, None, minute), 60, minute)
    assert worth_writing(old, observe(old, source, 900, None, minute), 60, minute)
    renew = T0 + timedelta(seconds=120)
    assert worth_writing(old, observe(old, source, 805, None, renew), 60, renew)
    failed = observe(old, source, None, "down", minute)
    assert worth_writing(old, failed, 60, minute)
    assert not worth_writing(failed, observe(failed, source, None, "down", renew), 60, renew)


def _status(watts: float, read_at: datetime) -> Obj:
    return SolarSurplusStatus(entity=SENSOR, watts=watts, read_at=read_at).model_dump(
        mode="json", by_alias=True
    )


def test_a_reading_counts_for_three_poll_periods_then_there_is_no_surplus() -> None:
    found = series.surplus(FLAT, "lab", {}, _status(500, T0))
    assert found is not None
    assert tariff.surplus_at(found, T0 + timedelta(seconds=179)) == 500
    assert tariff.surplus_at(found, T0 + timedelta(seconds=180)) is None
    # A pass is due when it goes stale (or the price changes first).
    assert tariff.next_change(FLAT, T0, None, found) == T0 + timedelta(seconds=180)
    assert series.surplus(FLAT, "lab", {}, None) is None
    assert series.surplus(FLAT, "lab", {}, {"watts": 500}) is None


def test_a_recorded_surplus_is_read_from_its_configmap() -> None:
    electricity = Electricity.model_validate(
        {"pricePerKWh": 0.3, "solarSurplus": {"configMapKeyRef": {"name": "pv", "key": "w.csv"}}}
    )
    text = "start,watts\n2026-06-01T12:00:00Z,400\n2026-06-01T12:15:00Z,0\n"
    found = series.surplus(electricity, "lab", {("lab", "pv"): {"w.csv": text}}, None)
    assert found is not None
    assert tariff.surplus_at(found, T0) == 400
    assert series.surplus(electricity, "lab", {}, None) is None  # missing: no surplus


# The price a machine pays.


def test_a_machine_fully_covered_pays_nothing_and_one_partly_covered_the_rest() -> None:
    assert tariff.paid_watts(40, 50) == 0
    assert tariff.paid_watts(40, 30) == pytest.approx(10)
    assert tariff.paid_watts(40, None) == 40
    # Shared by draw: two machines of 40 W under 60 W pay 10 W each, the Group 20 W.
    assert tariff.paid_watts(40, 60, beside=40) == pytest.approx(10)
    # What a run adds: 40 W more beside 30 W under 50 W of surplus adds 20 W.
    assert tariff.added_watts(40, 50, beside=30) == pytest.approx(20)


def test_energy_over_a_period_is_free_while_the_surplus_lasts() -> None:
    surplus = Series((T0,), (100.0,), timedelta(hours=1))
    # 200 W for two hours: the first hour 100 W is paid, the second 200 W (no surplus).
    cost = tariff.cost(FLAT, 200, T0, T0 + timedelta(hours=2), surplus=surplus)
    assert cost == pytest.approx((0.1 + 0.2) * 0.30)
    covered = Series((T0,), (500.0,), timedelta(hours=2))
    assert tariff.cost(FLAT, 200, T0, T0 + timedelta(hours=2), surplus=covered) == 0


def test_the_account_pays_nothing_while_the_surplus_covers_the_group() -> None:
    spec = GroupSpec.model_validate(
        {"electricity": FLAT.model_dump(mode="json", by_alias=True, exclude_none=True)}
    )
    draw = Draw(off=2, idle=10, on=50)
    surplus = Series((T0,), (30.0,), timedelta(minutes=3))
    assert rate(draw, spec, "Ready", 0.0, T0, surplus=surplus).price_per_kwh == 0
    partly = rate(draw, spec, "Ready", 1.0, T0, surplus=surplus)
    assert partly.price_per_kwh == pytest.approx(0.30 * 20 / 50)
    assert partly.watts == 50  # the energy used is the draw: only its price falls
    stale = rate(draw, spec, "Ready", 1.0, T0 + timedelta(minutes=3), surplus=surplus)
    assert stale.price_per_kwh == pytest.approx(0.30)


# A deferrable Job.


def _sunny(watts: float) -> list[Any]:
    """The deferral's NUC (50 W busy) in a Group on the afternoon tariff, with a surplus of
    `watts` read at 12:00."""
    electricity = {**AFTERNOON, "solarSurplus": {"homeAssistant": HOME_ASSISTANT}}
    lab, nuc = fleet(electricity)
    lab["status"] = {"solarSurplus": {"entity": SENSOR, "watts": watts, "readAt": ts(at(0))}}
    return [lab, nuc]


def test_a_surplus_that_covers_the_machine_releases_the_job_now() -> None:
    result = planned(*_sunny(2000), job())
    assert "now is its cheapest start" in released(result)["backup"]
    assert "0.0000 EUR" in released(result)["backup"]


def test_a_small_or_stale_surplus_leaves_it_waiting_for_the_cheap_hours() -> None:
    key = ObjectKey(APPS, "backup")
    assert planned(*_sunny(5), job()).waits[key].start == at(2 * 3600)
    # Read at 12:00, three minutes later it is stale: the afternoon rate wins again.
    assert planned(*_sunny(2000), job(), now=600).waits[key].start == at(2 * 3600)


def _sunny_nucs(watts: float, count: int) -> list[Any]:
    """`count` NUCs (50 W busy, 2 W off, 4 cpu), off, in one Group with a surplus of `watts`."""
    lab, _ = _sunny(watts)
    return [
        lab,
        *(
            machine(f"nuc-{i}", watts=(50, 10, 2), learned={"bootSeconds": 120})
            for i in range(1, count + 1)
        ),
    ]


def test_a_run_is_not_charged_for_its_own_standby_twice() -> None:
    # 50 W of surplus for a 50 W run: the run's draw replaces the machine's 2 W of standby
    # (not added on top of it), so the surplus covers it all.
    reason = released(planned(*_sunny(50), job()))["backup"]
    assert "now is its cheapest start (0.0000 EUR on machine nuc" in reason


def test_a_crew_counts_each_machine_once_against_the_surplus() -> None:
    # 100 W covers two 50 W runs: the second machine sees the first at 50 W, not its 2 W of
    # standby and 50 W besides.
    both = job(cpu="4")
    both["spec"]["parallelism"] = 2
    reason = released(planned(*_sunny_nucs(100, 2), both))["backup"]
    assert "now is its cheapest start (0.0000 EUR for 2 pods at once on 2 machines" in reason


def test_two_jobs_are_not_both_told_the_same_surplus_makes_them_free() -> None:
    # 52 W covers one 50 W run beside the other NUC's 2 W of standby: the Job due first takes
    # it now; the other, weighed beside that run, would pay full price while it is on, so it
    # waits for the surplus left once the first is done (held to 14:00: its start that ends
    # then, 14:00 less 2 min of boot and 30 of run).
    first = job(
        "first",
        cpu="4",
        annotations={
            "lightsout.dev/finish-by": ts(at(5 * 3600)),
            "lightsout.dev/expected-duration": "30m",
        },
    )
    result = planned(*_sunny_nucs(52, 2), first, job("second", cpu="4"))
    assert "0.0000 EUR" in released(result)["first"]
    assert "second" not in released(result)
    wait = result.waits[ObjectKey(APPS, "second")]
    assert wait.start == at(2 * 3600 - 120 - 1800)
    assert "(0.0000 EUR on machine nuc-1" in wait.reason


def test_the_surplus_is_read_once_a_plan_and_not_at_all_for_carbon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[datetime] = []
    real = tariff.persisting

    def counted(*args: Any, **kwargs: Any) -> Series | None:
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(deferral.tariff, "persisting", counted)
    jobs = [job(f"job-{i}") for i in range(3)]
    planned(*_sunny_nucs(2000, 4), *jobs)
    assert len(calls) == 1  # one Group, once: not per machine and Job
    calls.clear()
    carbon = {"pricePerKWh": 0.3, "objective": "Carbon"}
    lab, nuc = fleet({**carbon, "solarSurplus": {"homeAssistant": HOME_ASSISTANT}})
    lab["status"] = {"solarSurplus": {"entity": SENSOR, "watts": 2000, "readAt": ts(at(0))}}
    planned(lab, nuc, *jobs)
    assert calls == []
