"""The providerID of a managed machine's core Node: cluster-autoscaler matches instances to
Nodes by nothing else.

A machine's providerID is its `spec.providerID`, else `lightsout://<namespace>/<name>`
(`planning.autoscaler.nodegroups.provider_id`, the one scheme). When the core Node registers without
one (a kubelet started without `--provider-id`), `ensure` sets it — Kubernetes lets
`spec.providerID` go from empty to a value once, never change. A core Node that already carries
a different one is left alone and reported as the condition `ProviderIDConflict`
(`planning.machine.passes.provider_id_reported`, from the `ids` read here)
(the externalgrpc provider then knows the instance by the Node's own providerID, so
cluster-autoscaler still matches it).

Called by `execution.reconcile.Reconciler.reconcile` once per pass, with the cached core Node
and the machine's `wanted` providerID.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lightsout.k8s.api import Api
from lightsout.models.node import NodeSpec
from lightsout.planning.autoscaler.nodegroups import provider_id
from lightsout.planning.machine.passes import ProviderIDs
from lightsout.state.parse import as_str, dig

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def wanted(machine: Obj, spec: NodeSpec) -> str:
    """The providerID the machine's core Node should carry."""
    meta = machine.get("metadata") or {}
    return provider_id(
        str(meta.get("namespace") or ""), str(meta.get("name") or ""), spec.provider_id
    )


def current(core_node: Obj | None) -> str:
    return as_str(dig(core_node, "spec", "providerID"))


def ids(core_node: Obj | None, want: str) -> ProviderIDs:
    """The wanted providerID and the one the core Node carries, for the pass's verdict."""
    return ProviderIDs(wanted=want, seen=current(core_node))


def patch(core_node: Obj | None, want: str) -> dict[str, Any] | None:
    """The patch that gives the core Node `want`; None when it has it, or has another one."""
    if core_node is None or current(core_node):
        return None
    return {"spec": {"providerID": want}}


def ensure(api: Api, core_node: Obj | None, want: str) -> Obj | None:
    """Sets the core Node's providerID `want` when it has none; returns the core Node as it now
    is."""
    change = patch(core_node, want)
    if core_node is None or change is None:
        return core_node
    name = str(core_node["metadata"]["name"])
    log.info("core Node %s: spec.providerID set to %s", name, change["spec"]["providerID"])
    try:
        updated: Obj = api.patch_node(name, change)
    except Exception:
        # Most likely its kubelet set one meanwhile (the field is immutable once set): the next
        # pass reads it and reports it. The machine's power work must not wait on this.
        log.warning("core Node %s: setting spec.providerID failed", name, exc_info=True)
        return core_node
    return updated
