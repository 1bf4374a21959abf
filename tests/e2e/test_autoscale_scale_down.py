"""The built-in autoscaler's scale-down end to end: a PodDisruptionBudget keeps a machine on
until it allows the eviction, and a Group never goes below minNodes.

Two emulated Redfish servers, both powered on, run a two-replica Deployment, one pod each,
whose PodDisruptionBudget first allows no disruption. The pods would fit on one machine, so one
machine is unneeded but for the budget; once the budget allows one eviction the autoscaler
powers that machine off (drain through the Eviction API, real shutdown Job), the pod moves to
the other machine, and with the workload deleted the last machine stays on for minNodes.

A running Job's pod keeps its machine on (scaleDown.jobGraceSeconds): on the same two machines,
one holds a bare pod (so it is needed) and the other only a Job's pod that would fit beside it.
The lab's kwok keeps that pod Running while it carries `HOLD_ANNOTATION`; the machine stays on
with the Job named in `lightsout plan` until the test lets the pod finish, and is powered off
one unneeded time later. (The grace 0, which evicts such a pod, is proven on the replay.)
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kwok_stages import HOLD_ANNOTATION
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, SushyEmulator
from tests.e2e.autoscaling import (
    UNNEEDED,
    Fleet,
    desired,
    diagnosed,
    plan_json,
    plan_text,
    pod,
    reasons,
    running,
)
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, holds, says_ready, wait_for
from tests.harness.workload import batch_job, web_deployment, web_pdb

PAIR = {
    "one": {"cpu": "4", "memory": "8Gi", "watts": 40},
    "two": {"cpu": "4", "memory": "8Gi", "watts": 60},
}
UNNEEDED_SECONDS = 2
#: How late after its deadline a wrong scale-down would be seen: the planner's pass (it wakes
#: 0.05 s after the deadline), its patch of the machine and one poll of ours, on a busy host.
SLACK_SECONDS = 3
#: The Job test's unneeded time: a machine wrongly found unneeded while its Job runs would be
#: powered off this long after, well inside the test's watch of twice as long.
JOB_UNNEEDED_SECONDS = 5
#: The Job's pod: small enough to fit beside the bare pod on the other machine.
JOB_REQUESTS = {"cpu": "500m", "memory": "100Mi"}
#: On a Job's pod template: the lab's kwok keeps the pod Running until the test removes it.
HELD = {HOLD_ANNOTATION: "true"}


@pytest.fixture
def pair(namespace: str) -> Fleet:
    return Fleet(namespace, PAIR)


@pytest.fixture
def pair_bmc(kube_api: client.ApiClient, cluster: Cluster, pair: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, pair) as (bmc, _):
        yield bmc


def test_a_pdb_holds_a_machine_on_and_min_nodes_holds_the_last(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    pair: Fleet,
    pair_bmc: SushyEmulator,
) -> None:
    names = [pair.name(s) for s in PAIR]
    # Scale-down starts disabled, so neither machine is powered off while it still waits for
    # its pod; both are powered on by hand, as a person would.
    group = fleet.group(
        "autoscaled",
        autoscaler="builtin",
        minNodes=1,
        scaleDown={"enabled": False, "unneededSeconds": UNNEEDED_SECONDS},
    )
    objects = [*fleet.bmc_secrets(pair_bmc), group, *pair.nodes(pair_bmc, desiredPowerState="On")]
    fleet.apply(crds, namespace, objects)
    for name in names:
        wait_phase(crds, namespace, name, "Ready")
    fleet.apply(crds, namespace, [web_deployment({"cpu": "500m", "memory": "100Mi"}), web_pdb(2)])

    def placement() -> dict[str, str]:
        pods = get_json(crds, "pods", "-n", namespace, "-l", "app=web")["items"]
        return {
            p["metadata"]["name"]: p["spec"].get("nodeName", "")
            for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    # The scheduler spreads the two replicas, one per machine.
    spread = wait_for(
        lambda: placement() if len(set(placement().values())) == 2 else None, PATIENCE, "spread"
    )
    assert set(spread.values()) == set(names), spread
    wait_for(
        lambda: (
            (get_json(crds, "pdb", "web", "-n", namespace).get("status") or {}).get(
                "disruptionsAllowed"
            )
            == 0
            and get_json(crds, "pdb", "web", "-n", namespace)["status"].get("currentHealthy") == 2
        ),
        PATIENCE,
        "the PDB to count both pods",
    )

    # (f) Scale-down on: each machine is idle enough and its pod would fit on the other, but
    # the budget allows no eviction, so both stay on well past their unneeded time.
    scale_down = {"spec": {"scaleDown": {"enabled": True, "stabilizationWindowSeconds": 0}}}
    crds.kubectl(
        "patch",
        "lsg",
        "autoscaled",
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        json.dumps(scale_down),
    )
    explained = wait_for(
        lambda: text if "PodDisruptionBudget" in (text := plan_text(crds, namespace)) else None,
        PATIENCE,
        "lightsout plan to name the budget",
    )
    assert f"{namespace}/web allows no disruption" in explained, explained
    # The operator has seen scale-down enabled (the Group's status follows its generation; the
    # planner woke on that same change). A planner ignoring the budget would have marked a
    # machine unneeded in that pass and powered it off one unneeded time later: watch both
    # machines until then.
    wait_for(
        lambda: (
            (g := get_json(crds, "lsg", "autoscaled", "-n", namespace))
            and (g.get("status") or {}).get("observedGeneration") == g["metadata"]["generation"]
        ),
        PATIENCE,
        "the operator to see scale-down enabled",
    )

    def both_kept() -> bool:
        for name in names:
            machine = get_json(crds, "lsn", name, "-n", namespace)
            assert machine["spec"]["desiredPowerState"] == "On", machine
            assert UNNEEDED not in (machine["metadata"].get("annotations") or {}), machine
        return pair_bmc.count_power_requests(reset_types=POWER_OFF) == 0

    holds(
        both_kept,
        time.monotonic() + UNNEEDED_SECONDS + SLACK_SECONDS,
        "both machines on, neither unneeded, no power-off",
    )

    # The budget now allows one eviction: one machine becomes unneeded, is drained (its pod
    # moves to the other) and powered off after its unneeded time.
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(web_pdb(1)))
    off = wait_for(
        lambda: next((n for n in names if desired(crds, namespace, n) == "Off"), None),
        PATIENCE,
        "one machine powered off by the autoscaler",
    )
    (kept,) = [n for n in names if n != off]
    wait_phase(crds, namespace, off, "Off")
    events = reasons(crds, namespace, off)
    assert any(r == "ScaleDown" and "unneeded for" in m for r, m in events), events
    short = {pair.name(s): s for s in PAIR}[off]
    assert pair_bmc.count_power_requests(pair.uuids[short], reset_types=POWER_OFF) == 1
    wait_for(
        lambda: set(placement().values()) == {kept} and len(placement()) == 2,
        PATIENCE,
        "both replicas on the remaining machine",
    )

    # (e) The workload is deleted: the last machine is unneeded, but minNodes is 1.
    crds.kubectl("delete", "deployment", "web", "-n", namespace)
    held = wait_for(
        lambda: text if "at minNodes" in (text := plan_text(crds, namespace)) else None,
        PATIENCE,
        "lightsout plan to say minNodes holds the last machine",
    )
    assert kept in held, held
    since = wait_for(
        lambda: (
            get_json(crds, "lsn", kept, "-n", namespace)["metadata"].get("annotations") or {}
        ).get(UNNEEDED),
        PATIENCE,
        "the operator to record the last machine as unneeded",
    )
    # Past the unneeded time the operator itself recorded (in whole seconds, so up to one
    # second early) plus its reaction: still on.
    deadline = dt.datetime.fromisoformat(since.replace("Z", "+00:00")) + dt.timedelta(
        seconds=1 + UNNEEDED_SECONDS + SLACK_SECONDS
    )
    holds(
        lambda: desired(crds, namespace, kept) == "On",
        time.monotonic() + (deadline - dt.datetime.now(dt.UTC)).total_seconds(),
        f"{kept} wanted On past its unneeded time",
    )
    assert wait_phase(crds, namespace, kept, "Ready")
    assert pair_bmc.count_power_requests(reset_types=POWER_OFF) == 1


def _patch_scale_down(crds: Cluster, namespace: str, scale_down: dict[str, object]) -> None:
    """Patch the Group's scaleDown and wait until the operator has seen it (its status follows
    the generation; the planner wakes on that same change)."""
    body = json.dumps({"spec": {"scaleDown": scale_down}})
    crds.kubectl("patch", "lsg", "autoscaled", "-n", namespace, "--type", "merge", "-p", body)
    wait_for(
        lambda: (
            (g := get_json(crds, "lsg", "autoscaled", "-n", namespace))
            and (g.get("status") or {}).get("observedGeneration") == g["metadata"]["generation"]
        ),
        PATIENCE,
        f"the operator to see scaleDown {scale_down}",
    )


def _schedulable(crds: Cluster, name: str) -> bool:
    """kube-scheduler would place a pod tolerating only kwok's taint on core Node `name`."""
    node = get_json(crds, "node", name)
    if not node:
        return False
    ready = says_ready(node)
    blocking = [
        t
        for t in node["spec"].get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and t["key"] != "kwok.x-k8s.io/node"
    ]
    return ready and not node["spec"].get("unschedulable") and not blocking


def _held_job_on(crds: Cluster, namespace: str, job: str, machine: str) -> str:
    """Start Job `job` with its pod held Running; the pod's name once it runs on `machine`."""
    fleet.apply(crds, namespace, [batch_job(job, JOB_REQUESTS, HELD)])
    ((pod, node),) = wait_for(
        lambda: list(_job_running(crds, namespace, job).items()),
        PATIENCE,
        f"Job {job}'s pod Running",
    )
    assert node == machine, node
    return pod


def _job_running(crds: Cluster, namespace: str, job: str) -> dict[str, str]:
    """The Job's Running pods, not being deleted, and where each runs."""
    pods = get_json(crds, "pods", "-n", namespace, "-l", f"job-name={job}")
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in (pods or {}).get("items", [])
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def _machine_notes(crds: Cluster, namespace: str, name: str) -> str:
    """What `lightsout plan --json` says about one machine."""
    machines = plan_json(crds, namespace)["machines"]
    return "; ".join(
        n for m in machines if m["machine"] == f"{namespace}/{name}" for n in m["notes"]
    )


def _when(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_running_jobs_pod_keeps_its_machine_until_it_completes(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    pair: Fleet,
    pair_bmc: SushyEmulator,
) -> None:
    """With scaleDown.jobGraceSeconds at its default, a Job's running pod keeps its machine on
    (and `lightsout plan` says so); once the pod finishes, the machine is unneeded from then
    and powered off one unneeded time later. With the grace at 0 the pod is evicted and starts
    over elsewhere: that is the same decision with another setting, proven on the replay
    (tests/unit/test_simulate_job_grace.py
    `test_with_job_grace_zero_the_build_is_evicted_and_starts_over`)."""
    one, two = pair.name("one"), pair.name("two")
    # Both machines powered on by hand with scale-down off (so neither goes while the pods are
    # placed); the Group leaves scaleDown.jobGraceSeconds at its default, a day.
    group = fleet.group(
        "autoscaled",
        autoscaler="builtin",
        minNodes=1,
        scaleDown={
            "enabled": False,
            "unneededSeconds": JOB_UNNEEDED_SECONDS,
            "stabilizationWindowSeconds": 0,
        },
    )
    objects = [*fleet.bmc_secrets(pair_bmc), group, *pair.nodes(pair_bmc, desiredPowerState="On")]
    fleet.apply(crds, namespace, objects)
    with diagnosed(crds, namespace):
        for name in (one, two):
            wait_phase(crds, namespace, name, "Ready")
        wait_for(
            lambda: _schedulable(crds, one) and _schedulable(crds, two),
            PATIENCE,
            "both core Nodes schedulable",
        )
        # `two` is needed whatever happens: its bare pod would not come back after eviction.
        keeper = pod("keeper", "1")
        keeper["spec"]["nodeName"] = two
        fleet.apply(crds, namespace, [keeper])
        wait_for(
            lambda: (
                (get_json(crds, "pod", "keeper", "-n", namespace) or {})
                .get("status", {})
                .get("phase")
                == "Running"
            ),
            PATIENCE,
            "the bare pod Running on two",
        )
        # The Job's pod goes to the emptier machine (kube-scheduler's least-allocated score);
        # it would fit on `two` too, so without the grace `one` would be unneeded.
        build_pod = _held_job_on(crds, namespace, "build", one)

        # (1) Scale-down on, the grace at its default: the Job keeps `one` on, and `lightsout
        # plan` names it with the time left.
        _patch_scale_down(crds, namespace, {"enabled": True})
        watched = time.monotonic()

        def kept() -> bool:
            machine = get_json(crds, "lsn", one, "-n", namespace)
            assert machine["spec"]["desiredPowerState"] == "On", machine
            assert machine["status"]["phase"] == "Ready", machine["status"]
            assert UNNEEDED not in (machine["metadata"].get("annotations") or {}), machine
            assert _job_running(crds, namespace, "build") == {build_pod: one}
            return pair_bmc.count_power_requests(reset_types=POWER_OFF) == 0

        # A planner ignoring the Job would have found `one` unneeded in the pass that saw
        # scale-down enabled and powered it off one unneeded time later: watch twice that.
        holds(
            kept,
            watched + 2 * JOB_UNNEEDED_SECONDS + SLACK_SECONDS,
            "one on, Ready, not unneeded, its Job's pod Running, no power-off",
        )

        note = wait_for(
            lambda: (
                text if "is running" in (text := _machine_notes(crds, namespace, one)) else None
            ),
            PATIENCE,
            "lightsout plan to name the Job on one",
        )
        assert f"Job {namespace}/build is running (pod {namespace}/{build_pod}, for " in note, note
        left = re.search(r"movable in (\d+)s \(scaleDown\.jobGraceSeconds 86400\)", note)
        assert left and 86_400 - PATIENCE < int(left[1]) <= 86_400, note

        # (2) The Job's pod finishes: `one` is unneeded from then, and powered off one
        # unneeded time later.
        crds.kubectl("annotate", "pod", build_pod, "-n", namespace, f"{HOLD_ANNOTATION}-")
        finished = wait_for(
            lambda: (
                (p := get_json(crds, "pod", build_pod, "-n", namespace))
                and p["status"].get("phase") == "Succeeded"
                and p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
            ),
            PATIENCE,
            "the Job's pod Succeeded",
        )
        since = wait_for(
            lambda: (
                get_json(crds, "lsn", one, "-n", namespace)["metadata"].get("annotations") or {}
            ).get(UNNEEDED),
            PATIENCE,
            "the operator to record one as unneeded",
        )
        # Both in whole seconds.
        assert _when(since) >= _when(finished) - dt.timedelta(seconds=1), (since, finished)
        wait_for(lambda: desired(crds, namespace, one) == "Off", PATIENCE, "one wanted Off")
        wait_phase(crds, namespace, one, "Off")
        events = reasons(crds, namespace, one)
        assert any(r == "ScaleDown" and "unneeded for" in m for r, m in events), events
        assert pair_bmc.count_power_requests(pair.uuids["one"], reset_types=POWER_OFF) == 1
        assert pair_bmc.count_power_requests(reset_types=POWER_OFF) == 1
