"""An IPMI machine powered on and off by the operator: kubectl patch → Job → Ansible → ipmi_sim.

Real control plane, the operator as a real process, the action Job's pod run by the stand-in
kubelet (real ansible-runner, the shipped playbooks, the ipmi_power role with pyghmi), and
OpenIPMI's ipmi_sim on 127.0.0.1 as the BMC (lightsout_lab/ipmi.py). The machine simulator
registers the core Node while the BMC's chassis says the power is on.

A second machine, cycled alongside, has an OS that ignores the ACPI soft-off: its Group's site
shutdown playbook (an overlay from a ConfigMap, the way to set an IPMI machine's
gracefulShutdownSeconds) gives it 3 s, then the power is forced off, and the Node says so
(status and a ForcedPowerOff Warning).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.ipmi import IpmiBmc, IpmiMachine, IpmiSim
from lightsout_lab.operator_process import OperatorProcess
from tests.e2e.conftest import patch_desired
from tests.harness import fleet
from tests.harness.cycle import patch_and_wait, report, wait_phase
from tests.harness.wait import events_for, events_with_reason, get_json, reasons_until

#: Seconds the site shutdown playbook gives the OS that ignores the soft-off.
GRACEFUL_SECONDS = 3
#: The shipped shutdown.yml with the soft-off time set (set_fact beats the driver mapping): what a
#: site writes to give IPMI machines another gracefulShutdownSeconds than 120.
SITE_SHUTDOWN = f"""---
- name: Site shutdown - a shorter soft-off, then the shipped shutdown
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
    lightsout_power_state: "off"
  tasks:
    - name: Check the extravars
      ansible.builtin.import_tasks: tasks/contract.yml

    - name: Give the OS {GRACEFUL_SECONDS} s to shut down
      ansible.builtin.set_fact:
        ipmi_power_graceful_timeout: {GRACEFUL_SECONDS}

    - name: Power the machine off
      ansible.builtin.include_tasks: tasks/power.yml

    - name: Read the power state back
      ansible.builtin.include_tasks: tasks/power.yml
      vars:
        lightsout_power_state: status
      when: lightsout_driver not in lightsout_off_confirming_drivers

    - name: Report
      ansible.builtin.import_tasks: tasks/report.yml
"""


@pytest.fixture
def sim(namespace: str) -> Iterator[IpmiSim]:
    machines = [
        IpmiMachine(f"ipmi-{namespace}", power_state="Off"),
        IpmiMachine(f"stubborn-{namespace}", power_state="Off", soft_shutdown="ignore"),
    ]
    with IpmiSim(machines) as running:
        yield running


@pytest.fixture
def bmc(sim: IpmiSim, namespace: str) -> IpmiBmc:
    return sim[f"ipmi-{namespace}"]


@pytest.fixture
def stubborn(sim: IpmiSim, namespace: str) -> IpmiBmc:
    """The machine whose OS ignores the soft-off."""
    return sim[f"stubborn-{namespace}"]


def test_ipmi_machine_powers_on_and_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    bmc: IpmiBmc,
    stubborn: IpmiBmc,
) -> None:
    name = bmc.name
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "site-playbooks"},
        "data": {"site-shutdown.yml": SITE_SHUTDOWN},
    }
    fleet.apply(
        crds,
        namespace,
        [
            configmap,
            fleet.secret("bmc", {"username": bmc.username, "password": bmc.password}),
            fleet.group(playbooks={"configMapName": "site-playbooks"}),
            fleet.ipmi_node(name, bmc.host, bmc.port, labels={"lightsout.dev/test": "ipmi"}),
            fleet.ipmi_node(
                stubborn.name,
                stubborn.host,
                stubborn.port,
                playbooks={"shutdown": "site-shutdown.yml"},
            ),
        ],
    )
    with (
        fleet.simulated(crds, kube_api, namespace, name, bmc.power_reader()),
        fleet.simulated(crds, kube_api, namespace, stubborn.name, stubborn.power_reader()),
    ):
        wait_phase(crds, namespace, name, "Off")
        wait_phase(crds, namespace, stubborn.name, "Off")
        patch_desired(crds, namespace, stubborn.name, "On")  # alongside the first machine
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
        wait_phase(crds, namespace, stubborn.name, "Ready")
        patch_desired(crds, namespace, stubborn.name, "Off")

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
        reasons_until(
            crds, namespace, name, "PowerOnRequested", "NodeRegistered", "PowerOffRequested"
        )

        # The OS that ignores the soft-off: given its 3 s, then forced off, and said so.
        forced_off = wait_phase(crds, namespace, stubborn.name, "Off")
        report("ipmi", "stubborn Off", orders=[str(c) for c in stubborn.commands()])
        assert stubborn.power_state() == "Off"
        assert [str(c) for c in stubborn.power_commands()] == ["power 1", "shutdown 1", "power 0"]
        op = forced_off["lastOperation"]
        assert (op["action"], op["result"]) == ("shutdown", "Succeeded")
        assert "site-shutdown.yml" in op["message"]
        assert op["values"]["forced_after_seconds"] == GRACEFUL_SECONDS
        hard = (
            f"the OS did not shut down within {GRACEFUL_SECONDS} s and the machine was powered"
            " off hard"
        )
        assert forced_off["reason"] == "JobSucceeded"
        assert hard in forced_off["message"], forced_off["message"]
        forced = events_with_reason(crds, namespace, stubborn.name, "ForcedPowerOff")
        assert forced == [("Warning", f"shutdown: {hard}")]
        # The machine whose OS obeyed was not forced, and no event says it was.
        assert "forced_after_seconds" not in off["lastOperation"]["values"]
        assert "ForcedPowerOff" not in [e["reason"] for e in events_for(crds, namespace, name)]
