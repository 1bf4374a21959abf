"""Outages in the replay: a trace's UPS (`trace.yaml`'s `ups`) and its mains failures, read as
the operator reads a NUT server, decided on by the operator's own planner
(`planning.autoscaler.battery`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lightsout.simulate.analysis.report import render_text, summarise
from lightsout.simulate.replay.engine import Result, replay
from lightsout.simulate.traces import trace as traces
from lightsout.simulate.traces.trace import MainsOutage, TraceError, TraceUps
from lightsout.simulate.traces.validate import validate
from tests.unit.test_simulate import phases, pod, trace

pytestmark = pytest.mark.unit

SOURCE = {"nut": {"host": "ups.example", "ups": "rack"}}
HOUR = 3600.0


def outage_trace(
    capacity_wh: float, *, tier: str = "Shed", battery: bool = True, **policy: Any
) -> traces.Trace:
    """Two machines (120 W busy) kept on by a long pod and minNodes 1; the mains fail at
    30 min for 20 min."""
    spec: dict[str, Any] = {"minNodes": 1}
    if battery:
        spec["battery"] = {"source": SOURCE, "tier": tier, **policy}
    base = trace([pod(60, 3 * HOUR, "long", cpu="3")], hours=2.0, **spec)
    ups = TraceUps(capacity_wh=capacity_wh, outages=[MainsOutage(at_seconds=1800, seconds=1200)])
    return replace(base, ups=ups)


def only_outage(result: Result) -> dict[str, Any]:
    (outage,) = summarise(result)["outages"]
    return dict(outage)


def test_a_shed_group_goes_off_at_once_and_comes_back_after_the_mains() -> None:
    result = replay(outage_trace(500))
    outage = only_outage(result)
    assert outage["cutByDeadBattery"] == []
    # Off after the 10 s delay, a poll, the drain and the 20 s shutdown.
    assert outage["allOffSeconds"] is not None and outage["allOffSeconds"] < 60
    assert outage["batteryLeftShare"] > 0.9
    # Back: 60 s of mains, then the boot (10 s power-on + 50 s boot), then the record cleared.
    assert 60 <= outage["restoredSeconds"] < 200
    assert "Off" in phases(result, "m1")[2:]  # powered off during the outage
    assert phases(result, "m1")[-1] == "Ready"  # and back


def test_a_hold_group_rides_through_a_big_battery() -> None:
    result = replay(outage_trace(5000, tier="Hold"))
    outage = only_outage(result)
    assert outage["allOffSeconds"] is None  # never needed to go off
    assert outage["cutByDeadBattery"] == []


def test_a_small_battery_shuts_down_before_it_is_empty() -> None:
    # 105 W drawn: 40 Wh last about 20 minutes, no longer than the outage: the Hold Group is
    # shut down at low battery (below 20 %), before the battery is empty.
    held = only_outage(replay(outage_trace(40, tier="Hold")))
    assert held["cutByDeadBattery"] == []
    assert held["allOffSeconds"] is not None
    assert 0.15 < held["batteryLeftShare"] < 0.25
    # Back only once the battery is at 50 % again (charging at 10 W: over an hour).
    assert held["restoredSeconds"] > HOUR


def test_a_battery_too_small_for_one_shutdown_cuts_the_machine_and_says_so() -> None:
    # 0.2 Wh: the drained machine idles at 40 W (45 W with the other one off) while it shuts
    # down for 20 s; the battery lasts about 14 s of that.
    cut = only_outage(replay(outage_trace(0.2, tier="Hold")))
    assert cut["cutByDeadBattery"] == ["m1"]
    # 0.5 Wh lasts about 36 s: enough.
    assert only_outage(replay(outage_trace(0.5, tier="Hold")))["cutByDeadBattery"] == []


def test_without_a_battery_policy_the_ups_feeds_nothing_lightsout_knows() -> None:
    assert summarise(replay(outage_trace(40, battery=False)))["outages"] == []


def test_the_report_says_how_the_battery_fared() -> None:
    text = render_text(summarise(replay(outage_trace(500))))
    assert "outage at 1800.0 s for 1200.0 s" in text
    assert "cut by a dead battery: none" in text


def test_a_trace_keeps_its_ups_and_names_a_bad_field(tmp_path: Path) -> None:
    written = traces.write(outage_trace(500), tmp_path / "t")
    assert traces.load(written).ups == outage_trace(500).ups
    meta = (written / traces.TRACE_FILE).read_text()
    (written / traces.TRACE_FILE).write_text(meta.replace("capacityWh: 500.0", "capacityWh: -1"))
    with pytest.raises(TraceError, match=r"ups\.capacityWh"):
        traces.load(written)
    problems = [str(p) for p in validate(written)]
    assert any("ups.capacityWh: Input should be greater than 0 (got -1)" in p for p in problems), (
        problems
    )


def test_the_machines_fed_and_their_draw_set_the_runtime() -> None:
    result = replay(outage_trace(500))
    outage = only_outage(result)
    # One machine busy (120 W at 3 of 4 cpus: 40 + 80 x 0.75 = 100 W), one off (5 W).
    assert outage["loadWatts"] == pytest.approx(105, abs=1)
    assert outage["runtimeSeconds"] == pytest.approx(500 * 0.9 / 105 * 3600, rel=0.02)
