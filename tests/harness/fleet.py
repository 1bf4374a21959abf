"""Builds Lights-Out resources for emulated machines and wires them to the machine simulator.

Used by end-to-end tests: one call gives a BMC Secret, a Group and Nodes pointing at a running
sushy-tools emulator, and a `MachineSimulator` that registers each machine's core Node once the
emulator says it is On. `ipmi_node`, `wol_node` and `proxmox_node` build Nodes of the other
drivers (for ipmi_sim, an sshd + Wake-on-LAN listener, fakepve), `plug_node` a smart-plug
machine's, `sim_machine` their simulated machines.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator, SimMachine
from lightsout_lab.sushy import SushyEmulator


@dataclass(frozen=True)
class MachineDef:
    name: str
    uuid: str
    cpu: str = "4"
    memory: str = "8Gi"
    on_watts: int = 60


def secret(name: str, data: Mapping[str, str | bytes]) -> dict[str, Any]:
    encoded = {
        k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()
        for k, v in data.items()
    }
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}


def group(name: str = "homelab", **spec: Any) -> dict[str, Any]:
    """A Group for a test; its health check is off unless `healthCheck` is given: a Group's
    first check runs at once for every new machine (an Ansible Job per machine), which a test
    about something else would only wait behind on 2 cores."""
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": name},
        "spec": {
            "minNodes": 0,
            "maxNodes": 10,
            "autoscaler": "none",
            "healthCheck": {"enabled": False},
            **spec,
        },
    }


def redfish_node(
    machine: MachineDef,
    bmc: SushyEmulator,
    *,
    group_name: str = "homelab",
    desired: str = "Off",
    secret_name: str = "bmc",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": machine.name},
        "spec": {
            "desiredPowerState": desired,
            "group": group_name,
            "kubernetesNodeName": machine.name,
            "driver": {
                "redfish": {
                    "endpoint": bmc.endpoint,
                    "systemId": machine.uuid,
                    "credentialsSecretRef": {"name": secret_name},
                    "tls": {"caSecretRef": {"name": f"{secret_name}-ca", "key": "ca.crt"}},
                    "gracefulShutdownSeconds": 30,
                }
            },
            "resources": {"cpu": machine.cpu, "memory": machine.memory, "pods": 110},
            "power": {"onWatts": machine.on_watts, "bootTimeoutSeconds": 180},
            **spec,
        },
    }


def apply(cluster: Cluster, namespace: str, objects: Iterable[Mapping[str, Any]]) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(items))


def bmc_secrets(
    bmc: SushyEmulator, name: str = "bmc", password: str | None = None
) -> list[dict[str, Any]]:
    return [
        secret(name, {"username": bmc.username, "password": password or bmc.password}),
        secret(f"{name}-ca", {"ca.crt": bmc.ca_path.read_bytes()}),
    ]


def simulator(
    api: client.ApiClient,
    bmc: SushyEmulator,
    machines: Iterable[MachineDef],
    namespace: str,
    boot_seconds: float = 2.0,
) -> MachineSimulator:
    sims = [
        SimMachine(
            node_name=m.name,
            provider_id=f"lightsout://{namespace}/{m.name}",
            power=bmc.power_reader(m.uuid),
            capacity={"cpu": m.cpu, "memory": m.memory, "pods": "110"},
            boot_seconds=boot_seconds,
        )
        for m in machines
    ]
    return MachineSimulator(api=api, machines=sims).start()


def _node(
    name: str,
    driver: Mapping[str, Any],
    *,
    group_name: str = "homelab",
    desired: str = "Off",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {
            "desiredPowerState": desired,
            "group": group_name,
            "kubernetesNodeName": name,
            "driver": dict(driver),
            "resources": {"cpu": "4", "memory": "8Gi", "pods": 110},
            "power": {"bootTimeoutSeconds": 180, "shutdownTimeoutSeconds": 180},
            **spec,
        },
    }


def ipmi_node(
    name: str, host: str, port: int, *, secret_name: str = "bmc", **spec: Any
) -> dict[str, Any]:
    """A Node powered through IPMI-over-LAN (cipher suite 3, as ipmi_sim speaks it)."""
    block = {
        "ipmi": {
            "host": host,
            "port": port,
            "cipherSuite": 3,
            "credentialsSecretRef": {"name": secret_name},
        }
    }
    return _node(name, block, **spec)


def wol_node(
    name: str,
    *,
    mac: str,
    lan_host: str,
    lan_port: int,
    ssh_host: str,
    ssh_port: int,
    ssh_user: str,
    known_hosts: str,
    shutdown_command: str,
    secret_name: str = "ssh",
    **spec: Any,
) -> dict[str, Any]:
    """A Wake-on-LAN + SSH Node. `lan_host` must be a loopback address in tests, never a
    real broadcast address."""
    block = {
        "wol": {
            "macAddress": mac,
            "broadcastAddress": lan_host,
            "port": lan_port,
            "ssh": _ssh(ssh_host, ssh_port, ssh_user, secret_name, known_hosts, shutdown_command),
        }
    }
    return _node(name, block, **spec)


def _ssh(
    host: str, port: int, user: str, secret_name: str, known_hosts: str, shutdown_command: str
) -> dict[str, Any]:
    """The `ssh` block of a Wake-on-LAN or plug driver (the key from the Secret's
    `ssh-privatekey`)."""
    return {
        "host": host,
        "port": port,
        "user": user,
        "privateKeySecretRef": {"name": secret_name, "key": "ssh-privatekey"},
        "knownHosts": known_hosts,
        "shutdownCommand": shutdown_command,
    }


def plug_node(
    name: str,
    kind: str,
    endpoint: str,
    *,
    ssh_host: str,
    ssh_port: int,
    ssh_user: str,
    known_hosts: str,
    shutdown_command: str,
    secret_name: str,
    plug: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A smart-plug Node (`kind`: shelly, tasmota, homeassistant) whose OS is shut down over
    SSH; `plug` adds fields of the driver block (switchEntity, force, …)."""
    block = {
        kind: {
            "endpoint": endpoint,
            "ssh": _ssh(ssh_host, ssh_port, ssh_user, secret_name, known_hosts, shutdown_command),
            **(plug or {}),
        }
    }
    return _node(name, block, **spec)


def proxmox_node(
    name: str,
    endpoint: str,
    *,
    secret_name: str = "pve",
    proxmox: Mapping[str, Any],
    **spec: Any,
) -> dict[str, Any]:
    """A Proxmox VE VM Node; `proxmox` holds the mode and its fields (vmid, template, …)."""
    block = {
        "proxmox": {
            "endpoint": endpoint,
            "node": "pve1",
            "credentialsSecretRef": {"name": secret_name},
            "tls": {"caSecretRef": {"name": f"{secret_name}-ca", "key": "ca.crt"}},
            **proxmox,
        }
    }
    return _node(name, block, **spec)


def sim_machine(
    name: str, namespace: str, power: Callable[[], str], boot_seconds: float = 2.0
) -> SimMachine:
    """A simulated machine registering core Node `name` while `power()` says On."""
    return SimMachine(
        node_name=name,
        provider_id=f"lightsout://{namespace}/{name}",
        power=power,
        boot_seconds=boot_seconds,
    )


@contextlib.contextmanager
def simulated(
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    name: str,
    power: Callable[[], str],
    boot_seconds: float = 2.0,
) -> Iterator[MachineSimulator]:
    """One simulated machine for the length of a test; its core Node is removed afterwards."""
    sim = MachineSimulator(api, [sim_machine(name, namespace, power, boot_seconds)]).start()
    try:
        yield sim
    finally:
        sim.stop()
        cluster.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
