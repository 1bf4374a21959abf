"""Keeps each Group's machine counts and energy current (`status.nodes`, `status.targetSize`,
`status.energy`).

A change of a Group or of one of its machines puts the Group on the reconcilers' work queue
(`handlers/node.py`), which counts it from the watch caches a second later with `recount`, so
`kubectl get lsg` shows how many machines are on, off, in transition or failed, and how many
should be on (`targetSize`, the machines whose desired power state is On); its energy is the
sum of its machines' accounts (`execution.energy.group_energy`), rewritten only when that sum
no longer follows from what the Group holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from lightsout.execution.energy import group_energy
from lightsout.k8s.api import Api
from lightsout.models.enums import Phase
from lightsout.models.group import GroupSpec

#: The `status.nodes` count each phase adds to (Unknown: none but the total).
_COUNTED: dict[str | None, str] = {
    Phase.READY: "on",
    Phase.OFF: "off",
    Phase.FAILED: "failed",
    Phase.POWERING_ON: "transitioning",
    Phase.BOOTING: "transitioning",
    Phase.DRAINING: "transitioning",
    Phase.POWERING_OFF: "transitioning",
    Phase.PROVISIONING: "transitioning",
    Phase.DEPROVISIONING: "transitioning",
}


def group_counts(machines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`status.nodes` and `status.targetSize` of a Group from its machines (pure)."""
    counts = {"total": 0, "on": 0, "off": 0, "transitioning": 0, "failed": 0}
    target = 0
    for machine in machines:
        counts["total"] += 1
        if counted := _COUNTED.get((machine.get("status") or {}).get("phase")):
            counts[counted] += 1
        if (machine.get("spec") or {}).get("desiredPowerState") == "On":
            target += 1
    return {"nodes": counts, "targetSize": target}


def recount(
    api: Api, group: Mapping[str, Any], spec: GroupSpec, machines: Iterable[Mapping[str, Any]]
) -> None:
    """Write the Group's counts when they differ from its status (a worker thread calls it)."""
    meta = group["metadata"]
    machines = list(machines)
    status = {**group_counts(machines), "observedGeneration": meta.get("generation")}
    old = group.get("status") or {}
    changed = {key: value for key, value in status.items() if old.get(key) != value}
    energy = group_energy(group, spec, machines, dt.datetime.now(dt.UTC))
    if energy is not None:
        changed["energy"] = energy
    if changed:
        api.patch_status(meta["namespace"], "groups", meta["name"], changed)
