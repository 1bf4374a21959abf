"""The workload the drain e2e tests put on their machines: a Deployment of web pods and the
PodDisruptionBudget that guards it (both named ``web``, selecting ``app: web``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Lets the pods run on the stand-in kubelet's (kwok-style) Nodes.
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists"}


def web_deployment(requests: Mapping[str, str], replicas: int = 2) -> dict[str, Any]:
    """``replicas`` nginx pods, each asking for ``requests``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "tolerations": [KWOK_TOLERATION],
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx",
                            "resources": {"requests": dict(requests)},
                        }
                    ],
                },
            },
        },
    }


def web_pdb(min_available: int) -> dict[str, Any]:
    """A PodDisruptionBudget keeping ``min_available`` of the web pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}},
    }
