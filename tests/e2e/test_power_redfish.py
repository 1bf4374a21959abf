"""The power state machine end to end: kubectl patch → Job → Ansible → sushy-tools → Node.

Real kube-apiserver/controller-manager/scheduler, real Redfish emulator, real ansible-runner in
the action Job's pod (run by the stand-in kubelet), the operator as a real process. The
machine's OS ignores the ACPI shutdown: after the drain and `gracefulShutdownSeconds` the power
is forced off, and the Node says so (status and a ForcedPowerOff Warning). Two more
machines, behind a BMC that takes sessions only, are cycled on and off through the operator
(CYCLES times in all): every Job's Redfish session is deleted again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.cluster import KWOK_ANNOTATION
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.redfish_profiles import SESSIONS
from lightsout_lab.sushy import POWER_OFF, POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.conftest import PATIENCE, patch_desired, status, wait_phase
from tests.harness import fleet
from tests.harness.cycle import report
from tests.harness.wait import events_with_reason, get_json, reasons_until, wait_for
from tests.harness.workload import web_deployment, web_pdb

#: Seconds the OS that ignores the ACPI shutdown is given before the power is forced off.
GRACEFUL_SECONDS = 3
#: Power cycles of the session-leak test (issue 40 asks for 20), spread over MACHINES machines
#: behind one BMC, in rounds of one cycle per machine; each cycle is two Jobs (a startup and a
#: shutdown, which logs in twice: its power-off and its read-back). Five machines in four
#: rounds: ten side by side made the shared cores' load jump to some thirty runnable processes
#: (ten Ansible runs at once, each a playbook process, its task fork and a module), and another
#: lab's shutdown Job, started in such a wave, took over four minutes and failed its test. Four
#: machines in five rounds once took 2.5 to 4 minutes a round and hit the 900-s timeout:
#: the test's own timeout below allows for every wave.
CYCLES = 20
MACHINES = 5
#: Seconds a round's MACHINES Jobs side by side may take to land: under a cold CI's load one
#: round of ten shutdowns took over 240 s (the harness's usual patience), so the wait scales
#: with the Jobs that share the cores rather than with one Job's time.
ROUND_PATIENCE = 60 * MACHINES
#: The test's own timeout: 40 Ansible Jobs on two cores shared with two other labs, in eight
#: waves plus the machines' first power-off, each up to ROUND_PATIENCE and most far less.
SESSION_TEST_TIMEOUT = (2 * CYCLES // MACHINES + 1) * ROUND_PATIENCE * 2 // 3


@pytest.fixture
def bmc(machine: fleet.MachineDef) -> Iterator[SushyEmulator]:
    """The machine's BMC (sushy-tools as it is); the machine's OS ignores GracefulShutdown (the
    BMC accepts it, the machine stays On until ForceOff)."""
    system = FakeSystem(uuid=machine.uuid, name=machine.name, graceful_shutdown="ignore")
    with SushyEmulator([system]) as emulator:
        yield emulator


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


def ignoring_node(machine: fleet.MachineDef, bmc: SushyEmulator) -> dict[str, Any]:
    node = fleet.redfish_node(machine, bmc, labels={"lightsout.dev/test": "yes"})
    node["spec"]["driver"]["redfish"]["gracefulShutdownSeconds"] = GRACEFUL_SECONDS
    return node


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
            ignoring_node(machine, bmc),
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
    reasons_until(
        crds, namespace, machine.name, "PowerOnRequested", "JobSucceeded", "NodeRegistered"
    )

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
    # Drained, asked to shut down, ignored it: forced off after its seconds, one order each.
    orders = bmc.power_requests(machine.uuid)
    assert [(r.reset_type, r.status) for r in orders] == [
        ("On", 204),
        ("GracefulShutdown", 204),
        ("ForceOff", 204),
    ]
    hard = (
        f"the OS did not shut down within {GRACEFUL_SECONDS} s and the machine was powered off hard"
    )
    assert off["reason"] == "JobSucceeded"
    assert hard in off["message"], off["message"]
    assert off["lastOperation"]["values"]["forced_after_seconds"] == GRACEFUL_SECONDS
    forced = events_with_reason(crds, namespace, machine.name, "ForcedPowerOff")
    assert forced == [("Warning", f"shutdown: {hard}")]
    pods = web_pods()
    assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {spare}
    assert get_json(crds, "node", machine.name) is None, "core Node removed (policy Delete)"
    crds.kubectl("delete", "node", spare, "--wait=false")


def reach_in_round(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    """The machine's status once it is in `phase`, waiting up to ROUND_PATIENCE."""
    return wait_for(
        lambda: (s := status(cluster, namespace, name)).get("phase") == phase and s,
        ROUND_PATIENCE,
        f"{name} to reach phase {phase} (its round's Jobs side by side)",
    )


@pytest.mark.timeout(SESSION_TEST_TIMEOUT)
def test_sessions_only_bmc_keeps_no_session_after_power_cycles(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
) -> None:
    """Machines behind a BMC that refuses Basic auth (sessions only), cycled on and off through
    the operator: CYCLES power cycles in all (MACHINES machines in rounds, their Jobs side by
    side, all logging in to the one emulator's session table). Each Job logs in with a session
    and deletes it again, so the BMC holds none after any round nor at the end (a BMC keeps only
    a few; a leaked one per Job locks users out)."""
    boxes = [
        fleet.MachineDef(name=f"cycled{i}-{namespace}", uuid=str(uuid.uuid4()), cpu="8")
        for i in range(MACHINES)
    ]
    systems = [FakeSystem(uuid=b.uuid, name=b.name, profile="sessions-only") for b in boxes]
    with SushyEmulator(systems, landing_seconds=(1, 1)) as bmc:
        nodes = [fleet.redfish_node(box, bmc) for box in boxes]
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), *nodes])
        sim = fleet.simulator(kube_api, bmc, boxes, namespace, boot_seconds=0.5)
        try:
            for box in boxes:
                wait_phase(crds, namespace, box.name, "Off")
            for cycle in range(1, CYCLES // MACHINES + 1):
                for wanted, phase in (("On", "Ready"), ("Off", "Off")):
                    for box in boxes:
                        patch_desired(crds, namespace, box.name, wanted)
                    for box in boxes:
                        reached = reach_in_round(crds, namespace, box.name, phase)
                        assert reached["lastOperation"]["result"] == "Succeeded", reached
                assert bmc.live_sessions() == 0, f"a session left after round {cycle}"
                report("redfish-sessions", f"round {cycle}", machines=MACHINES)
        finally:
            sim.stop()
            for box in boxes:
                crds.kubectl("delete", "node", box.name, "--ignore-not-found", "--wait=false")
        requests = bmc.requests()
        made = [r for r in requests if r.path == SESSIONS and r.method == "POST"]
        deleted = [
            r for r in requests if r.method == "DELETE" and r.path.startswith(SESSIONS + "/")
        ]
        report("redfish-sessions", "done", logins=len(made), logouts=len(deleted))
        # One login per Job (at least the power Jobs), each deleted; one order per intent.
        assert len(made) >= 2 * CYCLES
        assert [r.status for r in made] == [201] * len(made)
        assert [r.status for r in deleted] == [204] * len(made)
        for box in boxes:
            orders = bmc.power_requests(box.uuid)
            assert [r.reset_type for r in orders] == ["On", "GracefulShutdown"] * (
                CYCLES // MACHINES
            ), box.name
            assert {r.status for r in orders} == {204}
        assert bmc.live_sessions() == 0
