"""The action Job's entrypoint against a real IPMI BMC: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials directory, termination-message file), with real ansible-runner, the shipped
playbooks and the ipmi_power role, against OpenIPMI's ipmi_sim on 127.0.0.1 (harness:
lightsout_lab/ipmi.py). No Kubernetes needed.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from lightsout_lab.ipmi import IpmiBmc, IpmiMachine, IpmiSim, PowerState
from tests.harness import runner
from tests.harness.runner import RunnerRun

pytestmark = pytest.mark.e2e


def run_runner(
    tmp_path: Path,
    bmc: IpmiBmc,
    action: str,
    *,
    password: str | None = None,
    port: int | None = None,
    boot_override: str = "None",
    graceful_seconds: int = 10,
) -> RunnerRun:
    """Run the runner once against the simulated BMC."""
    credentials = {"username": bmc.username, "password": (password or bmc.password) + "\n"}
    extravars = {
        "lightsout_node": {"name": "box-1", "namespace": "homelab"},
        "lightsout_driver": "ipmi",
        # The Node's spec.driver.ipmi as the operator sends it (credentialsSecretRef dropped).
        "lightsout_ipmi": {
            "host": bmc.host,
            "port": bmc.port if port is None else port,
            "cipherSuite": 3,
            "bootOverride": boot_override,
            "gracefulShutdownSeconds": graceful_seconds,
            "transitionTimeoutSeconds": 10,
        },
    }
    return runner.run_runner(tmp_path, action, extravars, credentials)


def machine(power_state: PowerState = "Off", **options: Any) -> IpmiMachine:
    return IpmiMachine(name="box-1", power_state=power_state, **options)


def test_startup_powers_on_once_with_pxe_and_is_idempotent(tmp_path: Path) -> None:
    with IpmiSim(machine("Off")) as sim:
        bmc = sim.bmc
        first = run_runner(tmp_path, bmc, "startup", boot_override="Pxe")
        assert first.returncode == 0, first.explain()
        assert first.result["result"] == "Succeeded", first.explain()
        assert first.result["failedTask"] is None
        assert first.result["values"] == {"power_state": "On", "driver": "ipmi", "changed": True}
        assert bmc.power_state() == "On"
        assert bmc.boot_device() == "pxe"
        assert [str(c) for c in bmc.commands()] == ["boot pxe", "power 1"]

        again = run_runner(tmp_path, bmc, "startup", boot_override="Pxe")
        assert again.returncode == 0, again.explain()
        assert again.result["values"] == {"power_state": "On", "driver": "ipmi", "changed": False}
        assert len(bmc.commands()) == 2  # no second order, no second boot device


def test_shutdown_soft_off_is_enough_when_the_os_obeys(tmp_path: Path) -> None:
    with IpmiSim(machine("On")) as sim:
        run = run_runner(tmp_path, sim.bmc, "shutdown")
        assert run.returncode == 0, run.explain()
        assert run.result["result"] == "Succeeded", run.explain()
        assert run.result["values"] == {"power_state": "Off", "driver": "ipmi", "changed": True}
        assert sim.bmc.power_state() == "Off"
        assert [str(c) for c in sim.bmc.power_commands()] == ["shutdown 1"]


def test_shutdown_forces_the_power_off_when_the_os_ignores_it(tmp_path: Path) -> None:
    with IpmiSim(machine("On", soft_shutdown="ignore")) as sim:
        run = run_runner(tmp_path, sim.bmc, "shutdown", graceful_seconds=2)
        assert run.returncode == 0, run.explain()
        assert run.result["values"] == {
            "power_state": "Off",
            "driver": "ipmi",
            "changed": True,
            "forced_after_seconds": 2,  # the OS had the soft-off's 2 s
        }
        assert sim.bmc.power_state() == "Off"
        assert [str(c) for c in sim.bmc.power_commands()] == ["shutdown 1", "power 0"]

        # Without a soft-off the OS is given no time at all.
        sim.bmc.set_power_state("On")
        sim.bmc.clear_commands()
        at_once = run_runner(tmp_path, sim.bmc, "shutdown", graceful_seconds=0)
        assert at_once.returncode == 0, at_once.explain()
        assert at_once.result["values"]["forced_after_seconds"] == 0
        assert [str(c) for c in sim.bmc.power_commands()] == ["power 0"]


def test_healthcheck_reads_the_state_and_sends_no_order(tmp_path: Path) -> None:
    with IpmiSim(machine("On")) as sim:
        run = run_runner(tmp_path, sim.bmc, "healthcheck")
        assert run.returncode == 0, run.explain()
        assert run.result["values"] == {"power_state": "On", "driver": "ipmi", "changed": False}
        assert sim.bmc.commands() == []


def test_wrong_password_fails_clearly_without_leaking_it(tmp_path: Path) -> None:
    wrong = "Wr0ng-" + uuid.uuid4().hex[:12]
    with IpmiSim(machine("Off")) as sim:
        run = run_runner(tmp_path, sim.bmc, "startup", password=wrong)
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"]
        assert f"BMC at 127.0.0.1:{sim.bmc.port}" in result["message"]
        assert "Incorrect password" in result["message"]
        assert "check the username and password" in result["message"]
        for text in (run.result_text, run.stdout, run.stderr):
            assert wrong not in text
        assert sim.bmc.power_state() == "Off"
        assert sim.bmc.commands() == []


def test_a_bmc_that_does_not_answer_fails_clearly(tmp_path: Path) -> None:
    with IpmiSim(machine("Off")) as sim:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
            silent.bind(("127.0.0.1", 0))  # bound, never answers
            port = silent.getsockname()[1]
            run = run_runner(tmp_path, sim.bmc, "healthcheck", port=port)
        assert run.returncode == 1, run.explain()
        assert f"BMC at 127.0.0.1:{port} failed: no answer" in run.result["message"]
