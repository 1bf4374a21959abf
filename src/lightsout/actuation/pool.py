"""Which address of a Group's `spec.addressPool` a clone gets: the lowest one no other machine
holds. The operator's leases of them (`execution.addresses`) and the replay's pool in memory
(`actuation.memory.AddressPool`) both choose here, and say "exhausted" in the same words.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

from lightsout.planning.types import Phase

#: Phases after which the clone is gone (Off) or given up on (Failed): its address is free.
RELEASED = frozenset({Phase.OFF, Phase.FAILED})


class PoolExhaustedError(RuntimeError):
    """Every address of the pool is leased to another machine."""


def addresses(spec: Mapping[str, Any]) -> Iterator[ipaddress.IPv4Address]:
    first = ipaddress.IPv4Address(spec["start"])
    last = ipaddress.IPv4Address(spec["end"])
    for number in range(int(first), int(last) + 1):
        yield ipaddress.IPv4Address(number)


def free_addresses(spec: Mapping[str, Any], taken: set[str]) -> list[str]:
    """The pool's addresses not in `taken`, lowest first."""
    return [str(a) for a in addresses(spec) if str(a) not in taken]


def exhausted(group: str, spec: Mapping[str, Any]) -> PoolExhaustedError:
    """What is said when no address of the pool is free."""
    size = sum(1 for _ in addresses(spec))
    return PoolExhaustedError(
        f"address pool of Group {group} is exhausted: all {size} addresses of "
        f"{spec['start']}-{spec['end']} are leased to other machines; no clone made"
    )
