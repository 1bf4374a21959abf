"""Polling helpers for end-to-end tests: wait for what a user would see, with a clear failure."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from lightsout_lab import Cluster
from tests.harness.kube import UNHANDLED, kube_for

#: A wait without an interval of its own probes after 0.5 s, then each time 1.5 times later,
#: up to every 3 s: a probe is an API request (once a `kubectl` run, see `get_json`), and three
#: labs waiting minutes at 2 probes a second would spend a core on asking.
FIRST_INTERVAL = 0.5
INTERVAL_GROWTH = 1.5
MAX_INTERVAL = 3.0


def wait_for[T](
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float | None = None,
    seen: Callable[[], Any] | None = None,
) -> T:
    """Call probe until it returns something truthy; fail naming `what` and the last value.
    `interval`: seconds between probes (default: backing off from 0.5 s to 3 s). `seen`: what
    the failure shows instead of the probe's last (falsy) answer, e.g. the statuses waited on,
    so that a timeout in CI says where things stood."""
    end = time.monotonic() + timeout
    last: T | None = None
    pause = FIRST_INTERVAL if interval is None else interval
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > end:
            shown = last if seen is None else seen()
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {shown!r}")
        time.sleep(pause)
        if interval is None:
            pause = min(pause * INTERVAL_GROWTH, MAX_INTERVAL)


def holds[T](probe: Callable[[], T | None], until: float, what: str, interval: float = 0.5) -> T:
    """Call probe until `time.monotonic()` passes `until`, failing as soon as it returns
    something falsy (naming `what` and that value); return its last value.

    For "nothing happens" checks: `until` is the moment by which the wrong thing would have
    happened (a deadline the operator itself recorded, plus its reaction time), not a guess.
    """
    while True:
        last = probe()
        if not last:
            raise AssertionError(f"{what} stopped holding; last: {last!r}")
        if time.monotonic() > until:
            return last
        time.sleep(interval)


def get_json(cluster: Cluster, *args: str) -> Any:
    """`kubectl get ARGS -o json` parsed; None when the object does not exist.

    Answered in-process by the cluster's cached API client (tests/harness/kube.py) in the same
    shape; by kubectl itself for the arguments that client does not map."""
    kube = kube_for(cluster)
    if kube is not None:
        found = kube.get(args)
        if found is not UNHANDLED:
            return found
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr or "not found" in proc.stderr:
            return None
        raise AssertionError(f"kubectl get {' '.join(args)}: {proc.stderr}")
    return json.loads(proc.stdout)


def says_ready(obj: Any) -> bool:
    """Whether a pod or Node object (as `get_json` returns it) has the condition Ready=True."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def events_with_reason(
    cluster: Cluster, namespace: str, name: str, reason: str, timeout: float = 30
) -> list[tuple[str, str]]:
    """(type, message) of the object's events with this reason, once there is one (events are
    posted right after the status that says the same is written)."""
    found: list[tuple[str, str]] = wait_for(
        lambda: [
            (e["type"], e["message"])
            for e in events_for(cluster, namespace, name)
            if e["reason"] == reason
        ],
        timeout,
        f"a {reason} event on {name}",
    )
    return found


def events_until(
    cluster: Cluster,
    namespace: str,
    name: str,
    ok: Callable[[list[dict[str, Any]]], bool],
    what: str,
    timeout: float = 30,
) -> list[dict[str, Any]]:
    """The object's events, oldest first, once `ok` holds for them. The operator posts an event
    right after the status write that says the same, so a test that has just seen the status
    must wait for the event rather than read the events once."""

    def probe() -> list[dict[str, Any]] | None:
        events = events_for(cluster, namespace, name)
        return events if ok(events) else None

    return wait_for(probe, timeout, f"{what} (events of {name})")


def reasons_until(
    cluster: Cluster, namespace: str, name: str, *reasons: str, timeout: float = 30
) -> list[str]:
    """The reasons of the object's events, oldest first, once every one of `reasons` is among
    them."""

    def found(events: list[dict[str, Any]]) -> bool:
        return set(reasons) <= {e["reason"] for e in events}

    events = events_until(cluster, namespace, name, found, f"events {', '.join(reasons)}", timeout)
    return [e["reason"] for e in events]


def warned(
    cluster: Cluster,
    namespace: str,
    name: str,
    saying: str = "",
    reason: str | None = None,
    timeout: float = 30,
) -> list[dict[str, Any]]:
    """The object's events once one is a Warning (with `reason`, when given) whose message
    contains `saying`."""

    def found(events: list[dict[str, Any]]) -> bool:
        return any(
            e["type"] == "Warning" and reason in (None, e["reason"]) and saying in e["message"]
            for e in events
        )

    what = f"a Warning{f' {reason}' if reason else ''} saying {saying!r}"
    return events_until(cluster, namespace, name, found, what, timeout)


def events_for(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """Events whose involved object has this name, oldest first."""
    data = get_json(
        cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )
    items: list[dict[str, Any]] = data["items"] if data else []
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
