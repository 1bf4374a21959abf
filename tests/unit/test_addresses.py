"""execution/addresses.py in pure code: the network extravars, and allocation skipping the
addresses another provision took (the API stood in for by a dict; the race itself, against the
real API server, is tests/e2e/test_proxmox_join.py's)."""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.actuation.pool import PoolExhaustedError
from lightsout.execution import addresses
from lightsout.k8s.api import ConflictError
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec

pytestmark = pytest.mark.unit

POOL = {"cidr": "10.77.0.0/24", "start": "10.77.0.10", "end": "10.77.0.12", "gateway": "10.77.0.1"}
GROUP = GroupSpec.model_validate({"addressPool": POOL})
PROXMOX = {
    "endpoint": "https://pve:8006",
    "node": "pve1",
    "credentialsSecretRef": {"name": "pve"},
    "mode": "Ephemeral",
    "template": {"vmid": 9000},
    "join": {"apiServerEndpoint": "10.0.0.10:6443"},
}
SPEC = NodeSpec.model_validate(
    {"group": "lab", "kubernetesNodeName": "clone", "driver": {"proxmox": PROXMOX}}
)


def clone(name: str) -> tuple[dict[str, Any], NodeSpec]:
    return {"metadata": {"name": name, "namespace": "ns"}}, SPEC


class Leases:
    """The API's Leases by name (a stand-in for `Api`, which `allocate` is given);
    `create_lease` refuses an existing name like the API server (409)."""

    def __init__(self, taken_meanwhile: tuple[str, ...] = ()) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.taken_meanwhile = list(taken_meanwhile)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert namespace == body["metadata"]["namespace"] == "ns"  # the Group's namespace
        name = body["metadata"]["name"]
        if self.taken_meanwhile:  # another worker creates the lease between list and create
            self.items[self.taken_meanwhile.pop(0)] = {"metadata": {}}
        if name in self.items:
            raise ConflictError("exists")
        self.items[name] = body
        return body

    def list_leases(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert namespace == "ns"
        key, _, value = selector.partition("=")
        return [
            lease
            for lease in self.items.values()
            if (lease["metadata"].get("labels") or {}).get(key) == value
        ]


@pytest.fixture
def leases() -> Leases:
    return Leases(taken_meanwhile=(addresses.lease_name("lab", "10.77.0.10"),))


def test_allocation_skips_a_lost_race_reuses_its_own_lease_and_exhausts(leases: Leases) -> None:
    # .10 is taken by another worker between the list and the create: .11 instead.
    assert addresses.allocate(leases, *clone("a"), GROUP) == "10.77.0.11"
    # Its own lease, found again.
    assert addresses.allocate(leases, *clone("a"), GROUP) == "10.77.0.11"
    assert addresses.allocate(leases, *clone("b"), GROUP) == "10.77.0.12"
    with pytest.raises(PoolExhaustedError, match="all 3 addresses"):
        addresses.allocate(leases, *clone("c"), GROUP)
    assert all(n.startswith("lightsout-ip-lab-") for n in leases.items), "the machine's Group"


def test_no_pool_no_address_and_dhcp() -> None:
    assert addresses.allocate(Leases(), *clone("a"), GroupSpec()) is None
    assert addresses.allocate(Leases(), *clone("a"), None) is None
    assert addresses.network(SPEC, GroupSpec(), None) == {}


def test_network_is_the_address_with_the_pools_prefix_gateway_and_dns() -> None:
    group = GroupSpec.model_validate({"addressPool": {**POOL, "dnsServers": ["10.77.0.2"]}})
    assert addresses.network(SPEC, group, "10.77.0.11") == {
        "network": {
            "address": "10.77.0.11/24",
            "gateway": "10.77.0.1",
            "dns_servers": ["10.77.0.2"],
        }
    }
