"""The action Job's entrypoint against a Proxmox VE API: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials and CA directories, termination-message file), with real ansible-runner, the
shipped playbooks and the proxmox_vm role, against fakepve over TLS (lightsout_lab/fakepve.py).
Persistent VMs are started and stopped; ephemeral ones are cloned from a template and destroyed.
No Kubernetes needed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lightsout_lab.fakepve import CLONE, DESTROY, SHUTDOWN, START, STOP, FakePveCluster, Guest
from tests.harness import runner
from tests.harness.runner import RunnerRun

pytestmark = pytest.mark.e2e

TEMPLATE = 9000
GROUP_TAG = "lightsout-group.homelab"
#: What a check or a shutdown (which reads the state back) reports of fakepve's default guest,
#: kept in the Node's status.inspected.
INSPECTED = {"cpu": Guest(0, "").cores, "memory": f"{Guest(0, '').memory_mib}Mi"}
#: A power-off that stopped the VM.
STOPPED = {"power_state": "Off", "driver": "proxmox", "changed": True}


def run_runner(
    tmp_path: Path,
    pve: FakePveCluster,
    action: str,
    proxmox: dict[str, Any],
    *,
    node_name: str = "vm-1",
    group: str | None = "homelab",
    password: str | None = None,
    files: dict[str, str] | None = None,
) -> RunnerRun:
    """Run the runner once against fakepve with the Node's spec.driver.proxmox settings."""
    credentials = {
        "username": pve.username + "\n",
        "password": (password or pve.password) + "\n",
        **{name: text + "\n" for name, text in (files or {}).items()},
    }
    block = {
        "endpoint": pve.endpoint,
        "node": "pve1",
        "credentialsSecretRef": {"name": "pve"},
        "tls": {"caSecretRef": {"name": "pve-ca", "key": "ca.crt"}},
        **proxmox,
    }
    extravars: dict[str, Any] = {
        "lightsout_node": {"name": node_name, "namespace": "homelab"},
        "lightsout_driver": "proxmox",
        "lightsout_proxmox": block,
    }
    if group:
        extravars["lightsout_group"] = group
    ca = {"ca.crt": pve.ca_path.read_text()}
    return runner.run_runner(tmp_path, action, extravars, credentials, ca=ca)


def persistent(vmid: int, **more: Any) -> dict[str, Any]:
    return {"mode": "Persistent", "vmid": vmid, **more}


def ephemeral(**more: Any) -> dict[str, Any]:
    return {
        "mode": "Ephemeral",
        "template": {"vmid": TEMPLATE},
        "vmidRange": {"lower": 300, "upper": 309},
        "allowedHosts": ["pve1", "pve2"],
        "cores": 2,
        "memoryMiB": 2048,
        "tags": ["k8s"],
        **more,
    }


def cluster_with_template(*more: Guest) -> FakePveCluster:
    """pve1: the template and a running VM of the group; pve2: empty."""
    return FakePveCluster(
        [
            Guest(TEMPLATE, "debian-template", node="pve1", template=True),
            Guest(
                150,
                "vm-0",
                node="pve1",
                status="running",
                tags=("lightsout", GROUP_TAG, "lightsout-node.homelab.vm-0"),
            ),
            *more,
        ],
        nodes=("pve2",),
    )


def test_persistent_vm_starts_once_and_stops(tmp_path: Path) -> None:
    with FakePveCluster([Guest(100, "vm-1", status="stopped")]) as pve:
        first = run_runner(tmp_path, pve, "startup", persistent(100))
        assert first.returncode == 0, first.explain()
        assert first.result["failedTask"] is None
        assert first.values == {"power_state": "On", "driver": "proxmox", "changed": True}
        assert pve.status(100) == "running"
        assert pve.count(START, vmid=100) == 1

        again = run_runner(tmp_path, pve, "startup", persistent(100))
        assert again.returncode == 0, again.explain()
        assert again.values["changed"] is False
        assert pve.count(START, vmid=100) == 1  # no second start

        health = run_runner(tmp_path, pve, "healthcheck", persistent(100))
        assert health.returncode == 0, health.explain()
        assert health.values == {
            "power_state": "On",
            "driver": "proxmox",
            "changed": False,
            "inspected": INSPECTED,
        }

        down = run_runner(tmp_path, pve, "shutdown", persistent(100))
        assert down.returncode == 0, down.explain()
        assert down.values == {**STOPPED, "inspected": INSPECTED}
        assert pve.status(100) == "stopped"
        assert pve.count(SHUTDOWN, vmid=100, ok_only=True) == 1


def test_ephemeral_vm_is_cloned_spread_and_destroyed(tmp_path: Path) -> None:
    with cluster_with_template() as pve:
        before = pve.summary()
        made = run_runner(tmp_path, pve, "provision", ephemeral())
        assert made.returncode == 0, made.explain()
        # pve1 already runs a VM of the group: the clone goes to pve2, with the lowest free id.
        assert made.values == {
            "power_state": "On",
            "driver": "proxmox",
            "changed": True,
            "vmid": 300,
            "host": "pve2",
        }
        vm = pve.vm(300)
        assert vm is not None
        assert (vm["name"], vm["node"], vm["status"]) == ("vm-1", "pve2", "running")
        assert (int(vm["config"]["cores"]), int(vm["config"]["memory"])) == (2, 2048)
        assert pve.tags(300) == sorted(
            ["k8s", "lightsout", GROUP_TAG, "lightsout-node.homelab.vm-1"]
        )
        assert pve.count(CLONE, vmid=TEMPLATE) == 1
        after_provision = pve.summary()

        again = run_runner(tmp_path, pve, "provision", ephemeral())
        assert again.returncode == 0, again.explain()
        assert again.values["changed"] is False
        assert (again.values["vmid"], again.values["host"]) == (300, "pve2")
        assert pve.count(CLONE) == 1  # found by its tags, not cloned again

        health = run_runner(tmp_path, pve, "healthcheck", ephemeral())
        assert health.values["power_state"] == "On", health.explain()

        gone = run_runner(tmp_path, pve, "deprovision", ephemeral())
        assert gone.returncode == 0, gone.explain()
        assert gone.values == {"power_state": "Off", "driver": "proxmox", "changed": True}
        assert not pve.exists(300)
        assert pve.count(SHUTDOWN, vmid=300) == 1  # graceful first, then destroyed
        assert pve.count(DESTROY, vmid=300, ok_only=True) == 1
        assert pve.exists(150)  # the other machine of the group is untouched

        again_gone = run_runner(tmp_path, pve, "deprovision", ephemeral())
        assert again_gone.returncode == 0, again_gone.explain()
        assert again_gone.values["changed"] is False

        health_off = run_runner(tmp_path, pve, "healthcheck", ephemeral())
        assert health_off.values["power_state"] == "Off", health_off.explain()
        print("fakepve before:", before)
        print("fakepve after provision:", after_provision)
        print("fakepve after deprovision:", pve.summary())


#: Guests whose OS ignores the ACPI shutdown: still running after gracefulShutdownSeconds
#: (fakepve's time passes at once at time_scale 0, so the test waits for none of it).
HUNG_SECS = 600
GRACEFUL = 3
#: What a power-off reports when Proxmox stopped the guest hard after GRACEFUL seconds.
FORCED = {**STOPPED, "forced_after_seconds": GRACEFUL}
#: ... read back from the VM still there (a deprovision reads nothing back: the clone is gone).
FORCED_OFF = {**FORCED, "inspected": INSPECTED}


def test_a_guest_that_ignores_the_shutdown_is_stopped_hard_and_said_so(tmp_path: Path) -> None:
    guests = [
        Guest(100, "vm-1", status="running", shutdown_secs=HUNG_SECS),
        Guest(101, "vm-2", status="running", shutdown_secs=GRACEFUL - 1),
    ]
    with FakePveCluster(guests) as pve:
        hung = run_runner(
            tmp_path, pve, "shutdown", persistent(100, gracefulShutdownSeconds=GRACEFUL)
        )
        assert hung.returncode == 0, hung.explain()
        assert hung.values == FORCED_OFF
        assert pve.status(100) == "stopped"
        # Proxmox's own shutdown task stopped it (forceStop), no second order was sent.
        [task] = pve.tasks(SHUTDOWN, vmid=100)
        assert any("terminating now" in line for line in task["log"]), task
        assert pve.count(STOP) == 0

        clean = run_runner(
            tmp_path, pve, "shutdown", persistent(101, gracefulShutdownSeconds=GRACEFUL)
        )
        assert clean.returncode == 0, clean.explain()
        assert clean.values == {**STOPPED, "inspected": INSPECTED}


def running_clone(**faults: Any) -> Guest:
    """The running clone of Node homelab/vm-1 (Lights-Out's tags), with `faults`."""
    return Guest(
        300,
        "vm-1",
        node="pve2",
        status="running",
        tags=("lightsout", "lightsout-node.homelab.vm-1"),
        **faults,
    )


def test_deprovision_of_a_hung_clone_says_it_was_stopped_hard(tmp_path: Path) -> None:
    clone = running_clone(shutdown_secs=HUNG_SECS)
    with cluster_with_template(clone) as pve:
        run = run_runner(tmp_path, pve, "deprovision", ephemeral(gracefulShutdownSeconds=GRACEFUL))
        assert run.returncode == 0, run.explain()
        assert run.values == FORCED
        assert not pve.exists(300)


@dataclass(frozen=True)
class TaskFault:
    """A Proxmox task that fails after it started: the guest, what breaks, the exit status."""

    guest: Guest
    exitstatus: str
    arrange: Callable[[FakePveCluster], None] | None = None
    time_scale: float = 0.0


def hold_config_lock(pve: FakePveCluster) -> None:
    # Another task holds the VM's config lock: the VM shows no `lock`, so the role sends the
    # start, and the start task waits for the lock (10 PVE s = 1 s here) and fails.
    pve.call(pve.pve.hold_config_lock(100, None))


def ceph_down(pve: FakePveCluster) -> None:
    pve.pve.add_ceph_storage("ceph-pool")
    pve.pve.ceph_down()


TASK_FAULTS = {
    "qemu-exits": TaskFault(
        Guest(100, "vm-1", start_error="QEMU exited with code 1"), "QEMU exited with code 1"
    ),
    "config-lock-held": TaskFault(
        Guest(100, "vm-1"),
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
        hold_config_lock,
        time_scale=0.1,
    ),
    "storage-down": TaskFault(
        Guest(100, "vm-1", config={"scsi0": "ceph-pool:vm-100-disk-0,size=8G"}),
        "rbd error: rbd: couldn't connect to the cluster! (Connection timed out)",
        ceph_down,
    ),
}

#: The role's task timeout in the failing-task tests: far beyond the harness's own wait for one
#: run (300 s), so a role that waits out its timeout instead of reading the task's exit status
#: fails the test.
HANG_TIMEOUT = 3600


@pytest.mark.parametrize("fault", TASK_FAULTS.values(), ids=TASK_FAULTS.keys())
def test_failed_start_task_is_reported_with_its_exit_status(
    tmp_path: Path, fault: TaskFault
) -> None:
    with FakePveCluster([fault.guest], time_scale=fault.time_scale) as pve:
        if fault.arrange is not None:
            fault.arrange(pve)
        run = run_runner(tmp_path, pve, "startup", persistent(100, taskTimeoutSeconds=HANG_TIMEOUT))
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"] == "proxmox_vm : Fail with the task's exit status"
        assert result["message"] == (
            f"Starting VM 100 (vm-1) on {pve.endpoint} failed: "
            f"Proxmox task qmstart on pve1 ended with '{fault.exitstatus}'"
        ), run.explain()
        assert pve.status(100) == "stopped"
        [task] = pve.tasks(START, vmid=100)  # one start, not retried
        assert task["exitstatus"] == fault.exitstatus


def test_hung_task_fails_at_the_task_timeout(tmp_path: Path) -> None:
    """A task that does not end is given up at taskTimeoutSeconds, and said to be running."""
    with FakePveCluster([Guest(100, "vm-1")], time_scale=1.0) as pve:
        pve.pve.lock_wait = HANG_TIMEOUT  # the start task waits an hour for the config lock
        hold_config_lock(pve)
        run = run_runner(tmp_path, pve, "startup", persistent(100, taskTimeoutSeconds=2))
        assert run.returncode == 1, run.explain()
        message = run.result["message"]
        assert message.startswith(
            f"Starting VM 100 (vm-1) on {pve.endpoint} failed: "
            "Proxmox task qmstart on pve1 did not finish within 2 s (still running"
        ), run.explain()
        [task] = pve.tasks(START, vmid=100)
        assert task["status"] == "running"
        # The task's UPID (the user in it is masked like the credentials) to find it in PVE.
        assert "; task " + task["upid"].rsplit(":", 2)[0] in message


def test_failed_destroy_task_is_reported_and_the_clone_kept(tmp_path: Path) -> None:
    clone = running_clone()
    with cluster_with_template(clone) as pve:
        pve.pve.fail("DELETE", "/nodes/pve2/qemu/300", error="failed_remove_config_file")
        run = run_runner(tmp_path, pve, "deprovision", ephemeral(taskTimeoutSeconds=HANG_TIMEOUT))
        assert run.returncode == 1, run.explain()
        assert run.result["message"] == (
            f"Destroying VM 300 (vm-1) on {pve.endpoint} failed: Proxmox task qmdestroy on pve2 "
            "ended with 'failed to remove config file: unexpected error'"
        ), run.explain()
        assert pve.count(SHUTDOWN, vmid=300, ok_only=True) == 1
        assert pve.count(DESTROY, vmid=300) == 1
        assert pve.exists(300)


def test_locked_vm_fails_at_once_without_an_order(tmp_path: Path) -> None:
    with FakePveCluster([Guest(100, "vm-1", lock="backup")]) as pve:
        run = run_runner(tmp_path, pve, "startup", persistent(100))
        assert run.returncode == 1, run.explain()
        assert "locked (backup)" in run.result["message"]
        assert pve.count(START) == 0


def test_deprovision_refuses_a_vm_lights_out_did_not_clone(tmp_path: Path) -> None:
    with cluster_with_template(Guest(120, "vm-1", node="pve2", status="running")) as pve:
        run = run_runner(tmp_path, pve, "deprovision", ephemeral(vmid=120))
        assert run.returncode == 1, run.explain()
        assert "Refusing to destroy VM 120" in run.result["message"]
        assert pve.status(120) == "running"
        assert pve.count(SHUTDOWN) == 0
        assert pve.count(DESTROY) == 0


def test_provision_report_survives_a_failed_start(tmp_path: Path) -> None:
    """The clone's id is reported even when the step after the clone fails."""
    with cluster_with_template() as pve:
        pve.pve.fail("POST", "/status/start", 500, "cannot start: no quorum")
        run = run_runner(tmp_path, pve, "provision", ephemeral())
        assert run.returncode == 1, run.explain()
        assert "cannot start: no quorum" in run.result["message"]
        assert run.values["vmid"] == 300
        assert run.values["host"] == "pve2"
        assert pve.exists(300)


def test_wrong_password_fails_without_leaking_it(tmp_path: Path) -> None:
    wrong = "Wr0ng-pve-" + uuid.uuid4().hex
    with FakePveCluster([Guest(100, "vm-1")]) as pve:
        run = run_runner(tmp_path, pve, "startup", persistent(100), password=wrong)
        assert run.returncode == 1, run.explain()
        assert "authentication failed" in run.result["message"]
        for text in (run.result_text, run.stdout, run.stderr):
            assert wrong not in text
        assert pve.count(START) == 0


def test_api_token_is_used_instead_of_the_password(tmp_path: Path) -> None:
    token_id, token_secret = "root@pam!lightsout", "tok-" + uuid.uuid4().hex
    keys = {"name": "pve", "tokenIdKey": "token-id", "tokenSecretKey": "token-secret"}
    with FakePveCluster([Guest(100, "vm-1")], token_id=token_id, token_secret=token_secret) as pve:
        run = run_runner(
            tmp_path,
            pve,
            "startup",
            persistent(100, credentialsSecretRef=keys),
            # tasks/contract.yml still wants username/password files: a wrong password proves
            # the token is what logs in.
            password="not-the-password",
            files={"token-id": token_id, "token-secret": token_secret},
        )
        assert run.returncode == 0, run.explain()
        assert run.values["power_state"] == "On"
        assert pve.requests("POST", "/access/ticket") == []  # no password login at all
        for text in (run.result_text, run.stdout, run.stderr):
            assert token_secret not in text
