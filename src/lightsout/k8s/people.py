"""API calls only a person's `lightsout` command makes, with their own kubeconfig's rights.

Kept out of `lightsout.k8s.api`, whose calls are the operator's and define the Helm chart's RBAC
rules (tests/harness/permissions.py derives them from that module): the operator never reads
pod logs or watches CronJobs, so its ServiceAccount may not. Called by `lightsout logs` and
`lightsout trace record` (`lightsout.cli`, `lightsout.commands.record`), with the command's own
`Api`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from kubernetes import watch
from kubernetes.client import ApiException

from lightsout.k8s.api import Api


def pod_log(api: Api, namespace: str, name: str) -> bytes:
    """The pod's container output, which the API server fetches from its node's kubelet; raises
    ApiException when the pod is gone or its kubelet cannot serve it (`api.error_message` says
    why)."""
    # Unparsed (the raw urllib3 response), so bytes that are not UTF-8 reach the terminal.
    response: Any = api.core().read_namespaced_pod_log(name, namespace, _preload_content=False)
    return cast(bytes, response.data)


# ---------------------------------------------------------------- `lightsout trace record`
class ExpiredError(Exception):
    """The resourceVersion to watch from is too old (410 Gone): list again."""


#: What the recorder lists and watches: per kind, the namespaced and the cluster-wide call.
_KINDS = {
    "pods": ("core", "list_namespaced_pod", "list_pod_for_all_namespaces"),
    "jobs": ("batch", "list_namespaced_job", "list_job_for_all_namespaces"),
    "cronjobs": ("batch", "list_namespaced_cron_job", "list_cron_job_for_all_namespaces"),
}


def _lister(api: Api, kind: str, namespace: str | None) -> tuple[Any, tuple[str, ...]]:
    group, namespaced, everywhere = _KINDS[kind]
    found = api.core() if group == "core" else api.batch()
    if namespace:
        return getattr(found, namespaced), (namespace,)
    return getattr(found, everywhere), ()


def list_objects(api: Api, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
    """Pods, Jobs or CronJobs of one namespace (None: all) as plain dicts, and the list's
    resourceVersion to watch from."""
    call, args = _lister(api, kind, namespace)
    data = call(*args, _preload_content=False).json()
    return list(data.get("items") or []), str(data["metadata"].get("resourceVersion") or "")


def watch_objects(
    api: Api, kind: str, namespace: str | None, resource_version: str, seconds: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event type, object as a plain dict) from `resource_version` on, for up to `seconds`
    (the server then ends the watch). Bookmarks come through as ("BOOKMARK", {metadata with
    the resourceVersion}); an expired resourceVersion raises ExpiredError."""
    call, args = _lister(api, kind, namespace)
    stream = watch.Watch().stream(
        call,
        *args,
        resource_version=resource_version,
        timeout_seconds=seconds,
        allow_watch_bookmarks=True,
        # A client-side limit too: a connection that went silent must not block for ever.
        _request_timeout=(10, seconds + 30),
    )
    try:
        for event in stream:
            yield str(event["type"]), cast(dict[str, Any], event["raw_object"])
    except ApiException as exc:
        if exc.status == 410:
            raise ExpiredError(str(exc.reason)) from exc
        raise
