"""Proxmox VMs powered on and off by the operator, persistent and ephemeral.

kubectl patch → Job → Ansible (proxmox_vm role, community.proxmox) → fakepve over TLS on
127.0.0.1 (lightsout_lab/fakepve.py). A Persistent VM is started and stopped (its OS ignores
the ACPI shutdown, so Proxmox stops it hard, and the Node says so). An Ephemeral
machine has no VM while it is off: power-on runs provision.yml (clone the template, start the
clone), power-off runs deprovision.yml (shut the clone down, destroy it); the Lights-Out Node
resource stays, and `status.clone` names the clone while it exists. The machine simulator
reads the VM's state through the Proxmox API (by id, or by the machine's tag for a clone).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.fakepve import CLONE, DESTROY, SHUTDOWN, START, FakePveCluster, Guest
from lightsout_lab.operator_process import OperatorProcess
from tests.harness import fleet
from tests.harness.cycle import patch_and_wait, report, wait_phase
from tests.harness.wait import events_with_reason, get_json, reasons_until, wait_for

TEMPLATE = 9000
PERSISTENT_VMID = 100


@pytest.fixture
def pve() -> Iterator[FakePveCluster]:
    guests = [
        Guest(TEMPLATE, "debian-template", node="pve1", template=True),
        # Its OS ignores the ACPI power button: Proxmox stops it hard after the graceful
        # timeout (120 s, which pass at once at fakepve's time_scale 0).
        Guest(PERSISTENT_VMID, "db", node="pve1", status="stopped", acpi=False),
    ]
    with FakePveCluster(guests, nodes=("pve2",)) as cluster:
        yield cluster


def pve_objects(pve: FakePveCluster, node: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        fleet.secret("pve", {"username": pve.username, "password": pve.password}),
        fleet.secret("pve-ca", {"ca.crt": pve.ca_path.read_bytes()}),
        fleet.group(),
        node,
    ]


def test_persistent_vm_is_started_and_stopped(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    pve: FakePveCluster,
) -> None:
    name = f"db-{namespace}"
    node = fleet.proxmox_node(
        name, pve.endpoint, proxmox={"mode": "Persistent", "vmid": PERSISTENT_VMID}
    )
    fleet.apply(crds, namespace, pve_objects(pve, node))
    power = pve.power_reader(vmid=PERSISTENT_VMID)
    with fleet.simulated(crds, kube_api, namespace, name, power):
        wait_phase(crds, namespace, name, "Off")
        report("proxmox-persistent", "before", vm=pve.status(PERSISTENT_VMID), pve=pve.summary())
        assert pve.status(PERSISTENT_VMID) == "stopped"

        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready")
        report("proxmox-persistent", "patch On -> Ready", seconds=seconds, vm=pve.status(100))
        assert pve.status(PERSISTENT_VMID) == "running"
        assert pve.count(START, vmid=PERSISTENT_VMID) == 1
        assert ready["lastOperation"]["action"] == "startup"
        assert "clone" not in ready

        off, seconds = patch_and_wait(crds, namespace, name, "Off", "Off")
        report("proxmox-persistent", "patch Off -> Off", seconds=seconds, pve=pve.summary())
        assert pve.status(PERSISTENT_VMID) == "stopped"  # stopped, never destroyed
        assert pve.count(SHUTDOWN, vmid=PERSISTENT_VMID, ok_only=True) == 1
        assert pve.count(DESTROY) == 0 and pve.count(CLONE) == 0
        assert (off["lastOperation"]["action"], off["lastOperation"]["result"]) == (
            "shutdown",
            "Succeeded",
        )
        # Off as asked, but not cleanly: the Node says the OS was cut off, and warns.
        hard = "the OS did not shut down within 120 s and the machine was powered off hard"
        assert off["reason"] == "JobSucceeded"
        assert hard in off["message"], off["message"]
        assert off["lastOperation"]["values"]["forced_after_seconds"] == 120
        forced = events_with_reason(crds, namespace, name, "ForcedPowerOff")
        assert forced == [("Warning", f"shutdown: {hard}")]


def test_ephemeral_vm_is_cloned_on_power_on_and_destroyed_on_power_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    pve: FakePveCluster,
) -> None:
    name = f"burst-{namespace}"
    node = fleet.proxmox_node(
        name,
        pve.endpoint,
        proxmox={
            "mode": "Ephemeral",
            "template": {"vmid": TEMPLATE},
            "vmidRange": {"lower": 300, "upper": 309},
            "allowedHosts": ["pve1", "pve2"],
            "cores": 2,
            "memoryMiB": 2048,
        },
    )
    fleet.apply(crds, namespace, pve_objects(pve, node))
    machine_tag = f"lightsout-node.{namespace}.{name}"
    power = pve.power_reader(tag=machine_tag)
    with fleet.simulated(crds, kube_api, namespace, name, power):
        wait_phase(crds, namespace, name, "Off")
        vms_before = [vm["vmid"] for vm in pve.vms()]
        report("proxmox-ephemeral", "before", vms=vms_before, pve=pve.summary())
        assert pve.tagged(machine_tag) == []

        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready")
        clones = pve.tagged(machine_tag)
        report(
            "proxmox-ephemeral",
            "patch On -> Ready",
            seconds=seconds,
            clones=[
                {k: c.get(k) for k in ("vmid", "name", "node", "status", "tags")} for c in clones
            ],
            status_clone=ready.get("clone"),
        )
        assert len(clones) == 1
        vmid = int(clones[0]["vmid"])
        clone = pve.vm(vmid)
        assert clone is not None
        assert (clone["name"], clone["status"]) == (name, "running")
        assert (int(clone["config"]["cores"]), int(clone["config"]["memory"])) == (2, 2048)
        assert "lightsout-group.homelab" in pve.tags(vmid)
        assert pve.count(CLONE, vmid=TEMPLATE) == 1
        op = ready["lastOperation"]
        assert (op["action"], op["result"]) == ("provision", "Succeeded")
        assert op["values"]["vmid"] == vmid
        assert ready["clone"] == {"vmid": vmid, "host": clone["node"]}
        reasons_until(crds, namespace, name, "PowerOnRequested", "NodeRegistered")

        off, seconds = patch_and_wait(crds, namespace, name, "Off", "Off")
        report("proxmox-ephemeral", "patch Off -> Off", seconds=seconds, pve=pve.summary())
        assert not pve.exists(vmid)
        assert pve.tagged(machine_tag) == []
        assert pve.count(SHUTDOWN, vmid=vmid) == 1  # graceful first, then destroyed
        assert pve.count(DESTROY, vmid=vmid, ok_only=True) == 1
        assert [vm["vmid"] for vm in pve.vms()] == vms_before  # template and db untouched
        op = off["lastOperation"]
        assert (op["action"], op["result"], op["values"]["power_state"]) == (
            "deprovision",
            "Succeeded",
            "Off",
        )
        assert "clone" not in off
        # The clone's OS shut down by itself: nothing forced, nothing said of it.
        assert "forced_after_seconds" not in op["values"]
        assert "hard" not in off["message"], off["message"]
        # The machine is still declared: powering it on again would clone anew.
        resource = get_json(crds, "lsn", name, "-n", namespace)
        assert resource is not None and resource["spec"]["desiredPowerState"] == "Off"
        assert get_json(crds, "node", name) is None, "the clone's core Node is gone"


def test_vm_that_fails_to_start_ends_failed_without_a_core_node(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
) -> None:
    """A start task that fails (QEMU exits) on the last attempt: the machine is Failed with
    Proxmox's words, and the core Node made before power-on (never registered: the VM never
    booted) is gone, so `kubectl get nodes` shows no Unknown Node for it (issue 31)."""
    broken = Guest(PERSISTENT_VMID, "db", node="pve1", status="stopped", start_error="QEMU exited")
    name = f"broken-{namespace}"
    with FakePveCluster([broken]) as pve:
        node = fleet.proxmox_node(
            name,
            pve.endpoint,
            proxmox={"mode": "Persistent", "vmid": PERSISTENT_VMID},
            maxRetries=0,
        )
        fleet.apply(crds, namespace, pve_objects(pve, node))
        wait_phase(crds, namespace, name, "Off")
        failed, _ = patch_and_wait(crds, namespace, name, "On", "Failed")
        assert pve.count(START, vmid=PERSISTENT_VMID) == 1
        assert pve.status(PERSISTENT_VMID) == "stopped"
    assert failed["reason"] == "RetriesExhausted"
    assert "QEMU exited" in failed["message"], failed["message"]
    assert failed["message"].startswith(f"removed core Node {name}"), failed["message"]
    wait_for(lambda: get_json(crds, "node", name) is None, 60, f"core Node {name} to be removed")
    reasons_until(crds, namespace, name, "CoreNodeCreated", "CoreNodeRemoved")
