"""A whole Lights-Out installation on one machine: the `make demo` and `make bench` stage.

Starts, in order: the control plane, a sushy-tools Redfish BMC emulating the given servers, the
emulators of the optional `extras` (machines of the other drivers: ipmi_sim, a Wake-on-LAN
listener and sshd, fakepve; see `extras.py`), the stand-in kubelet that runs action Jobs, the
machine simulator that registers a machine's core Node once its emulator says On, the CRDs, a
namespace with the given objects (and the extras' Group, Secrets and Nodes), and the operator.
`stop()` takes everything down again in reverse order, even after a failure half-way.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightsout_lab.binaries import repo_root
from lightsout_lab.cluster import Cluster
from lightsout_lab.extras import ExtraMachine, extras_group
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent, runner_image_env
from lightsout_lab.machines import MachineSimulator, SimMachine
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import FakeSystem, SushyEmulator

CRDS = ("groups.lightsout.dev", "nodes.lightsout.dev")


def machine_capacity(node: Mapping[str, Any]) -> dict[str, str]:
    """The capacity a machine's core Node reports: what its Lights-Out Node promises.

    The same numbers the planner assumes for a machine that is off, so the emulated machine
    joins with exactly the room the autoscaler powered it on for (pods defaults like the CRD).
    """
    resources = dict((node.get("spec") or {}).get("resources") or {})
    extended = resources.pop("extended", None) or {}
    capacity = {"pods": "110", **{k: str(v) for k, v in resources.items()}}
    capacity.update({k: str(v) for k, v in extended.items()})
    return capacity


@dataclass
class Lab:
    """Everything running; `nodes` are Lights-Out Node manifests with Redfish drivers.

    `extras` are machines of the other drivers, each with its own emulator; none by default,
    which is what the benchmarks measure. `simulated` names the Nodes whose machines the
    simulator boots and registers (None: all of them): a benchmark of a thousand machines that
    stay off does not need a thousand BMC polls every half second. `with_operator=False`
    leaves the operator to `start_operator()`, so a caller can measure the cluster without it.
    """

    objects: Sequence[dict[str, Any]]
    namespace: str = "lightsout-demo"
    username: str = "admin"
    password: str = "lights-out-demo"
    boot_seconds: float = 3.0
    operator_env: Mapping[str, str] = field(default_factory=dict)
    extras: Sequence[ExtraMachine] = ()
    simulated: Collection[str] | None = None
    with_operator: bool = True
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lightsout-lab-")))
    cluster: Cluster | None = None
    bmc: SushyEmulator | None = None
    agent: KubeletAgent | None = None
    simulator: MachineSimulator | None = None
    operator: OperatorProcess | None = None

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj.get("kind") == "Node"]

    def system_id(self, node_name: str) -> str:
        node = next(n for n in self.nodes if n["metadata"]["name"] == node_name)
        return str(node["spec"]["driver"]["redfish"]["systemId"])

    def start(self) -> Lab:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        root = repo_root()
        self.cluster = cluster = Cluster(directory=self.workdir / "cluster").start()
        systems = [
            FakeSystem(uuid=self.system_id(n["metadata"]["name"]), name=n["metadata"]["name"])
            for n in self.nodes
        ]
        self.bmc = bmc = SushyEmulator(
            systems, username=self.username, password=self.password
        ).start()
        for node in self.nodes:
            node["spec"]["driver"]["redfish"]["endpoint"] = bmc.endpoint
        extra_objects: list[dict[str, Any]] = [extras_group()] if self.extras else []
        for extra in self.extras:
            extra.start()
            extra_objects += extra.objects()
        extra_nodes = [o for o in extra_objects if o["kind"] == "Node"]
        api = cluster.api_client()
        self.agent = KubeletAgent(
            api=api, image_env=runner_image_env(root), log_dir=self.workdir
        ).start()
        powered = [
            (n, bmc.power_reader(self.system_id(n["metadata"]["name"])))
            for n in self.nodes
            if self.simulated is None or n["metadata"]["name"] in self.simulated
        ]
        powered += [(n, e.power_reader()) for e, n in zip(self.extras, extra_nodes, strict=True)]
        self.simulator = MachineSimulator(
            api=api,
            machines=[
                SimMachine(
                    node_name=n["spec"]["kubernetesNodeName"],
                    provider_id=f"lightsout://{self.namespace}/{n['metadata']['name']}",
                    power=power,
                    capacity=machine_capacity(n),
                    boot_seconds=self.boot_seconds,
                )
                for n, power in powered
            ],
        ).start()
        cluster.kubectl("apply", "--server-side", "-f", str(root / "crds"))
        cluster.wait_established(CRDS)
        cluster.kubectl("create", "namespace", self.namespace)
        items = json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": [*self.objects, *extra_objects]}
        )
        cluster.kubectl("apply", "-n", self.namespace, "-f", "-", input=items, timeout=900)
        if self.with_operator:
            self.start_operator()

    def start_operator(self, verbose: bool = True) -> OperatorProcess:
        """Start the operator on the lab's namespace (once healthy, it is returned)."""
        assert self.cluster is not None, "start() the lab first"
        self.operator = OperatorProcess(
            cluster=self.cluster,
            namespaces=(self.namespace,),
            log_dir=self.workdir,
            identity="lab-operator",
            extra_env={**JOB_PLACEMENT_ENV, **self.operator_env},
            verbose=verbose,
        )
        self.operator.start()
        return self.operator

    def stop(self) -> None:
        for part in (self.operator, self.simulator, self.agent):
            if part is not None:
                part.stop()
        for extra in self.extras:
            extra.stop()
        if self.bmc is not None:
            self.bmc.stop()
        if self.cluster is not None:
            self.cluster.destroy()
