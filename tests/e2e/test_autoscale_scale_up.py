"""The built-in autoscaler end to end: pending pods power on the right machines, and only those;
idle machines drain and power off; a dry-run Group only explains.

Three emulated Redfish servers of different sizes (a small one, a large one, one with a GPU) in
a `builtin` Group, the real kube-scheduler marking pods Unschedulable, the operator as a real
process planning on its watches, and every power action carried out by a real Ansible Job
against sushy-tools. Asserted is what a user sees: desiredPowerState, phases, events on pods
and machines, the Group's status, `lightsout plan`, and the power requests at the emulator.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.autoscaling import (
    SIZES,
    Fleet,
    desired,
    diagnosed,
    plan_json,
    plan_text,
    pod,
    pod_node,
    reasons,
    running,
    unschedulable,
)
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, wait_for

#: A CronJob's Job names its pods with this label.
JOB_NAME = "batch.kubernetes.io/job-name"


@pytest.fixture
def machines(request: pytest.FixtureRequest, namespace: str) -> Fleet:
    """The test's machines: `SIZES`, or the sizes it parametrises this fixture with."""
    return Fleet(namespace, getattr(request, "param", SIZES))


@pytest.fixture
def bmc(kube_api: client.ApiClient, cluster: Cluster, machines: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, machines) as (emulator, _):
        yield emulator


def test_pending_pods_power_on_the_machines_that_fit_and_idle_ones_power_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    machines: Fleet,
    bmc: SushyEmulator,
) -> None:
    with diagnosed(crds, namespace):
        scenario(crds, namespace, machines, bmc)


def scenario(crds: Cluster, namespace: str, machines: Fleet, bmc: SushyEmulator) -> None:
    small, large, gpu = (machines.name(s) for s in ("small", "large", "gpu"))
    group = fleet.group(
        "autoscaled",
        autoscaler="builtin",
        minNodes=0,
        scaleUp={"maxConcurrentOperations": 3},
        scaleDown={
            "unneededSeconds": 5,
            "stabilizationWindowSeconds": 0,
            "maxConcurrentOperations": 3,
        },
    )
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), group, *machines.nodes(bmc)])
    for name in (small, large, gpu):
        wait_phase(crds, namespace, name, "Off")

    def power_ons(short: str) -> int:
        return bmc.count_power_requests(machines.uuids[short], reset_types=POWER_ON)

    # (b) Two pods that fit one machine: one machine is powered on, the cheapest that fits.
    fleet.apply(crds, namespace, [pod("web-1", "1"), pod("web-2", "1")])
    wait_for(lambda: desired(crds, namespace, small) == "On", PATIENCE, "small powered on")
    wait_phase(crds, namespace, small, "Ready")
    wait_for(
        lambda: (
            pod_node(crds, namespace, "web-1") == small
            and pod_node(crds, namespace, "web-2") == small
        ),
        PATIENCE,
        "both pods running on the small machine",
    )
    assert (desired(crds, namespace, large), desired(crds, namespace, gpu)) == ("Off", "Off")
    assert (power_ons("small"), power_ons("large"), power_ons("gpu")) == (1, 0, 0)
    for name in ("web-1", "web-2"):
        # A pod that became unschedulable after small's power-on was decided is counted on
        # small, coming up: its event says it waits for small.
        events = reasons(crds, namespace, name)
        told = {"TriggeredScaleUp", "WaitingForScaleUp"}
        assert any(r in told and small in m for r, m in events), events
    assert any(r == "ScaleUp" for r, _ in reasons(crds, namespace, small))

    # (a) A pod only the large machine can hold, (c) a pod asking for a GPU and (d) a pod no
    # machine can ever hold, all at once.
    fleet.apply(
        crds, namespace, [pod("big", "6"), pod("trainer", "500m", gpu="1"), pod("huge", "64")]
    )
    wait_for(lambda: pod_node(crds, namespace, "big") == large, PATIENCE, "big on large")
    wait_for(lambda: pod_node(crds, namespace, "trainer") == gpu, PATIENCE, "trainer on gpu")
    for name in (large, gpu):
        assert wait_phase(crds, namespace, name, "Ready")
    big_events = reasons(crds, namespace, "big")
    assert any(r == "TriggeredScaleUp" and large in m for r, m in big_events), big_events
    trainer_events = reasons(crds, namespace, "trainer")
    assert any(r == "TriggeredScaleUp" and gpu in m for r, m in trainer_events), trainer_events

    assert unschedulable(crds, namespace, "huge")
    explained = wait_for(
        lambda: [m for r, m in reasons(crds, namespace, "huge") if r == "NotTriggerScaleUp"],
        PATIENCE,
        "the huge pod's explanation",
    )
    assert explained[0].startswith("no machine could ever host this pod"), explained
    assert all(name in explained[0] for name in (small, large, gpu)), explained
    # Each power-on reached its BMC exactly once; the huge pod powered nothing on.
    assert (power_ons("small"), power_ons("large"), power_ons("gpu")) == (1, 1, 1)
    scaled_up = get_json(crds, "lsg", "autoscaled", "-n", namespace)["status"]["lastScaleUp"]
    assert scaled_up["nodes"] and scaled_up["reason"], scaled_up
    shown = plan_json(crds, namespace)
    assert any(p.startswith(f"{namespace}/huge") for p in shown["pods"]), shown["pods"]

    # (e) The workload goes away: every machine drains and powers off after its unneeded
    # time (minNodes is 0 here), through the same Jobs a person's kubectl patch would run.
    crds.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
    for name in (small, large, gpu):
        wait_phase(crds, namespace, name, "Off")
        assert desired(crds, namespace, name) == "Off"
        events = reasons(crds, namespace, name)
        assert any(r == "Unneeded" for r, _ in events), events
        assert any(r == "ScaleDown" and "unneeded for" in m for r, m in events), events
    for short in SIZES:
        assert bmc.power_state(machines.uuids[short]) == "Off"
        assert bmc.count_power_requests(machines.uuids[short], reset_types=POWER_OFF) == 1
        assert power_ons(short) == 1
    # The explanation was posted once per reason, not on every plan.
    explained = [m for r, m in reasons(crds, namespace, "huge") if r == "NotTriggerScaleUp"]
    assert len(explained) == len(set(explained)), explained
    scaled_down = get_json(crds, "lsg", "autoscaled", "-n", namespace)["status"]["lastScaleDown"]
    assert scaled_down["nodes"], scaled_down
    # Each machine's one power cycle was timed from its phase history, and `-o wide` shows it.
    for name in (small, large, gpu):
        learned = get_json(crds, "lsn", name, "-n", namespace)["status"]["learned"]
        assert len(learned["bootSamples"]) == len(learned["shutdownSamples"]) == 1, learned
        assert learned["bootSeconds"] == learned["bootSamples"][0] > 0, learned
        assert len(learned["powerOns"]) == 1, learned
    wide = crds.kubectl("get", "lsn", small, "-n", namespace, "-o", "wide").stdout.splitlines()
    assert "BOOT-S" in wide[0] and "SHUTDOWN-S" in wide[0], wide
    learned = get_json(crds, "lsn", small, "-n", namespace)["status"]["learned"]
    # By the header's character offsets: a column left empty (HEALTH before any health check)
    # would shift a whitespace split.
    for column, key in (("BOOT-S", "bootSeconds"), ("SHUTDOWN-S", "shutdownSeconds")):
        start = wide[0].index(column)
        assert wide[1][start:].split()[0] == str(learned[key]), wide


def test_a_dry_run_group_explains_and_changes_nothing(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    machines: Fleet,
    bmc: SushyEmulator,
) -> None:
    small = machines.name("small")
    group = fleet.group("autoscaled", autoscaler="builtin", dryRun=True)
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), group, *machines.nodes(bmc)])
    wait_phase(crds, namespace, small, "Off")
    fleet.apply(crds, namespace, [pod("web", "1")])
    said = wait_for(
        lambda: [m for r, m in reasons(crds, namespace, "web") if r == "DryRunScaleUp"],
        PATIENCE,
        "the dry-run explanation on the pod",
    )
    assert said[0].startswith("dry run") and small in said[0], said
    assert any(r == "DryRunScaleUp" for r, _ in reasons(crds, namespace, small))
    # The same decision through the CLI, which a person reads before turning dryRun off.
    shown = plan_json(crds, namespace)
    actions = [a for a in shown["actions"] if a["machine"] == f"{namespace}/{small}"]
    assert actions and actions[0]["action"] == "PowerOn" and actions[0]["dryRun"], shown
    # Nothing changed: the machine stays Off, its BMC never heard from the operator.
    assert desired(crds, namespace, small) == "Off"
    assert bmc.count_power_requests() == 0
    group_status = get_json(crds, "lsg", "autoscaled", "-n", namespace).get("status") or {}
    assert "lastScaleUp" not in group_status, group_status


# CronJob pre-warming is proven on the operator's planner with a fake clock, and its wiring
# end to end elsewhere:
# - which of two machines is powered on for an announced run (one power-on per run, the slower
#   but frugal one when it is Ready before the run is due): tests/unit/test_simulate.py
#   `test_prewarming_powers_one_machine_on_per_run_just_in_time`, and the planner's notes in
#   tests/unit/test_autoscale_prewarm.py;
# - a `Forbid` CronJob whose run still goes is not pre-warmed for, the run after it is:
#   tests/unit/test_cron_policy.py
#   `test_the_live_snapshot_announces_no_run_for_a_forbid_cronjob_whose_job_still_runs` (the
#   live snapshot from the CronJob's `status.active`) and tests/unit/test_simulate.py
#   `test_a_forbid_run_still_going_is_not_pre_warmed_for_but_the_next_one_is` (the replay);
# - the wiring (a live CronJob, the real controller's run, the machine powered on before it
#   with an event that says why): tests/e2e/test_simulator_reality.py; the real controller's
#   runs are the ones Lights-Out announces: tests/e2e/test_cron_dst.py.


#: A frugal but loud machine in a Group with a quiet window always open, a machine in a Group
#: without windows that can take the same pods, and one whose Group has a floor in force (too
#: small for the quiet part's pod, so the two parts cannot meet whatever the timing).
WINDOWED = {
    "loud": {"cpu": "4", "memory": "8Gi", "watts": 20},
    "nuc": {"cpu": "4", "memory": "8Gi", "watts": 60},
    "box": {"cpu": "1", "memory": "8Gi", "watts": 80},
}


@pytest.mark.parametrize("machines", [WINDOWED], indirect=True, ids=["loud-nuc-box"])
def test_a_floor_window_powers_a_machine_on_and_a_quiet_window_leaves_the_pod_elsewhere(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    machines: Fleet,
    bmc: SushyEmulator,
) -> None:
    """Quiet: a pod that the loud machine (the lowest-energy choice) or the nuc can host gets
    the nuc; the loud machine's BMC hears nothing and its Group says which window holds it.
    Floor: box's Group has a window with minNodes 1 in force: box is powered on for it, and the
    event and the Group say which window holds it on.

    When a floor's machine is powered on (one boot estimate and a margin before the window
    opens, Ready by the opening) and that it is powered off once the window has closed are
    proven on the operator's planner with a fake clock: tests/unit/test_windows.py
    (`test_a_floor_powers_on_one_learned_boot_before_its_window_opens`,
    `test_the_group_is_told_when_its_floor_starts_early_opens_and_closes`,
    `test_the_replay_has_the_floor_ready_at_its_opening_and_off_after_it`)."""
    loud, nuc, box = (machines.name(s) for s in ("loud", "nuc", "box"))
    # In force from this minute for an hour: the floor holds box on from the first pass.
    opened = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    nodes = {node["metadata"]["name"]: node for node in machines.nodes(bmc)}
    for name, group_name in ((loud, "rack"), (nuc, "home"), (box, "evening")):
        nodes[name]["spec"]["group"] = group_name
    night = {"name": "night", "schedule": "0 * * * *", "durationSeconds": 3600, "quiet": True}
    evening = {
        "name": "evening",
        "schedule": f"{opened.minute} {opened.hour} * * *",
        "durationSeconds": 3600,
        "minNodes": 1,
    }
    groups = [
        fleet.group("rack", autoscaler="builtin", windows=[night]),
        fleet.group("home", autoscaler="builtin", scaleDown={"unneededSeconds": 600}),
        fleet.group("evening", autoscaler="builtin", windows=[evening]),
    ]
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), *groups, *nodes.values()])
    for name in (loud, nuc):
        wait_phase(crds, namespace, name, "Off")

    def power_ons(short: str) -> int:
        return bmc.count_power_requests(machines.uuids[short], reset_types=POWER_ON)

    with diagnosed(crds, namespace):
        # Quiet: the pod gets the nuc, not the loud machine.
        fleet.apply(crds, namespace, [pod("chore", "2")])
        wait_for(lambda: pod_node(crds, namespace, "chore") == nuc, PATIENCE, "chore on nuc")
        assert (power_ons("loud"), desired(crds, namespace, loud)) == (0, "Off")
        told = [m for r, m in reasons(crds, namespace, "rack") if r == "WindowInForce"]
        assert told and "window night" in told[0] and "quiet until" in told[0], told
        shown = plan_text(crds, namespace)
        assert "in force: window night" in shown and "quiet until" in shown, shown

        # Floor: box is ordered On for the window, with no pod asking for it.
        wait_phase(crds, namespace, box, "Ready")
        (ordered,) = [e for e in events_for(crds, namespace, box) if e["reason"] == "ScaleUp"]
        assert "window evening" in ordered["message"], ordered["message"]
        assert "minNodes 1 until" in ordered["message"], ordered["message"]
        said = [m for r, m in reasons(crds, namespace, "evening") if r == "WindowInForce"]
        assert any("minNodes 1" in m for m in said), said
        assert (power_ons("loud"), power_ons("nuc"), power_ons("box")) == (0, 1, 1)
