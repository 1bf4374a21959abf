"""Restart safety and Leases: SIGKILL mid-action, and two operators side by side."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.conftest import PATIENCE, patch_desired, running_job, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for


def test_sigkill_mid_action_resumes_and_sends_one_power_on(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: object,
) -> None:
    fleet.apply(
        crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), fleet.redfish_node(machine, bmc)]
    )
    wait_phase(crds, namespace, machine.name, "Off")
    patch_desired(crds, namespace, machine.name, "On")
    job = wait_for(lambda: running_job(crds, namespace, machine.name), PATIENCE, "a running Job")

    operator.kill()
    assert get_json(crds, "job", job, "-n", namespace) is not None
    operator.start()

    ready = wait_phase(crds, namespace, machine.name, "Ready")
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
    assert ready["lastOperation"]["job"] == job, "the restarted operator adopted the same Job"
    jobs = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={machine.name}")
    assert [j["metadata"]["name"] for j in jobs["items"]] == [job]
    assert operator.starts == 2


@pytest.fixture
def fleet_of_three(namespace: str) -> list[fleet.MachineDef]:
    return [fleet.MachineDef(name=f"m{i}-{namespace}", uuid=str(uuid.uuid4())) for i in range(3)]


@pytest.fixture
def bmc3(fleet_of_three: list[fleet.MachineDef]) -> Iterator[SushyEmulator]:
    systems = [FakeSystem(uuid=m.uuid, name=m.name) for m in fleet_of_three]
    with SushyEmulator(systems) as emulator:
        yield emulator


def test_two_operators_never_act_on_one_machine_and_take_over_on_death(
    crds: Cluster,
    namespace: str,
    kube_api: client.ApiClient,
    runner: object,
    tmp_path: Path,
    bmc3: SushyEmulator,
    fleet_of_three: list[fleet.MachineDef],
) -> None:
    env = {**JOB_PLACEMENT_ENV, "LIGHTSOUT_LEASE_SECONDS": "10"}
    ops = {
        ident: OperatorProcess(
            cluster=crds, namespaces=(namespace,), log_dir=tmp_path, identity=ident, extra_env=env
        )
        for ident in ("operator-a", "operator-b")
    }
    simulator = fleet.simulator(kube_api, bmc3, fleet_of_three, namespace)
    try:
        for op in ops.values():
            op.start()
        nodes = [fleet.redfish_node(m, bmc3) for m in fleet_of_three]
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc3), fleet.group(), *nodes])
        for m in fleet_of_three:
            wait_phase(crds, namespace, m.name, "Off")
        for m in fleet_of_three:
            patch_desired(crds, namespace, m.name, "On")

        # While the first machine's Job runs, kill whichever operator holds its Lease.
        first = fleet_of_three[0]
        wait_for(lambda: running_job(crds, namespace, first.name), PATIENCE, "a running Job")
        lease = wait_for(
            lambda: (get_json(crds, "leases", "-n", namespace) or {}).get("items"),
            30,
            "machine Leases",
        )
        holders = {item["spec"].get("holderIdentity") for item in lease}
        assert holders <= set(ops), holders
        first_lease = next(item for item in lease if item["metadata"]["name"].endswith(first.name))
        victim = first_lease["spec"]["holderIdentity"]
        ops[victim].kill()

        for m in fleet_of_three:
            wait_phase(crds, namespace, m.name, "Ready")
            assert bmc3.count_power_requests(m.uuid, reset_types=POWER_ON) == 1, m.name
            jobs = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={m.name}")
            assert len(jobs["items"]) == 1, f"{m.name}: one Job for one intent"
        survivor = next(ident for ident in ops if ident != victim)
        assert f"{first.name}" in ops[survivor].text(), "the survivor took the machine over"
    finally:
        simulator.stop()
        for op in ops.values():
            op.stop()
        for m in fleet_of_three:
            crds.kubectl("delete", "node", m.name, "--ignore-not-found", "--wait=false")
