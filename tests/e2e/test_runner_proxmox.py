"""The action Job's entrypoint against a Proxmox VE API: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials and CA directories, termination-message file), with real ansible-runner, the
shipped playbooks and the proxmox_vm role, against fakepve over TLS (lightsout_lab/fakepve.py).
Persistent VMs are started and stopped; ephemeral ones are cloned from a template and destroyed.
No Kubernetes needed.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from lightsout_lab.fakepve import CLONE, DESTROY, SHUTDOWN, START, FakePveCluster, Guest
from tests.harness import runner
from tests.harness.runner import RunnerRun

pytestmark = pytest.mark.e2e

TEMPLATE = 9000
GROUP_TAG = "lightsout-group.homelab"


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
        assert health.values == {"power_state": "On", "driver": "proxmox", "changed": False}

        down = run_runner(tmp_path, pve, "shutdown", persistent(100))
        assert down.returncode == 0, down.explain()
        assert down.values == {"power_state": "Off", "driver": "proxmox", "changed": True}
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


def test_failed_start_task_gives_the_task_exit_status(tmp_path: Path) -> None:
    broken = Guest(100, "vm-1", start_error="unable to find configuration file for disk scsi0")
    with FakePveCluster([broken]) as pve:
        run = run_runner(tmp_path, pve, "startup", persistent(100, taskTimeoutSeconds=2))
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"]
        assert "Proxmox task qmstart on pve1 ended with" in result["message"]
        assert "unable to find configuration file for disk scsi0" in result["message"]
        assert "Reached timeout" not in result["message"]
        assert pve.status(100) == "stopped"


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
