"""Energy accounting kept in status, read from the API's objects: a machine's draw and cpu use
(what its pass checkpoints its account with, `planning.energy.status.checkpoint`), and a Group's
`status.energy`, the sum of its machines' (the Group recount, `handlers.group`). `lightsout
status` and the metrics read what they wrote and count an account on to the present with
`Account.at` — no write is needed for the figures to move. How an account is written in status
and read back lives in `planning.energy.status`, which those readers share. Pure: dicts in,
dicts out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, replace
from typing import Any

from lightsout.models.group import GroupSpec
from lightsout.planning.energy import status as energystatus
from lightsout.planning.energy.account import Account, Draw, combine
from lightsout.planning.energy.status import (
    account_from_status,
    account_to_status,
    price,
    rounded_rate,
    whole_second,
)
from lightsout.state.measured import expected_resources, expected_watts
from lightsout.state.parse import dig, pod_requests
from lightsout.state.resources import Resources, parse_resources
from lightsout.state.status import group_status, node_status

Obj = Mapping[str, Any]
_TERMINAL = {"Succeeded", "Failed"}
#: A Group's account is rewritten only when its machines' sum moved by more than this (Wh):
#: otherwise every recount would write, and every write would bring a recount.
_GROUP_TOLERANCE_WH = 1e-3


def draw(node: Obj) -> Draw:
    """The machine's draw: learned from measured watts, else declared (`state.measured`, which
    the planner's snapshot and so the simulator read too)."""
    watts = expected_watts(node)
    return Draw.declared(on=watts.on, idle=watts.idle, off=watts.off)


def cpu_utilisation(node: Obj, core_node: Obj | None, pods: Sequence[Obj]) -> float:
    """Requested cpu of the pods on the machine's core Node over its allocatable cpu (else the
    machine's declared, else inspected cpu), as `energystatus.cpu_use` reads it."""
    allocatable = parse_resources(dig(core_node, "status", "allocatable"))
    expected = expected_resources(node) or Resources()
    capacity = allocatable.get("cpu") or expected.get("cpu")
    requested = sum(
        pod_requests(dig(pod, "spec")).get("cpu")
        for pod in pods
        if dig(pod, "status", "phase") not in _TERMINAL
    )
    return energystatus.cpu_use(requested, capacity)


def machine_accounts(machines: Iterable[Obj]) -> list[Account]:
    return [
        account
        for machine in machines
        if (account := account_from_status(node_status(machine).energy))
    ]


def group_energy(
    group: Obj, spec: GroupSpec, machines: Iterable[Obj], now: dt.datetime
) -> dict[str, Any] | None:
    """The Group's new status.energy (its machines' accounts summed at `now`), or None when
    what it holds already extrapolates to that sum (nothing to write)."""
    now = whole_second(now)
    per_kwh, currency = price(spec, now)
    summed = combine(machine_accounts(machines), now, per_kwh)
    summed = replace(summed, rate=rounded_rate(summed.rate))
    held = account_from_status(group_status(group).energy)
    if held is not None and _same(held.at(now), summed):
        return None
    return account_to_status(summed, currency)


def _same(a: Account, b: Account) -> bool:
    if a.rate != b.rate or a.today.start != b.today.start or a.month.start != b.month.start:
        return False
    pairs = (
        (a.total, b.total),
        (a.today.amounts, b.today.amounts),
        (a.month.amounts, b.month.amounts),
    )
    return all(
        abs(x - y) <= _GROUP_TOLERANCE_WH
        for left, right in pairs
        for x, y in zip(astuple(left), astuple(right), strict=True)
    )
