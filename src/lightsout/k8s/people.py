"""API calls only a person's `lightsout` command makes, with their own kubeconfig's rights.

Kept out of `lightsout.k8s.api`, whose calls are the operator's and define the Helm chart's RBAC
rules (tests/harness/permissions.py derives them from that module): the operator never reads
pod logs, so its ServiceAccount may not. Called by `lightsout logs` (`lightsout.cli`).
"""

from __future__ import annotations

from typing import Any, cast

from lightsout.k8s.api import core


def pod_log(namespace: str, name: str) -> bytes:
    """The pod's container output, which the API server fetches from its node's kubelet; raises
    ApiException when the pod is gone or its kubelet cannot serve it (`api.error_message` says
    why)."""
    # Unparsed (the raw urllib3 response), so bytes that are not UTF-8 reach the terminal.
    response: Any = core().read_namespaced_pod_log(name, namespace, _preload_content=False)
    return cast(bytes, response.data)
