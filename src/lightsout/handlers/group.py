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
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from lightsout.actuation.inputs import status_patch
from lightsout.execution.energy import group_energy
from lightsout.k8s.api import Api
from lightsout.models.group import GroupSpec
from lightsout.planning.types import TRANSITIONING, Phase
from lightsout.state.parse import dig
from lightsout.state.status import group_status, node_status

#: The `status.nodes` count each phase adds to (Unknown: none but the total).
_COUNTED: dict[Phase | None, str] = {
    Phase.READY: "on",
    Phase.OFF: "off",
    Phase.FAILED: "failed",
    **dict.fromkeys(TRANSITIONING, "transitioning"),
}


def group_counts(machines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`status.nodes` and `status.targetSize` of a Group from its machines (pure)."""
    machines = list(machines)
    counted = Counter(_COUNTED.get(node_status(m).phase) for m in machines)
    counts = {k: counted[k] for k in ("on", "off", "transitioning", "failed")}
    target = sum(dig(m, "spec", "desiredPowerState") == "On" for m in machines)
    return {"nodes": {"total": len(machines), **counts}, "targetSize": target}


def recount(
    api: Api, group: Mapping[str, Any], spec: GroupSpec, machines: Iterable[Mapping[str, Any]]
) -> None:
    """Write the Group's counts when they differ from its status (a worker thread calls it)."""
    meta = group["metadata"]
    machines = list(machines)
    status = {**group_counts(machines), "observedGeneration": meta.get("generation")}
    changed = status_patch(group_status(group).stored, status)
    energy = group_energy(group, spec, machines, dt.datetime.now(dt.UTC))
    if energy is not None:
        changed["energy"] = energy
    if changed:
        api.patch_status(meta["namespace"], "groups", meta["name"], changed)
