"""A startup Job whose credentials Secret is deleted after the Job was created (its references
all resolved) and before a kubelet mounts it, for the tests of that path under the real kubelet
(tests/e2e/test_real_kubelet.py) and under the stand-in (tests/e2e/test_stand_in_kubelet.py).

The node is cordoned until the Secret is deleted, so the kubelet meets a missing Secret. A
kubelet says why only in a `FailedMount` event on the pod; the operator must fail the attempt
at once from that event (the Job's deadline, bootTimeoutSeconds + 120 s = 3120 s, is far beyond
this wait), name the Secret, delete the Job and send no power order.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import FakeSystem, SushyEmulator
from tests.e2e.conftest import status
from tests.harness import fleet
from tests.harness.wait import get_json, reasons_until, wait_for

SECRET = "bmc-2"
GROUP = "lab"


@dataclass(frozen=True)
class SecretGone:
    """The machine whose first attempt failed at the mount, with what a test goes on with."""

    box: fleet.MachineDef
    bmc: SushyEmulator
    #: The deleted credentials Secret, to create again.
    credentials: Mapping[str, Any]
    #: The machine's `status.lastOperation` of the failed attempt.
    failed: Mapping[str, Any]
    #: Seconds from the node taking the pod to the attempt's failure.
    took: float


@contextmanager
def secret_gone_before_the_mount(
    crds: Cluster,
    namespace: str,
    kube_api: client.ApiClient,
    tmp_path: Path,
    node_name: str,
    operator_env: Mapping[str, str],
) -> Iterator[SecretGone]:
    """Run the failed first attempt on `node_name` (the operator, the BMC and the machine stay
    up inside the `with`)."""
    box = fleet.MachineDef(name="box-2", uuid=str(uuid.uuid4()))
    operator = OperatorProcess(
        cluster=crds,
        namespaces=(namespace,),
        log_dir=tmp_path,
        identity="operator-b",
        extra_env=dict(operator_env),
    )
    system = FakeSystem(uuid=box.uuid, name=box.name, power_state="Off")
    node_filter = f"lightsout.dev/node={box.name}"
    with (
        SushyEmulator([system]) as bmc,
        fleet.simulated(crds, kube_api, namespace, box.name, bmc.power_reader(box.uuid)),
    ):
        credentials, ca = fleet.bmc_secrets(bmc, SECRET)
        machine = fleet.redfish_node(
            box,
            bmc,
            group_name=GROUP,
            secret_name=SECRET,
            maxRetries=1,
            power={"onWatts": 60, "bootTimeoutSeconds": 3000},
        )
        fleet.apply(crds, namespace, [fleet.group(GROUP), credentials, ca, machine])
        operator.start()
        try:
            crds.kubectl("cordon", node_name)
            try:
                patch = json.dumps({"spec": {"desiredPowerState": "On"}})
                crds.kubectl("patch", "lsn", box.name, "-n", namespace, "--type=merge", "-p", patch)
                job = wait_for(
                    lambda: get_json(crds, "jobs", "-n", namespace, "-l", node_filter)["items"],
                    120,
                    "the startup Job (its references all resolved)",
                )[0]
                crds.kubectl("delete", "secret", SECRET, "-n", namespace)
            finally:
                crds.kubectl("uncordon", node_name)
            started = time.monotonic()
            failed = wait_for(
                lambda: (
                    (op := status(crds, namespace, box.name).get("lastOperation") or {}).get(
                        "result"
                    )
                    == "Failed"
                    and op
                ),
                180,
                "the attempt whose Secret volume is missing to fail",
            )
            took = time.monotonic() - started
            assert failed["attempt"] == 1 and failed["job"] == job["metadata"]["name"]
            assert "its pod cannot start: FailedMount: " in failed["message"], failed["message"]
            assert f'secret "{SECRET}" not found' in failed["message"], failed["message"]
            wait_for(
                lambda: get_json(crds, "job", failed["job"], "-n", namespace) is None,
                120,
                f"the Job {failed['job']} to be deleted",
            )
            reasons_until(crds, namespace, box.name, "PodStartFailed")
            assert bmc.power_requests(box.uuid) == []
            yield SecretGone(box, bmc, credentials, failed, took)
        finally:
            operator.stop()
