"""The replay and a running Job's pod (`scaleDown.jobGraceSeconds`): the machine it runs on is
drained only once it is done, unless the Group sets the grace to 0; the report counts every
eviction of a running pod.

One hand-built trace: a pinned always-on machine `base`, whose Deployment pod leaves after
10 minutes, and `m1`, powered on for a 3-hour build that would then fit on `base`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli
from lightsout.simulate.analysis.report import render_text, summarise
from lightsout.simulate.replay.engine import Options, Result, replay
from lightsout.simulate.traces.trace import Trace, TracePod, write
from tests.unit.test_simulate import node, phases, pod_spec, trace

pytestmark = pytest.mark.unit

BUILD_SECONDS = 3 * 3600
NO_GRACE = "group.spec.scaleDown.jobGraceSeconds=0"


def build_trace() -> Trace:
    base = node("base")
    base["spec"] |= {"desiredPowerState": "On", "autoscaling": {"enabled": False}}
    pods = [
        TracePod(0, 600, "web", "web-1", pod_spec("3"), "ReplicaSet", "web"),
        # 1.5 of m1's 4 cpu: under the utilisation threshold, and room on base after web-1.
        TracePod(60, BUILD_SECONDS, "ci", "build-1", pod_spec("1500m"), "Job", "build"),
    ]
    return trace(pods, machines=[base, node("m1")], hours=5)


def build(result: Result) -> Any:
    (found,) = [p for p in result.pods if p.key.name == "build-1"]
    return found


def test_a_running_job_pod_keeps_its_machine_until_it_is_done() -> None:
    result = replay(build_trace())
    pod = build(result)
    assert pod.run == 0  # never evicted: it ran once, from start to end, on m1
    assert (pod.done, pod.host) == (True, "m1")
    # m1 is still powered off once the build is over: the grace delays it, not forever.
    assert phases(result, "m1")[-3:] == ["Draining", "PoweringOff", "Off"]
    evictions = summarise(result)["evictions"]
    assert evictions == {"pods": 0, "distinctPods": 0, "jobPods": 0, "distinctJobPods": 0}


def test_with_job_grace_zero_the_build_is_evicted_and_starts_over() -> None:
    patient = replay(build_trace())
    eager = replay(build_trace(), Options(overrides=(NO_GRACE,)))
    pod = build(eager)
    assert pod.run == 1
    # Evicted from m1, it started again from zero on base, after its first start.
    assert pod.host == "base"
    assert pod.started is not None and pod.started > build(patient).started
    summary = summarise(eager)
    assert summary["evictions"] == {
        "pods": 1,
        "distinctPods": 1,
        "jobPods": 1,
        "distinctJobPods": 1,
    }
    assert (
        "evictions of running pods (each restarts from zero): 1 (1 distinct), "
        "of them Job pods 1 (1 distinct)" in render_text(summary)
    )


def test_simulate_command_reports_evictions_with_and_without_the_grace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(build_trace(), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["evictions"]["jobPods"] == 0
    # The reactive baseline is cluster-autoscaler, to which a Job's pod is movable.
    assert out["baseline"]["evictions"]["jobPods"] == 1

    assert cli.main(["simulate", str(directory), "--set", NO_GRACE, "--no-baseline"]) == 0
    assert "of them Job pods 1 (1 distinct)" in capsys.readouterr().out
