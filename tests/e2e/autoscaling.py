"""Helpers for the autoscaler's end-to-end tests: a fleet of machines of different sizes behind
one Redfish emulator, pods that ask for capacity, and what a user reads back (desired power
state, events, where a pod runs, `lightsout plan`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator, SimMachine
from lightsout_lab.sushy import FakeSystem, PowerState, SushyEmulator
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import events_for, get_json

GPU = "nvidia.com/gpu"
#: The annotation where the operator records since when a machine has been unneeded.
UNNEEDED = "lightsout.dev/unneeded-since"


class Fleet:
    """Machines of different sizes behind one BMC, with their simulator."""

    def __init__(self, namespace: str, sizes: dict[str, dict[str, Any]]) -> None:
        self.namespace = namespace
        self.sizes = sizes
        self.uuids = {name: str(uuid.uuid4()) for name in sizes}

    def name(self, short: str) -> str:
        return f"{short}-{self.namespace}"

    def names(self) -> dict[str, str]:
        """Every machine's name, by its short name."""
        return {short: self.name(short) for short in self.sizes}

    def systems(self, power_state: PowerState = "Off") -> list[FakeSystem]:
        return [
            FakeSystem(uuid=self.uuids[s], name=self.name(s), power_state=power_state)
            for s in self.sizes
        ]

    def nodes(
        self, bmc: SushyEmulator, group: str = "autoscaled", **spec: Any
    ) -> list[dict[str, Any]]:
        out = []
        for short, size in self.sizes.items():
            machine = fleet.MachineDef(
                name=self.name(short),
                uuid=self.uuids[short],
                cpu=size["cpu"],
                memory=size["memory"],
                on_watts=size["watts"],
            )
            resources: dict[str, Any] = {"cpu": size["cpu"], "memory": size["memory"]}
            if size.get("gpu"):
                resources["extended"] = {GPU: size["gpu"]}
            node = fleet.redfish_node(machine, bmc, group_name=group, resources=resources, **spec)
            out.append(node)
        return out

    def apply(
        self,
        crds: Cluster,
        bmc: SushyEmulator,
        groups: list[dict[str, Any]],
        group_of: Mapping[str, str],
    ) -> dict[str, str]:
        """The Groups, the BMC's Secrets and every machine in its Group (`group_of`, by short
        name), all Off once this returns; the machines' names by short name."""
        nodes = self.nodes(bmc)
        for short, node in zip(self.sizes, nodes, strict=True):
            node["spec"]["group"] = group_of[short]
        fleet.apply(crds, self.namespace, [*fleet.bmc_secrets(bmc), *groups, *nodes])
        names = self.names()
        for name in names.values():
            wait_phase(crds, self.namespace, name, "Off")
        return names

    def simulator(
        self, api: client.ApiClient, bmc: SushyEmulator, *, provider_ids: bool = True
    ) -> MachineSimulator:
        """`provider_ids=False`: the core Nodes register without one, as from a kubelet started
        without `--provider-id` (Lights-Out then sets it)."""
        machines = []
        for short, size in self.sizes.items():
            capacity = {"cpu": size["cpu"], "memory": size["memory"], "pods": "110"}
            if size.get("gpu"):
                capacity[GPU] = size["gpu"]
            machines.append(
                SimMachine(
                    node_name=self.name(short),
                    provider_id=f"lightsout://{self.namespace}/{self.name(short)}"
                    if provider_ids
                    else "",
                    power=bmc.power_reader(self.uuids[short]),
                    capacity=capacity,
                    boot_seconds=float(size.get("boot_seconds", 2.0)),
                )
            )
        return MachineSimulator(api=api, machines=machines).start()


SIZES = {
    "small": {"cpu": "2", "memory": "4Gi", "watts": 30},
    "large": {"cpu": "8", "memory": "16Gi", "watts": 80},
    "gpu": {"cpu": "4", "memory": "8Gi", "watts": 200, "gpu": "1"},
}


def pod(name: str, cpu: str, gpu: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "100Mi"}}
    if gpu:
        resources["requests"][GPU] = gpu
        resources["limits"] = {GPU: gpu}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        },
    }


def desired(crds: Cluster, namespace: str, name: str) -> str:
    obj = get_json(crds, "lsn", name, "-n", namespace)
    return str(obj["spec"]["desiredPowerState"])


def reasons(crds: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in events_for(crds, namespace, name)]


def pod_node(crds: Cluster, namespace: str, name: str) -> str | None:
    obj = get_json(crds, "pod", name, "-n", namespace)
    node = (obj or {}).get("spec", {}).get("nodeName")
    return str(node) if node else None


def unschedulable(crds: Cluster, namespace: str, name: str) -> bool:
    obj = get_json(crds, "pod", name, "-n", namespace) or {}
    for condition in obj.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled":
            return (condition["status"], condition.get("reason")) == ("False", "Unschedulable")
    return False


def lightsout(crds: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`lightsout ARGS` run as a person would, whatever its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "lightsout.cli", *args],
        env=crds.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=PATIENCE + 60,
    )


def plan_json(crds: Cluster, namespace: str) -> dict[str, Any]:
    """`lightsout plan -n NAMESPACE --json`, run as a person would."""
    proc = subprocess.run(
        [sys.executable, "-m", "lightsout.cli", "plan", "-n", namespace, "--json"],
        env=crds.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def plan_text(crds: Cluster, namespace: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "lightsout.cli", "plan", "-n", namespace],
        env=crds.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return proc.stdout


@contextlib.contextmanager
def running(
    api: client.ApiClient,
    cluster: Cluster,
    machines: Fleet,
    *,
    provider_ids: bool = True,
    power_state: PowerState = "Off",
) -> Iterator[tuple[SushyEmulator, MachineSimulator]]:
    """The fleet's BMC and simulator; its core Nodes are removed afterwards. `power_state="On"`:
    every machine runs from the start, its core Node registered by the simulator."""
    with SushyEmulator(machines.systems(power_state)) as bmc:
        simulator = machines.simulator(api, bmc, provider_ids=provider_ids)
        try:
            yield bmc, simulator
        finally:
            simulator.stop()
            for short in machines.sizes:
                cluster.kubectl(
                    "delete", "node", machines.name(short), "--ignore-not-found", "--wait=false"
                )


@contextlib.contextmanager
def diagnosed(crds: Cluster, namespace: str) -> Iterator[None]:
    """On a failed assertion, add what a person would look at next: the pods, the machines and
    `lightsout plan`."""
    try:
        yield
    except AssertionError as error:
        pods = crds.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        machines = crds.kubectl("get", "lsn", "-n", namespace, check=False).stdout
        try:
            shown = plan_text(crds, namespace)
        except subprocess.CalledProcessError as failed:
            shown = f"lightsout plan failed: {failed.stderr}"
        raise AssertionError(f"{error}\n{pods}\n{machines}\n{shown}") from error
