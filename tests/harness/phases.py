"""Every phase the Lights-Out Nodes of a namespace pass through, from a watch: the order in which
machines went on and off, as a person reading `kubectl get lsn -w` would tell it."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client, watch

GROUP, VERSION = "lightsout.dev", "v1alpha1"


def on_off(at: float, name: str, before: str, phase: str) -> list[tuple[float, str, str]]:
    """(at, name, "on" / "off") when a phase change powers a machine on or off."""
    if before == "Off" and phase != "Off":
        return [(at, name, "on")]
    if before != "Off" and phase == "Off":
        return [(at, name, "off")]
    return []


class PhaseWatch(threading.Thread):
    """Every phase each machine's status passes through, from a watch of the Lights-Out Nodes:
    a poll misses a phase shorter than its interval (a machine Off for a moment between its
    power-off Job and the power-on the planner wanted meanwhile), a watch sees every write."""

    def __init__(self, api: client.ApiClient, namespace: str, start: dt.datetime) -> None:
        super().__init__(daemon=True)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.start_time = start
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.phases: dict[str, str] = {}
        self.moments: list[tuple[float, str, str]] = []
        #: Every phase change seen (seconds, machine, phase), printed for a person comparing.
        self.timeline: list[tuple[float, str, str]] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                "nodes",
                timeout_seconds=5,
            )
            try:
                for event in stream:
                    self._seen(event["object"])
                    if self.stopped.is_set():
                        return
            except Exception:
                time.sleep(0.2)

    def _seen(self, machine: Mapping[str, Any]) -> None:
        seconds = (dt.datetime.now(dt.UTC) - self.start_time).total_seconds()
        name, phase = (
            str(machine["metadata"]["name"]),
            (machine.get("status") or {}).get("phase", "Off"),
        )
        with self.lock:
            before = self.phases.get(name, "Off")
            self.moments.extend(on_off(seconds, name, before, phase))
            if phase != before:
                self.timeline.append((round(seconds, 1), name, phase))
            self.phases[name] = phase

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
