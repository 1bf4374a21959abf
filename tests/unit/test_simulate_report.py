"""What `lightsout simulate` reports about a replay: why pods waited, the one always-on
reference every policy's saving is measured against, and the timeline plot's legend.

Small hand-built traces (the helpers of `test_simulate`) whose figures can be worked out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli
from lightsout.simulate.analysis.report import render_text, summarise
from lightsout.simulate.replay.engine import Options, Policy, replay
from lightsout.simulate.traces.trace import Trace, TracePod, write
from tests.unit.test_simulate import TRUTH, node, pod, trace

pytestmark = pytest.mark.unit

#: One GPU job's pod: it needs the machine's only GPU.
GPU_POD = {
    "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": 1}}},
    ]
}


def gpu_node(name: str, desired: str = "Off") -> dict[str, Any]:
    machine = node(name, cpu=8, watts=(300, 60, 5))
    machine["spec"]["resources"]["extended"] = {"nvidia.com/gpu": 1}
    if desired == "On":  # pinned on: up before the jobs come, never powered off
        machine["spec"] |= {"desiredPowerState": "On", "autoscaling": {"enabled": False}}
    return machine


def gpu_jobs(*machines: dict[str, Any]) -> Trace:
    """Two GPU jobs that overlap: "first" at 10 min for an hour, "second" 5 min after it."""
    pods = [
        TracePod(600, 3600, "ml", "first", GPU_POD, "Job", "first"),
        TracePod(900, 600, "ml", "second", GPU_POD, "Job", "second"),
    ]
    return trace(pods, machines=list(machines))


def test_a_job_waiting_for_a_gpu_held_by_another_is_busy_capacity_not_a_late_power_on() -> None:
    # gpu-1 is up all along and the only machine with a GPU: "second" waits 55 minutes for
    # "first" to give the GPU back. That is no power-on's fault (none could help), so it is not
    # counted past its machine's boot: it waited for busy capacity.
    result = replay(gpu_jobs(gpu_node("gpu-1", desired="On")))
    second = next(p for p in result.pods if p.key.name == "second")
    assert second.wait == pytest.approx(3300)
    waits = summarise(result)["waits"]["other"]
    assert waits["forPowerOn"] == {"pods": 0, "p95Seconds": None, "maxSeconds": None, "pastBoot": 0}
    assert waits["forBusyCapacity"] == {"pods": 1, "p95Seconds": 3300.0, "maxSeconds": 3300.0}
    text = render_text(summarise(result))
    assert (
        "  waiting for a power-on (a machine that could hold the pod was not up): 0 pods, "
        "p95 -, max -; 0 past their machine's power-on and boot + 5 s\n"
    ) in text
    assert (
        "  waiting for busy capacity (every machine that could hold the pod was up, other pods "
        "held the room): 1 pods, p95 3300.0 s, max 3300.0 s\n"
    ) in text


def test_a_job_whose_gpu_is_busy_while_another_gpu_machine_is_off_waits_for_a_power_on() -> None:
    # The same jobs with a second GPU machine, off: the planner powers it on for "second",
    # which waits for that power-on and boot (the up machine being full does not make it a
    # busy-capacity wait: a power-on ends it), and no longer than that boot.
    result = replay(gpu_jobs(gpu_node("gpu-1", desired="On"), gpu_node("gpu-2")))
    second = next(p for p in result.pods if p.key.name == "second")
    assert (second.first_host, second.powered_for) == ("gpu-2", "gpu-2")
    boot = TRUTH.power_on_seconds + TRUTH.boot_seconds
    waits = summarise(result)["waits"]["other"]
    assert waits["forPowerOn"]["pods"] == 1
    assert waits["forPowerOn"]["maxSeconds"] == pytest.approx(boot + 0.1)  # + the debounce
    assert waits["forPowerOn"]["pastBoot"] == 0
    assert waits["forBusyCapacity"]["pods"] == 0


def _placement_trace() -> Trace:
    """A pod that Lights-Out runs on the frugal machine (it powers on the cheapest one) and an
    always-on cluster on the hungry one (both empty and Ready: kube-scheduler's tie goes to
    the first name), so its busy draw depends on the policy."""
    hungry, frugal = node("a-hungry", watts=(300, 40, 5)), node("b-frugal", watts=(60, 20, 2))
    return trace([pod(600, 3600, "p", cpu="2")], machines=[hungry, frugal])


def test_every_policy_saves_against_one_always_on_reference() -> None:
    t = _placement_trace()
    results = {policy: replay(t, Options(policy=policy)) for policy in Policy}
    hosts = {policy: result.pods[0].host for policy, result in results.items()}
    assert hosts == {
        Policy.ALWAYS_ON: "a-hungry",
        Policy.LIGHTSOUT: "b-frugal",
        Policy.REACTIVE: "b-frugal",
    }
    summaries = {policy: summarise(result) for policy, result in results.items()}
    reference = summaries[Policy.ALWAYS_ON]["energy"]["usedKWh"]
    # Both machines idle all 2 h (40 + 20 W) plus the pod's busy draw where always-on ran it,
    # on a-hungry: (300 - 40) W x 2/4 cpu x 1 h. Lights-Out's own placement would have given
    # it a reference 0.11 kWh lower (b-frugal: (60 - 20) W x 2/4 x 1 h), the reactive
    # baseline's another, and their "% saved" no common denominator.
    assert reference == pytest.approx((40 + 20) * 2 / 1000 + 0.130, abs=0.002)
    for policy, summary in summaries.items():
        e = summary["energy"]
        assert e["alwaysOnKWh"] == reference, policy
        assert e["savedKWh"] == pytest.approx(reference - e["usedKWh"], abs=0.001), policy
        assert e["savedShare"] == pytest.approx(1 - e["usedKWh"] / reference, abs=0.005)
    assert summaries[Policy.ALWAYS_ON]["energy"]["savedShare"] == 0.0


def test_simulate_prints_the_baseline_saving_against_the_same_always_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(_placement_trace(), tmp_path / "t")
    assert cli.main(["simulate", str(tmp_path / "t"), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["energy"]["alwaysOnKWh"] == document["baseline"]["energy"]["alwaysOnKWh"]
    assert document["energy"]["alwaysOnReference"] == {
        "policy": "always-on",
        "scoring": "LeastAllocated",
    }
    assert cli.main(["simulate", str(tmp_path / "t")]) == 0
    text = capsys.readouterr().out
    e, b = document["energy"], document["baseline"]["energy"]
    assert (
        f"against always-on {e['alwaysOnKWh']:.2f} kWh (every machine on all week, pods placed "
        "by LeastAllocated; the same reference for every policy)"
    ) in text
    assert (
        f"{b['savedKWh']:.2f} kWh saved ({b['savedShare'] * 100:.1f}%) against the same always-on"
    ) in text


def test_the_plot_legend_covers_no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.figure
    import matplotlib.pyplot  # first: on import it wraps Figure.savefig, unpatched

    from lightsout.simulate.analysis.plot import plot

    drawn: list[tuple[Any, list[Any], list[str]]] = []
    original = matplotlib.figure.Figure.savefig

    def save_and_measure(figure: Any, *args: Any, **kwargs: Any) -> None:
        """The legend's and the axes' boxes on the figure as saved (laid out and drawn)."""
        original(figure, *args, **kwargs)
        renderer = figure.canvas.get_renderer()
        legends = [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]
        (legend,) = legends
        drawn.append(
            (
                legend.get_window_extent(renderer),
                [axes.get_window_extent(renderer) for axes in figure.axes],
                [text.get_text() for text in legend.get_texts()],
            )
        )

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save_and_measure)
    # A week whose top machine is on to the very end (the old legend sat over its last hours).
    result = replay(trace([], machines=[node("m1"), node("m2")], hours=168, minNodes=2))
    plot(result, tmp_path / "week.png")
    ((legend, areas, labels),) = drawn
    assert labels == ["PoweringOn", "Booting", "Ready", "Draining", "PoweringOff"]
    assert len(areas) == 2  # the machines' rows, and the pods waiting under them
    for area in areas:
        assert not legend.overlaps(area), (legend, area)
