"""The built-in autoscaler's scale-down end to end: a PodDisruptionBudget keeps a machine on
until it allows the eviction, and a Group never goes below minNodes.

Two emulated Redfish servers, both powered on, run a two-replica Deployment, one pod each,
whose PodDisruptionBudget first allows no disruption. The pods would fit on one machine, so one
machine is unneeded but for the budget; once the budget allows one eviction the autoscaler
powers that machine off (drain through the Eviction API, real shutdown Job), the pod moves to
the other machine, and with the workload deleted the last machine stays on for minNodes.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, SushyEmulator
from tests.e2e.autoscaling import UNNEEDED, Fleet, desired, plan_text, reasons, running
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, holds, wait_for
from tests.harness.workload import web_deployment, web_pdb

PAIR = {
    "one": {"cpu": "4", "memory": "8Gi", "watts": 40},
    "two": {"cpu": "4", "memory": "8Gi", "watts": 60},
}
UNNEEDED_SECONDS = 2
#: How late after its deadline a wrong scale-down would be seen: the planner's pass (it wakes
#: 0.05 s after the deadline), its patch of the machine and one poll of ours, on a busy host.
SLACK_SECONDS = 3


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
