"""execution/addresses.py in pure code: the network extravars, and allocation skipping the
addresses another provision took (the API stood in for by a dict; the race itself, against the
real API server, is tests/e2e/test_proxmox_join.py's)."""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.actuation.pool import PoolExhaustedError
from lightsout.execution import addresses
from lightsout.k8s import api

pytestmark = pytest.mark.unit

POOL = {"cidr": "10.77.0.0/24", "start": "10.77.0.10", "end": "10.77.0.12", "gateway": "10.77.0.1"}
GROUP = {"metadata": {"name": "lab", "namespace": "ns"}, "spec": {"addressPool": POOL}}


def clone(name: str) -> dict[str, Any]:
    join = {"apiServerEndpoint": "10.0.0.10:6443"}
    proxmox = {"mode": "Ephemeral", "join": join}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"driver": {"proxmox": proxmox}}}


class Leases:
    """Leases by name; `create` refuses an existing name like the API server (409)."""

    def __init__(self, taken_meanwhile: tuple[str, ...] = ()) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.taken_meanwhile = list(taken_meanwhile)

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert namespace == body["metadata"]["namespace"] == "ns"  # the Group's namespace
        name = body["metadata"]["name"]
        if self.taken_meanwhile:  # another worker creates the lease between list and create
            self.items[self.taken_meanwhile.pop(0)] = {"metadata": {}}
        if name in self.items:
            raise api.ConflictError("exists")
        self.items[name] = body
        return body

    def list(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert namespace == "ns"
        key, _, value = selector.partition("=")
        return [
            lease
            for lease in self.items.values()
            if (lease["metadata"].get("labels") or {}).get(key) == value
        ]


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> Leases:
    held = Leases(taken_meanwhile=(addresses.lease_name("lab", "10.77.0.10"),))
    monkeypatch.setattr(api, "create_lease", held.create)
    monkeypatch.setattr(api, "list_leases", held.list)
    return held


def test_allocation_skips_a_lost_race_reuses_its_own_lease_and_exhausts(leases: Leases) -> None:
    # .10 is taken by another worker between the list and the create: .11 instead.
    assert addresses.allocate(clone("a"), GROUP) == "10.77.0.11"
    assert addresses.allocate(clone("a"), GROUP) == "10.77.0.11"  # its own lease, found again
    assert addresses.allocate(clone("b"), GROUP) == "10.77.0.12"
    with pytest.raises(PoolExhaustedError, match="all 3 addresses"):
        addresses.allocate(clone("c"), GROUP)


def test_no_pool_no_address_and_dhcp() -> None:
    group = {"metadata": {"name": "lab"}, "spec": {}}
    assert addresses.allocate(clone("a"), group) is None
    assert addresses.network(clone("a"), group, None) == {}


def test_network_is_the_address_with_the_pools_prefix_gateway_and_dns() -> None:
    group = {**GROUP, "spec": {"addressPool": {**POOL, "dnsServers": ["10.77.0.2"]}}}
    assert addresses.network(clone("a"), group, "10.77.0.11") == {
        "network": {
            "address": "10.77.0.11/24",
            "gateway": "10.77.0.1",
            "dns_servers": ["10.77.0.2"],
        }
    }
