"""`lightsout power … --wait`, `lightsout status` and `lightsout logs`, run as a person runs them,
against the real stack: the operator, sushy-tools as the BMC, Ansible in the action Job (whose
pod log the API server fetches from the runner node's kubelet API).
"""

from __future__ import annotations

import json

import pytest

from lightsout.commands import logs as logs_command
from lightsout.commands.power import ExitCode
from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.autoscaling import lightsout
from tests.e2e.conftest import PATIENCE
from tests.harness import fleet


def test_power_on_wait_returns_when_ready_and_status_shows_it(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    fleet.apply(
        crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), fleet.redfish_node(machine, bmc)]
    )

    on = lightsout(
        crds, "power", "on", machine.name, "-n", namespace, "--wait", "--timeout", str(PATIENCE)
    )

    assert on.returncode == ExitCode.DONE, on.stdout + on.stderr
    lines = on.stdout.splitlines()
    assert lines[0] == f"{machine.name}: desiredPowerState On"
    assert lines[-1].startswith(f"{machine.name}: Ready"), on.stdout
    assert any("PoweringOn" in line for line in lines), "the phases were followed"
    assert bmc.power_state(machine.uuid) == "On"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1

    shown = lightsout(crds, "status", "-n", namespace, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    (row,) = table["machines"]
    assert (row["name"], row["phase"], row["power"], row["lastAction"]) == (
        machine.name,
        "Ready",
        "On",
        "startup Succeeded",
    )
    (group,) = table["groups"]
    assert (group["on"], group["total"]) == (1, 1)
    text = lightsout(crds, "status", "-n", namespace).stdout
    assert any(
        line.split()[:4] == [machine.name, group["name"], "On", "Ready"]
        for line in text.splitlines()
    ), text


@pytest.mark.bmc(power_state="On", disable_power_off=True)
def test_power_off_wait_fails_with_the_bmc_message(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    node = fleet.redfish_node(machine, bmc, desired="On", maxRetries=0)
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), node])
    ready = lightsout(
        crds, "power", "on", machine.name, "-n", namespace, "--wait", "--timeout", str(PATIENCE)
    )
    assert ready.returncode == ExitCode.DONE, ready.stdout + ready.stderr

    off = lightsout(
        crds, "power", "off", machine.name, "-n", namespace, "--wait", "--timeout", str(PATIENCE)
    )

    assert off.returncode == ExitCode.FAILED, off.stdout + off.stderr
    last = off.stdout.splitlines()[-1]
    assert last.startswith(f"{machine.name}: Failed"), off.stdout
    assert "task '" in last and ("400" in last or "power" in last.lower()), last
    assert bmc.power_state(machine.uuid) == "On"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_OFF) >= 1

    # `lightsout logs` shows the failed action's playbook output: the failing task (the one the
    # Failed line names; up to its first quote, task names may hold one) and the BMC's refusal.
    task = last.split("task '", 1)[1].split("'", 1)[0]
    shown = lightsout(crds, "logs", machine.name, "-n", namespace)
    assert shown.returncode == logs_command.ExitCode.PRINTED, shown.stderr
    assert shown.stderr.startswith("# shutdown Failed: job "), shown.stderr
    failed = [line for line in shown.stdout.splitlines() if "  FAILED    " in line]
    assert len(failed) == 1 and task in failed[0] and "HTTP 400" in failed[0], shown.stdout
    print(shown.stderr + shown.stdout)
    raw = lightsout(
        crds, "logs", machine.name, "-n", namespace, "--action", "shutdown", "-o", "json"
    )
    records = [json.loads(line) for line in raw.stdout.splitlines() if line.startswith("{")]
    (record,) = [r for r in records if r.get("status") == "failed"]
    assert f"{record['role']} : {record['task']}: {record['msg']}" in failed[0], raw.stdout
    # A Redfish machine is never provisioned: there is no Job of that action to show.
    none = lightsout(crds, "logs", machine.name, "-n", namespace, "--action", "provision")
    assert none.returncode == logs_command.ExitCode.NOT_FOUND, none.stdout + none.stderr
    assert "no provision action Job left" in none.stderr, none.stderr


def test_power_of_a_missing_node_exits_not_found(crds: Cluster, namespace: str) -> None:
    for command in (("power", "on", "no-such-box", "--wait"), ("logs", "no-such-box")):
        missing = lightsout(crds, *command, "-n", namespace)
        assert (
            missing.returncode == ExitCode.NOT_FOUND.value == logs_command.ExitCode.NOT_FOUND.value
        )
        assert "no-such-box" in missing.stderr and namespace in missing.stderr
