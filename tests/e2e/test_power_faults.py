"""What a user sees when the BMC says no: a Failed phase that names the cause, nothing leaked."""

from __future__ import annotations

import json

import pytest

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, SushyEmulator
from tests.e2e.conftest import patch_desired, wait_phase
from tests.harness import fleet
from tests.harness.cycle import report
from tests.harness.wait import events_for, events_with_reason, get_json, warned


@pytest.mark.bmc(power_state="On", disable_power_off=True)
def test_bmc_refusing_power_off_ends_failed_with_its_message(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    node = fleet.redfish_node(machine, bmc, desired="On", maxRetries=1)
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), node])
    wait_phase(crds, namespace, machine.name, "Ready")

    patch_desired(crds, namespace, machine.name, "Off")
    failed = wait_phase(crds, namespace, machine.name, "Failed")

    op = failed["lastOperation"]
    assert (op["action"], op["result"], op["attempt"]) == ("shutdown", "Failed", 2)
    assert failed["attempts"] == 2, "one try plus maxRetries=1 retry, then it stops"
    assert "400" in op["message"] or "power" in op["message"].lower(), op["message"]
    condition = {c["type"]: c for c in failed["conditions"]}["PowerActionSucceeded"]
    assert condition["status"] == "False"
    assert op["message"][:40] in condition["message"] or condition["message"] in failed["message"]
    # The machine is still on and was drained: the status says so rather than hiding it.
    assert bmc.power_state(machine.uuid) == "On"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_OFF) >= 2
    core = get_json(crds, "node", machine.name)
    assert core is not None and core["spec"].get("unschedulable") is True
    # A Warning event explains the failure.
    warned(crds, namespace, machine.name)


def test_wrong_credentials_fail_with_authentication_message_and_leak_nothing(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    """The default maxRetries (3): a refused password is not retried, and the message names
    the Secret and keys to fix."""
    wrong = "Wr0ng-Passw0rd-That-Must-Not-Leak"
    node = fleet.redfish_node(machine, bmc, desired="On")
    assert "maxRetries" not in node["spec"]
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc, password=wrong), fleet.group(), node])
    failed = wait_phase(crds, namespace, machine.name, "Failed")

    op = failed["lastOperation"]
    report("redfish", "wrong password", attempts=failed["attempts"], message=failed["message"])
    assert (op["action"], op["result"], op["attempt"]) == ("startup", "Failed", 1)
    assert failed["attempts"] == 1, "a refusal is not retried"
    assert failed["reason"] == "AuthenticationFailed"
    secret = f"Secret {namespace}/bmc, keys 'username' and 'password'"
    for text in (op["message"], failed["message"]):
        assert "HTTP 401" in text and f"refused the credentials from {secret}" in text, text
    warnings = events_with_reason(crds, namespace, machine.name, "AuthenticationFailed")
    assert len(warnings) == 1 and warnings[0][0] == "Warning", warnings
    assert secret in warnings[0][1], warnings
    jobs = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={machine.name}")
    assert [j["metadata"]["name"] for j in jobs["items"]] == [op["job"]]
    assert bmc.power_state(machine.uuid) == "Off"
    assert bmc.count_power_requests(machine.uuid) == 0

    job = get_json(crds, "job", failed["lastOperation"]["job"], "-n", namespace)
    everything = "\n".join(
        [
            json.dumps(get_json(crds, "lsn", machine.name, "-n", namespace)),
            json.dumps(events_for(crds, namespace, machine.name)),
            json.dumps(job),
            json.dumps(get_json(crds, "configmaps", "-n", namespace)),
            operator.text(),
        ]
    )
    assert wrong not in everything
    assert bmc.password not in everything
