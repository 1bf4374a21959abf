"""Reconciles `nodes.lightsout.dev`: one machine's power state machine."""

from __future__ import annotations

from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION


@kopf.on.resume(API_GROUP, API_VERSION, "nodes")
@kopf.on.create(API_GROUP, API_VERSION, "nodes")
@kopf.on.update(API_GROUP, API_VERSION, "nodes", field="spec")
def observe_node(
    spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, **_: Any
) -> None:
    phase = status.get("phase") or "Unknown"
    patch.status["observedGeneration"] = meta.get("generation")
    patch.status["phase"] = phase
    kopf.info(
        {"metadata": meta, "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "Node"},
        reason="Observed",
        message=f"desired power state {spec.get('desiredPowerState', 'Off')}, phase {phase}",
    )
