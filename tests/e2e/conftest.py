"""Fixtures for end-to-end tests of machines: a Redfish BMC, its machine, the simulator.

`@pytest.mark.bmc(power_state="On", disable_power_off=True)` on a test configures the emulator.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.cluster_autoscaler import service_account_kubeconfig
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess, webhook_env
from lightsout_lab.process import free_port
from lightsout_lab.sushy import FakeSystem, SushyEmulator
from lightsout_lab.wol import WolListener
from tests.e2e import ca_support
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

#: Seconds to wait for a phase: sushy lands power changes 1-11 s late, Ansible starts in ~5 s.
PATIENCE = 240


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bmc(**options): options of the test's Redfish emulator")


@pytest.fixture
def machine(namespace: str) -> fleet.MachineDef:
    return fleet.MachineDef(name=f"box-{namespace}", uuid=str(uuid.uuid4()), cpu="8")


@pytest.fixture
def bmc(request: pytest.FixtureRequest, machine: fleet.MachineDef) -> Iterator[SushyEmulator]:
    marker = request.node.get_closest_marker("bmc")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    power = options.pop("power_state", "Off")
    system = FakeSystem(uuid=machine.uuid, name=machine.name, power_state=power)
    with SushyEmulator([system], **options) as emulator:
        yield emulator


@pytest.fixture
def lan() -> Iterator[WolListener]:
    """The "LAN" of Wake-on-LAN machines: a UDP listener on 127.0.0.1."""
    with WolListener() as listener:
        yield listener


@pytest.fixture
def sim(
    kube_api: client.ApiClient,
    cluster: Cluster,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    namespace: str,
) -> Iterator[MachineSimulator]:
    simulator = fleet.simulator(kube_api, bmc, [machine], namespace)
    yield simulator
    simulator.stop()
    cluster.kubectl("delete", "node", machine.name, "--ignore-not-found", "--wait=false")


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = get_json(cluster, "lsn", name, "-n", namespace)
    found: dict[str, Any] = (obj or {}).get("status") or {}
    return found


def wait_phase(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        current = status(cluster, namespace, name)
        return current if current.get("phase") == phase else None

    return wait_for(probe, PATIENCE, f"{name} to reach phase {phase}")


def patch_desired(cluster: Cluster, namespace: str, name: str, desired: str) -> None:
    body = json.dumps({"spec": {"desiredPowerState": desired}})
    cluster.kubectl("patch", "lsn", name, "-n", namespace, "--type", "merge", "-p", body)


def running_job(cluster: Cluster, namespace: str, name: str) -> str | None:
    """Name of the machine's action Job once its pod is Running (the playbook has started)."""
    job = (status(cluster, namespace, name).get("lastOperation") or {}).get("job")
    if not job:
        return None
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"job-name={job}")
    phases = [p["status"].get("phase") for p in (pods or {}).get("items", [])]
    return job if "Running" in phases else None


def post_existing_node(cluster: Cluster, name: str, labels: dict[str, str], *extra: str) -> str:
    """POST a Node by hand, as a kubelet registering does; it exists, so the API server refuses
    (after admission, where the core-Node webhook sees the request). Returns the refusal."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    done = cluster.kubectl("create", *extra, "-f", "-", input=json.dumps(body), check=False)
    assert done.returncode != 0 and "AlreadyExists" in done.stderr + done.stdout, done
    return str(done.stderr)


def can(crds: Cluster, account: str, *args: str) -> bool:
    """What the API server's authorizer answers for ServiceAccount `account` (`ns:name`)."""
    answer = crds.kubectl(
        "auth", "can-i", *args, f"--as=system:serviceaccount:{account}", check=False
    )
    return answer.stdout.strip() == "yes"


# ---------------------------------------------------- cluster-autoscaler (externalgrpc) tests
@pytest.fixture
def grpc_address() -> str:
    """Where the operator's externalgrpc server listens."""
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def plaintext_operator(
    crds: Cluster, namespace: str, tmp_path: Path, runner: KubeletAgent, grpc_address: str
) -> Iterator[OperatorProcess]:
    env = {"LIGHTSOUT_GRPC_ADDRESS": grpc_address, "LIGHTSOUT_GRPC_INSECURE": "true"}
    yield from ca_support.operator(crds, namespace, tmp_path, env)


@pytest.fixture
def ca_kubeconfig(crds: Cluster, tmp_path: Path) -> Path:
    """cluster-autoscaler's rights: those deploy/cluster-autoscaler/rbac.yaml grants."""
    crds.kubectl("apply", "-f", str(ca_support.RBAC))
    return service_account_kubeconfig(crds, tmp_path / "ca-kubeconfig")


@contextlib.contextmanager
def webhook_operator_process(
    crds: Cluster, namespace: str, log_dir: Path
) -> Iterator[OperatorProcess]:
    """The operator serving its admission webhooks on the host with the API server's own
    serving certificate (SAN 127.0.0.1, signed by the cluster CA, which is the caBundle),
    writing their configurations itself (LIGHTSOUT_WEBHOOK_URL) and removing them after."""
    port = free_port()
    configuration = f"lightsout-webhooks-{namespace}"
    proc = OperatorProcess(
        cluster=crds,
        namespaces=(namespace,),
        log_dir=log_dir,
        extra_env={**JOB_PLACEMENT_ENV, **webhook_env(crds, port, configuration)},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            crds.kubectl("delete", kind, configuration, check=False)
