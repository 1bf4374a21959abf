"""`lightsout simulate --sweep`: a knob's values replayed one by one, energy against waits.

A point is exactly the single replay with that setting (one code path), a bad knob or value is
one line and exit 2, `-o json` is strict JSON, `--plot` writes the curve; and the planner's
`scaleDown.breakEvenMultiple` the sweep varies is honoured, fractional waits included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli
from lightsout.simulate.analysis import report, sweep
from lightsout.simulate.replay.engine import Options, Policy, Result, replay
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
    ("foo", "unknown knob 'foo' (knobs: breakEvenMultiple, selectionPolicy)"),
    ("breakEvenMultiple=1,-1", "breakEvenMultiple=-1: Input should be greater than or equal to 0"),
    ("breakEvenMultiple=1,,2", "breakEvenMultiple: an empty value in '1,,2'"),
    ("breakEvenMultiple=x", "breakEvenMultiple=x: not a number: 'x'"),
    ("breakEvenMultiple=nan", "breakEvenMultiple=nan: not a finite number: 'nan'"),
    ("selectionPolicy=Cheapest", "selectionPolicy=Cheapest: Input should be 'LowestEnergy'"),
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
    }
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(["simulate", str(directory), "--sweep", "breakEvenMultiple=1,3"]) == 0
    text = capsys.readouterr().out
    assert "sweep of spec.scaleDown.breakEvenMultiple" in text
    assert "1 (default)" in text
    assert "reactive baseline" in text
