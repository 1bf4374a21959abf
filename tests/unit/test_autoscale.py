"""Table tests of the planner's scale-up: `plan(snapshot, now)` for pending pods and minNodes.

Each test builds raw API objects (see `test_autoscale_objects`), runs them through
`snapshot_from` and `plan`, and asserts what a person would notice: which machines are powered
on, for which pods, and what the explanations say.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.models.enums import SelectionPolicy
from lightsout.planning.autoscaler.autoscale import WAITING_FOR_SYNC
from lightsout.planning.autoscaler.decisions import PowerOn
from tests.unit.test_autoscale_objects import (
    T0,
    at,
    core_node,
    daemonset,
    group,
    machine,
    mkey,
    ons,
    pkey,
    pod,
    pod_note,
    ready_machine,
    run,
    snap,
)

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def test_a_pod_that_fits_only_the_larger_machine_powers_on_the_larger_one() -> None:
    result = run(
        group(),
        machine("small", "2", "4Gi", watts=(40, 20, 1)),
        machine("large", "8", "32Gi", watts=(200, 90, 5)),
        pod("web-1", "4", "1Gi"),
    )
    assert ons(result) == ["large"]
    (action,) = result.power_on
    assert action.pods == (pkey("web-1"),)
    assert action.group == mkey("lab")
    assert pod_note(result, "web-1") == "powering on machine large for it"


def test_two_pods_that_fit_one_machine_power_on_one_machine() -> None:
    result = run(
        group(),
        machine("a", "4", "8Gi", watts=(60, 30, 1)),
        machine("b", "4", "8Gi", watts=(60, 30, 1)),
        pod("web-1", "1500m", "2Gi"),
        pod("web-2", "1500m", "2Gi"),
    )
    assert ons(result) == ["a"]
    assert set(result.power_on[0].pods) == {pkey("web-1"), pkey("web-2")}
    assert "2 pending pod(s) need it" in result.power_on[0].reason


def test_a_gpu_pod_powers_on_the_gpu_machine_and_other_pods_avoid_it() -> None:
    objects: list[Any] = [
        group(),
        machine("cpu-box", "8", "16Gi", watts=(80, 40, 2)),
        machine("gpu-box", "8", "16Gi", watts=(300, 120, 5), extended={GPU: 1}, taints=[GPU_TAINT]),
    ]
    gpu_only = run(
        *objects, pod("train-1", "2", "4Gi", extended={GPU: 1}, tolerations=[GPU_TOLERATION])
    )
    assert ons(gpu_only) == ["gpu-box"]
    cpu_only = run(*objects, pod("web-1", "2", "4Gi"))
    assert ons(cpu_only) == ["cpu-box"]


def test_a_pod_no_machine_could_ever_host_gets_no_action_and_each_machines_reason() -> None:
    result = run(
        group(),
        machine("small", "2", "4Gi"),
        machine(
            "tainted",
            "16",
            "64Gi",
            taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
        ),
        machine("labelled", "16", "64Gi", labels={"disk": "ssd"}),
        pod("big-1", "6", "8Gi", selector={"disk": "hdd"}),
    )
    assert result.actions == ()
    note = pod_note(result, "big-1")
    assert note.startswith("no machine could ever host this pod: ")
    assert "small: node selector disk=hdd does not match; insufficient cpu: needs 6, free 2" in note
    assert (
        "tainted: node selector disk=hdd does not match; untolerated taint dedicated=db:NoSchedule"
        in note
    )
    assert "labelled: node selector disk=hdd does not match" in note


def test_when_no_machine_fits_the_reasons_list_every_machine() -> None:
    result = run(
        group(),
        machine("a", "2", "4Gi"),
        machine("b", "2", "4Gi"),
        machine("c", "2", "4Gi"),
        machine("d", "2", "4Gi"),
        machine("e", "4", "64Gi", labels={"zone": "attic"}),
        pod("huge-1", "3", "8Gi", selector={"zone": "basement"}),
    )
    assert result.actions == ()
    note = pod_note(result, "huge-1")
    assert note.startswith("no machine could ever host this pod")
    assert (
        "a, b, c and 1 more: node selector zone=basement does not match; insufficient cpu" in note
    )
    assert "e: node selector zone=basement does not match" in note


def test_capacity_already_powering_on_absorbs_a_pod_instead_of_a_second_power_on() -> None:
    objects: list[Any] = [
        group(),
        machine("booting", "4", "8Gi", desired="On", phase="Booting"),
        machine("spare", "4", "8Gi"),
    ]
    result = run(*objects, pod("web-1", "2", "1Gi"))
    assert result.actions == ()
    assert pod_note(result, "web-1") == "will run on machine booting, already powering on (Booting)"
    # A second pod that no longer fits the booting machine does call for the spare.
    more = run(*objects, pod("web-1", "2", "1Gi"), pod("web-2", "3", "1Gi"))
    assert ons(more) == ["spare"], pod_note(more, "web-3")


def test_a_machine_asked_on_but_not_yet_acted_on_counts_as_in_flight() -> None:
    result = run(
        group(),
        machine("asked", "4", "8Gi", desired="On", phase="Off"),
        machine("spare", "4", "8Gi"),
        pod("web-1", "1", "1Gi"),
    )
    assert result.actions == ()


def test_max_nodes_is_honoured_and_explained() -> None:
    result = run(
        group(maxNodes=1),
        ready_machine("on-1", "2", "4Gi"),
        pod("busy-1", "2", "4Gi", node="on-1"),
        machine("off-1", "4", "8Gi"),
        pod("web-1", "1", "1Gi"),
    )
    assert result.actions == ()
    assert "off-1: group lab at maxNodes (1 of 1 on)" in pod_note(result, "web-1")
    assert any("maxNodes" in line for line in result.explanations.groups[mkey("lab")])


def test_max_concurrent_operations_counts_power_ons_in_flight() -> None:
    machines = [machine(f"m{i}", "4", "8Gi") for i in range(5)]
    pods = [pod(f"job-{i}", "3", "4Gi") for i in range(5)]
    two = run(group(scaleUp={"maxConcurrentOperations": 2}), machines, pods)
    assert len(two.power_on) == 2
    blocked = [
        p for p in ("job-0", "job-1", "job-2", "job-3", "job-4") if "in flight" in pod_note(two, p)
    ]
    assert len(blocked) == 3
    in_flight = [machine("m9", "1", "1Gi", desired="On", phase="PoweringOn")]
    one = run(group(scaleUp={"maxConcurrentOperations": 2}), machines, in_flight, pods)
    assert len(one.power_on) == 1


def test_a_booting_machine_no_longer_counts_against_max_concurrent_operations() -> None:
    # Its power-on Job succeeded: the operation is over, the machine boots by itself. Counting
    # it would hold the next machine of a burst back by a whole boot.
    machines = [machine(f"m{i}", "4", "8Gi") for i in range(5)]
    pods = [pod(f"job-{i}", "3", "4Gi") for i in range(5)]
    booting = [machine(f"b{i}", "1", "1Gi", desired="On", phase="Booting") for i in range(2)]
    result = run(group(scaleUp={"maxConcurrentOperations": 2}), machines, booting, pods)
    assert len(result.power_on) == 2


def test_max_nodes_caps_a_batch_of_identical_machines() -> None:
    result = run(
        group(maxNodes=3, scaleUp={"maxConcurrentOperations": 10}),
        [machine(f"m{i}", "2", "4Gi") for i in range(6)],
        [pod(f"w-{i}", "2", "1Gi") for i in range(6)],
    )
    assert ons(result) == ["m0", "m1", "m2"]


# The crafted case: `efficient` draws least, `snug` fits the pod exactly, `favourite` has the
# highest priority and `quick` boots fastest; each policy must pick a different one.
POLICY_MACHINES = [
    machine("efficient", "4", "8Gi", watts=(60, 30, 1), boot=300),
    machine("snug", "2", "4Gi", watts=(90, 60, 1), boot=300),
    machine("favourite", "8", "16Gi", watts=(150, 100, 1), priority=100, boot=300),
    machine("quick", "8", "16Gi", watts=(200, 140, 1), boot=30),
]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (SelectionPolicy.LOWEST_ENERGY, "efficient"),
        (SelectionPolicy.LEAST_WASTE, "snug"),
        (SelectionPolicy.PRIORITY, "favourite"),
        (SelectionPolicy.FASTEST_BOOT, "quick"),
    ],
)
def test_selection_policies_choose_differently(policy: SelectionPolicy, expected: str) -> None:
    result = run(group(selectionPolicy=str(policy)), POLICY_MACHINES, pod("web-1", "2", "4Gi"))
    assert ons(result) == [expected]
    assert str(policy) in result.power_on[0].reason


def test_lowest_energy_prefers_one_big_machine_to_several_small_ones_when_it_draws_less() -> None:
    pods = [pod(f"w-{i}", "1", "1Gi") for i in range(6)]
    small = [machine(f"small-{i}", "2", "4Gi", watts=(50, 40, 0)) for i in range(3)]
    big = machine("big", "8", "16Gi", watts=(120, 70, 0))
    assert ons(run(group(scaleUp={"maxConcurrentOperations": 5}), small, big, pods)) == ["big"]
    thirsty = machine("big", "8", "16Gi", watts=(400, 300, 0))
    assert ons(run(group(scaleUp={"maxConcurrentOperations": 5}), small, thirsty, pods)) == [
        "small-0",
        "small-1",
        "small-2",
    ]


def test_machines_of_different_sizes_are_bin_packed() -> None:
    # 5 pods of 3 cpu: the 8-cpu box takes two, each 4-cpu box one.
    result = run(
        group(selectionPolicy="LeastWaste", scaleUp={"maxConcurrentOperations": 10}),
        machine("box-8", "8", "32Gi"),
        [machine(f"box-4-{i}", "4", "8Gi") for i in range(4)],
        [pod(f"w-{i}", "3", "1Gi") for i in range(5)],
    )
    assert len(result.power_on) == 4
    hosted = sorted(len(a.pods) for a in result.power_on)
    assert hosted == [1, 1, 1, 2]
    assert sum(hosted) == 5


def test_a_machine_made_unnecessary_by_a_later_choice_is_dropped() -> None:
    # FastestBoot picks the quick small box for the small pod, then must start the slow big box
    # for the big pod anyway; the small pod fits there too, so the quick box is not started.
    result = run(
        group(selectionPolicy="FastestBoot"),
        machine("quick", "2", "4Gi", boot=60),
        machine("slow", "8", "16Gi", boot=600),
        pod("small-1", "2", "1Gi"),
        pod("big-1", "6", "1Gi"),
    )
    assert ons(result) == ["slow"]
    assert set(result.power_on[0].pods) == {pkey("small-1"), pkey("big-1")}


def test_daemonset_pods_are_counted_on_new_nodes() -> None:
    objects: list[Any] = [group(), machine("m", "4", "8Gi"), daemonset("agent", "1", "512Mi")]
    assert ons(run(*objects, pod("w-1", "3", "1Gi"))) == ["m"]
    result = run(*objects, pod("w-1", "3500m", "1Gi"))
    assert result.actions == ()
    assert "m: insufficient cpu: needs 3.5, free 3" in pod_note(result, "w-1")
    # A DaemonSet that does not select the machine takes nothing from it.
    picky = daemonset("gpu-agent", "1", "512Mi", nodeSelector={"gpu": "true"})
    assert ons(run(group(), machine("m", "4", "8Gi"), picky, pod("w-1", "3500m", "1Gi"))) == ["m"]


def test_taints_tolerations_and_affinity_steer_the_choice() -> None:
    objects: list[Any] = [
        group(),
        machine(
            "db-box",
            "8",
            "16Gi",
            watts=(50, 10, 0),
            taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
        ),
        machine("zone-a", "8", "16Gi", watts=(90, 60, 0), labels={"zone": "a"}),
        machine("zone-b", "8", "16Gi", watts=(80, 50, 0), labels={"zone": "b"}),
    ]
    tolerant = pod(
        "db-1", "1", "1Gi", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db"}]
    )
    assert ons(run(*objects, tolerant)) == ["db-box"]
    in_a = pod(
        "web-1",
        "1",
        "1Gi",
        affinity=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}],
    )
    assert ons(run(*objects, in_a)) == ["zone-a"]
    not_a = pod(
        "web-2",
        "1",
        "1Gi",
        affinity=[{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}],
    )
    assert ons(run(*objects, not_a)) == ["zone-b"]


def test_a_pinned_machine_is_never_powered_on_even_when_it_is_the_only_fit() -> None:
    result = run(group(), machine("pinned", "8", "16Gi", enabled=False), pod("w-1", "4", "1Gi"))
    assert result.actions == ()
    assert "pinned: pinned (autoscaling.enabled=false)" in pod_note(result, "w-1")
    assert not pod_note(result, "w-1").startswith("no machine could ever")


def test_groups_sized_by_someone_else_are_left_alone() -> None:
    result = run(
        group(autoscaler="cluster-autoscaler"), machine("m", "8", "16Gi"), pod("w-1", "1", "1Gi")
    )
    assert result.actions == ()
    assert "sized by cluster-autoscaler" in pod_note(result, "w-1")


def test_pods_wait_out_the_scale_up_window() -> None:
    objects: list[Any] = [
        group(scaleUp={"stabilizationWindowSeconds": 120}),
        machine("m", "4", "8Gi"),
    ]
    young = run(*objects, pod("w-1", "1", "1Gi", pending_since=at(-30)))
    assert young.actions == ()
    assert "pods wait 120s before group lab scales up" in pod_note(young, "w-1")
    old = run(*objects, pod("w-1", "1", "1Gi", pending_since=at(-150)))
    assert ons(old) == ["m"]


def test_a_fresh_ready_node_is_trusted_to_take_a_pod_the_scheduler_has_not_retried() -> None:
    fresh = ready_machine("new", "4", "8Gi", ready_since=at(-5))
    objects: list[Any] = [group(), fresh, machine("spare", "4", "8Gi")]
    result = run(*objects, pod("w-1", "1", "1Gi", pending_since=at(-120)))
    assert result.actions == ()
    assert pod_note(result, "w-1") == "fits on node new; the scheduler should place it there"
    # A day-old node the scheduler has long tried and refused does not hold the pod back.
    stale = ready_machine("new", "4", "8Gi")
    assert ons(
        run(
            group(),
            stale,
            machine("spare", "4", "8Gi"),
            pod("w-1", "1", "1Gi", pending_since=at(-120)),
        )
    ) == ["spare"]


def test_a_group_below_min_nodes_powers_on_its_cheapest_machines() -> None:
    result = run(
        group(minNodes=2),
        machine("hungry", "4", "8Gi", watts=(300, 200, 1)),
        machine("frugal-1", "4", "8Gi", watts=(40, 20, 1)),
        machine("frugal-2", "4", "8Gi", watts=(45, 25, 1)),
    )
    assert ons(result) == ["frugal-1", "frugal-2"]
    assert all(a.reason == "group lab is below minNodes (0 of 2)" for a in result.power_on)
    assert all(a.pods == () for a in result.power_on)


def test_min_nodes_counts_machines_powered_on_for_pods() -> None:
    result = run(
        group(minNodes=1),
        machine("a", "4", "8Gi", watts=(40, 20, 1)),
        machine("b", "8", "8Gi", watts=(80, 50, 1)),
        pod("w-1", "6", "1Gi"),
    )
    assert ons(result) == ["b"]


def test_dry_run_groups_get_the_same_plan_marked_dry_run() -> None:
    objects: list[Any] = [machine("m", "4", "8Gi"), pod("w-1", "1", "1Gi")]
    live = run(group(), *objects)
    dry = run(group(dryRun=True), *objects)
    assert ons(dry) == ons(live) == ["m"]
    assert [a.dry_run for a in dry.actions] == [True]
    assert [a.dry_run for a in live.actions] == [False]
    assert any("dryRun" in line for line in dry.explanations.groups[mkey("lab")])


def test_an_incomplete_snapshot_yields_no_actions_and_says_why() -> None:
    snapshot = snap(group(), machine("m", "4", "8Gi"), pod("w-1", "1", "1Gi"), complete=False)
    from lightsout.planning.autoscaler.autoscale import plan

    result = plan(snapshot, T0)
    assert result.actions == ()
    assert not result.decided
    assert result.summary == WAITING_FOR_SYNC
    assert result.explanations.groups[mkey("lab")] == (WAITING_FOR_SYNC,)


def test_daemonset_pods_pending_do_not_call_for_machines() -> None:
    result = run(group(), machine("m", "4", "8Gi"), pod("agent-x", "1", "1Gi", owner="DaemonSet"))
    assert result.actions == ()
    assert "DaemonSet pod" in pod_note(result, "agent-x")


def test_machines_without_expected_resources_use_what_their_kept_node_learned() -> None:
    result = run(
        group(),
        machine("learned", resources=False),
        core_node("learned", "8", "16Gi", ready=False),
        machine("unknown", resources=False),
        pod("w-1", "6", "1Gi"),
    )
    assert ons(result) == ["learned"]
    assert "capacity unknown" in " ".join(result.explanations.machines[mkey("unknown")])


def test_pods_spread_over_groups_pick_per_group_policy_and_cheapest_group() -> None:
    result = run(
        group("attic", selectionPolicy="Priority"),
        group("cellar", selectionPolicy="LowestEnergy"),
        machine("attic-1", "4", "8Gi", group="attic", watts=(100, 80, 1)),
        machine("cellar-1", "4", "8Gi", group="cellar", watts=(50, 20, 1)),
        pod("w-1", "1", "1Gi"),
    )
    assert ons(result) == ["cellar-1"]
    assert isinstance(result.actions[0], PowerOn) and result.actions[0].group == mkey("cellar")


def test_the_plan_is_deterministic() -> None:
    objects: list[Any] = [
        group(scaleUp={"maxConcurrentOperations": 10}),
        [machine(f"m{i}", "4", "8Gi") for i in range(8)],
        [pod(f"w-{i}", "1500m", "1Gi") for i in range(9)],
    ]
    assert run(*objects) == run(*objects)
    assert ons(run(*objects)) == ["m0", "m1", "m2", "m3", "m4"]


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ({"selector": {"kubernetes.io/hostname": "box-2"}}, "box-2"),
        (
            {
                "affinity": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["box-3"]}
                        ]
                    }
                ]
            },
            "box-3",
        ),
        (
            {
                "affinity": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": ["box-0"],
                            }
                        ]
                    }
                ]
            },
            "box-1",
        ),
    ],
    ids=["by-label", "by-field", "not-first"],
)
def test_a_pod_that_names_its_node_powers_on_that_machine_among_identical_ones(
    placement: dict[str, Any], expected: str
) -> None:
    boxes = [machine(f"box-{i}", "4", "8Gi") for i in range(4)]
    result = run(group(), boxes, pod("w-1", "1", "1Gi", **placement))
    assert ons(result) == [expected]


def test_a_machine_just_made_ready_is_trusted_even_if_its_kubelet_was_ready_long_before() -> None:
    # The kubelet reported Ready an hour ago, but the operator only finished (labels, uncordon)
    # five seconds ago: the scheduler may not have retried the pod yet, so no second machine.
    objects = ready_machine("fresh", "4", "8Gi")
    objects[0]["status"]["phaseSince"] = "2026-03-01T11:59:55Z"
    result = run(
        group(),
        objects,
        machine("spare", "4", "8Gi"),
        pod("w-1", "1", "1Gi", pending_since=at(-300)),
    )
    assert result.actions == ()
    assert pod_note(result, "w-1") == "fits on node fresh; the scheduler should place it there"


def test_every_machine_gets_an_explanation() -> None:
    result = run(
        group(maxNodes=1),
        ready_machine("on-1", "4", "8Gi"),
        pod("busy-1", "3", "4Gi", node="on-1"),
        machine("off-1", "4", "8Gi"),
        machine("broken", "4", "8Gi", desired="On", phase="Failed"),
        machine("orphan", "4", "8Gi", group="nowhere"),
    )
    notes = result.explanations.machines
    assert notes[mkey("off-1")] == ("off: group lab at maxNodes (1 of 1 on)",)
    assert notes[mkey("broken")] == ("Failed",)
    assert notes[mkey("orphan")] == ("group nowhere not found: not autoscaled",)
    assert "needed: utilisation 75%" in notes[mkey("on-1")][0]


GARBAGE: list[Any] = [None, 0, -5, "", "On", [], {}, {"x": 1}, "NaN", 10**9]


def test_the_planner_never_raises_on_odd_but_readable_objects() -> None:
    import copy
    import random

    rng = random.Random(7)  # noqa: S311 - reproducible data, not secrets
    base: list[Any] = [
        group(minNodes=1, scaleUp={"maxConcurrentOperations": 3}),
        ready_machine("on-1", "4", "8Gi"),
        machine("off-1", "8", "16Gi", watts=(100, 50, 1)),
        machine("off-2", "2", "2Gi", desired="On", phase="Booting"),
        pod("busy-1", "1", "1Gi", node="on-1"),
        pod("w-1", "2", "1Gi"),
        pod("w-2", "100", "1Gi", selector={"a": "b"}),
        daemonset("agent", "100m", "64Mi"),
    ]
    flat = [o for item in base for o in (item if isinstance(item, list) else [item])]
    for _ in range(300):
        objects = copy.deepcopy(flat)
        victim = rng.choice(objects)
        section = rng.choice(
            [k for k in ("spec", "status", "metadata") if isinstance(victim.get(k), dict)]
        )
        keys = list(victim[section]) or ["x"]
        victim[section][rng.choice(keys)] = rng.choice(GARBAGE)
        run(objects)  # must not raise


STARTUP = {"key": "lightsout.dev/unregistered", "effect": "NoSchedule"}


def test_a_node_with_the_startup_taint_is_capacity_on_its_way_not_usable_now() -> None:
    # Booting: the Node the operator created before power-on, tainted, not Ready yet.
    booting = [
        machine("booting", "4", "8Gi", desired="On", phase="Booting"),
        core_node("booting", ready=False, taints=[STARTUP]),
    ]
    # Ready in status, but the startup taint not removed yet: still on its way.
    labelling = [
        machine("labelling", "4", "8Gi", desired="On", phase="Ready"),
        core_node("labelling", taints=[STARTUP]),
    ]
    result = run(
        group(scaleUp={"maxConcurrentOperations": 5}),
        *booting,
        *labelling,
        machine("spare", "4", "8Gi"),
        pod("web-1", "3", "1Gi"),
        pod("web-2", "3", "1Gi"),
    )

    # Both pods are expected on the two machines coming up: nothing else is powered on.
    assert result.actions == ()
    notes = {pod_note(result, "web-1"), pod_note(result, "web-2")}
    assert notes == {
        "will run on machine booting, already powering on (Booting)",
        "will run on machine labelling, already powering on (Ready, its core Node not schedulable "
        "yet)",
    }
    # A third pod does not fit what is coming and calls for the spare.
    more = run(
        group(scaleUp={"maxConcurrentOperations": 5}),
        *booting,
        *labelling,
        machine("spare", "4", "8Gi"),
        pod("web-1", "3", "1Gi"),
        pod("web-2", "3", "1Gi"),
        pod("web-3", "3", "1Gi"),
    )
    assert ons(more) == ["spare"], pod_note(more, "web-3")
