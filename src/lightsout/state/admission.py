"""What the deferrable-Jobs admission webhook does with a Job's CREATE (pure, no I/O).

A Job that may wait for cheap hours (`state.types.deferrable`: FINISH_BY or MAX_DELAY, and no
Kueue queue) is created suspended and marked DEFERRED, as Kueue admits its Jobs: no pod exists
until the planner (`planning.autoscaler.deferral`) releases it with `spec.suspend: false`
(`k8s.api.Api.release_job`). A Job its author created suspended already is only marked: the
planner governs it the same way. The webhook (`lightsout.handlers.admission`) hands kopf the
patch returned here; a Job the operator is down for is admitted as it is and runs at once.
The replay (`simulate.replay.deferred`) admits the Jobs it creates, CronJob runs and a trace's
bare Jobs alike, through `admitted`: the same decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightsout.state.types import DEFERRED, deferrable


def held_patch(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that holds a deferrable Job at its CREATE (`spec.suspend` and the
    DEFERRED annotation), only the annotation for a Job suspended by its author, or None: a
    Job that is not deferrable, or one Kueue governs.

    A dry run gets the same patch: it is only the answer (nothing is stored, nothing else
    changes), and `kubectl create --dry-run=server` then shows what a real create does."""
    meta = job.get("metadata") or {}
    if not deferrable(meta.get("annotations") or {}, meta.get("labels") or {}):
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {DEFERRED: "true"}}}
    if (job.get("spec") or {}).get("suspend") is not True:
        patch["spec"] = {"suspend": True}
    return patch


def admitted(job: Mapping[str, Any]) -> dict[str, Any]:
    """The Job as the API server stores it after the webhook: `held_patch` merged in (a copy;
    `job` unchanged when it is not held)."""
    out = dict(job)
    patch = held_patch(job)
    if patch is None:
        return out
    meta = dict(out.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
    out["metadata"] = meta
    out["spec"] = {**(out.get("spec") or {}), **patch.get("spec", {})}
    return out
