"""`lightsout plan`'s rendering of a Plan, and when the autoscaler plans again on its own.

Both are pure: `planning.autoscaler.report` turns a snapshot and its plan into the text a person
reads; `planning.autoscaler.wake.next_wake` finds the next deadline (an unneeded machine's timer, a
window) at which the same snapshot would give a different plan — the only reason the autoscaler ever
wakes without a watched change.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.report import as_json, render_text
from lightsout.planning.autoscaler.wake import next_wake
from tests.unit.test_autoscale_objects import T0, at, group, machine, mkey, pod, ready_machine, snap

pytestmark = pytest.mark.unit


def test_the_report_names_each_group_machine_action_and_refusal() -> None:
    snapshot = snap(
        group(),
        machine("small", "2", "4Gi", watts=(40, 20, 1)),
        machine("large", "8", "32Gi", watts=(200, 90, 5)),
        pod("web-1", "4", "1Gi"),
        pod("huge", "64", "1Gi"),
    )
    result = plan(snapshot, T0)
    text = render_text(snapshot, result, T0)
    assert "Group lightsout/lab" in text
    assert "power on large: 1 pending pod(s) need it (apps/web-1)" in text
    assert "small" in text and "desired Off" in text
    assert "apps/huge: no machine could ever host this pod" in text
    data = as_json(snapshot, result, T0)
    assert [(a["action"], a["machine"]) for a in data["actions"]] == [
        ("PowerOn", "lightsout/large")
    ]


def test_an_incomplete_snapshot_is_reported_as_no_decision() -> None:
    snapshot = snap(group(), machine("small"), complete=False)
    text = render_text(snapshot, plan(snapshot, T0), T0)
    assert "waiting for every watch to sync" in text


def test_an_unneeded_machine_wakes_the_planner_when_its_time_runs_out() -> None:
    snapshot = snap(
        group(scaleDown={"unneededSeconds": 60, "stabilizationWindowSeconds": 0}),
        ready_machine("idle"),
        unneeded_since={mkey("idle"): at(-20)},
    )
    result = plan(snapshot, T0)
    assert result.unneeded_since == {mkey("idle"): at(-20)}
    assert next_wake(snapshot, result, T0) == at(40)


def test_nothing_pending_and_nothing_unneeded_means_no_timer() -> None:
    snapshot = snap(group(), machine("off"))
    assert next_wake(snapshot, plan(snapshot, T0), T0) is None


def test_a_pending_pod_wakes_the_planner_when_its_scale_up_window_ends() -> None:
    snapshot = snap(
        group(scaleUp={"stabilizationWindowSeconds": 10}),
        machine("small"),
        pod("web-1", pending_since=at(-4)),
    )
    result = plan(snapshot, T0)
    assert not result.power_on
    assert next_wake(snapshot, result, T0) == at(6)
    assert next_wake(snapshot, result, at(6)) == at(-4) + timedelta(seconds=30)
