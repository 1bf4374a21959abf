"""A user playbook from a ConfigMap replaces the shipped one for one action of one machine.

The Group names a ConfigMap of site playbooks (`spec.playbooks.configMapName`, inherited by
every Node of the Group that names none of its own) and the Node names the file to run for its
startup (`spec.playbooks.startup`). The action Job mounts the ConfigMap; the runner lays the
overlay over the shipped playbooks and runs the user's file. Its effect is visible on the
hardware (ipmi_sim receives a one-time PXE boot order the shipped startup would not send: the
Node asks for no boot override) and in the Node's status (the values the playbook reported
through set_stats land in `status.lastOperation.values`). Shutdown, not overridden, still runs
the shipped playbook.
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

#: A site playbook: keeps the extravars contract and the result channel of the shipped
#: startup.yml (its tasks/ are in the project next to it, the driver mapping reaches it through
#: group_vars/), and adds a PXE boot.
SITE_STARTUP = """---
- name: Site startup - network-boot the machine, then power it on
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    lightsout_power_state: "on"
  tasks:
    - name: Check the extravars
      ansible.builtin.import_tasks: tasks/contract.yml

    - name: Always reinstall from the network at power-on (set_fact beats the mapping)
      ansible.builtin.set_fact:
        ipmi_power_boot_override: pxe

    - name: Power the machine on
      ansible.builtin.include_tasks: tasks/power.yml

    - name: Report, with what this site playbook adds
      ansible.builtin.set_stats:
        data:
          lightsout:
            power_state: "{{ lightsout_observed_state }}"
            driver: "{{ lightsout_driver }}"
            changed: "{{ lightsout_changed | bool }}"
            playbook: site-startup.yml
            boot: pxe
        aggregate: false
        per_host: false
"""


@pytest.fixture
def bmc(namespace: str) -> Iterator[IpmiBmc]:
    with IpmiSim(IpmiMachine(f"site-{namespace}", power_state="Off")) as sim:
        yield sim.bmc


def test_node_startup_runs_the_user_playbook_from_the_groups_configmap(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    bmc: IpmiBmc,
) -> None:
    name = bmc.name
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "site-playbooks"},
        "data": {"site-startup.yml": SITE_STARTUP},
    }
    fleet.apply(
        crds,
        namespace,
        [
            configmap,
            fleet.secret("bmc", {"username": bmc.username, "password": bmc.password}),
            fleet.group(playbooks={"configMapName": "site-playbooks"}),
            fleet.ipmi_node(name, bmc.host, bmc.port, playbooks={"startup": "site-startup.yml"}),
        ],
    )
    with fleet.simulated(crds, kube_api, namespace, name, bmc.power_reader()):
        wait_phase(crds, namespace, name, "Off")
        report("overlay", "before", power=bmc.power_state(), boot=bmc.boot_device())

        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready")
        op = ready["lastOperation"]
        report(
            "overlay",
            "patch On -> Ready",
            seconds=seconds,
            orders=[str(c) for c in bmc.commands()],
            values=op["values"],
        )
        # The user's playbook ran: its PXE order reached the BMC before the power-on ...
        assert [str(c) for c in bmc.commands()] == ["boot pxe", "power 1"]
        assert bmc.boot_device() == "pxe"
        # ... and what it reported is in the Node's status.
        assert op["action"] == "startup" and op["result"] == "Succeeded"
        assert op["values"]["playbook"] == "site-startup.yml"
        assert op["values"]["boot"] == "pxe"
        assert op["values"]["power_state"] == "On"
        assert "site-startup.yml" in op["message"]

        off, seconds = patch_and_wait(crds, namespace, name, "Off", "Off")
        op = off["lastOperation"]
        report("overlay", "patch Off -> Off", seconds=seconds, message=op["message"])
        # Shutdown is not overridden: the shipped playbook ran, and reported no extras.
        assert "shutdown.yml" in op["message"]
        assert "playbook" not in op["values"]
        assert bmc.power_state() == "Off"
