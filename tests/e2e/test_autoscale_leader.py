"""Two operator replicas: only the holder of the `lightsout-autoscaler` Lease plans, and the other
takes over when the holder dies.

Both replicas watch the same namespace and keep their own caches. A pending pod is planned for
once (one ScaleUp event on the machine, one TriggeredScaleUp on the pod, one power-on at the
BMC); after the leader is SIGKILLed, the survivor takes the Lease once it expires and powers on
a machine for the next pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_ON, SushyEmulator
from tests.e2e.autoscaling import Fleet, desired, diagnosed, pod, reasons, running
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

PAIR = {
    "first": {"cpu": "2", "memory": "4Gi", "watts": 30},
    "second": {"cpu": "2", "memory": "4Gi", "watts": 40},
}


@pytest.fixture
def pair(namespace: str) -> Fleet:
    return Fleet(namespace, PAIR)


@pytest.fixture
def pair_bmc(kube_api: client.ApiClient, cluster: Cluster, pair: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, pair) as (bmc, _):
        yield bmc


def test_one_replica_plans_and_the_other_takes_over(
    crds: Cluster,
    namespace: str,
    runner: object,
    tmp_path: Path,
    pair: Fleet,
    pair_bmc: SushyEmulator,
) -> None:
    # The default 15-s Lease: the leader renews it every 5 s, and a shorter one lost it to the
    # other replica under CI's load (a 7-s stall of the leader's renewals at load 30).
    ops = {
        ident: OperatorProcess(
            cluster=crds,
            namespaces=(namespace,),
            log_dir=tmp_path,
            identity=ident,
            extra_env=JOB_PLACEMENT_ENV,
        )
        for ident in ("operator-a", "operator-b")
    }
    try:
        for op in ops.values():
            op.start()
        group = fleet.group("autoscaled", autoscaler="builtin")
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(pair_bmc), group, *pair.nodes(pair_bmc)])
        with diagnosed(crds, namespace):
            first, second = pair.name("first"), pair.name("second")

            def holder() -> str | None:
                lease = get_json(crds, "lease", "lightsout-autoscaler", "-n", namespace) or {}
                name = (lease.get("spec") or {}).get("holderIdentity")
                return str(name) if name else None

            leader = wait_for(holder, PATIENCE, "a replica to hold the autoscaler Lease")
            for name in (first, second):
                wait_phase(crds, namespace, name, "Off")
            fleet.apply(crds, namespace, [pod("web-1", "1500m")])
            wait_for(lambda: desired(crds, namespace, first) == "On", PATIENCE, "first On")
            wait_for(
                lambda: any(r == "TriggeredScaleUp" for r, _ in reasons(crds, namespace, "web-1")),
                PATIENCE,
                "the pod's event",
            )
            # One decision, posted by one replica: the other kept its caches but planned nothing.
            scale_ups = [r for r, _ in reasons(crds, namespace, first) if r == "ScaleUp"]
            assert scale_ups == ["ScaleUp"], reasons(crds, namespace, first)
            triggered = [r for r, _ in reasons(crds, namespace, "web-1") if r == "TriggeredScaleUp"]
            assert triggered == ["TriggeredScaleUp"]
            assert holder() == leader
            wait_for(
                lambda: pair_bmc.count_power_requests(pair.uuids["first"], reset_types=POWER_ON),
                PATIENCE,
                "the power-on at the BMC",
            )

            # The leader dies without a word; the survivor takes the Lease once it expires.
            ops[leader].kill()
            survivor = next(ident for ident in ops if ident != leader)
            wait_for(lambda: holder() == survivor, PATIENCE, f"{survivor} to take the Lease")
            fleet.apply(crds, namespace, [pod("web-2", "1500m")])
            wait_for(lambda: desired(crds, namespace, second) == "On", PATIENCE, "second On")
            assert pair_bmc.count_power_requests(pair.uuids["first"], reset_types=POWER_ON) == 1
    finally:
        for op in ops.values():
            op.stop()
