"""The break-even behind `scaleDown.unneededSeconds: auto` weighed by the price in force
(`planning.autoscaler.breakeven.priced_break_even`): counted from the moment a machine became
unneeded, idling until it has cost what a power cycle costs at that moment's price. A flat price
gives the plain figure; dearer hours ahead shorten the wait, cheaper ones lengthen it.

Same fixtures as `test_breakeven`: a machine learned to boot in 60 s and shut down in 30 s
(break-even 90 s at one price), unneeded since `SINCE`.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout.models.enums import DeferralObjective
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.breakeven import unneeded_seconds
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.planning.policy import EnergyModel
from lightsout.simulate.replay.engine import Options, replay
from lightsout.simulate.traces.generate import household_deferrable
from lightsout.simulate.traces.trace import Trace
from lightsout.state.series import Series
from lightsout.state.types import Snapshot
from tests.unit.test_autoscale_objects import at, group, machine_note, mkey, offs, snap
from tests.unit.test_breakeven import idle_cluster

pytestmark = pytest.mark.unit

PLAIN = "auto: break-even, learned boot 60s + shutdown 30s"


def series(since: datetime, *steps: tuple[float, float]) -> Series:
    """Values from `since`, each `(seconds, value)` for that long."""
    starts, values, at_ = [], [], since
    for seconds, value in steps:
        starts.append(at_)
        values.append(value)
        at_ += timedelta(seconds=seconds)
    return Series(tuple(starts), tuple(values), timedelta(seconds=steps[-1][0]))


def priced_snapshot(
    since: datetime,
    *,
    electricity: dict[str, Any] | None = None,
    prices: Series | None = None,
    carbon: Series | None = None,
    objective: DeferralObjective | None = None,
    **spec: Any,
) -> Snapshot:
    """The idle cluster, its Group priced as given, the machine unneeded since `since`."""
    objects = idle_cluster()
    objects[0] = group(electricity=electricity or {"pricePerKWh": 0.2}, **spec)
    snapshot = snap(objects, unneeded_since={mkey("idle"): since})
    (g,) = snapshot.groups
    assert g.electricity is not None
    power = g.electricity
    if objective is not None:
        power = power.model_copy(update={"objective": objective})
    g = dataclasses.replace(g, electricity=power, prices=prices, carbon=carbon)
    return dataclasses.replace(snapshot, groups=(g,))


def wait(snapshot: Snapshot, since: datetime | None) -> tuple[float, str]:
    (m,) = snapshot.machines
    (g,) = snapshot.groups
    return unneeded_seconds(m, g, EnergyModel.of(snapshot.machines, snapshot.groups), since)


def steps(since: datetime, *pairs: tuple[float, float], **kw: Any) -> Snapshot:
    return priced_snapshot(since, prices=series(since, *pairs), **kw)


SINCE = at(-60)


def test_one_price_at_every_hour_gives_the_plain_break_even() -> None:
    flat = priced_snapshot(SINCE)
    assert wait(flat, SINCE) == (90, PLAIN)
    # A series that holds one price over the break-even, or a tariff that does not change
    # within it: the same figure and words.
    assert wait(steps(SINCE, (3600, 0.31)), SINCE) == (90, PLAIN)
    evening = {"pricePerKWh": 0.2, "rates": [{"from": "18:00", "to": "22:00", "pricePerKWh": 0.5}]}
    assert wait(priced_snapshot(SINCE, electricity=evening), SINCE) == (90, PLAIN)
    # Without the moment it became unneeded (cluster-autoscaler's option), unpriced.
    assert wait(steps(SINCE, (30, 0.2), (3600, 0.6)), None) == (90, PLAIN)


def test_dearer_hours_ahead_shorten_the_wait_and_say_so() -> None:
    # 30 s at 0.2 pay 6 of the cycle's 90 s x 0.2 = 18; the remaining 12 take 20 s at 0.6.
    snapshot = steps(SINCE, (30, 0.2), (3600, 0.6))
    seconds, source = wait(snapshot, SINCE)
    assert seconds == pytest.approx(50)
    assert source == (
        f"{PLAIN}, priced: 0.2 EUR/kWh now, 0.6 EUR/kWh from 2026-03-01T11:59:30Z "
        "(90s at one price)"
    )
    # Unneeded for 60 s: past the priced 50 s, powered off, though 60 < 90.
    result = plan(snapshot, at(0))
    assert offs(result) == ["idle"]
    (action,) = result.actions
    assert "unneeded for 60s (auto: break-even" in action.reason
    assert "(90s at one price) 50s)" in action.reason
    # The planner wakes itself at the priced deadline.
    later = steps(at(-20), (30, 0.2), (3600, 0.6))
    assert next_wake(later, plan(later, at(0)), at(0)) == at(30)


def test_cheaper_hours_ahead_lengthen_the_wait() -> None:
    # 30 s at 0.6 pay 18 of 54; the remaining 36 take 180 s at 0.2: 210 s.
    snapshot = steps(at(-100), (30, 0.6), (3600, 0.2))
    seconds, _ = wait(snapshot, at(-100))
    assert seconds == pytest.approx(210)
    result = plan(snapshot, at(0))
    assert offs(result) == []
    assert "only for 100s of 210s (auto: break-even" in machine_note(result, "idle")
    assert "priced: 0.6 EUR/kWh now, 0.2 EUR/kWh from" in machine_note(result, "idle")


def test_the_multiple_scales_the_cycle_before_it_is_priced() -> None:
    # 2 x 90 s at 0.2 = 36: 6 in the first 30 s, 30 more in 50 s at 0.6.
    snapshot = steps(SINCE, (30, 0.2), (3600, 0.6), scaleDown={"breakEvenMultiple": 2})
    seconds, source = wait(snapshot, SINCE)
    assert seconds == pytest.approx(80)
    assert "x breakEvenMultiple 2, priced:" in source
    assert "(180s at one price)" in source


def test_hours_at_no_price_pay_nothing_back_and_no_price_now_leaves_it_plain() -> None:
    free_hour = steps(SINCE, (30, 0.2), (3600, 0.0), (3600, 0.2))
    assert wait(free_hour, SINCE)[0] == pytest.approx(3690)
    negative = steps(SINCE, (30, 0.2), (3600, -0.05), (3600, 0.2))
    assert wait(negative, SINCE)[0] == pytest.approx(3690)
    # Free (or paid to consume) now: the cycle has no price to weigh it by.
    assert wait(steps(SINCE, (30, 0.0), (3600, 0.6)), SINCE) == (90, PLAIN)


def test_never_paid_back_within_the_horizon() -> None:
    # Past the series, the tariff's price: 0, so idling never pays the cycle back.
    snapshot = steps(SINCE, (30, 0.2), electricity={"pricePerKWh": 0.0})
    seconds, source = wait(snapshot, SINCE)
    assert math.isinf(seconds)
    assert "never paid back within 24 h" in source
    assert offs(plan(snapshot, at(0))) == []


def test_past_a_price_series_the_tariff_price_holds() -> None:
    # The series covers 30 s at 0.2; after it, pricePerKWh 0.6: as a step up.
    ending = steps(SINCE, (30, 0.2), electricity={"pricePerKWh": 0.6})
    seconds, source = wait(ending, SINCE)
    assert seconds == pytest.approx(50)
    assert "0.2 EUR/kWh now, 0.6 EUR/kWh from 2026-03-01T11:59:30Z" in source


def carbon(since: datetime, *pairs: tuple[float, float]) -> Snapshot:
    return priced_snapshot(since, carbon=series(since, *pairs), objective=DeferralObjective.CARBON)


def test_objective_carbon_weighs_the_break_even_by_carbon_intensity() -> None:
    # The price is flat; the grid's carbon intensity triples after 30 s.
    seconds, source = wait(carbon(SINCE, (30, 100.0), (3600, 300.0)), SINCE)
    assert seconds == pytest.approx(50)
    assert "priced: 100 gCO2/kWh now, 300 gCO2/kWh from 2026-03-01T11:59:30Z" in source


def test_past_a_carbon_series_its_last_value_holds() -> None:
    # 30 s at 100, then the series ends: 100 holds, so the plain figure.
    assert wait(carbon(SINCE, (30, 100.0)), SINCE) == (90, PLAIN)
    # It ends after a step: the 300 holds.
    assert wait(carbon(SINCE, (30, 100.0), (10, 300.0)), SINCE)[0] == pytest.approx(50)
    # A carbon series that does not cover the moment: unpriced.
    assert wait(carbon(at(-30), (3600, 100.0)), SINCE) == (90, PLAIN)


def test_a_multiple_that_is_no_exact_float_still_powers_off_at_its_deadline() -> None:
    # 90 x 1.3 is 117.00000000000001 in floating point: the wait is settled to the
    # millisecond, so at its deadline (117 s, a datetime) the machine goes, and the planner
    # was woken for that deadline.
    objects = idle_cluster()
    objects[0] = group(scaleDown={"breakEvenMultiple": 1.3})
    assert offs(plan(snap(objects, unneeded_since={mkey("idle"): at(-117)}), at(0))) == ["idle"]
    snapshot = snap(objects, unneeded_since={mkey("idle"): at(-100)})
    assert next_wake(snapshot, plan(snapshot, at(0)), at(0)) == at(17)


# --- in the replay ------------------------------------------------------------------------------

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "electricity"


def _with_rates(trace: Trace, rates: list[dict[str, Any]] | None) -> Trace:
    """`trace` with its Groups on a UTC tariff: `rates` over their pricePerKWh, no series."""

    def electricity(given: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in given.items() if k not in ("series", "carbon", "objective")}
        return {**kept, "timeZone": "UTC", **({"rates": rates} if rates else {})}

    return dataclasses.replace(
        trace,
        machines=tuple(
            {**m, "spec": {**m["spec"], "electricity": electricity(m["spec"]["electricity"])}}
            if m["kind"] == "Group"
            else m
            for m in trace.machines
        ),
    )


def test_the_replay_powers_off_sooner_before_dearer_hours_and_later_before_cheaper() -> None:
    # The household week: tower-1 becomes unneeded at 21:02 every evening (the photo index,
    # run at once, is not pre-warmed: it starts when the tower is up at 19:02 and runs 2 h;
    # break-even 128 s once learned). A rate from 21:03 moves when it is powered off, so what
    # it draws.
    week = household_deferrable(
        (DATA / "de_lu_price_hourly.csv").read_text(),
        (DATA / "de_carbon_intensity_hourly.csv").read_text(),
        weeks=1,
    )

    def tower_wh(price: float | None) -> tuple[int, float]:
        rates = None if price is None else [{"from": "21:03", "to": "23:00", "pricePerKWh": price}]
        result = replay(_with_rates(week, rates), Options(defer=False))
        (tower,) = [m for m in result.machines if m.name == "tower-1"]
        return tower.power_ons, tower.energy.total.used_wh

    flat, dearer, cheaper = tower_wh(None), tower_wh(0.9), tower_wh(0.1)
    assert flat[0] == dearer[0] == cheaper[0]  # the same power cycles, at other moments
    assert dearer[1] < flat[1] < cheaper[1]
