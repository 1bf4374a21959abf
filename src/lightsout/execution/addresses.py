"""Static addresses for clones that join by themselves, from the Group's `spec.addressPool`.

Called by the reconcile pass before it writes the status of a provision (`allocate`: a machine
whose pool is exhausted is not provisioned), by the actuator when it builds the provision Job
(`allocate` again, which finds the machine's own lease, and `network`: the extravars the
playbook writes into the cloud-init network-config), and after a phase change (`settle`: the
address is released once the machine is Off or Failed).

Each address in use is one coordination.k8s.io Lease in the Group's namespace, named after the
Group and the address (`lightsout-ip-<group>-<a-b-c-d>`): creating it is the lock. Two
provisions racing for one address (several operator workers, or replicas) both try to create
the same name and the API server lets exactly one succeed; the loser takes the next free
address. No status to read-modify-write, no resourceVersion to retry on.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from typing import Any

from lightsout.actuation.pool import (
    RELEASED,
    addresses,
    exhausted,
    free_addresses,
    pool_of,
)
from lightsout.execution import join
from lightsout.execution.naming import dns_label, label_value
from lightsout.k8s.api import Api, ConflictError
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec

log = logging.getLogger(__name__)

LABEL_POOL = "lightsout.dev/address-pool"
LABEL_MACHINE = "lightsout.dev/address-for"
ANNOTATION_ADDRESS = "lightsout.dev/address"

Obj = Mapping[str, Any]


def lease_name(group: str, address: str) -> str:
    return dns_label("lightsout-ip-", group, "-" + address.replace(".", "-"))


def _machine_selector(namespace: str, name: str) -> str:
    return f"{LABEL_MACHINE}={label_value(f'{namespace}.{name}')}"


def _lease(node: Obj, group: str, address: str) -> dict[str, Any]:
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(group, address),
            "namespace": meta["namespace"],
            "labels": {
                LABEL_POOL: label_value(group),
                LABEL_MACHINE: label_value(f"{meta['namespace']}.{meta['name']}"),
                join.LABEL_MANAGED_BY: "lightsout",
            },
            "annotations": {ANNOTATION_ADDRESS: address},
        },
        "spec": {"holderIdentity": f"{meta['namespace']}/{meta['name']}"},
    }


def allocate(api: Api, node: Obj, spec: NodeSpec, group: GroupSpec | None) -> str | None:
    """The machine's address (leased now, or its lease from an earlier pass); None without a
    pool. Raises PoolExhaustedError when every address is leased to other machines."""
    found = pool_of(spec, group)
    if found is None:
        return None
    meta = node["metadata"]
    namespace, group_name = meta["namespace"], spec.group
    in_pool = {str(a) for a in addresses(found)}
    for held in api.list_leases(namespace, _machine_selector(namespace, meta["name"])):
        address = (held["metadata"].get("annotations") or {}).get(ANNOTATION_ADDRESS)
        if address in in_pool:
            return str(address)
    taken = {
        str((lease["metadata"].get("annotations") or {}).get(ANNOTATION_ADDRESS))
        for lease in api.list_leases(namespace, f"{LABEL_POOL}={label_value(group_name)}")
    }
    for address in free_addresses(found, taken):
        try:
            api.create_lease(namespace, _lease(node, group_name, address))
        except ConflictError:
            continue  # another provision took it between the list and the create
        log.info("leased %s to %s/%s", address, namespace, meta["name"])
        return address
    raise exhausted(group_name, found)


def network(spec: NodeSpec, group: GroupSpec | None, address: str | None) -> dict[str, Any]:
    """The static network of the clone, for the provision playbook's network-config."""
    found = pool_of(spec, group)
    if found is None or address is None:
        return {}
    prefix = ipaddress.IPv4Network(found.cidr, strict=False).prefixlen
    static: dict[str, Any] = {"address": f"{address}/{prefix}"}
    if found.gateway:
        static["gateway"] = found.gateway
    if found.dns_servers:
        static["dns_servers"] = list(found.dns_servers)
    return {"network": static}


def release(api: Api, namespace: str, name: str) -> None:
    api.delete_leases(namespace, _machine_selector(namespace, name))


def settle(api: Api, node: Obj, spec: NodeSpec, previous_phase: str | None, phase: str) -> None:
    """After a phase change into Off or Failed, the machine's address lease is deleted."""
    # Not only while the Group has a pool: a pool removed meanwhile must not strand a lease.
    if previous_phase == phase or phase not in RELEASED or spec.clone_join is None:
        return
    meta = node["metadata"]
    release(api, meta["namespace"], meta["name"])
    log.info("released the address of %s/%s (%s)", meta["namespace"], meta["name"], phase)
