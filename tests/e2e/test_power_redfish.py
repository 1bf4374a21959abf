"""The power state machine end to end: kubectl patch → Job → Ansible → sushy-tools → Node.

Real kube-apiserver/controller-manager/scheduler, real Redfish emulator, real ansible-runner in
the action Job's pod (run by the stand-in kubelet), the operator as a real process.
"""

from __future__ import annotations

import json
from typing import Any

from lightsout_lab import Cluster
from lightsout_lab.cluster import KWOK_ANNOTATION
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.conftest import PATIENCE, patch_desired, status, wait_phase
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, wait_for
from tests.harness.workload import web_deployment, web_pdb


def always_on_node(cluster: Cluster, name: str, unschedulable: bool) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name},
        },
        "spec": {"unschedulable": unschedulable},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    cluster.kubectl(
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"capacity": capacity, "allocatable": capacity}}),
    )


def test_power_on_then_drain_and_power_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    fleet.apply(
        crds,
        namespace,
        [
            *fleet.bmc_secrets(bmc),
            fleet.group(),
            fleet.redfish_node(machine, bmc, labels={"lightsout.dev/test": "yes"}),
        ],
    )
    wait_phase(crds, namespace, machine.name, "Off")
    assert bmc.power_state(machine.uuid) == "Off"

    # --- power on
    patch_desired(crds, namespace, machine.name, "On")
    ready = wait_phase(crds, namespace, machine.name, "Ready")
    assert bmc.power_state(machine.uuid) == "On"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
    op = ready["lastOperation"]
    assert (op["action"], op["result"]) == ("startup", "Succeeded")
    assert op["job"] and get_json(crds, "job", op["job"], "-n", namespace) is not None
    core = get_json(crds, "node", machine.name)
    assert core["metadata"]["labels"]["lightsout.dev/test"] == "yes"
    assert not core["spec"].get("unschedulable")
    reasons = [e["reason"] for e in events_for(crds, namespace, machine.name)]
    for expected in ("PowerOnRequested", "JobSucceeded", "NodeRegistered"):
        assert expected in reasons, reasons

    # --- a workload on the machine, protected by a PDB that first forbids any eviction
    spare = f"spare-{namespace}"
    always_on_node(crds, spare, unschedulable=True)
    fleet.apply(crds, namespace, [web_deployment({"cpu": "100m"}), web_pdb(2)])

    def web_pods() -> list[dict[str, Any]]:
        pods = get_json(crds, "pods", "-n", namespace, "-l", "app=web")["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    wait_for(
        lambda: len([p for p in web_pods() if p["status"].get("phase") == "Running"]) == 2,
        PATIENCE,
        "two web pods running on the machine",
    )
    assert {p["spec"]["nodeName"] for p in web_pods()} == {machine.name}
    crds.kubectl("uncordon", spare)

    # --- power off: the PDB holds the drain, and the status says why
    patch_desired(crds, namespace, machine.name, "Off")

    def drain_blocked() -> dict[str, Any] | None:
        s = status(crds, namespace, machine.name)
        for c in s.get("conditions", []):
            if c["type"] == "Draining" and c["reason"] == "DrainBlocked":
                return c
        return None

    blocked = wait_for(drain_blocked, PATIENCE, "the drain to report the blocking PDB")
    assert f"{namespace}/web" in blocked["message"]
    assert status(crds, namespace, machine.name)["phase"] == "Draining"
    assert bmc.power_state(machine.uuid) == "On"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_OFF) == 0

    crds.kubectl(
        "patch",
        "pdb",
        "web",
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"minAvailable": 1}}),
    )
    off = wait_phase(crds, namespace, machine.name, "Off")
    assert bmc.power_state(machine.uuid) == "Off"
    assert (off["lastOperation"]["action"], off["lastOperation"]["result"]) == (
        "shutdown",
        "Succeeded",
    )
    pods = web_pods()
    assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {spare}
    assert get_json(crds, "node", machine.name) is None, "core Node removed (policy Delete)"
    crds.kubectl("delete", "node", spare, "--wait=false")
