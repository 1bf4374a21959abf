"""The pod status the stand-in kubelet (`lightsout_lab.kubelet`) reports at each step of a pod:
its volumes cannot be mounted yet (`creating`), its process runs (`running`), it ended
(`terminated`). Pure builders of the `status` patched onto the pod, shaped as a real kubelet's:
the operator reads the container's state and termination message from them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

#: The container state a real kubelet reports until the pod's sandbox and volumes are ready.
CONTAINER_CREATING = "ContainerCreating"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def creating(pod: Mapping[str, Any], started: str) -> dict[str, Any]:
    """While the pod's volumes cannot be mounted: no sandbox yet, so no pod IP, and the
    container waiting in ContainerCreating (with no message: the cause is in the events)."""
    return {
        "phase": "Pending",
        "startTime": started,
        "hostIP": "127.0.0.1",
        "conditions": _conditions(pod, started, sandbox=False, ready=False),
        "containerStatuses": [_container(pod, {"waiting": {"reason": CONTAINER_CREATING}})],
    }


def running(pod: Mapping[str, Any], started: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "startTime": started,
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "conditions": _conditions(pod, now(), sandbox=True, ready=True),
        "containerStatuses": [_container(pod, {"running": {"startedAt": started}})],
    }


def terminated(
    pod: Mapping[str, Any], started: str, code: int, reason: str, message: str
) -> dict[str, Any]:
    ended = now()
    state = {
        "exitCode": code,
        "reason": reason,
        "message": message,
        "startedAt": started,
        "finishedAt": ended,
    }
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "startTime": started,
        "conditions": _conditions(pod, ended, sandbox=False, ready=False, done=True),
        "containerStatuses": [_container(pod, {"terminated": state})],
    }


def _container(pod: Mapping[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }


def _conditions(
    pod: Mapping[str, Any], at: str, *, sandbox: bool, ready: bool, done: bool = False
) -> list[dict[str, Any]]:
    """The pod conditions a kubelet owns (PodScheduled is the scheduler's). Status patches
    merge conditions by type, so each report carries all of them."""
    name = pod["spec"]["containers"][0]["name"]
    waiting = f"containers with unready status: [{name}]"
    unready = (
        {"reason": "PodCompleted"} if done else {"reason": "ContainersNotReady", "message": waiting}
    )

    def condition(kind: str, true: bool, why: Mapping[str, str]) -> dict[str, Any]:
        found = {"type": kind, "status": str(true), "lastTransitionTime": at}
        return found if true else {**found, **why}

    return [
        condition("PodReadyToStartContainers", sandbox, {}),
        condition("Initialized", True, {}),
        condition("Ready", ready, unready),
        condition("ContainersReady", ready, unready),
    ]
