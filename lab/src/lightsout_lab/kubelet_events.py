"""The stand-in kubelet's events about its pods (`lightsout_lab.kubelet`), as a real kubelet
posts them: core v1 Events in the pod's namespace, `source: {component: kubelet, host: NODE}`,
`reportingComponent: kubelet`, `reportingInstance: NODE`.

Aggregated as client-go's event recorder does: the same event again (same pod, type, reason
and message) bumps the one Event's `count` and `lastTimestamp` instead of adding another, so a
mount retried every few seconds shows as `FailedMount (x12 over 3m)` in `kubectl describe`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException

from lightsout_lab.kubelet_status import now

log = logging.getLogger(__name__)

COMPONENT = "kubelet"
WARNING = "Warning"


@dataclass
class EventRecorder:
    """Posts and counts up the events of the pods on node `host`."""

    api: client.ApiClient
    host: str
    #: (pod uid, type, reason, message) → (the Event's name, its count).
    _posted: dict[tuple[str, str, str, str], tuple[str, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def warning(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        meta = pod["metadata"]
        key = (str(meta.get("uid", "")), WARNING, reason, message)
        with self._lock:
            name, count = self._posted.get(key, ("", 0))
        events = client.CoreV1Api(self.api)
        try:
            if not name:
                # A create whose answer was lost (an apiserver timeout under load) may still
                # have stored the Event: count that one up rather than post a second.
                name, count = self._stored(events, meta, reason, message)
            if name and not self._count_up(events, meta, name, count + 1, message):
                name = ""  # deleted meanwhile (events expire): start over, as the recorder does
            if not name:
                name, count = self._create(events, meta, reason, message), 0
        except ApiException as exc:
            log.warning("event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)
            return
        with self._lock:
            self._posted[key] = (name, count + 1)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Drop what is kept of a pod's events (it runs, or it is gone)."""
        uid = str(pod["metadata"].get("uid", ""))
        with self._lock:
            for key in [k for k in self._posted if k[0] == uid]:
                del self._posted[key]

    def _stored(
        self, events: client.CoreV1Api, meta: Mapping[str, Any], reason: str, message: str
    ) -> tuple[str, int]:
        """This node's Event for the pod, reason and message already stored, with its count;
        ("", 0) when there is none."""
        found = events.list_namespaced_event(
            meta["namespace"],
            field_selector=f"involvedObject.name={meta['name']},reason={reason}",
        )
        for event in found.items:
            same_pod = event.involved_object.uid == meta.get("uid")
            ours = event.source is not None and event.source.host == self.host
            if same_pod and ours and event.message == message:
                return str(event.metadata.name), event.count or 1
        return "", 0

    def _count_up(
        self,
        events: client.CoreV1Api,
        meta: Mapping[str, Any],
        name: str,
        count: int,
        message: str,
    ) -> bool:
        """Patch the Event as the recorder does; False when it no longer exists."""
        try:
            patch = {"count": count, "lastTimestamp": now(), "message": message}
            events.patch_namespaced_event(name, meta["namespace"], patch)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _create(
        self, events: client.CoreV1Api, meta: Mapping[str, Any], reason: str, message: str
    ) -> str:
        stamp = now()
        # The recorder's naming: the object's name and the time in nanoseconds, in hex.
        name = f"{meta['name']}.{time.time_ns():x}"
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": WARNING,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT, "host": self.host},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        events.create_namespaced_event(meta["namespace"], body)
        return name
