"""A fleet of 200 machines and an operator SIGKILLed while 8 of them are powering on (at
least half with their action Job running, the others asked to).

The work queue and the watch caches must keep the restart safety of the old design: the
restarted operator lists everything again, re-adopts each running Job by its name, and no
machine gets a second power command for its one intent.

Eight is twice the operator's default workers (`LIGHTSOUT_WORKERS`, 4): more intents than
workers, queued, on either side of the kill. Each more costs a startup Job (an Ansible run,
some 15 CPU-seconds) and proves nothing the eighth does not; the 200 are what the restarted
operator lists again, and cost no Job.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.conftest import patch_desired
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

FLEET = 200
POWERED = 8
#: Eight Ansible runs share the machine's cores with everything else.
PATIENCE = 900
#: Seconds between two looks at all 200 machines while nothing but the end is awaited: each
#: look is a kubectl listing them all, CPU the eight Ansible runs would otherwise have.
SLOW_POLL = 3.0


@pytest.fixture
def machines(namespace: str) -> list[fleet.MachineDef]:
    return [fleet.MachineDef(name=f"f{i:03d}", uuid=str(uuid.uuid4())) for i in range(FLEET)]


@pytest.fixture
def bmc200(machines: list[fleet.MachineDef]) -> Iterator[SushyEmulator]:
    with SushyEmulator([FakeSystem(uuid=m.uuid, name=m.name) for m in machines]) as emulator:
        yield emulator


def phases(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = (get_json(cluster, "lsn", "-n", namespace) or {}).get("items", [])
    return {i["metadata"]["name"]: i.get("status") or {} for i in items}


def test_sigkill_while_eight_machines_power_on_sends_one_power_on_each(
    crds: Cluster,
    namespace: str,
    kube_api: client.ApiClient,
    runner: KubeletAgent,
    tmp_path: Path,
    bmc200: SushyEmulator,
    machines: list[fleet.MachineDef],
) -> None:
    powered = machines[:POWERED]
    group = fleet.group(maxNodes=FLEET)
    nodes = [fleet.redfish_node(m, bmc200) for m in machines]
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc200), group, *nodes])
    operator = OperatorProcess(
        cluster=crds, namespaces=(namespace,), log_dir=tmp_path, extra_env=JOB_PLACEMENT_ENV
    )
    sim: MachineSimulator = fleet.simulator(kube_api, bmc200, powered, namespace)
    operator.start()
    try:
        wait_for(
            lambda: (
                (s := phases(crds, namespace))
                and len(s) == FLEET
                and all(v.get("phase") == "Off" for v in s.values())
            ),
            PATIENCE,
            f"all {FLEET} machines Off",
            interval=SLOW_POLL,
        )
        for machine in powered:
            patch_desired(crds, namespace, machine.name, "On")

        def mid_action() -> list[str]:
            """The machines powering on with their Job started (named in status)."""
            status = phases(crds, namespace)
            return [
                m.name
                for m in powered
                if status[m.name].get("phase") == "PoweringOn"
                and (status[m.name].get("lastOperation") or {}).get("job")
            ]

        # Killed as soon as half of them have their Job running: the operator starts the
        # eight one after the other, and on a loaded machine the first are Ready before the
        # last has a Job. The others' intents are in their specs, some with a Job being made.
        caught: list[str] = wait_for(
            lambda: found if len(found := mid_action()) >= POWERED // 2 else None,
            PATIENCE,
            f"{POWERED // 2} of the {POWERED} machines powering on with their Job",
            interval=1.0,
        )
        operator.kill()
        print(f"[fleet restart] killed with {len(caught)} machines mid-action: {caught}")
        operator.start()

        def settled() -> bool:
            status = phases(crds, namespace)
            return all(status[m.name].get("phase") == "Ready" for m in powered) and all(
                status[m.name].get("phase") == "Off" for m in machines[POWERED:]
            )

        wait_for(
            settled,
            PATIENCE,
            f"{POWERED} machines Ready and {FLEET - POWERED} Off",
            interval=SLOW_POLL,
        )
    finally:
        operator.stop()
        sim.stop()
        for machine in powered:
            crds.kubectl("delete", "node", machine.name, "--ignore-not-found", "--wait=false")

    orders = {m.name: bmc200.count_power_requests(m.uuid, reset_types=POWER_ON) for m in powered}
    assert orders == {m.name: 1 for m in powered}, "one power-on order per machine and intent"
    ordered = {r.system for r in bmc200.power_requests()}
    assert ordered <= {m.uuid for m in powered}, "no machine that stays Off got a power order"
    # Action Jobs only (they carry their attempt): the Group's health-check CronJob may have
    # run a check of the fleet meanwhile, which reads the BMC and sends no power order.
    jobs = get_json(crds, "jobs", "-n", namespace, "-l", "lightsout.dev/attempt") or {}
    attempts = sorted(j["metadata"]["labels"]["lightsout.dev/attempt"] for j in jobs["items"])
    assert attempts == ["1"] * POWERED, "one Job per machine: each adopted, none retried"
    assert operator.starts == 2
