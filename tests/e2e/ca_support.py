"""Helpers for the end-to-end tests of cluster-autoscaler driving Lights-Out (externalgrpc).

The operator as a real `lightsout run` with its gRPC server on, cluster-autoscaler Groups, and
what a user reads back: conditions' and events' times, and whether RBAC refused anything.
The fixtures built on them are in tests/e2e/conftest.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightsout_lab import Cluster
from lightsout_lab.cluster_autoscaler import ClusterAutoscaler
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV
from lightsout_lab.operator_process import OperatorProcess
from tests.harness import fleet
from tests.harness.ca_flags import readme_flags
from tests.harness.wait import events_for

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "deploy" / "cluster-autoscaler" / "rbac.yaml"
#: README flags the lab sets itself (it writes its own cloud config).
LAB_OWN = ("--cloud-provider", "--cloud-config")


def lab_flags() -> list[str]:
    """README's cluster-autoscaler flags but for those the lab sets itself (`LAB_OWN`): what a
    user copies is what the test runs."""
    flags = readme_flags()
    assert "--cloud-provider=externalgrpc" in flags, flags
    return [f for f in flags if f.partition("=")[0] not in LAB_OWN]


def operator(
    crds: Cluster, namespace: str, log_dir: Path, env: dict[str, str]
) -> Iterator[OperatorProcess]:
    """`lightsout run` with these settings (the gRPC server's), stopped afterwards."""
    proc = OperatorProcess(
        cluster=crds,
        namespaces=(namespace,),
        log_dir=log_dir,
        extra_env={**JOB_PLACEMENT_ENV, **env},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def ca_group(name: str = "ca", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "autoscaler": "cluster-autoscaler",
        "minNodes": 0,
        "maxNodes": 2,
        # cluster-autoscaler takes these through NodeGroupGetOptions.
        "scaleDown": {"unneededSeconds": 10, "utilizationThreshold": 0.5},
    }
    return fleet.group(name, **{**base, **spec})


#: Issue 28's Groups: "small" of two 4-cpu machines at 30 W, "big" of one 16-cpu at 220 W
#: (`Fleet` sizes, and the Group of each machine).
PRICED = {
    "small-1": {"cpu": "4", "memory": "8Gi", "watts": 30},
    "small-2": {"cpu": "4", "memory": "8Gi", "watts": 30},
    "big": {"cpu": "16", "memory": "32Gi", "watts": 220},
}
PRICED_GROUP_OF = {"small-1": "small", "small-2": "small", "big": "big"}


def priced_groups() -> list[dict[str, Any]]:
    return [ca_group("small"), ca_group("big", maxNodes=1)]


def with_flags(flags: list[str], *own: str) -> list[str]:
    """`flags` (README's) with a test's `own` in place of those of the same names."""
    names = {flag.partition("=")[0] for flag in own}
    return [f for f in flags if f.partition("=")[0] not in names] + list(own)


def assert_allowed(autoscaler: ClusterAutoscaler) -> None:
    """Nothing cluster-autoscaler tried was refused by RBAC."""
    refused = [line for line in autoscaler.text().splitlines() if "forbidden" in line]
    assert refused == [], "\n".join(refused[:10])


def parse_time(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def condition_since(obj: dict[str, Any] | None, kind: str, status: str) -> dt.datetime | None:
    """When condition `kind` became `status`; None unless it is so now."""
    for condition in (obj or {}).get("status", {}).get("conditions", []):
        if condition["type"] == kind and condition["status"] == status:
            return parse_time(condition.get("lastTransitionTime"))
    return None


def event_time(crds: Cluster, namespace: str, name: str, reason: str) -> dt.datetime | None:
    """When the first event `reason` about `name` was posted."""
    for event in events_for(crds, namespace, name):
        if event["reason"] == reason:
            return parse_time(event.get("firstTimestamp") or event.get("eventTime"))
    return None
