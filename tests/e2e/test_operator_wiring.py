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
    counts = wait_for(
        lambda: (get_json(crds, "lsg", "homelab", "-n", namespace).get("status") or {}).get(
            "nodes"
        ),
        30,
        "the Group to count its machine",
    )
    assert counts["total"] == 1
    assert counts["off"] + counts["transitioning"] + counts["failed"] == 1
