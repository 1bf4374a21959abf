"""The action Job's entrypoint for a Wake-on-LAN + SSH machine: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials directory holding the SSH key as a Secret mount does, termination-message
file), with real ansible-runner, the shipped playbooks and the wol / ssh_shutdown /
reachability roles. The machine is an OpenSSH server on 127.0.0.1 that a magic packet starts
and the shutdown command stops (devcluster/sshd.py), the LAN a UDP listener on 127.0.0.1
(devcluster/wol.py): the magic packet never goes to a real broadcast address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lightsout.devcluster.sshd import PowerState, SshMachine
from lightsout.devcluster.wol import WolListener

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEY_NAME = "ssh-privatekey"


@dataclass
class RunnerRun:
    """One finished run of the runner."""

    returncode: int
    stdout: str
    stderr: str
    result_text: str

    @property
    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.result_text)
        return data

    def explain(self) -> str:
        return f"rc={self.returncode}\nresult={self.result_text}\nstdout:\n{self.stdout[-6000:]}"


def wol_block(box: SshMachine, lan: WolListener, **ssh: Any) -> dict[str, Any]:
    """The Node's spec.driver.wol as the operator sends it (camelCase, unchanged)."""
    return {
        "macAddress": box.mac.upper(),
        "broadcastAddress": lan.host,  # never a real broadcast address in a test
        "port": lan.port,
        "ssh": {
            "host": box.ssh.host,
            "port": box.ssh.port,
            "user": box.ssh.user,
            "privateKeySecretRef": {"name": "mini-ssh", "key": KEY_NAME},
            "knownHosts": box.ssh.known_hosts_line + "\n",
            "shutdownCommand": box.shutdown_command,
            **ssh,
        },
        "bootTimeoutSeconds": 20,
        "shutdownTimeoutSeconds": 20,
    }


def run_runner(tmp_path: Path, action: str, block: dict[str, Any], key: str) -> RunnerRun:
    """Lay out the Job's files under tmp_path and run the runner once."""
    job = tmp_path / f"job-{action}-{uuid.uuid4().hex[:6]}"
    credentials = job / "credentials"
    credentials.mkdir(parents=True)
    # As a kubernetes.io/ssh-auth Secret is mounted: read-only, group-readable, and (often)
    # without the trailing newline OpenSSH insists on.
    (credentials / KEY_NAME).write_text(key.rstrip("\n"))
    (credentials / KEY_NAME).chmod(0o440)
    extravars = {
        "lightsout_node": {"name": "mini-1", "namespace": "homelab"},
        "lightsout_action": action,
        "lightsout_driver": "wol",
        "lightsout_wol": block,
    }
    (job / "extravars.json").write_text(json.dumps(extravars))
    result_path = job / "termination-log"
    work = job / "scratch"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "LIGHTSOUT_ACTION": action,
        "LIGHTSOUT_EXTRAVARS": str(job / "extravars.json"),
        "LIGHTSOUT_CREDENTIALS_DIR": str(credentials),
        "LIGHTSOUT_PLAYBOOK_DIR": str(ROOT / "playbooks"),
        "LIGHTSOUT_ROLES_DIR": str(ROOT / "roles"),
        "LIGHTSOUT_OVERLAY_DIR": str(job / "overlay"),
        "LIGHTSOUT_RESULT_PATH": str(result_path),
        "LIGHTSOUT_WORK_DIR": str(work),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "lightsout.runner"],
        env=env,
        cwd=job,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return RunnerRun(proc.returncode, proc.stdout, proc.stderr, result_path.read_text())


@pytest.fixture
def lan() -> Iterator[WolListener]:
    with WolListener() as listener:
        yield listener


def machine(lan: WolListener, power_state: PowerState, **options: Any) -> SshMachine:
    box = SshMachine("mini-1", power_state=power_state, boot_seconds=1.0, **options)
    lan.wakes(box)
    return box


def test_startup_wakes_the_machine_once_and_is_idempotent(tmp_path: Path, lan: WolListener) -> None:
    with machine(lan, "Off") as box:
        block = wol_block(box, lan)
        first = run_runner(tmp_path, "startup", block, box.ssh.client_key)
        assert first.returncode == 0, first.explain()
        assert first.result["result"] == "Succeeded", first.explain()
        assert first.result["failedTask"] is None
        assert first.result["values"] == {"power_state": "On", "driver": "wol", "changed": True}
        assert box.power_state() == "On"
        assert box.reachable()
        packets = lan.packets()
        assert len(packets) == 1
        assert packets[0].mac == box.mac
        assert len(packets[0].data) == 126  # 6 x 0xFF + 20 copies of the MAC

        again = run_runner(tmp_path, "startup", block, box.ssh.client_key)
        assert again.returncode == 0, again.explain()
        assert again.result["values"] == {"power_state": "On", "driver": "wol", "changed": False}
        assert len(lan.packets()) == 1  # no second packet
        assert box.power_ons == 1


def test_shutdown_runs_the_command_over_ssh_and_waits_for_off(
    tmp_path: Path, lan: WolListener
) -> None:
    with machine(lan, "On", shutdown_seconds=1.0) as box:
        block = wol_block(box, lan)
        run = run_runner(tmp_path, "shutdown", block, box.ssh.client_key)
        assert run.returncode == 0, run.explain()
        assert run.result["result"] == "Succeeded", run.explain()
        assert run.result["values"] == {"power_state": "Off", "driver": "wol", "changed": True}
        assert box.shutdown_requests() == 1
        assert box.power_state() == "Off"
        assert not box.reachable()

        again = run_runner(tmp_path, "shutdown", block, box.ssh.client_key)
        assert again.returncode == 0, again.explain()
        assert again.result["values"]["changed"] is False
        assert box.shutdown_requests() == 1
        assert lan.packets() == []


@pytest.mark.parametrize("state", ["On", "Off"])
def test_healthcheck_probes_and_sends_nothing(
    tmp_path: Path, lan: WolListener, state: PowerState
) -> None:
    with machine(lan, state) as box:
        run = run_runner(tmp_path, "healthcheck", wol_block(box, lan), box.ssh.client_key)
        assert run.returncode == 0, run.explain()
        assert run.result["values"] == {"power_state": state, "driver": "wol", "changed": False}
        assert lan.packets() == []
        assert box.shutdown_requests() == 0


def test_a_probe_other_than_the_ssh_port(tmp_path: Path, lan: WolListener) -> None:
    with machine(lan, "Off") as box, SshMachine("other", power_state="On") as other:
        block = {**wol_block(box, lan), "probe": {"host": other.ssh.host, "port": other.ssh.port}}
        run = run_runner(tmp_path, "healthcheck", block, box.ssh.client_key)
        assert run.returncode == 0, run.explain()
        assert run.result["values"]["power_state"] == "On"  # what the probe port says


def test_host_key_mismatch_fails_clearly_and_leaks_no_key(tmp_path: Path, lan: WolListener) -> None:
    with machine(lan, "On") as box, SshMachine("impostor") as impostor:
        wrong = impostor.ssh.known_hosts_line.split(" ", 1)[1]  # another host's key
        block = wol_block(box, lan, knownHosts=f"[{box.ssh.host}]:{box.ssh.port} {wrong}")
        run = run_runner(tmp_path, "shutdown", block, box.ssh.client_key)
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"]
        assert f"SSH to {box.ssh.user}@{box.ssh.host}:{box.ssh.port} failed" in result["message"]
        assert "Host key verification failed" in result["message"]
        assert box.shutdown_requests() == 0
        assert box.power_state() == "On"
        key_lines = [line for line in box.ssh.client_key.splitlines() if len(line) > 20]
        for text in (run.result_text, run.stdout, run.stderr):
            for line in key_lines:
                assert line not in text


def test_a_machine_that_does_not_wake_fails_with_what_was_sent(
    tmp_path: Path, lan: WolListener
) -> None:
    with machine(lan, "Off") as box:
        block = {**wol_block(box, lan), "macAddress": "52:54:00:00:00:01", "bootTimeoutSeconds": 2}
        run = run_runner(tmp_path, "startup", block, box.ssh.client_key)
        assert run.returncode == 1, run.explain()
        message = run.result["message"]
        assert f"did not answer on {box.ssh.host}:{box.ssh.port} within 2 s" in message
        assert f"52:54:00:00:00:01 (sent to {lan.host}:{lan.port})" in message
        assert [p.mac for p in lan.packets()] == ["52:54:00:00:00:01"]
        assert box.power_state() == "Off"
