"""Which address of a Group's `spec.addressPool` a clone gets: the lowest one no other machine
holds. The operator's leases of them (`execution.addresses`) and the replay's pool in memory
(`actuation.memory.MemoryPool`) both choose here, and say "exhausted" in the same words.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from lightsout.models.group import AddressPool, GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.types import Phase

#: Phases after which the clone is gone (Off) or given up on (Failed): its address is free.
RELEASED = frozenset({Phase.OFF, Phase.FAILED})


class PoolExhaustedError(RuntimeError):
    """Every address of the pool is leased to another machine."""


def pool_of(spec: NodeSpec, group: GroupSpec | None) -> AddressPool | None:
    """The Group's address pool, when the machine is a clone that joins by itself."""
    if spec.clone_join is None or group is None:
        return None
    return group.address_pool


def addresses(pool: AddressPool) -> Iterator[ipaddress.IPv4Address]:
    first = ipaddress.IPv4Address(pool.start)
    last = ipaddress.IPv4Address(pool.end)
    for number in range(int(first), int(last) + 1):
        yield ipaddress.IPv4Address(number)


def free_addresses(pool: AddressPool, taken: set[str]) -> list[str]:
    """The pool's addresses not in `taken`, lowest first."""
    return [str(a) for a in addresses(pool) if str(a) not in taken]


def exhausted(group: str, pool: AddressPool) -> PoolExhaustedError:
    """What is said when no address of the pool is free."""
    size = sum(1 for _ in addresses(pool))
    return PoolExhaustedError(
        f"address pool of Group {group} is exhausted: all {size} addresses of "
        f"{pool.start}-{pool.end} are leased to other machines; no clone made"
    )
