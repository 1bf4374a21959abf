"""Energy accounting kept in status: `planning.energy` accounts as `status.energy` dicts.

Called by the reconcile pass (`execution.reconcile`), which checkpoints a machine's
`status.energy` whenever its rate changes (phase, requested cpu, declared watts, price); by the
Group recount (`handlers.group`), which writes the sum of its machines'; and read by
`lightsout status` and the metrics, which count an account on to the present with
`Account.at` — no write is needed for the figures to move. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lightsout.planning.energy import Account, Amounts, Draw, Period, Rate, combine, is_powered
from lightsout.planning.types import Phase
from lightsout.state import parse_resources
from lightsout.state.parse import parse_time

Obj = Mapping[str, Any]
#: Key of a pod's cpu request (millicores) in the operator's cache of pods bound to core Nodes.
CPU_REQUEST = "cpuRequestMillis"
_TERMINAL = {"Succeeded", "Failed"}
#: Rates in status are rounded to this many decimals (µW): plenty, and readable.
_DECIMALS = 6
#: Amounts keep more: a checkpoint adds its rounding error to them for good, and a lab's costs
#: are fractions of a cent.
_AMOUNT_DECIMALS = 9
#: A Group's account is rewritten only when its machines' sum moved by more than this (Wh):
#: otherwise every recount would write, and every write would bring a recount.
_GROUP_TOLERANCE_WH = 1e-3


def price(group: Obj | None) -> tuple[float, str | None]:
    """The Group's electricity price per kWh and its currency (0 and None when not set)."""
    electricity = ((group or {}).get("spec") or {}).get("electricity") or {}
    try:
        per_kwh = float(electricity.get("pricePerKWh") or 0.0)
    except (TypeError, ValueError):
        per_kwh = 0.0
    if not electricity:
        return 0.0, None
    return per_kwh, str(electricity.get("currency") or "EUR")


def draw(node: Obj) -> Draw:
    power = (node.get("spec") or {}).get("power") or {}

    def watts(key: str) -> float | None:
        value = power.get(key)
        return float(value) if isinstance(value, int | float) else None

    return Draw.declared(on=watts("onWatts"), idle=watts("idleWatts"), off=watts("offWatts"))


def cpu_utilisation(node: Obj, core_node: Obj | None, pods: Sequence[Obj]) -> float:
    """Requested cpu of the pods on the machine's core Node over its allocatable cpu (else the
    machine's declared cpu); 0 when neither is known. Rounded to whole percents, so a pod of a
    few millicores does not make a checkpoint."""
    allocatable = parse_resources(((core_node or {}).get("status") or {}).get("allocatable"))
    capacity = allocatable.get("cpu") or parse_resources(
        (node.get("spec") or {}).get("resources")
    ).get("cpu")
    if capacity <= 0:
        return 0.0
    requested = sum(
        int(pod.get(CPU_REQUEST) or 0)
        for pod in pods
        if (pod.get("status") or {}).get("phase") not in _TERMINAL
    )
    return round(min(requested / capacity, 1.0), 2)


def rate(node: Obj, group: Obj | None, phase: Phase | str | None, utilisation: float) -> Rate:
    """What the machine draws, saves and pays from now on, in that phase at that utilisation."""
    try:
        current = Phase(str(phase)) if phase is not None else None
    except ValueError:
        current = None
    return _rounded(Rate.of(draw(node), is_powered(current), utilisation, price(group)[0]))


def _rounded(in_force: Rate) -> Rate:
    # What status can hold: a rate read back from status must compare equal to the one that
    # was written, or every pass would checkpoint again (and every write bring another pass).
    return Rate(*(round(v, _DECIMALS) for v in _rate_fields(in_force)))


def _amounts(raw: Obj) -> Amounts:
    return Amounts(
        float(raw.get("usedWattHours") or 0.0),
        float(raw.get("savedWattHours") or 0.0),
        float(raw.get("usedCost") or 0.0),
        float(raw.get("savedCost") or 0.0),
    )


def _period(raw: Any, fallback: dt.datetime) -> Period:
    if not isinstance(raw, Mapping):
        return Period(fallback)
    start = parse_time(raw.get("start"))
    return Period(start, _amounts(raw)) if start else Period(fallback)


def account_from_status(raw: Any) -> Account | None:
    """The account a status.energy holds; None when absent or unreadable (a person's edit, an
    older version's `wattHours`): accounting then starts afresh."""
    if not isinstance(raw, Mapping):
        return None
    counted_to, since = parse_time(raw.get("countedTo")), parse_time(raw.get("since"))
    if counted_to is None or since is None:
        return None
    try:
        in_force = Rate(
            float(raw.get("watts") or 0.0),
            float(raw.get("savingWatts") or 0.0),
            float(raw.get("pricePerKWh") or 0.0),
        )
        total = _amounts(raw)
        # A period that does not parse counts as long gone: `at` starts the current one.
        today = _period(raw.get("today"), dt.datetime.min.replace(tzinfo=dt.UTC))
        month = _period(raw.get("month"), dt.datetime.min.replace(tzinfo=dt.UTC))
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (*_fields(total), *_rate_fields(in_force))):
        return None
    return Account(counted_to, in_force, since, total, today, month)


def _fields(amounts: Amounts) -> tuple[float, float, float, float]:
    return amounts.used_wh, amounts.saved_wh, amounts.used_cost, amounts.saved_cost


def _rate_fields(in_force: Rate) -> tuple[float, float, float]:
    return in_force.watts, in_force.saving_watts, in_force.price_per_kwh


def _time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _amounts_to_status(amounts: Amounts) -> dict[str, float]:
    used, saved, used_cost, saved_cost = (round(v, _AMOUNT_DECIMALS) for v in _fields(amounts))
    return {
        "usedWattHours": used,
        "savedWattHours": saved,
        "usedCost": used_cost,
        "savedCost": saved_cost,
    }


def account_to_status(account: Account, currency: str | None) -> dict[str, Any]:
    watts, saving, per_kwh = (round(v, _DECIMALS) for v in _rate_fields(account.rate))
    out: dict[str, Any] = {
        "countedTo": _time(account.counted_to),
        "since": _time(account.since),
        "watts": watts,
        "savingWatts": saving,
        "pricePerKWh": per_kwh,
        **_amounts_to_status(account.total),
        "today": {"start": _time(account.today.start), **_amounts_to_status(account.today.amounts)},
        "month": {"start": _time(account.month.start), **_amounts_to_status(account.month.amounts)},
    }
    if currency:
        out["currency"] = currency
    return out


def whole_second(now: dt.datetime) -> dt.datetime:
    # status holds whole seconds: counting to a whole second keeps what is written and what is
    # counted the same figure.
    return now.replace(microsecond=0)


def checkpoint(
    node: Obj, group: Obj | None, phase: Phase | str | None, utilisation: float, now: dt.datetime
) -> dict[str, Any] | None:
    """The machine's new status.energy when its rate changes at `now` (or accounting starts);
    None when the rate in force is still right (nothing to write)."""
    now = whole_second(now)
    wanted = rate(node, group, phase, utilisation)
    current = account_from_status((node.get("status") or {}).get("energy"))
    if current is None:
        account = Account.opened(now, wanted)
    elif current.rate == wanted:
        return None
    else:
        account = current.checkpoint(now, wanted)
    return account_to_status(account, price(group)[1])


def machine_accounts(machines: Iterable[Obj]) -> list[Account]:
    return [
        account
        for machine in machines
        if (account := account_from_status((machine.get("status") or {}).get("energy")))
    ]


def group_energy(group: Obj, machines: Iterable[Obj], now: dt.datetime) -> dict[str, Any] | None:
    """The Group's new status.energy (its machines' accounts summed at `now`), or None when
    what it holds already extrapolates to that sum (nothing to write)."""
    now = whole_second(now)
    per_kwh, currency = price(group)
    summed = combine(machine_accounts(machines), now, per_kwh)
    summed = replace(summed, rate=_rounded(summed.rate))
    held = account_from_status((group.get("status") or {}).get("energy"))
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
        for x, y in zip(_fields(left), _fields(right), strict=True)
    )
