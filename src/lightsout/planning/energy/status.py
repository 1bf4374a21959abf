"""`status.energy` as an `Account` and back: how a Node's and a Group's energy is written,
and when a machine's is checkpointed.

A machine's pass (`planning.machine.passes`, the operator's and the replay's) checkpoints its
account with `checkpoint` whenever its rate changes (phase, requested cpu, watts, price);
`execution.energy` writes the Group recount's sums and reads accounts back before it writes;
`lightsout status` (`commands.status`) and the metrics (`metrics.machines`) read them too.
Reader and writer sit together here, under both the operator and the metrics, so neither has to
import the other. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from lightsout.models.group import GroupSpec
from lightsout.planning.energy import tariff
from lightsout.planning.energy.account import Account, Amounts, Draw, Period, Rate, is_powered
from lightsout.planning.types import Phase
from lightsout.state.parse import as_enum, format_time, parse_time
from lightsout.state.series import Series

Obj = Mapping[str, Any]
#: Rates in status are rounded to this many decimals (µW): plenty, and readable.
_DECIMALS = 6
#: Amounts keep more: a checkpoint adds its rounding error to them for good, and a lab's costs
#: are fractions of a cent.
_AMOUNT_DECIMALS = 9
#: The status fields of an `Amounts` and of a `Rate`, in the order of their fields.
_AMOUNT_KEYS = ("usedWattHours", "savedWattHours", "usedCost", "savedCost")
_RATE_KEYS = ("watts", "savingWatts", "pricePerKWh")


def cpu_use(requested: float, capacity: float) -> float:
    """A machine's CPU use as a pass reads it, the operator's and the replay's: requested over
    allocatable cpu, at most 1, rounded to whole percents (so a pod of a few millicores does
    not make a checkpoint); 0 when the capacity is unknown."""
    if capacity <= 0:
        return 0.0
    return round(min(requested / capacity, 1.0), 2)


def rounded_rate(in_force: Rate) -> Rate:
    """The rate as status holds it."""
    # A rate read back from status must compare equal to the one that was written, or every
    # pass would checkpoint again (and every write bring another pass).
    return Rate(*(round(v, _DECIMALS) for v in _rate_fields(in_force)))


def _amounts(raw: Obj) -> Amounts:
    return Amounts(*(float(raw.get(key) or 0.0) for key in _AMOUNT_KEYS))


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
        in_force = Rate(*(float(raw.get(key) or 0.0) for key in _RATE_KEYS))
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


def _amounts_to_status(amounts: Amounts) -> dict[str, float]:
    rounded = (round(v, _AMOUNT_DECIMALS) for v in _fields(amounts))
    return dict(zip(_AMOUNT_KEYS, rounded, strict=True))


def _period_to_status(period: Period) -> dict[str, Any]:
    return {"start": format_time(period.start), **_amounts_to_status(period.amounts)}


def account_to_status(account: Account, currency: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "countedTo": format_time(account.counted_to),
        "since": format_time(account.since),
        **dict(zip(_RATE_KEYS, _rate_fields(rounded_rate(account.rate)), strict=True)),
        **_amounts_to_status(account.total),
        "today": _period_to_status(account.today),
        "month": _period_to_status(account.month),
    }
    if currency:
        out["currency"] = currency
    return out


def price(
    group: GroupSpec | None, now: dt.datetime, prices: Series | None = None
) -> tuple[float, str | None]:
    """The Group's electricity price per kWh at `now` (its price series', else its tariff's
    rate in force, else its one price) and its currency (0 and None when not set)."""
    electricity = group.electricity if group is not None else None
    if electricity is None:
        return 0.0, None
    return tariff.price_at(electricity, now, prices), electricity.currency


def rate(
    machine_draw: Draw,
    group: GroupSpec | None,
    phase: Phase | str | None,
    utilisation: float,
    now: dt.datetime,
    *,
    prices: Series | None = None,
    surplus: Series | None = None,
    beside: float = 0.0,
) -> Rate:
    """What the machine draws, saves and pays from `now` on, in that phase at that utilisation
    (until the price or the solar surplus changes: `tariff.next_change`). With a `surplus` in
    force its price per kWh is the Group's times the share of its draw the surplus leaves to
    pay (`tariff.paid_share`, its Group's other machines drawing `beside`): 0 while the surplus
    covers the Group's draw. Its saving is counted at that price too: an hour off while the
    surplus covers the Group saves nothing in money."""
    current = as_enum(Phase, str(phase), None) if phase is not None else None
    per_kwh = price(group, now, prices)[0]
    powered = is_powered(current)
    if surplus is not None and per_kwh:
        watts = machine_draw.watts(powered, utilisation)
        per_kwh *= tariff.paid_share(watts, tariff.surplus_at(surplus, now), beside)
    return rounded_rate(Rate.of(machine_draw, powered, utilisation, per_kwh))


def whole_second(now: dt.datetime) -> dt.datetime:
    # status holds whole seconds: counting to a whole second keeps what is written and what is
    # counted the same figure.
    return now.replace(microsecond=0)


def checkpoint(
    current: Account | None,
    machine_draw: Draw,
    group: GroupSpec | None,
    phase: Phase | str | None,
    utilisation: float,
    *,
    now: dt.datetime,
    prices: Series | None = None,
    surplus: Series | None = None,
    beside: float = 0.0,
) -> dict[str, Any] | None:
    """The machine's new `status.energy` when its rate changes at `now` (or accounting
    starts); None when the rate in force is still right (nothing to write)."""
    now = whole_second(now)
    wanted = rate(
        machine_draw, group, phase, utilisation, now, prices=prices, surplus=surplus, beside=beside
    )
    if current is None:
        account = Account.opened(now, wanted)
    elif current.rate == wanted:
        return None
    else:
        account = current.checkpoint(now, wanted)
    return account_to_status(account, price(group, now, prices)[1])
