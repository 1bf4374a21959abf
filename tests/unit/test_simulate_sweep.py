"""`lightsout simulate --sweep`: a knob's values replayed one by one, energy against waits.

A point is exactly the single replay with that setting (one code path), a bad knob or value is
one line and exit 2, `-o json` is strict JSON, `--plot` writes the curve; and the planner's
`scaleDown.breakEvenMultiple` the sweep varies is honoured, fractional waits included. The
deferral margin is swept on a week of deferrable runs priced by a synthetic day-ahead series:
cost, CO2, delays and deadlines missed per point, beside the runs released at once; a trace
that gives it nothing to change is one line."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli
from lightsout.simulate.analysis import report, sweep
from lightsout.simulate.replay.engine import Options, Policy, Result, replay
from lightsout.simulate.traces.generate import CHEAP_HOURS_START, household_deferrable
from lightsout.simulate.traces.trace import Trace, write
from tests.unit.test_simulate import TRUTH, node, pod, trace

pytestmark = pytest.mark.unit

#: Two pods with an idle gap of 200 s between them on one machine. Its break-even is 120 s
#: before its first shutdown is timed (learned boot 60 s, the shutdown taken as long), so at
#: one break-even time it is powered off in the gap and booted again; at three (360 s) it
#: stays on through it.
GAP_PODS = [pod(60, 300, "a"), pod(60 + 60.1 + 300 + 200, 300, "b")]


def gap_trace() -> Trace:
    return trace(GAP_PODS, machines=[node("m1")])


def power_ons(summary: dict[str, Any]) -> int:
    return sum(m["powerOns"] for m in summary["machines"])


def test_each_point_is_the_single_replay_with_that_setting() -> None:
    t = gap_trace()
    points, baseline = sweep.run(t, sweep.parse("breakEvenMultiple=1,3"), Options())
    reference = report.always_on_reference(replay(t))
    for point in points:
        single = replay(t, Options(overrides=(f"spec.scaleDown.breakEvenMultiple={point.value}",)))
        assert point.summary == report.summarise(single, reference)
    assert baseline == report.summarise(replay(t, Options(policy=Policy.REACTIVE)), reference)
    once, thrice = points
    # Waiting longer keeps the machine on through the gap: one power-on instead of two, more
    # energy, and the second pod starts at once instead of waiting for a boot.
    assert (power_ons(once.summary), power_ons(thrice.summary)) == (2, 1)
    assert once.kwh < thrice.kwh
    assert once.summary["waits"]["other"]["maxSeconds"] > 60
    assert thrice.summary["waits"]["other"]["p50Seconds"] < 61


def _drained_after_idle(result: Result) -> float:
    """Seconds from the first pod's end to its machine starting to drain."""
    (machine,) = result.machines
    drain = next(at for at, phase in machine.timeline if phase == "Draining")
    (first, *_) = result.pods
    assert first.started is not None
    return drain - (first.started + first.run_seconds)


@pytest.mark.parametrize("multiple", [1.0, 1.2575, 2.5])
def test_a_machine_is_powered_off_after_that_many_break_even_times_fractions_included(
    multiple: float,
) -> None:
    # Before this change a wait of 150.9 s was compared with the whole seconds elapsed (150),
    # its deadline was then past, and the machine stayed on until something else happened.
    t = trace([pod(60, 300, "a")], machines=[node("m1")])
    result = replay(t, Options(overrides=(f"spec.scaleDown.breakEvenMultiple={multiple}",)))
    break_even = 2 * (TRUTH.power_on_seconds + TRUTH.boot_seconds)
    assert _drained_after_idle(result) == pytest.approx(multiple * break_even, abs=0.5)


def _point(value: str, kwh: float, p95: float) -> sweep.Point:
    return sweep.Point(value, {"energy": {"usedKWh": kwh}, "waits": {"other": {"p95Seconds": p95}}})


def test_the_knee_is_the_front_point_farthest_from_the_chord_between_its_ends() -> None:
    points = [
        _point("a", 10.0, 0.0),
        _point("b", 8.0, 10.0),
        _point("dominated", 9.0, 20.0),
        _point("c", 7.5, 50.0),
        _point("d", 7.4, 100.0),
    ]
    assert [p.value for p in sweep.front(points)] == ["d", "c", "b", "a"]
    knee = sweep.knee(points)
    assert knee is not None and knee.value == "b"
    # One point better on both figures than the others: no curve, no knee.
    flat = [_point("1", 8.0, 98.0), _point("2", 8.2, 98.0), _point("3", 8.4, 98.0)]
    assert sweep.knee(flat) is None
    # A front bending away from the corner of least energy and shortest wait (homelab-week's
    # wide sweep): the middle point is above the chord, a worse trade than either end's mix.
    away = [_point("1", 7.96, 98.0), _point("20", 18.91, 50.0), _point("100", 24.66, 0.0)]
    assert sweep.knee(away) is None


BAD = [
    ("foo", "unknown knob 'foo' (knobs: breakEvenMultiple, selectionPolicy, deferralMargin)"),
    ("breakEvenMultiple=1,-1", "breakEvenMultiple=-1: Input should be greater than or equal to 0"),
    ("breakEvenMultiple=1,,2", "breakEvenMultiple: an empty value in '1,,2'"),
    ("breakEvenMultiple=x", "breakEvenMultiple=x: not a number: 'x'"),
    ("breakEvenMultiple=nan", "breakEvenMultiple=nan: not a finite number: 'nan'"),
    ("selectionPolicy=Cheapest", "selectionPolicy=Cheapest: Input should be 'LowestEnergy'"),
    ("deferralMargin=600,-1", "deferralMargin=-1: Input should be greater than or equal to 0"),
    ("deferralMargin=90000", "deferralMargin=90000: Input should be less than or equal to 86400"),
    ("deferralMargin=1.5", "deferralMargin=1.5: not a whole number of seconds: '1.5'"),
    (
        "deferralMargin",
        "deferralMargin: trace t has no deferrable Job (lightsout.dev/finish-by or "
        "lightsout.dev/max-delay on a CronJob's Job template or in a pod line's jobAnnotations)",
    ),
]


@pytest.mark.parametrize(("argument", "says"), BAD)
def test_a_bad_knob_or_value_is_one_line_and_exit_2(
    argument: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(gap_trace(), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "--sweep", argument]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"lightsout simulate: --sweep {says}"), line
    assert captured.out == ""


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("scaleDown.unneededSeconds=5", "a Group setting is under spec"),
        ("group.scaleDown.unneededSeconds=5", "a Group setting is under spec"),
        ("spec=5", "a Group setting is under spec"),
        ("spec.scaleDown.unneededSeconds", "expected PATH=VALUE"),
        ("spec.scaleDown.unneededSeconds=[", "the value is not YAML"),
    ],
)
def test_a_set_that_would_change_nothing_is_one_line_and_exit_2(
    setting: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Set outside spec, the value used to be written where no replay reads it, silently.
    directory = write(gap_trace(), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "--set", setting]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"lightsout simulate: --set {setting!r}: {says}"), line
    assert captured.out == ""


def test_a_sweep_of_another_policy_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(gap_trace(), tmp_path / "t")
    argv = ["simulate", str(directory), "--sweep", "selectionPolicy", "--policy", "reactive"]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--sweep replays the lightsout policy" in line


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_and_the_plot_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(gap_trace(), tmp_path / "t")
    picture = tmp_path / "sweep.png"
    argv = ["simulate", str(directory), "--sweep", "breakEvenMultiple=0.5,1,3", "-o", "json"]
    assert cli.main([*argv, "--plot", str(picture)]) == 0
    document = _strict(capsys.readouterr().out)
    assert document["knob"] == "breakEvenMultiple"
    assert document["setting"] == "spec.scaleDown.breakEvenMultiple"
    assert [p["value"] for p in document["points"]] == ["0.5", "1", "3"]
    assert [p["isDefault"] for p in document["points"]] == [False, True, False]
    assert document["baseline"]["policy"] == "reactive"
    assert set(document["points"][0]) == {
        "value",
        "isDefault",
        "usedKWh",
        "otherWaitP50Seconds",
        "otherWaitP95Seconds",
        "cronjobWaitP95Seconds",
        "latePowerOns",
        "powerOns",
        "cost",
        "gCO2",
        "deferredRuns",
        "deferredMeanDelayHours",
        "deferredMaxDelayHours",
        "deadlinesMissed",
    }
    assert document["axes"]["x"] == "usedKWh"
    assert document["points"][0]["deferredRuns"] is None
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(["simulate", str(directory), "--sweep", "breakEvenMultiple=1,3"]) == 0
    text = capsys.readouterr().out
    assert "sweep of spec.scaleDown.breakEvenMultiple" in text
    assert "1 (default)" in text
    assert "reactive baseline" in text


def falling_series(days: int, first: float) -> str:
    """Hourly values from the hour before the trace's start on, each one less than the last:
    a held run's cheapest start is always its latest, so the margin alone decides it."""
    lines = ["start_utc,value"]
    for hour in range(-1, days * 24 + 24):
        start = CHEAP_HOURS_START + timedelta(hours=hour)
        lines.append(f"{start:%Y-%m-%dT%H:%M:%SZ},{first - hour}")
    return "\n".join(lines) + "\n"


def deferrable_week(objective: str = "Cost") -> Trace:
    """A week of the household's deferrable runs on a synthetic day-ahead price (EUR/MWh) and
    grid carbon (gCO2/kWh), both falling hour by hour."""
    prices, carbon = falling_series(7, 400.0), falling_series(7, 500.0)
    return household_deferrable(prices, carbon, weeks=1, objective=objective)


def test_the_deferral_margin_sweep_prints_cost_co2_delays_and_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(deferrable_week(), tmp_path / "t")
    argv = ["simulate", str(directory), "--sweep", "deferralMargin=0,600,7200", "-o", "json"]
    picture = tmp_path / "margin.png"
    assert cli.main([*argv, "--plot", str(picture)]) == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    document = _strict(capsys.readouterr().out)
    assert document["setting"] == "spec.electricity.deferralMarginSeconds"
    assert document["axes"]["x"] == "cost" and document["axes"]["y"] == "deadlinesMissed"
    assert document["currency"] == "EUR"
    rows = {p["value"]: p for p in document["points"]}
    assert [r["isDefault"] for r in rows.values()] == [False, True, False]
    for row in rows.values():
        assert row["deferredRuns"] > 0 and row["gCO2"] > 0
        assert row["deadlinesMissed"] is not None
    # A held run starts as late as it may: the larger the margin, the earlier, and dearer.
    delays = [rows[v]["deferredMeanDelayHours"] for v in ("0", "600", "7200")]
    assert delays == sorted(delays, reverse=True) and delays[0] > delays[-1]
    assert rows["600"]["cost"] < rows["7200"]["cost"]
    # The baseline is the same planner running them at once: no run held, dearer.
    base = document["baseline"]
    assert (base["policy"], base["defer"], base["label"]) == (
        "lightsout",
        False,
        "released at once",
    )
    assert base["deferredRuns"] is None
    assert base["cost"] > max(r["cost"] for r in rows.values())
    # The knee is over cost and deadlines missed; or none, and the note names the best point.
    assert "(cost, deferrable runs' deadlines missed)" in document["kneeRule"]
    assert document["knee"] is not None or "least cost at the fewest" in document["kneeNote"]

    assert cli.main(["simulate", str(directory), "--sweep", "deferralMargin=0,7200"]) == 0
    text = capsys.readouterr().out
    heading = next(line for line in text.splitlines() if line.startswith("value"))
    for column in ("EUR", "kg CO2", "delay mean h", "max h", "missed"):
        assert column in heading
    assert "released at once" in text


def test_the_margin_sweep_weighs_grams_when_the_objective_is_carbon() -> None:
    t = deferrable_week("Carbon")
    prepared = sweep.prepare(t, sweep.parse("deferralMargin=0,600"), Options())
    assert prepared.trade is sweep.CARBON_MISSED


@pytest.mark.parametrize(
    ("overrides", "configmaps", "says"),
    [
        (
            ("spec.electricity.series=null",),
            True,
            "deferralMargin: no Group of trace household-deferrable has an electricity price "
            "series or rates (or, with objective Carbon, a carbon series): its deferrable Jobs "
            "run at once whatever the margin",
        ),
        ((), False, "deferralMargin: trace household-deferrable: "),
    ],
)
def test_a_trace_the_margin_cannot_change_is_refused_before_any_replay(
    overrides: tuple[str, ...], configmaps: bool, says: str
) -> None:
    t = deferrable_week()
    if not configmaps:  # the price series' ConfigMap is missing
        t = replace(t, configmaps=())
    with pytest.raises(sweep.SweepError) as refused:
        sweep.run(t, sweep.parse("deferralMargin"), Options(overrides=overrides))
    (line,) = str(refused.value).splitlines()
    assert line.startswith(says), line
    if not configmaps:
        assert "day-ahead" in line and line.endswith("run at once whatever the margin")
