"""Per-machine `coordination.k8s.io/v1` Leases: names, bodies and every decision about them.

A Lease is held while an action runs on a machine, so two operator replicas, a person (who can
create or take a Lease with kubectl) and the autoscaler never act on one machine at once. The
actuator and the leader Lease read the Lease, ask this module what to write, and send it with
`create`, or with `replace` carrying the `resourceVersion` they read: if anyone changed the Lease
in between, the API server answers 409 Conflict and nobody wins by accident. Only `take` and
`give_back` call the API: one read and at most one write each.

Expiry: a Lease expires `leaseDurationSeconds` after its `renewTime` (else `acquireTime`). A
Lease with a holder but no duration or no time never expires: that is how a person pins a
machine by hand, and a Lease that cannot be proven expired is never taken over.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lightsout.execution.jobs import LABEL_MANAGED_BY, LABEL_NODE, MANAGED_BY
from lightsout.execution.naming import label_value, stable_hash
from lightsout.k8s.api import Api, ConflictError
from lightsout.planning.types import KubeletHeartbeat, LeaseState
from lightsout.state.parse import as_int, as_mapping, dig

LEASE_PREFIX = "lightsout"
LABEL_NAMESPACE = "lightsout.dev/node-namespace"
ANNOTATION_MACHINE = "lightsout.dev/machine"


def lease_name(namespace: str, node: str) -> str:
    """`lightsout.<namespace>.<node>`: namespaces hold no dots, so no two machines collide."""
    name = f"{LEASE_PREFIX}.{namespace}.{node}"
    if len(name) <= 253:
        return name
    return f"{name[:240]}.{stable_hash(name)}"


def format_micro_time(moment: datetime) -> str:
    """A `MicroTime`: RFC 3339 in UTC with exactly six fractional digits and `Z`."""
    if moment.tzinfo is None:
        raise ValueError("Lease times must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: Any) -> datetime | None:
    """Parse a `MicroTime` or `Time` string; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def build_lease(
    name: str,
    namespace: str,
    holder: str,
    duration_seconds: int,
    now: datetime,
    *,
    machine: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A new Lease held by `holder` from `now`; `machine` is (namespace, name) for labels."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY},
    }
    if machine is not None:
        node_namespace, node = machine
        metadata["labels"][LABEL_NODE] = label_value(node)
        metadata["labels"][LABEL_NAMESPACE] = label_value(node_namespace)
        metadata["annotations"] = {ANNOTATION_MACHINE: f"{node_namespace}/{node}"}
    stamp = format_micro_time(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


def lease_expiry(lease: Mapping[str, Any] | None) -> datetime | None:
    """When the Lease's current hold ends, or None if it cannot be shown to end (or there is
    no Lease)."""
    if lease is None:
        return None
    since, duration = _held(lease)
    if since is None or duration is None:
        return None
    return since + timedelta(seconds=duration)


def kubelet_heartbeat(lease: Mapping[str, Any] | None) -> KubeletHeartbeat | None:
    """A kubelet's Lease (`kube-node-lease/<node>`) as its heartbeat; None without one. A Lease
    without a duration is taken at the kubelet's default, 40 s."""
    if lease is None:
        return None
    renewed, duration = _held(lease)
    return KubeletHeartbeat(renewed, duration if duration and duration > 0 else 40)


def _held(lease: Mapping[str, Any]) -> tuple[datetime | None, int | None]:
    """When the Lease was last renewed (else acquired), and its duration in seconds."""
    spec = as_mapping(dig(lease, "spec"))
    duration = as_int(spec.get("leaseDurationSeconds"))
    since = parse_micro_time(spec.get("renewTime")) or parse_micro_time(spec.get("acquireTime"))
    return since, duration


def lease_state(lease: Mapping[str, Any] | None, holder: str, now: datetime) -> LeaseState:
    """Free, held by `holder`, held by someone else, or expired (anyone may take it)."""
    if lease is None:
        return LeaseState.FREE
    current = dig(lease, "spec", "holderIdentity")
    if not current:
        return LeaseState.FREE
    expiry = lease_expiry(lease)
    if expiry is not None and now >= expiry:
        return LeaseState.EXPIRED
    return LeaseState.HELD_BY_ME if current == holder else LeaseState.HELD_BY_OTHER


def acquire(
    lease: Mapping[str, Any], holder: str, duration_seconds: int, now: datetime
) -> dict[str, Any] | None:
    """Body to `replace` the Lease with so `holder` holds it; None if someone else holds it.

    Taking a free or expired Lease from another holder restarts `acquireTime` and counts a
    transition; acquiring a Lease already held renews it.
    """
    if lease_state(lease, holder, now) is LeaseState.HELD_BY_OTHER:
        return None
    body = _for_replace(lease)
    spec = body["spec"]
    previous = spec.get("holderIdentity")
    if previous != holder:
        spec["acquireTime"] = format_micro_time(now)
        spec["leaseTransitions"] = (as_int(spec.get("leaseTransitions")) or 0) + 1
    else:
        spec.setdefault("acquireTime", format_micro_time(now))
        spec["leaseTransitions"] = as_int(spec.get("leaseTransitions")) or 0
    spec["holderIdentity"] = holder
    spec["leaseDurationSeconds"] = duration_seconds
    spec["renewTime"] = format_micro_time(now)
    return body


def renew(lease: Mapping[str, Any], holder: str, now: datetime) -> dict[str, Any] | None:
    """Body extending `holder`'s hold from `now`; None unless `holder` is the holder.

    An expired Lease that still names `holder` can be renewed: nobody took it in between, and
    if someone does now, the replace fails on its resourceVersion.
    """
    if dig(lease, "spec", "holderIdentity") != holder:
        return None
    body = _for_replace(lease)
    body["spec"]["renewTime"] = format_micro_time(now)
    return body


def release(lease: Mapping[str, Any], holder: str, now: datetime) -> dict[str, Any] | None:
    """Body that frees the Lease; None unless `holder` holds it (never free someone else's)."""
    if dig(lease, "spec", "holderIdentity") != holder:
        return None
    body = _for_replace(lease)
    spec = body["spec"]
    spec.pop("holderIdentity", None)
    spec.pop("acquireTime", None)
    spec["renewTime"] = format_micro_time(now)
    return body


def take(
    api: Api,
    namespace: str,
    name: str,
    holder: str,
    now: datetime,
    *,
    duration_seconds: int,
    machine: tuple[str, str] | None = None,
) -> dict[str, Any] | None:
    """Create, take or renew the Lease so `holder` holds it: the Lease written, or None when
    someone else holds it or wrote it first (409 Conflict on the create or the replace).
    A machine's Lease (`machine` is its namespace and name) is created labelled with it."""
    current = api.get_lease(namespace, name)
    try:
        if current is None:
            body = build_lease(name, namespace, holder, duration_seconds, now, machine=machine)
            return api.create_lease(namespace, body)
        update = acquire(current, holder, duration_seconds, now)
        return None if update is None else api.replace_lease(namespace, name, update)
    except ConflictError:
        return None


def give_back(api: Api, namespace: str, name: str, holder: str, now: datetime) -> bool:
    """Free the Lease if `holder` holds it; False when it changed since the read (409): then it
    is left as it is."""
    current = api.get_lease(namespace, name)
    body = release(current, holder, now) if current else None
    if body is None:
        return True
    try:
        api.replace_lease(namespace, name, body)
    except ConflictError:
        return False
    return True


def _for_replace(lease: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy that keeps `metadata.resourceVersion` (the compare in compare-and-swap)."""
    body = copy.deepcopy(dict(lease))
    body.setdefault("apiVersion", "coordination.k8s.io/v1")
    body.setdefault("kind", "Lease")
    metadata = body.setdefault("metadata", {})
    # Server-side bookkeeping; left out, the API server keeps what it has.
    metadata.pop("managedFields", None)
    body["spec"] = dict(as_mapping(dig(body, "spec")))
    return body
