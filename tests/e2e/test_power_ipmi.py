"""An IPMI machine powered on and off by the operator: kubectl patch → Job → Ansible → ipmi_sim.

Real control plane, the operator as a real process, the action Job's pod run by the stand-in
kubelet (real ansible-runner, the shipped playbooks, the ipmi_power role with pyghmi), and
OpenIPMI's ipmi_sim on 127.0.0.1 as the BMC (lightsout_lab/ipmi.py). The machine simulator
registers the core Node while the BMC's chassis says the power is on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.ipmi import IpmiBmc, IpmiMachine, IpmiSim
from lightsout_lab.operator_process import OperatorProcess
from tests.harness import fleet
from tests.harness.cycle import patch_and_wait, report, wait_phase
from tests.harness.wait import events_for, get_json


@pytest.fixture
def bmc(namespace: str) -> Iterator[IpmiBmc]:
    with IpmiSim(IpmiMachine(f"ipmi-{namespace}", power_state="Off")) as sim:
        yield sim.bmc


def test_ipmi_machine_powers_on_and_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    bmc: IpmiBmc,
) -> None:
    name = bmc.name
    fleet.apply(
        crds,
        namespace,
        [
            fleet.secret("bmc", {"username": bmc.username, "password": bmc.password}),
            fleet.group(),
            fleet.ipmi_node(name, bmc.host, bmc.port, labels={"lightsout.dev/test": "ipmi"}),
        ],
    )
    with fleet.simulated(crds, kube_api, namespace, name, bmc.power_reader()):
        wait_phase(crds, namespace, name, "Off")
        before = bmc.ipmitool("chassis", "power", "status").stdout.strip()
        report("ipmi", "before", chassis=before, orders=[str(c) for c in bmc.commands()])
        assert bmc.power_state() == "Off"
        assert before == "Chassis Power is off"

        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready")
        on = bmc.ipmitool("chassis", "power", "status").stdout.strip()
        report("ipmi", "patch On -> Ready", seconds=seconds, chassis=on)
        assert on == "Chassis Power is on"
        assert bmc.count_power_commands("power", "1") == 1  # one order for one intent
        op = ready["lastOperation"]
        assert (op["action"], op["result"]) == ("startup", "Succeeded")
        assert op["values"]["driver"] == "ipmi"
        assert ready["observedPowerState"] == "On"
        core = get_json(crds, "node", name)
        assert core["metadata"]["labels"]["lightsout.dev/test"] == "ipmi"

        off, seconds = patch_and_wait(crds, namespace, name, "Off", "Off")
        after = bmc.ipmitool("chassis", "power", "status").stdout.strip()
        report(
            "ipmi",
            "patch Off -> Off",
            seconds=seconds,
            chassis=after,
            orders=[str(c) for c in bmc.commands()],
        )
        assert after == "Chassis Power is off"
        # A soft-off (ACPI) was enough: the "OS" obeyed, nothing was forced.
        assert [str(c) for c in bmc.power_commands()] == ["power 1", "shutdown 1"]
        op = off["lastOperation"]
        assert (op["action"], op["result"], op["values"]["power_state"]) == (
            "shutdown",
            "Succeeded",
            "Off",
        )
        assert get_json(crds, "node", name) is None, "core Node removed (policy Delete)"
        reasons = [e["reason"] for e in events_for(crds, namespace, name)]
        for expected in ("PowerOnRequested", "NodeRegistered", "PowerOffRequested"):
            assert expected in reasons, reasons
