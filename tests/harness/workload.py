"""The workload the drain e2e tests put on their machines: a Deployment of web pods and the
PodDisruptionBudget that guards it (both named ``web``, selecting ``app: web``), and batch Jobs.
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


def batch_job(
    name: str, requests: Mapping[str, str], annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Job of one busybox pod asking for ``requests``; ``annotations`` go on its pod (the
    lab's kwok keeps a pod with ``lightsout_lab.kwok_stages.HOLD_ANNOTATION`` Running)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": dict(annotations or {})},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [KWOK_TOLERATION],
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "resources": {"requests": dict(requests)},
                        }
                    ],
                },
            },
        },
    }
