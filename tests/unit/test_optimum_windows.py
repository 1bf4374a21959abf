"""The offline optimum's time-indexed model (`optimum.windows`): pods start within windows,
machines counted up by whole slots, energy, cost or carbon.

A hand-computed case; the bound below the replay on small random traces, by energy and by cost,
with the replayed schedule mapped onto the model's columns passing every row (the validity
proof's own construction); a negative price and an unsolvable model give no figure.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from lightsout.simulate.analysis import optimum
from lightsout.simulate.analysis.optimum import solver, windows
from lightsout.simulate.analysis.optimum.model import violations
from lightsout.simulate.analysis.report import longest_wait
from lightsout.simulate.replay.engine import Result, replay
from lightsout.simulate.traces.trace import Durations, Trace, TracePod
from tests.unit.test_simulate import node

pytestmark = pytest.mark.unit

START = datetime(2026, 11, 2, tzinfo=UTC)
TRUTH = Durations(power_on_seconds=10, boot_seconds=50, shutdown_seconds=20)
#: Cheap from 01:00 to 02:00 and from 04:00 to 05:00 (UTC), dear otherwise.
RATES = [
    {"from": "01:00", "to": "02:00", "pricePerKWh": 0.05},
    {"from": "04:00", "to": "05:00", "pricePerKWh": 0.12},
]


def group(**electricity: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "lab"},
        "spec": {
            "maxNodes": 5,
            "electricity": {"pricePerKWh": 0.30, "currency": "EUR", "timeZone": "UTC"}
            | electricity,
        },
    }


def pod(at: float, run: float, name: str, cpu: str = "1") -> TracePod:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    return TracePod(at, run, "default", name, spec, "Job", name)


def trace(
    pods: list[TracePod],
    machines: list[dict[str, Any]] | None = None,
    *,
    hours: float = 2.0,
    configmaps: tuple[dict[str, Any], ...] = (),
    **electricity: Any,
) -> Trace:
    machines = machines or [node("m1")]
    return Trace(
        name="t",
        start=START,
        duration_seconds=hours * 3600,
        machines=(group(**electricity), *machines),
        configmaps=configmaps,
        pods=tuple(pods),
        durations={m["metadata"]["name"]: TRUTH for m in machines},
    )


def random_trace(seed: int) -> Trace:
    """Six hours, two machines of different sizes, a dozen pods that often contend."""
    rng = random.Random(seed)  # noqa: S311  (seeded on purpose: the trace must be reproducible)
    pods = [
        pod(rng.uniform(0, 5 * 3600), rng.uniform(300, 3000), f"p{i}", rng.choice(["1", "2", "3"]))
        for i in range(12)
    ]
    machines = [node("big", cpu=8, watts=(200, 80, 5)), node("small", cpu=4, watts=(60, 20, 2))]
    return trace(pods, machines, hours=6, rates=RATES)


def used_wh(result: Result) -> float:
    return sum(m.energy.total.used_wh for m in result.machines)


def test_one_aligned_pod_costs_what_the_zero_wait_model_says_by_hand() -> None:
    t = trace([pod(1800, 3600, "a")])
    bound = solver.solve_windows(t, time_limit=10, max_wait=0.0, slot=300)
    # 2 h standby at 5 W, 1 h up at idle-standby 35 W, the pod's quarter of (120-40) W for 1 h,
    # one boot (10+50 s) and one shutdown (20 s) at 35 W: the slots cut nothing off.
    expected = 10 + 35 + 20 + 80 / 3600 * 35
    assert (bound.source, bound.gap) == ("time-indexed MIP optimum", 0.0)
    assert bound.value == pytest.approx(expected, rel=1e-4)
    assert bound.value <= used_wh(replay(t))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_replayed_schedule_maps_onto_the_model_and_the_bound_is_below_it(seed: int) -> None:
    t = random_trace(seed)
    result = replay(t)
    waited = longest_wait(result)
    for objective, real in (
        (windows.ENERGY, used_wh(result)),
        (windows.COST, sum(m.cost for m in result.machines)),
    ):
        problem = windows.windows_problem(t, waited, objective=objective, slot=300)
        values, unmapped = windows.mapped(problem, result)
        assert unmapped == []
        assert violations(problem, values, problem.upper) == []
        assert problem.value(values) <= real * (1 + 1e-9)
        bound = solver.solve_windows(t, 4, waited, objective=objective, slot=300, replayed=[result])
        assert bound.value is not None
        assert bound.value <= problem.value(values) * (1 + 1e-6)
        assert bound.incumbent is not None and bound.value <= bound.incumbent * (1 + 1e-6)


def test_a_cheap_hour_lowers_the_cost_of_a_pod_that_may_wait_for_it() -> None:
    # One 1-cpu pod of 30 min arriving at 00:30 that may wait 2 h: started at 01:00 it runs in
    # the cheap hour; its load energy is the same wherever it runs.
    t = trace([pod(1800, 1800, "a")], hours=4, rates=RATES)
    waited = solver.solve_windows(t, 10, 7200.0, objective=windows.COST, slot=300)
    at_once = solver.solve_windows(t, 10, 0.0, objective=windows.COST, slot=300)
    assert waited.value is not None and at_once.value is not None
    # The standby, 5 W for 4 h (3 h at 0.30, 1 h at 0.05 EUR/kWh), is paid either way.
    standby = 5 / 1000 * (3 * 0.30 + 0.05)
    up = (40 - 5 + 80 / 4) / 1000 * 0.5  # idle above standby and the pod's load, for 30 min
    assert waited.value == pytest.approx(standby + up * 0.05, rel=0.02)
    assert at_once.value >= standby + up * 0.30 * 0.9


def test_a_negative_price_gives_no_cost_bound_but_the_energy_bound_stands() -> None:
    series = "start,price\n2026-11-02T00:00:00Z,50\n2026-11-02T01:00:00Z,-300\n"
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "day-ahead", "labels": {"lightsout.dev/series": ""}},
        "data": {"prices.csv": series},
    }
    ref = {"configMapKeyRef": {"name": "day-ahead", "key": "prices.csv"}, "unit": "PerMWh"}
    t = trace([pod(600, 1800, "a")], configmaps=(configmap,), series=ref)
    cost = solver.solve_windows(t, 10, 0.0, objective=windows.COST, slot=300)
    assert (cost.value, cost.incumbent, cost.gap) == (None, None, None)
    assert "negative price" in cost.note
    assert solver.solve_windows(t, 10, 0.0, slot=300).value is not None


def test_required_runs_that_cannot_all_start_in_their_windows_give_no_figure() -> None:
    # Two pods of all 4 cpu at once on the one machine, neither allowed to wait.
    t = trace([pod(600, 1800, "a", cpu="4"), pod(600, 1800, "b", cpu="4")])
    bound = solver.solve_windows(t, 10, 0.0, slot=300)
    assert (bound.value, bound.incumbent, bound.source) == (None, None, "")
    assert "no schedule" in bound.note


def test_contended_pods_get_the_larger_of_the_time_indexed_and_lp_bounds_below_the_replay() -> None:
    t = trace([pod(600, 1800, "a", cpu="3"), pod(900, 1800, "b", cpu="3")])
    result = replay(t)
    waited = longest_wait(result)
    bound = optimum.solve(t, time_limit=10, max_wait=waited, replayed=[result])
    timed = solver.solve_windows(t, 10, waited, replayed=[result])
    assert bound.kind == optimum.WITH_WAITS and timed.value is not None
    assert bound.kwh is not None and bound.kwh * 1000 >= timed.value - 1e-6
    assert bound.kwh <= used_wh(result) / 1000
    # Standby 2 h x 5 W, the machine up at least 1 h (the pods cannot overlap) x 35 W, each
    # pod's 3/4 of 80 W for 0.5 h; the 1 min slots may cut two of them off the up time.
    work = 10 + 35 + 2 * 80 * 0.75 * 0.5
    assert work - 2 * 60 / 3600 * 35 <= timed.value <= bound.kwh * 1000


def test_default_slot_divides_an_hour_and_grows_with_the_trace() -> None:
    week = trace([], hours=168)
    assert windows.default_slot(week, 4) == 300
    assert windows.default_slot(trace([], hours=24 * 28), 3) == 900
    assert all(3600 % s == 0 for s in windows.SLOTS)
