"""Reconciles `groups.lightsout.dev`: keeps each Group's machine counts current.

Every change of a machine (a Lights-Out Node) recounts its Group, so `kubectl get lsg` shows how
many machines are on, off, in transition or failed, and how many should be on (`targetSize`,
the machines whose desired power state is On).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION
from lightsout.k8s import api
from lightsout.models.enums import Phase

_TRANSITIONING = {
    Phase.POWERING_ON,
    Phase.BOOTING,
    Phase.DRAINING,
    Phase.POWERING_OFF,
    Phase.PROVISIONING,
    Phase.DEPROVISIONING,
}


def group_counts(machines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`status.nodes` and `status.targetSize` of a Group from its machines (pure)."""
    counts = {"total": 0, "on": 0, "off": 0, "transitioning": 0, "failed": 0}
    target = 0
    for machine in machines:
        phase = (machine.get("status") or {}).get("phase")
        counts["total"] += 1
        if phase == Phase.READY:
            counts["on"] += 1
        elif phase == Phase.OFF:
            counts["off"] += 1
        elif phase == Phase.FAILED:
            counts["failed"] += 1
        elif phase in _TRANSITIONING:
            counts["transitioning"] += 1
        if (machine.get("spec") or {}).get("desiredPowerState") == "On":
            target += 1
    return {"nodes": counts, "targetSize": target}


def recount(namespace: str, group: str) -> None:
    current = api.get_resource(namespace, "groups", group)
    if current is None:
        return
    machines = api.list_resources(namespace, "nodes", field_selector=f"spec.group={group}")
    status = {
        **group_counts(machines),
        "observedGeneration": current["metadata"].get("generation"),
    }
    old = current.get("status") or {}
    if any(old.get(key) != value for key, value in status.items()):
        api.patch_status(namespace, "groups", group, status)


@kopf.on.resume(API_GROUP, API_VERSION, "groups")
@kopf.on.create(API_GROUP, API_VERSION, "groups")
@kopf.on.update(API_GROUP, API_VERSION, "groups", field="spec")
def observe_group(name: str, namespace: str | None, **_: Any) -> None:
    if namespace is not None:
        recount(namespace, name)


@kopf.on.event(API_GROUP, API_VERSION, "nodes")
def machine_changed(spec: kopf.Spec, namespace: str | None, **_: Any) -> None:
    group = spec.get("group")
    if namespace is not None and group:
        recount(namespace, str(group))
