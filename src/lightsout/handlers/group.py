"""Reconciles `groups.lightsout.dev`: counts of its machines and its autoscaling policy."""

from __future__ import annotations

from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION


@kopf.on.resume(API_GROUP, API_VERSION, "groups")
@kopf.on.create(API_GROUP, API_VERSION, "groups")
@kopf.on.update(API_GROUP, API_VERSION, "groups", field="spec")
def observe_group(meta: kopf.Meta, patch: kopf.Patch, **_: Any) -> None:
    patch.status["observedGeneration"] = meta.get("generation")
