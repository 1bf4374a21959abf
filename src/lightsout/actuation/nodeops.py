"""Pure helpers for what the operator does to core Nodes: readiness, metadata, drain selection.

Called by `lightsout.execution.actuator` (which does the API calls) and by the observation
builder. No I/O here: everything takes and returns plain dicts (core objects, which have no
model here: read with `state.parse.dig`, tolerant of garbage).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lightsout.planning.types import STARTUP_TAINT_KEY
from lightsout.state.parse import condition, dig
from lightsout.state.types import MIRROR_POD

Obj = Mapping[str, Any]


def node_ready(node: Obj | None) -> bool:
    return (condition(dig(node, "status"), "Ready") or {}).get("status") == "True"


def node_unregistered(node: Obj | None) -> bool:
    """The Node carries the startup taint and no kubelet ever reported on it: Lights-Out made
    it before a power-on. A kubelet fills `status.nodeInfo` when it registers (its first
    POST, or its first status update of a Node that already existed); the node lifecycle
    controller may add conditions (Unknown, `NodeStatusNeverUpdated`) but never nodeInfo."""
    if not node or not has_startup_taint(node):
        return False
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return not info.get("kubeletVersion")


def node_cordoned(node: Obj | None) -> bool:
    return bool(dig(node, "spec", "unschedulable"))


def _taint_key(taint: Obj) -> tuple[str, str]:
    return (str(taint.get("key")), str(taint.get("effect")))


#: The startup taint as it is put on a core Node (see `STARTUP_TAINT_KEY`).
STARTUP_TAINT: Mapping[str, str] = {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"}


def taints_of(node: Obj | None) -> list[Obj]:
    """The taints of a core Node (of a kubelet's Node object), as a new list."""
    return list(dig(node, "spec", "taints") or [])


def has_startup_taint(node: Obj | None) -> bool:
    return any(t.get("key") == STARTUP_TAINT_KEY for t in taints_of(node))


def metadata_patch(
    node: Obj,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, str]],
    *,
    drop: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The merge patch that gives `node` these labels and taints, or None when it has them.

    Taints are merged by (key, effect): ours replace a same-keyed one, others are kept, except
    those whose key is in `drop` (the startup taint once the machine is Ready). The patch
    carries the Node's resourceVersion: the taint list is replaced whole, so a taint another
    writer (the node lifecycle controller) added since the read must not be lost; such a race
    is a 409 and the caller tries again.
    """
    wanted = {_taint_key(t): dict(t) for t in taints}
    kept = [
        t for t in taints_of(node) if _taint_key(t) not in wanted and str(t.get("key")) not in drop
    ]
    return node_patch(node, labels, kept + [wanted[k] for k in sorted(wanted)])


def _taint_set(taints: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted(
        (str(t.get("key")), str(t.get("value", "")), str(t.get("effect"))) for t in taints
    )


def node_patch(
    node: Obj, labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The merge patch that sets these labels (others untouched) and exactly this taint list
    on `node`, conditional on its resourceVersion; None when it has them already."""
    current_labels = (node.get("metadata") or {}).get("labels") or {}
    patch: dict[str, Any] = {}
    missing = {k: v for k, v in labels.items() if current_labels.get(k) != v}
    if missing:
        patch["metadata"] = {"labels": missing}
    if _taint_set(taints_of(node)) != _taint_set(taints):
        patch["spec"] = {"taints": list(taints)}
    if not patch:
        return None
    version = (node.get("metadata") or {}).get("resourceVersion")
    if version:
        patch.setdefault("metadata", {})["resourceVersion"] = version
    return patch


def metadata_applied(
    node: Obj | None, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]]
) -> bool:
    """The core Node carries these labels and taints, and no longer the startup taint."""
    return (
        node is not None and metadata_patch(node, labels, taints, drop=(STARTUP_TAINT_KEY,)) is None
    )


def _owned_by_daemonset(pod: Obj) -> bool:
    return any(
        ref.get("kind") == "DaemonSet"
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
    )


def evictable(pod: Obj) -> bool:
    """Pods a drain must move: not DaemonSet-owned, not mirror pods, not already finished."""
    meta = pod.get("metadata") or {}
    if MIRROR_POD in (meta.get("annotations") or {}):
        return False
    if _owned_by_daemonset(pod):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pods_to_drain(pods: Iterable[Obj]) -> list[Obj]:
    return [pod for pod in pods if evictable(pod)]


def _selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def blocking_pdb(pod: Obj, pdbs: Iterable[Obj]) -> str | None:
    """`namespace/name` of the PodDisruptionBudget selecting `pod`, if any."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if _selector_matches(dig(pdb, "spec", "selector"), labels):
            return f"{pmeta.get('namespace')}/{pmeta.get('name')}"
    return None
