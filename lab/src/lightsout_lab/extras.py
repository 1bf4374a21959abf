"""Machines of the other drivers for the lab: an IPMI server, a Wake-on-LAN mini PC, a mini PC
behind a smart plug, a Proxmox VM.

`Lab(extras=default_extras())` hosts them next to its Redfish servers, each behind its own
emulator on 127.0.0.1: OpenIPMI's ipmi_sim as the IPMI BMC (`ipmi.py`); a UDP listener as the
"LAN" and an sshd as the mini PC, whose magic packet starts the sshd and whose shutdown command
stops it (`wol.py`, `sshd.py`); an emulated Shelly Gen2 plug in front of another sshd machine,
booting when the plug switches on and shut down over SSH before the plug switches off
(`plugs.py`, `plug_apis.py`); fakepve as the Proxmox VE cluster, holding a template that an
Ephemeral machine is cloned from on power-on and destroyed on power-off (`fakepve.py`).

Each machine provides its Secrets and Lights-Out Node (Group `lab-extras`, `autoscaler: none`,
`autoscaling.enabled: false`: only a person's `kubectl patch` powers them), the power reader
the machine simulator registers its core Node by, and `report()`: what its emulator says, in
words, so `lightsout-lab demo` can show that the order really reached the "hardware".
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from lightsout_lab.fakepve import CLONE, DESTROY, FakePveCluster, Guest
from lightsout_lab.ipmi import IpmiMachine, IpmiSim
from lightsout_lab.machines import tcp_probe
from lightsout_lab.plug_apis import ShellyPlug
from lightsout_lab.plugs import PlugMachine
from lightsout_lab.sshd import SshMachine
from lightsout_lab.wol import WolListener

EXTRAS_GROUP = "lab-extras"
API_VERSION = "lightsout.dev/v1alpha1"
PVE_TEMPLATE = 9000


class ExtraMachine(Protocol):
    """One emulated machine of a driver other than Redfish, as the lab hosts it."""

    name: str
    driver: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def objects(self) -> list[dict[str, Any]]:
        """Its Secrets and its Lights-Out Node (desired Off)."""
        ...

    def power_reader(self) -> Callable[[], str]:
        """`On`/`Off` as its emulator reports it, for the machine simulator."""
        ...

    def report(self) -> str:
        """What the emulator says right now, in one line."""
        ...


def extras_group() -> dict[str, Any]:
    """The Group of the extra machines: nobody but a person powers them on or off."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Group",
        "metadata": {"name": EXTRAS_GROUP},
        "spec": {
            "minNodes": 0,
            "maxNodes": 3,
            "autoscaler": "none",
            # The CronJob would start Ansible Jobs at every 5th minute, mid-demo on 2 cores.
            "healthCheck": {"enabled": False},
        },
    }


def _secret(name: str, data: Mapping[str, str | bytes]) -> dict[str, Any]:
    encoded = {
        k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()
        for k, v in data.items()
    }
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}


def _node(
    name: str,
    driver: Mapping[str, Any],
    cpu: int,
    memory: str,
    watts: int,
    *,
    group: str = EXTRAS_GROUP,
    power: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A machine of `group`; in the extras' Group pinned to what a person sets."""
    spec: dict[str, Any] = {
        "desiredPowerState": "Off",
        "group": group,
        "kubernetesNodeName": name,
        "driver": dict(driver),
        "resources": {"cpu": cpu, "memory": memory},
        "power": {
            "onWatts": watts,
            "bootTimeoutSeconds": 180,
            "shutdownTimeoutSeconds": 180,
            **(power or {}),
        },
    }
    if group == EXTRAS_GROUP:
        # Belt and braces with the Group's `autoscaler: none`: pinned to what a person sets.
        spec["autoscaling"] = {"enabled": False}
    return {"apiVersion": API_VERSION, "kind": "Node", "metadata": {"name": name}, "spec": spec}


def _ssh_block(box: SshMachine, secret: str) -> dict[str, Any]:
    """The driver's `ssh` block for `box`, its key in the Secret `secret` (`ssh-privatekey`)."""
    ssh = box.ssh
    return {
        "host": ssh.host,
        "port": ssh.port,
        "user": ssh.user,
        "privateKeySecretRef": {"name": secret, "key": "ssh-privatekey"},
        "knownHosts": ssh.known_hosts_line + "\n",
        "shutdownCommand": box.shutdown_command,
    }


class IpmiServer:
    """An old server whose BMC speaks only IPMI-over-LAN: ipmi_sim on a loopback UDP port."""

    driver = "ipmi"

    def __init__(self, name: str = "ipmi-box") -> None:
        self.name = name
        self.sim = IpmiSim(IpmiMachine(name, power_state="Off"))

    def start(self) -> None:
        self.sim.start()

    def stop(self) -> None:
        self.sim.stop()

    def objects(self) -> list[dict[str, Any]]:
        bmc = self.sim.bmc
        secret = f"{self.name}-bmc"
        driver = {
            "ipmi": {
                "host": bmc.host,
                "port": bmc.port,
                "cipherSuite": 3,  # ipmi_sim's RMCP+ suite
                "credentialsSecretRef": {"name": secret},
            }
        }
        return [
            _secret(secret, {"username": bmc.username, "password": bmc.password}),
            _node(self.name, driver, cpu=8, memory="32Gi", watts=150),
        ]

    def power_reader(self) -> Callable[[], str]:
        return self.sim.bmc.power_reader()

    def report(self) -> str:
        bmc = self.sim.bmc
        # Asked with ipmitool, a client independent of the playbooks' pyghmi.
        status = bmc.ipmitool("chassis", "power", "status").stdout.strip() or "no answer"
        orders = ", ".join(str(c) for c in bmc.power_commands()) or "none"
        return f"ipmi_sim {bmc.host}:{bmc.port}: {status!r}; chassis orders so far: {orders}"


class WolMiniPc:
    """A mini PC woken by a magic packet and shut down over SSH; "on" while its sshd answers.

    The Node's broadcast address is the listener's loopback address: the packet never leaves
    127.0.0.1.
    """

    driver = "wol"

    def __init__(self, name: str = "mini-pc") -> None:
        self.name = name
        self.lan = WolListener()
        self.box = SshMachine(name, power_state="Off", boot_seconds=1.0, shutdown_seconds=1.0)

    def start(self) -> None:
        self.lan.start()
        self.box.start()
        self.lan.wakes(self.box)

    def stop(self) -> None:
        self.box.stop()
        self.lan.stop()

    def objects(self) -> list[dict[str, Any]]:
        ssh = self.box.ssh
        secret = f"{self.name}-ssh"
        driver = {
            "wol": {
                "macAddress": self.box.mac,
                "broadcastAddress": self.lan.host,
                "port": self.lan.port,
                "ssh": _ssh_block(self.box, secret),
            }
        }
        return [
            _secret(secret, {"ssh-privatekey": ssh.client_key}),
            _node(self.name, driver, cpu=4, memory="16Gi", watts=25),
        ]

    def power_reader(self) -> Callable[[], str]:
        # The same evidence as the reachability role: the SSH port answers or it does not.
        return tcp_probe(self.box.ssh.host, self.box.ssh.port)

    def report(self) -> str:
        packets = self.lan.magic_packets(self.box.mac)
        sources = sorted({f"{p.source[0]}" for p in packets})
        sent = f" (from {', '.join(sources)})" if sources else ""
        ssh = "answers" if self.box.reachable() else "closed"
        return (
            f"listener {self.lan.host}:{self.lan.port}: {len(packets)} magic packet(s) for "
            f"{self.box.mac}{sent}; sshd {self.box.ssh.host}:{self.box.ssh.port} {ssh}; "
            f"shutdown commands run: {self.box.shutdown_requests()}"
        )


class PluggedMiniPc:
    """A mini PC without Wake-on-LAN behind a Shelly plug: "power on after AC loss" boots it,
    its OS is shut down over SSH before the plug is switched off."""

    driver = "shelly"

    def __init__(self, name: str = "plug-pc", group: str = EXTRAS_GROUP) -> None:
        self.name = name
        #: The extras' Group (powered by hand) or an autoscaled one (`lightsout-lab demo`).
        self.group = group
        self.box = SshMachine(name, power_state="Off", boot_seconds=1.0, shutdown_seconds=1.0)
        self.plug = ShellyPlug(PlugMachine(self.box, standby_watts=1.5, idle_watts=12.0))

    def start(self) -> None:
        self.box.start()
        self.plug.start()

    def stop(self) -> None:
        self.plug.stop()
        self.box.stop()

    def objects(self) -> list[dict[str, Any]]:
        ssh = self.box.ssh
        secret = f"{self.name}-ssh"
        driver = {
            "shelly": {
                "endpoint": self.plug.endpoint,
                "ssh": _ssh_block(self.box, secret),
                "offWattsThreshold": 5.0,
            }
        }
        return [
            _secret(secret, {"ssh-privatekey": ssh.client_key}),
            _node(
                self.name,
                driver,
                cpu=4,
                memory="8Gi",
                watts=15,
                group=self.group,
                power={"idleWatts": 12, "offWatts": 1.5},
            ),
        ]

    def power_reader(self) -> Callable[[], str]:
        return self.plug.machine.power_state

    def report(self) -> str:
        orders = self.plug.machine.orders()
        said = ", ".join(
            f"{'on' if o.on else 'off'} ({o.machine_state}, {o.watts:g} W)" for o in orders
        )
        return (
            f"Shelly {self.plug.endpoint}: relay orders {said or 'none'}; meter "
            f"{self.plug.machine.watts():g} W; "
            f"shutdown commands run: {self.box.shutdown_requests()}"
        )


class EphemeralVm:
    """A Proxmox VM that exists only while it is on: cloned from a template, then destroyed."""

    driver = "proxmox"

    def __init__(self, namespace: str, name: str = "pve-burst") -> None:
        self.name = name
        self.namespace = namespace  # the clone's tag names the Node's namespace
        self.pve = FakePveCluster([Guest(PVE_TEMPLATE, "debian-12-template", template=True)])

    def start(self) -> None:
        self.pve.start()

    def stop(self) -> None:
        self.pve.stop()

    @property
    def tag(self) -> str:
        """The tag the proxmox_vm role puts on the machine's clone."""
        return f"lightsout-node.{self.namespace}.{self.name}"

    def objects(self) -> list[dict[str, Any]]:
        secret = f"{self.name}-pve"
        driver = {
            "proxmox": {
                "endpoint": self.pve.endpoint,
                "node": "pve1",
                "credentialsSecretRef": {"name": secret},
                "tls": {"caSecretRef": {"name": f"{secret}-ca", "key": "ca.crt"}},
                "mode": "Ephemeral",
                "template": {"vmid": PVE_TEMPLATE},
                "vmidRange": {"lower": 300, "upper": 309},
                "cores": 2,
                "memoryMiB": 4096,
            }
        }
        return [
            _secret(secret, {"username": self.pve.username, "password": self.pve.password}),
            _secret(f"{secret}-ca", {"ca.crt": self.pve.ca_path.read_bytes()}),
            _node(self.name, driver, cpu=2, memory="4Gi", watts=20),
        ]

    def power_reader(self) -> Callable[[], str]:
        return self.pve.power_reader(tag=self.tag)

    def report(self) -> str:
        clones = self.pve.tagged(self.tag)
        vms = (
            ", ".join(
                f"VM {c['vmid']} {c.get('name')!r} {c.get('status')} on {c.get('node')}"
                for c in clones
            )
            or "no clone"
        )
        return (
            f"fakepve {self.pve.endpoint}: {vms}; VMs in the cluster: "
            f"{[int(vm['vmid']) for vm in self.pve.vms()]}; clones made "
            f"{self.pve.count(CLONE, vmid=PVE_TEMPLATE)}, destroyed {self.pve.count(DESTROY)}"
        )


def default_extras(namespace: str) -> list[ExtraMachine]:
    """One machine of each other driver, for Nodes in `namespace`, as `lightsout-lab demo` shows."""
    return [IpmiServer(), WolMiniPc(), PluggedMiniPc(), EphemeralVm(namespace)]
