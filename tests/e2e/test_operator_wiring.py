"""The operator runs against the real API server and writes what it observes into status."""

from __future__ import annotations

import json

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from tests.harness.wait import events_for, get_json, wait_for

NODE = {
    "apiVersion": "lightsout.dev/v1alpha1",
    "kind": "Node",
    "metadata": {"name": "wired"},
    "spec": {
        "group": "homelab",
        "kubernetesNodeName": "wired",
        "driver": {
            "redfish": {
                "endpoint": "https://127.0.0.1:8443",
                "systemId": "4f0a7c2e-8a51-4d1c-9b8e-2f6b1a3c5d70",
                "credentialsSecretRef": {"name": "bmc"},
            }
        },
    },
}


def test_created_node_gets_status_and_event(
    crds: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    group = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "homelab"},
    }
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(group))
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(NODE))

    def observed() -> dict[str, object] | None:
        obj = get_json(crds, "lsn", "wired", "-n", namespace)
        status = obj.get("status") or {}
        return status if status.get("observedGeneration") == obj["metadata"]["generation"] else None

    status = wait_for(observed, 60, "the operator to write status.observedGeneration")
    assert status["phase"]
    events = wait_for(lambda: events_for(crds, namespace, "wired"), 30, "an event on the Node")
    # A new machine with no core Node and no health result is taken as off, and says so.
    assert status["phase"] == "Off"
    assert "ObservedOff" in {e["reason"] for e in events}
    assert operator.records(), "the operator logs JSON lines"

    # The Group is recounted a moment after each change of its machines: a count taken before
    # the machine had its phase holds it in `total` only, so wait for the count of an Off one.
    def counted_off() -> dict[str, int] | None:
        status = get_json(crds, "lsg", "homelab", "-n", namespace).get("status") or {}
        nodes: dict[str, int] = status.get("nodes") or {}
        return nodes if nodes.get("off") == 1 else None

    counts = wait_for(
        counted_off,
        30,
        "the Group to count its machine as off",
    )
    assert counts["total"] == 1
    assert counts["on"] + counts["transitioning"] + counts["failed"] == 0
