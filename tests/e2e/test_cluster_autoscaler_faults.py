"""cluster-autoscaler and Lights-Out when things go wrong, and between Groups that differ.

A real cluster-autoscaler (see test_cluster_autoscaler.py) against a real `lightsout run`, real
Ansible Jobs and sushy-tools:

- two Groups, small machines and a GPU machine: a pod that asks for a GPU makes
  cluster-autoscaler pick the GPU Group from the Groups' templates (TemplateNodeInfo), and the
  operator is SIGKILLed right after IncreaseSize and restarted: the intent survives, the GPU
  machine gets exactly one power-on, cluster-autoscaler asks for it exactly once, the small
  machine is never touched;
- a machine that powers on but whose core Node never registers: cluster-autoscaler's scale-up
  times out after the boot timeout (which the Group hands it as max-node-provision-time), the
  operator fails the machine after the same time counted from its power-on, cluster-autoscaler
  sees that instance error on its next node-instances cache refresh (every 2 minutes, fixed in
  cluster-autoscaler) and deletes the instance, and Lights-Out powers the machine off.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.cluster_autoscaler import ClusterAutoscaler
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.autoscaling import Fleet, desired, diagnosed, pod, pod_node, running
from tests.e2e.ca_support import assert_allowed, ca_group
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import events_for, wait_for

MIXED = {
    "small": {"cpu": "2", "memory": "4Gi", "watts": 30},
    "gpu": {"cpu": "4", "memory": "8Gi", "watts": 200, "gpu": "1"},
}

#: The never-registering machine's boot timeout: long enough for the power-on Job to send its
#: order before cluster-autoscaler gives up (the operator cancels a Job that has not started),
#: short enough for the machine to be Failed well before cluster-autoscaler's first refresh of
#: its node-instances cache, 2 minutes after it starts (missing it costs 2 more minutes).
BOOT_TIMEOUT = 25


@pytest.fixture
def mixed(namespace: str) -> Fleet:
    return Fleet(namespace, MIXED)


@pytest.fixture
def mixed_bmc(
    kube_api: client.ApiClient, cluster: Cluster, mixed: Fleet
) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, mixed, provider_ids=False) as (emulator, _):
        yield emulator


def test_gpu_pod_picks_the_gpu_group_and_an_operator_restart_loses_nothing(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    plaintext_operator: OperatorProcess,
    grpc_address: str,
    mixed: Fleet,
    mixed_bmc: SushyEmulator,
    ca_kubeconfig: Path,
) -> None:
    small, gpu = mixed.name("small"), mixed.name("gpu")
    nodes = mixed.nodes(mixed_bmc, "small")
    nodes[1]["spec"]["group"] = "gpus"
    groups = [ca_group("small"), ca_group("gpus")]
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(mixed_bmc), *groups, *nodes])
    for name in (small, gpu):
        wait_phase(crds, namespace, name, "Off")
    autoscaler = ClusterAutoscaler(
        crds, grpc_address, tmp_path / "ca", kubeconfig=ca_kubeconfig, flags=["--v=4"]
    )
    with autoscaler, diagnosed(crds, namespace):
        try:
            crds.kubectl(
                "apply", "-n", namespace, "-f", "-", input=json.dumps(pod("train", "1", gpu="1"))
            )
            wait_for(lambda: desired(crds, namespace, gpu) == "On", 120, f"{gpu} wanted On")
            # The operator dies right after recording the intent, before or while the power-on
            # Job runs; cluster-autoscaler keeps looping against a server that is gone.
            plaintext_operator.kill()
            time.sleep(6)
            plaintext_operator.start()
            wait_for(
                lambda: pod_node(crds, namespace, "train") == gpu, PATIENCE, f"the pod on {gpu}"
            )
            wait_phase(crds, namespace, gpu, "Ready")
        except AssertionError as error:
            raise AssertionError(f"{error}\ncluster-autoscaler:\n{autoscaler.tail()}") from error
        log = autoscaler.text()
    # Its own log line, not the event it also logs: one scale-up, asked for once.
    assert log.count("] Scale-up: setting group") == 1, log
    assert f"Scale-up: setting group {namespace}/gpus size to 1" in log
    assert mixed_bmc.count_power_requests(mixed.uuids["gpu"], reset_types=POWER_ON) == 1
    assert mixed_bmc.count_power_requests(mixed.uuids["small"]) == 0
    assert desired(crds, namespace, small) == "Off"
    assert_allowed(autoscaler)


def test_a_machine_that_never_registers_is_deleted_by_cluster_autoscaler(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    plaintext_operator: OperatorProcess,
    grpc_address: str,
    ca_kubeconfig: Path,
) -> None:
    ghost = Fleet(namespace, {"ghost": {"cpu": "4", "memory": "8Gi", "watts": 50}})
    # No simulator: the machine powers on at its BMC, but no core Node ever registers.
    with SushyEmulator(ghost.systems()) as bmc:
        (node,) = ghost.nodes(bmc, "ca")
        node["spec"]["power"] = {"onWatts": 50, "bootTimeoutSeconds": BOOT_TIMEOUT}
        node["spec"]["maxRetries"] = 0
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), ca_group(), node])
        name = ghost.name("ghost")
        wait_phase(crds, namespace, name, "Off")
        autoscaler = ClusterAutoscaler(
            crds, grpc_address, tmp_path / "ca", kubeconfig=ca_kubeconfig
        )
        with autoscaler, diagnosed(crds, namespace):
            try:
                crds.kubectl(
                    "apply", "-n", namespace, "-f", "-", input=json.dumps(pod("waits", "1"))
                )
                wait_for(lambda: desired(crds, namespace, name) == "On", 120, f"{name} wanted On")
                wait_for(
                    lambda: bmc.count_power_requests(bmc_uuid(ghost), reset_types=POWER_ON),
                    PATIENCE,
                    "the power-on at the BMC",
                )
                # The machine Failed after its boot timeout: cluster-autoscaler removes the
                # instance through DeleteNodes once its instances cache shows the error.
                wait_for(lambda: desired(crds, namespace, name) == "Off", 300, f"{name} wanted Off")
                wait_for(
                    lambda: bmc.count_power_requests(bmc_uuid(ghost), reset_types=POWER_OFF),
                    PATIENCE,
                    "the power-off at the BMC",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\n{autoscaler.tail()}") from error
        messages = [e["message"] for e in events_for(crds, namespace, name)]
        assert any(m.startswith("cluster-autoscaler deleted node(s)") for m in messages), messages
        assert bmc.count_power_requests(bmc_uuid(ghost), reset_types=POWER_ON) == 1
        assert_allowed(autoscaler)


def bmc_uuid(machines: Fleet) -> str:
    (only,) = machines.uuids.values()
    return only
