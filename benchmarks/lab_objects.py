"""The objects the benchmarks' Labs start with: the BMC Secret and powered-off Redfish machines.

A machine's endpoint is a placeholder: ``Lab`` starts one sushy-tools emulator with a system
per Node's ``systemId`` and points every Redfish Node at it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

GROUP = "bench"
PASSWORD = "bench-password"  # noqa: S105 - the throwaway account of a local emulator


def bmc_secret() -> dict[str, Any]:
    """The Secret every machine's ``credentialsSecretRef`` names (the Lab's BMC account)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bmc"},
        "stringData": {"username": "admin", "password": PASSWORD},
    }


def redfish_machine(
    name: str,
    *,
    cpu: str,
    memory: str,
    labels: Mapping[str, str] | None = None,
    group: str = GROUP,
) -> dict[str, Any]:
    """A powered-off Redfish machine of ``group`` with this capacity (and node labels)."""
    spec: dict[str, Any] = {
        "desiredPowerState": "Off",
        "group": group,
        "kubernetesNodeName": name,
        "driver": {
            "redfish": {
                "endpoint": "https://127.0.0.1:1",
                "systemId": str(uuid.uuid4()),
                "credentialsSecretRef": {"name": "bmc"},
                "tls": {"insecureSkipVerify": True},
                "gracefulShutdownSeconds": 10,
            }
        },
        "resources": {"cpu": cpu, "memory": memory, "pods": 110},
    }
    if labels is not None:
        spec["labels"] = dict(labels)
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
    }
