"""The action Job's entrypoint against a real Redfish BMC: `python -m lightsout.runner`.

Runs the runner as a subprocess, exactly as the Job's container does (env settings, extravars
file, credentials directory, termination-message file), with real ansible-runner, the shipped
playbooks and roles, and sushy-tools' emulator over TLS with basic auth. No Kubernetes needed.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from lightsout_lab.sushy import POWER_OFF, POWER_ON, FakeSystem, PowerState, SushyEmulator
from tests.harness import runner
from tests.harness.runner import RunnerRun

pytestmark = pytest.mark.e2e


def run_runner(
    tmp_path: Path,
    bmc: SushyEmulator,
    system_id: str,
    action: str,
    *,
    password: str | None = None,
    driver: str = "redfish",
    overlay: dict[str, str] | None = None,
    validate_certs: bool = True,
    graceful_timeout: int = 20,
) -> RunnerRun:
    """Run the runner once against the emulated BMC's system_id."""
    credentials = {
        "username": bmc.username,
        "password": (password or bmc.password) + "\n",
    }
    if validate_certs:
        credentials["ca.crt"] = bmc.ca_path.read_text()
    extravars = {
        "lightsout_node": {"name": "box-1", "namespace": "homelab"},
        "lightsout_driver": driver,
        "lightsout_redfish": {
            "endpoint": bmc.endpoint,
            "system_id": system_id,
            "validate_certs": validate_certs,
            "boot_override": "None",
            "graceful_timeout": graceful_timeout,
            "transition_timeout": 30,
            "poll_interval": 1,
        },
    }
    return runner.run_runner(tmp_path, action, extravars, credentials, overlay=overlay or {})


def new_system(power_state: PowerState = "Off") -> FakeSystem:
    return FakeSystem(uuid=str(uuid.uuid4()), name="box-1", power_state=power_state)


def test_startup_powers_on_once_and_is_idempotent(tmp_path: Path) -> None:
    system = new_system("Off")
    with SushyEmulator([system]) as bmc:
        first = run_runner(tmp_path, bmc, system.uuid, "startup")
        assert first.returncode == 0, first.explain()
        assert first.result["result"] == "Succeeded", first.explain()
        assert first.result["failedTask"] is None
        assert first.result["values"] == {"power_state": "On", "driver": "redfish", "changed": True}
        assert bmc.power_state(system.uuid) == "On"
        assert bmc.count_power_requests(system.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests(system.uuid) == 1

        again = run_runner(tmp_path, bmc, system.uuid, "startup")
        assert again.returncode == 0, again.explain()
        assert again.result["values"]["changed"] is False
        assert bmc.count_power_requests(system.uuid) == 1  # no second order


def test_shutdown_powers_off_and_confirms(tmp_path: Path) -> None:
    system = new_system("On")
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "shutdown")
        assert run.returncode == 0, run.explain()
        assert run.result["result"] == "Succeeded", run.explain()
        assert run.result["values"]["power_state"] == "Off"
        assert run.result["values"]["changed"] is True
        assert bmc.power_state(system.uuid) == "Off"
        # Graceful first; sushy lands it within the graceful timeout, so no forced power-off.
        orders = [r.reset_type for r in bmc.power_requests(system.uuid)]
        assert orders == ["GracefulShutdown"]
        assert "forced_after_seconds" not in run.result["values"]


def test_shutdown_forces_the_power_off_when_the_os_ignores_it_and_says_so(
    tmp_path: Path,
) -> None:
    system = FakeSystem(
        uuid=str(uuid.uuid4()), name="box-1", power_state="On", graceful_shutdown="ignore"
    )
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "shutdown", graceful_timeout=2)
        assert run.returncode == 0, run.explain()
        assert run.result["values"] == {
            "power_state": "Off",
            "driver": "redfish",
            "changed": True,
            "forced_after_seconds": 2,
        }
        assert bmc.power_state(system.uuid) == "Off"
        orders = [r.reset_type for r in bmc.power_requests(system.uuid)]
        assert orders == ["GracefulShutdown", "ForceOff"]


def test_healthcheck_reads_the_state_and_sends_no_order(tmp_path: Path) -> None:
    system = new_system("On")
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "healthcheck")
        assert run.returncode == 0, run.explain()
        assert run.result["values"] == {"power_state": "On", "driver": "redfish", "changed": False}
        assert bmc.count_power_requests() == 0


def test_healthcheck_without_certificate_verification(tmp_path: Path) -> None:
    system = new_system("Off")
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "healthcheck", validate_certs=False)
        assert run.returncode == 0, run.explain()
        assert run.result["values"]["power_state"] == "Off"


def test_wrong_password_fails_without_leaking_it(tmp_path: Path) -> None:
    system = new_system("Off")
    wrong = "Wr0ng-pa55word-" + uuid.uuid4().hex
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "startup", password=wrong)
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"]
        assert "401" in result["message"]
        assert "authentication" in result["message"].lower()
        for text in (run.result_text, run.stdout, run.stderr):
            assert wrong not in text
        assert bmc.power_state(system.uuid) == "Off"
        assert bmc.count_power_requests() == 0


def test_refused_power_off_fails_with_the_bmc_message(tmp_path: Path) -> None:
    system = new_system("On")
    with SushyEmulator([system], disable_power_off=True) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "shutdown")
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert "HTTP 400" in result["message"]
        assert "Can not request power off transition" in result["message"]
        assert "GracefulShutdown" in result["message"]
        assert bmc.power_state(system.uuid) == "On"
        # Refused once; the runner does not retry the refused order or force it.
        assert bmc.count_power_requests(system.uuid, reset_types=POWER_OFF) == 1


def test_startup_by_a_system_id_that_is_not_a_uuid(tmp_path: Path) -> None:
    """A vendor-style systemId (not a UUID) passes the role's input check and powers on.

    sushy-tools gives each system the Id of its UUID, but answers /redfish/v1/Systems/<name>
    with a redirect to it, so the system's name stands in for an Id like iDRAC's
    System.Embedded.1: the role must read /redfish/v1/Systems/<the id as given>.
    """
    system = FakeSystem(uuid=str(uuid.uuid4()), name="System.Embedded.1", power_state="Off")
    other = FakeSystem(uuid=str(uuid.uuid4()), name="box-2", power_state="Off")
    with SushyEmulator([other, system]) as bmc:
        run = run_runner(tmp_path, bmc, system.name, "startup")
        assert run.returncode == 0, run.explain()
        assert run.result["result"] == "Succeeded", run.explain()
        assert run.result["values"] == {"power_state": "On", "driver": "redfish", "changed": True}
        assert bmc.power_state(system.uuid) == "On"
        assert bmc.power_state(other.uuid) == "Off"
        assert bmc.count_power_requests(system.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests() == 1
        by_name = [r for r in bmc.requests() if r.method == "GET" and r.system == system.name]
        assert by_name, [f"{r.method} {r.path}" for r in bmc.requests()]

        again = run_runner(tmp_path, bmc, system.name, "startup")
        assert again.returncode == 0, again.explain()
        assert again.result["values"]["changed"] is False
        assert bmc.count_power_requests() == 1  # no second order


@pytest.mark.parametrize(
    "wrong", ["5b3c1f0e-7d2a-4c61-9e1b-000000000000", "System.Embedded.1"], ids=["uuid", "id"]
)
def test_unknown_system_id_names_the_systems_the_bmc_has(tmp_path: Path, wrong: str) -> None:
    """A systemId the BMC does not have fails with the role's message listing its systems."""
    systems = [
        new_system("Off"),
        FakeSystem(uuid=str(uuid.uuid4()), name="box-2", power_state="On"),
    ]
    with SushyEmulator(systems) as bmc:
        run = run_runner(tmp_path, bmc, wrong, "startup")
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["result"] == "Failed"
        assert result["failedTask"] == "redfish_power : Fail when no system has this id or UUID"
        message = result["message"]
        assert f"System {wrong} not found on {bmc.endpoint}" in message
        for system in systems:
            assert (
                f"/redfish/v1/Systems/{system.uuid}"
                f" (Id {system.uuid}, UUID {system.uuid}, Name {system.name})" in message
            )
        assert "to one of these Ids or UUIDs" in message
        assert "Error while resolving" not in message
        assert bmc.count_power_requests() == 0


def test_unsupported_driver_fails_clearly(tmp_path: Path) -> None:
    system = new_system("Off")
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "startup", driver="nosuch")
        assert run.returncode == 1, run.explain()
        assert "Driver 'nosuch' is not supported" in run.result["message"]
        assert bmc.count_power_requests() == 0


def test_overlay_playbook_wins_over_the_shipped_one(tmp_path: Path) -> None:
    overlay = """---
- name: User startup
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Report without touching the machine
      ansible.builtin.set_stats:
        data: {lightsout: {power_state: "On", driver: custom, changed: false}}
        aggregate: false
        per_host: false
"""
    system = new_system("Off")
    with SushyEmulator([system]) as bmc:
        run = run_runner(tmp_path, bmc, system.uuid, "startup", overlay={"startup.yml": overlay})
        assert run.returncode == 0, run.explain()
        assert run.result["values"]["driver"] == "custom"
        assert bmc.count_power_requests() == 0
