"""The action Job's entrypoint for a Wake-on-LAN + SSH machine: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials directory holding the SSH key as a Secret mount does, termination-message
file), with real ansible-runner, the shipped playbooks and the wol / ssh_shutdown /
reachability roles. The machine is an OpenSSH server on 127.0.0.1 that a magic packet starts
and the shutdown command stops (lightsout_lab/sshd.py), the LAN a UDP listener on 127.0.0.1
(lightsout_lab/wol.py): the magic packet never goes to a real broadcast address.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lightsout_lab.sshd import PowerState, SshMachine
from lightsout_lab.wol import WolListener
from tests.harness import runner
from tests.harness.runner import RunnerRun

pytestmark = pytest.mark.e2e

KEY_NAME = "ssh-privatekey"


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
    """Run the runner once with the Node's spec.driver.wol block and the SSH key."""
    extravars = {
        "lightsout_node": {"name": "mini-1", "namespace": "homelab"},
        "lightsout_driver": "wol",
        "lightsout_wol": block,
    }
    # As a kubernetes.io/ssh-auth Secret is mounted: read-only, group-readable, and (often)
    # without the trailing newline OpenSSH insists on.
    return runner.run_runner(
        tmp_path,
        action,
        extravars,
        {KEY_NAME: key.rstrip("\n")},
        credential_modes={KEY_NAME: 0o440},
    )


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
