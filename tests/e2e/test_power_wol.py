"""A Wake-on-LAN + SSH machine powered on and off by the operator.

kubectl patch → Job → Ansible (wol role: magic packet, reachability probe; ssh_shutdown role:
the shutdown command over SSH) → the machine. The "LAN" is a UDP listener on 127.0.0.1
(lightsout_lab/wol.py): the Node's broadcast address is that loopback address, so no packet
ever goes to a real broadcast address. The machine is an OpenSSH server on 127.0.0.1
(lightsout_lab/sshd.py) that boots (its sshd starts) when its magic packet arrives and powers
off (its sshd stops) when the shutdown command runs. Its power state, for the playbooks and for
the machine simulator alike, is whether its SSH port answers (`tcp_probe`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.machines import tcp_probe
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sshd import SshMachine
from lightsout_lab.wol import WolListener
from tests.harness import fleet
from tests.harness.cycle import patch_and_wait, report, wait_phase


@pytest.fixture
def box(namespace: str, lan: WolListener) -> Iterator[SshMachine]:
    with SshMachine(
        f"mini-{namespace}", power_state="Off", boot_seconds=1.0, shutdown_seconds=1.0
    ) as machine:
        lan.wakes(machine)
        yield machine


def test_wol_machine_wakes_on_its_magic_packet_and_shuts_down_over_ssh(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lan: WolListener,
    box: SshMachine,
) -> None:
    name = box.name
    fleet.apply(
        crds,
        namespace,
        [
            fleet.secret("ssh", {"ssh-privatekey": box.ssh.client_key}),
            fleet.group(),
            fleet.wol_node(
                name,
                mac=box.mac.upper(),
                lan_host=lan.host,
                lan_port=lan.port,
                ssh_host=box.ssh.host,
                ssh_port=box.ssh.port,
                ssh_user=box.ssh.user,
                known_hosts=box.ssh.known_hosts_line + "\n",
                shutdown_command=box.shutdown_command,
            ),
        ],
    )
    probe = tcp_probe(box.ssh.host, box.ssh.port)
    with fleet.simulated(crds, kube_api, namespace, name, probe, 1.0):
        wait_phase(crds, namespace, name, "Off")
        report(
            "wol",
            "before",
            probe=probe(),
            packets=len(lan.packets()),
            shutdown_requests=box.shutdown_requests(),
        )
        assert probe() == "Off"
        assert lan.packets() == []

        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready")
        packets = lan.magic_packets()
        report(
            "wol",
            "patch On -> Ready",
            seconds=seconds,
            probe=probe(),
            magic_packets=[p.mac for p in packets],
            sent_from=[f"{p.source[0]}:{p.source[1]}" for p in packets],
        )
        assert probe() == "On"
        assert [p.mac for p in packets] == [box.mac]  # one packet, the machine's MAC
        assert len(packets[0].data) >= 102
        assert box.power_ons == 1
        assert box.shutdown_requests() == 0
        op = ready["lastOperation"]
        assert (op["action"], op["result"], op["values"]["driver"]) == (
            "startup",
            "Succeeded",
            "wol",
        )

        off, seconds = patch_and_wait(crds, namespace, name, "Off", "Off")
        report(
            "wol",
            "patch Off -> Off",
            seconds=seconds,
            probe=probe(),
            shutdown_requests=box.shutdown_requests(),
            packets=len(lan.packets()),
        )
        assert probe() == "Off"
        assert box.shutdown_requests() == 1  # the command ran over SSH, once
        assert len(lan.packets()) == 1  # and no packet was sent to power it off
        op = off["lastOperation"]
        assert (op["action"], op["result"], op["values"]["power_state"]) == (
            "shutdown",
            "Succeeded",
            "Off",
        )
