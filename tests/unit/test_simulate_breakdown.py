"""The replay's energy by machine and cause (`analysis.breakdown`, `simulate --breakdown`) and
the bound's schedule beside it (`optimum.ScheduleEnergy`).

One hand-built trace: one machine (4 cpu; 120 W on, 40 W idle, 5 W off; power-on 10 s, boot
50 s, shutdown 20 s) and one 1-cpu pod that arrives at 30 min and runs for an hour, in 2 hours.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightsout import cli
from lightsout.simulate.analysis import optimum
from lightsout.simulate.analysis.breakdown import breakdown
from lightsout.simulate.replay.charges import Cause
from lightsout.simulate.replay.engine import replay
from lightsout.simulate.traces.trace import Trace, TracePod, write
from tests.unit.test_simulate import node, pod, pod_spec, trace

pytestmark = pytest.mark.unit

#: Idle above standby, W; the pod's load, W (a quarter of on - idle); standby, W.
IDLE, LOAD, STANDBY = 35.0, 20.0, 5.0


def one_pod() -> Trace:
    return trace([pod(1800, 3600, "a")], machines=[node("m1")])


def _kwh(seconds: float, watts: float) -> float:
    return seconds / 3600 * watts / 1000


def test_causes_add_up_to_each_machines_energy() -> None:
    pods = [pod(60 * i, 900 + 300 * (i % 3), f"p{i}", cpu=str(1 + i % 3)) for i in range(12)]
    result = replay(trace(pods, hours=3))
    for machine in result.machines:
        assert machine.charges.total_wh == pytest.approx(machine.energy.total.used_wh, rel=1e-9)
    rows = breakdown(result.machines)
    assert [r["name"] for r in rows] == ["m1", "m2"]
    assert sum(r["kWh"] for r in rows) == pytest.approx(
        sum(m.energy.total.used_wh for m in result.machines) / 1000, abs=1e-3
    )


def test_one_pod_splits_into_its_hand_computed_causes() -> None:
    result = replay(one_pod())
    (row,) = breakdown(result.machines)
    causes = row["causes"]
    assert causes[Cause.STANDBY] == pytest.approx(_kwh(7200, STANDBY), abs=1e-4)
    assert causes[Cause.LOAD] == pytest.approx(_kwh(3600, LOAD), abs=1e-4)
    assert causes[Cause.BUSY] == pytest.approx(_kwh(3600, IDLE), abs=1e-4)
    # Powered on when it arrives: the power-on Job and the boot, 60 s (within a second of
    # planning and reconciling); then the drain and the shutdown Job, 20 s.
    assert causes[Cause.POWERING_ON] == pytest.approx(_kwh(60, IDLE), abs=_kwh(1, IDLE))
    assert causes[Cause.SHUTTING_DOWN] == pytest.approx(_kwh(20, IDLE), abs=_kwh(1, IDLE))
    # Idle while waiting out its break-even time (learned boot 60 s + the untimed shutdown
    # taken as the boot, 60 s), and the 0.1 s between the pod's end and the plan that says so.
    assert set(causes[Cause.IDLE]) == {"unneededWait", "unplanned"}
    assert causes[Cause.IDLE]["unplanned"] == pytest.approx(_kwh(0.1, IDLE), abs=1e-6)
    assert causes[Cause.IDLE]["unneededWait"] == pytest.approx(_kwh(120, IDLE), abs=_kwh(1, IDLE))
    assert causes[Cause.JOB_GRACE] == causes[Cause.OTHER] == 0.0


def test_a_machine_kept_for_min_nodes_idles_for_min_nodes() -> None:
    result = replay(trace([], machines=[node("m1")], minNodes=1))
    (row,) = breakdown(result.machines)
    idle = row["causes"][Cause.IDLE]
    # Powered on at once for minNodes and Ready a minute later; the planner's first reasons are
    # the break-even wait (120 s) and then the stabilisation window (300 s from the scale-up),
    # and from then on, for the rest of the 2 hours, minNodes.
    assert idle["unneededWait"] == pytest.approx(_kwh(120, IDLE), abs=_kwh(1, IDLE))
    assert idle["stabilisation"] == pytest.approx(_kwh(300 - 60 - 120, IDLE), abs=_kwh(1, IDLE))
    assert idle["minNodes"] == pytest.approx(_kwh(7200 - 300, IDLE), abs=_kwh(1, IDLE))


def test_a_job_pod_that_could_move_elsewhere_is_charged_to_the_job_grace() -> None:
    base = node("base")
    base["spec"] |= {"desiredPowerState": "On", "autoscaling": {"enabled": False}}
    # The build powers m1 on (base is full of web-1's 3 cpu); once web-1 leaves, the build
    # would fit on base, and only the grace keeps m1 on until the build is done.
    pods = [
        TracePod(0, 600, "web", "web-1", pod_spec("3"), "ReplicaSet", "web"),
        TracePod(60, 3 * 3600, "ci", "build-1", pod_spec("1500m"), "Job", "build"),
    ]
    result = replay(trace(pods, machines=[base, node("m1")], hours=5))
    m1 = next(r for r in breakdown(result.machines) if r["name"] == "m1")["causes"]
    # Busy until web-1 leaves at 600 s (less the power-on and boot), held by the grace after.
    assert m1[Cause.JOB_GRACE] == pytest.approx(_kwh(3 * 3600 + 60 - 600, IDLE), abs=_kwh(2, IDLE))
    assert m1[Cause.BUSY] < _kwh(600, IDLE)


def test_the_bounds_schedule_is_split_by_the_objectives_terms() -> None:
    t = one_pod()
    bound = optimum.solve(t, time_limit=20)
    (schedule,) = bound.schedule
    assert (schedule.name, schedule.starts, schedule.up_hours) == ("m1", 1.0, 1.0)
    assert schedule.standby == pytest.approx(_kwh(7200, STANDBY))
    assert schedule.load == pytest.approx(_kwh(3600, LOAD))
    assert schedule.up == pytest.approx(_kwh(3600, IDLE))
    assert schedule.cycles == pytest.approx(_kwh(80, IDLE))  # power-on + boot + shutdown
    assert bound.kwh is not None and schedule.kwh == pytest.approx(bound.kwh, rel=1e-4)
    (row,) = breakdown(replay(t).machines, bound.schedule)
    above = row["aboveBound"]
    # What Lights-Out spends above the optimum here is its break-even wait, nothing else.
    assert above["up"] == pytest.approx(_kwh(120, IDLE), abs=_kwh(1, IDLE))
    assert above["cycles"] == pytest.approx(0.0, abs=_kwh(1, IDLE))
    assert above["load"] == pytest.approx(0.0, abs=1e-6)
    assert above["standby"] == pytest.approx(0.0, abs=1e-6)


def test_simulate_breakdown_prints_text_and_strict_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(one_pod(), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "--no-baseline", "--breakdown"]) == 0
    text = capsys.readouterr().out
    assert "energy by machine and cause, kWh" in text
    assert "  m1: " in text and "idle (unneededWait)" in text
    args = ["simulate", str(directory), "--no-baseline", "--breakdown", "--optimum", "-o", "json"]
    assert cli.main(args) == 0
    (row,) = json.loads(capsys.readouterr().out)["breakdown"]
    assert set(row) == {"name", "kWh", "causes", "bound", "aboveBound"}


def test_breakdown_with_a_sweep_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(one_pod(), tmp_path / "t")
    args = ["simulate", str(directory), "--sweep", "breakEvenMultiple", "--breakdown"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "--breakdown" in err and len(err.strip().splitlines()) == 1
