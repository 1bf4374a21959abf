"""Table tests of the planner's scale-down: when a Ready machine is unneeded, and when it is
powered off (unneeded time, stabilisation, minNodes, concurrency, PDBs, do-not-disrupt, pins).

The usual cluster: an always-on core node `base` with room, and a Lights-Out machine `idle`
carrying one small pod that would fit on `base`.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.state.types import DO_NOT_DISRUPT, SAFE_TO_EVICT
from tests.unit.test_autoscale_objects import (
    T0,
    at,
    core_node,
    group,
    machine,
    machine_note,
    mkey,
    offs,
    pdb,
    pod,
    ready_machine,
    run,
    snap,
    ts,
)

pytestmark = pytest.mark.unit

LONG_AGO = {mkey("idle"): at(-700)}  # past the default unneededSeconds (600)


def cluster(*extra: Any, group_spec: dict[str, Any] | None = None, **pod_kw: Any) -> list[Any]:
    return [
        group(**(group_spec or {})),
        core_node("base", "8", "16Gi"),
        ready_machine("idle", "4", "8Gi"),
        pod("web-1", "500m", "512Mi", node="idle", labels={"app": "web"}, **pod_kw),
        *extra,
    ]


def test_an_idle_machine_is_powered_off_after_the_unneeded_time_not_before() -> None:
    first = run(cluster())
    assert first.actions == ()
    assert first.unneeded_since == {mkey("idle"): at(0)}
    assert "only for 0s of 600s" in machine_note(first, "idle")

    halfway = run(cluster(), unneeded_since={mkey("idle"): at(-300)})
    assert halfway.actions == ()
    assert halfway.unneeded_since == {mkey("idle"): at(-300)}

    due = run(cluster(), unneeded_since=LONG_AGO)
    assert offs(due) == ["idle"]
    (action,) = due.power_off
    assert action.group == mkey("lab")
    assert "unneeded for 700s" in action.reason
    assert "its 1 pod fits on another node" in action.reason


def test_a_busy_machine_is_needed_and_forgets_its_unneeded_time() -> None:
    result = run(cluster(pod("db-1", "3", "1Gi", node="idle")), unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert result.unneeded_since == {}
    assert "utilisation 88% is not under the threshold 50%" in machine_note(result, "idle")


def test_the_utilisation_threshold_is_the_groups() -> None:
    objects = cluster(pod("db-1", "1500m", "1Gi", node="idle"))  # 2 of 4 cpu: 50%
    assert run(objects, unneeded_since=LONG_AGO).actions == ()
    lenient = cluster(
        pod("db-1", "1500m", "1Gi", node="idle"),
        group_spec={"scaleDown": {"utilizationThreshold": 0.6}},
    )
    assert offs(run(lenient, unneeded_since=LONG_AGO)) == ["idle"]


def test_never_below_min_nodes() -> None:
    result = run(cluster(group_spec={"minNodes": 1}), unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert "at minNodes (1 on, minimum 1)" in machine_note(result, "idle")


def test_a_pdb_allowing_no_disruption_blocks_and_one_allowing_some_does_not() -> None:
    blocked = run(cluster(pdb("web", {"app": "web"}, 0)), unneeded_since=LONG_AGO)
    assert blocked.actions == ()
    assert "PodDisruptionBudget apps/web allows no disruption (pod apps/web-1)" in machine_note(
        blocked, "idle"
    )
    unknown = run(cluster(pdb("web", {"app": "web"}, None)), unneeded_since=LONG_AGO)
    assert unknown.actions == ()
    other_ns = run(cluster(pdb("web", {"app": "web"}, 0, ns="elsewhere")), unneeded_since=LONG_AGO)
    assert offs(other_ns) == ["idle"]
    allowed = run(cluster(pdb("web", {"app": "web"}, 1)), unneeded_since=LONG_AGO)
    assert offs(allowed) == ["idle"]


@pytest.mark.parametrize(
    ("annotation", "value"), [(DO_NOT_DISRUPT, "true"), (SAFE_TO_EVICT, "False")]
)
def test_do_not_disrupt_blocks(annotation: str, value: str) -> None:
    result = run(cluster(annotations={annotation: value}), unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert f"pod apps/web-1 has {annotation}={value.lower()}" in machine_note(result, "idle")


def test_safe_to_evict_true_does_not_block() -> None:
    result = run(cluster(annotations={SAFE_TO_EVICT: "true"}), unneeded_since=LONG_AGO)
    assert offs(result) == ["idle"]


def test_a_bare_pod_blocks_because_it_would_not_come_back() -> None:
    result = run(cluster(owner=None), unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert "no controller" in machine_note(result, "idle")


DAY = 86_400  # scaleDown.jobGraceSeconds when unset


def started_pod(name: str, started: float, owner: str, owner_name: str) -> dict[str, Any]:
    """A small pod on `idle`, started `started` seconds from T0, controlled by `owner`."""
    obj = pod(name, "500m", "512Mi", node="idle", owner=owner)
    obj["metadata"]["ownerReferences"][0]["name"] = owner_name
    obj["status"]["startTime"] = ts(at(started))
    return obj


def job_pod(started: float) -> dict[str, Any]:
    """A pod of the Job apps/nightly-build on `idle`, started `started` seconds from T0."""
    return started_pod("nightly-build-x7k2p", started, "Job", "nightly-build")


def test_a_running_job_pod_keeps_its_machine_and_the_note_names_the_job_and_time_left() -> None:
    result = run(cluster(job_pod(-100)), unneeded_since=LONG_AGO)
    assert result.actions == ()
    # Needed, so its unneeded time starts only once the Job's pod is gone.
    assert result.unneeded_since == {}
    note = machine_note(result, "idle")
    assert note.startswith("needed: Job apps/nightly-build is running")
    assert "pod apps/nightly-build-x7k2p, for 100s" in note
    assert f"movable in {DAY - 100}s (scaleDown.jobGraceSeconds {DAY})" in note


def test_the_job_grace_is_the_groups_and_the_planner_wakes_when_it_ends() -> None:
    objects = cluster(job_pod(-3000), group_spec={"scaleDown": {"jobGraceSeconds": 3600}})
    snapshot = snap(objects, unneeded_since=LONG_AGO)
    result = plan(snapshot, T0)
    assert result.actions == ()
    assert "movable in 600s (scaleDown.jobGraceSeconds 3600)" in machine_note(result, "idle")
    assert next_wake(snapshot, result, T0) == at(600)


def test_past_the_grace_a_job_pod_is_movable_as_before() -> None:
    # The grace ran out 5 s ago: the machine is unneeded from now, its unneeded time counted as
    # for any machine whose pods fit elsewhere.
    first = run(cluster(job_pod(-DAY - 5)))
    assert first.actions == ()
    assert first.unneeded_since == {mkey("idle"): at(0)}
    assert "only for 0s of 600s" in machine_note(first, "idle")
    due = run(cluster(job_pod(-DAY - 5)), unneeded_since=LONG_AGO)
    assert offs(due) == ["idle"]
    assert "its 2 pods fit on other nodes" in due.power_off[0].reason


def test_job_grace_zero_makes_a_running_job_pod_movable_at_once() -> None:
    zero = {"scaleDown": {"jobGraceSeconds": 0}}
    result = run(cluster(job_pod(-100), group_spec=zero), unneeded_since=LONG_AGO)
    assert offs(result) == ["idle"]
    assert "its 2 pods fit on other nodes" in result.power_off[0].reason


def test_a_deployments_pod_stays_movable_however_recently_it_started() -> None:
    deployment = started_pod("api-5d8f-x2", -100, "ReplicaSet", "api-5d8f")
    result = run(cluster(deployment), unneeded_since=LONG_AGO)
    assert offs(result) == ["idle"]


def test_daemonset_and_mirror_pods_neither_count_nor_block() -> None:
    objects = cluster(
        pod("agent-1", "3", "6Gi", node="idle", owner="DaemonSet"),
        pod(
            "static-1",
            "500m",
            "1Gi",
            node="idle",
            owner="Node",
            annotations={"kubernetes.io/config.mirror": "x"},
        ),
    )
    assert offs(run(objects, unneeded_since=LONG_AGO)) == ["idle"]


def test_a_pinned_machine_is_untouched() -> None:
    objects = [
        group(),
        core_node("base", "8", "16Gi"),
        ready_machine("idle", "4", "8Gi", enabled=False),
    ]
    result = run(objects, unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert "pinned" in machine_note(result, "idle")
    assert result.unneeded_since == {}


def test_pods_that_would_not_fit_elsewhere_keep_the_machine() -> None:
    objects = [
        group(),
        core_node("base", "1", "16Gi"),
        ready_machine("idle", "4", "8Gi"),
        pod("web-1", "1500m", "512Mi", node="idle"),
    ]
    result = run(objects, unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert "pod apps/web-1 would not fit on any other Ready node" in machine_note(result, "idle")


def test_two_machines_do_not_both_count_on_the_same_free_space() -> None:
    objects = [
        group(scaleDown={"maxConcurrentOperations": 2}),
        core_node("base", "2", "16Gi"),
        ready_machine("idle-a", "4", "8Gi"),
        ready_machine("idle-b", "4", "8Gi"),
        pod("web-1", "1500m", "512Mi", node="idle-a"),
        pod("web-2", "1500m", "512Mi", node="idle-b"),
    ]
    since = {mkey("idle-a"): at(-700), mkey("idle-b"): at(-700)}
    result = run(objects, unneeded_since=since)
    assert offs(result) == ["idle-a"]
    assert "would not fit" in machine_note(result, "idle-b")


def test_two_idle_machines_consolidate_onto_each_other_only_once() -> None:
    objects = [
        group(scaleDown={"maxConcurrentOperations": 2}),
        ready_machine("idle-a", "4", "8Gi"),
        ready_machine("idle-b", "4", "8Gi"),
        pod("web-1", "500m", "512Mi", node="idle-a"),
        pod("web-2", "500m", "512Mi", node="idle-b"),
    ]
    since = {mkey("idle-a"): at(-700), mkey("idle-b"): at(-700)}
    assert offs(run(objects, unneeded_since=since)) == ["idle-a"]


def test_at_most_max_concurrent_operations_power_offs_counting_those_in_flight() -> None:
    objects = [
        group(),
        core_node("base", "16", "64Gi"),
        ready_machine("idle-a", "4", "8Gi"),
        ready_machine("idle-b", "4", "8Gi"),
    ]
    since = {mkey("idle-a"): at(-700), mkey("idle-b"): at(-700)}
    result = run(objects, unneeded_since=since)
    assert offs(result) == ["idle-a"]
    assert "1 power-offs in flight (scaleDown.maxConcurrentOperations 1)" in machine_note(
        result, "idle-b"
    )
    assert set(result.unneeded_since) == {mkey("idle-a"), mkey("idle-b")}
    draining = [machine("leaving", desired="Off", phase="Draining")]
    assert run([*objects, *draining], unneeded_since=since).actions == ()


def test_no_power_off_within_the_stabilisation_window_after_a_scale_up() -> None:
    recent = cluster(group_spec={"last_scale_up": at(-100)})
    result = run(recent, unneeded_since=LONG_AGO)
    assert result.actions == ()
    assert "scaled up 100s ago (scaleDown.stabilizationWindowSeconds 300)" in machine_note(
        result, "idle"
    )
    older = cluster(group_spec={"last_scale_up": at(-400)})
    assert offs(run(older, unneeded_since=LONG_AGO)) == ["idle"]


def test_a_machine_powered_on_for_a_pod_is_kept_while_that_pod_waits_for_it() -> None:
    objects = [
        group(),
        core_node("base", "8", "16Gi"),
        ready_machine("fresh", "4", "8Gi", ready_since=at(-10)),
        pod("job-1", "3", "1Gi", pending_since=at(-200)),
    ]
    result = run(objects, unneeded_since={mkey("fresh"): at(-700)})
    assert result.actions == ()
    assert "pending pods are expected to run here (apps/job-1)" in machine_note(result, "fresh")


def test_scale_down_disabled_and_other_autoscalers_leave_machines_on() -> None:
    disabled = cluster(group_spec={"scaleDown": {"enabled": False}})
    assert run(disabled, unneeded_since=LONG_AGO).actions == ()
    other = cluster(group_spec={"autoscaler": "none"})
    assert run(other, unneeded_since=LONG_AGO).actions == ()


def test_dry_run_power_offs_are_marked() -> None:
    result = run(cluster(group_spec={"dryRun": True}), unneeded_since=LONG_AGO)
    assert [(a.machine.name, a.dry_run) for a in result.actions] == [("idle", True)]


def test_lowest_energy_powers_off_the_hungrier_of_two_idle_machines_first() -> None:
    objects = [
        group(),
        core_node("base", "16", "64Gi"),
        ready_machine("frugal", "4", "8Gi", watts=(40, 20, 1)),
        ready_machine("hungry", "4", "8Gi", watts=(300, 150, 5)),
    ]
    since = {mkey("frugal"): at(-700), mkey("hungry"): at(-700)}
    assert offs(run(objects, unneeded_since=since)) == ["hungry"]


def test_priority_powers_off_the_lowest_priority_first() -> None:
    objects = [
        group(selectionPolicy="Priority"),
        core_node("base", "16", "64Gi"),
        ready_machine("precious", "4", "8Gi", priority=50),
        ready_machine("expendable", "4", "8Gi", priority=-10),
        pod("web-1", "500m", "512Mi", node="expendable"),
    ]
    since = {mkey("precious"): at(-700), mkey("expendable"): at(-700)}
    assert offs(run(objects, unneeded_since=since)) == ["expendable"]
