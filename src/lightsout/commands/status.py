"""`lightsout status [-n NS] [-o json]`: Groups and their machines at a glance. Pure.

Turns the Group and Node resources (plain dicts, as listed) into rows: per Group its autoscaler,
bounds and how many machines are on; per machine its phase, observed power, the last action and
how it ended, health and energy. `render_text` prints them as kubectl-style tables, `as_json`
gives the same rows to scripts.

Energy comes from status alone: the account checkpointed in a Node's or a Group's
`status.energy`, counted on to now at the rate in force (`planning.energy.account.Account.at`), so
the figures move between checkpoints. "Today" and "this month" are UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any
from zoneinfo import ZoneInfo

from lightsout.models.battery import BatteryPolicy, BatteryStatus
from lightsout.models.enums import Phase
from lightsout.models.group import Electricity, ScheduleWindow
from lightsout.planning.autoscaler.battery import source_name
from lightsout.planning.energy import mains, tariff
from lightsout.planning.energy.account import Amounts
from lightsout.planning.energy.status import account_from_status
from lightsout.planning.types import operation_from_status
from lightsout.state import series
from lightsout.state.parse import format_time
from lightsout.state.status import GroupStatusView, NodeStatusView, group_status, node_status

Obj = dict[str, Any]
_MESSAGE_WIDTH = 60


def _age(since: dt.datetime | None, now: dt.datetime) -> str:
    if since is None:
        return "-"
    seconds = max(int((now - since).total_seconds()), 0)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _amounts(amounts: Amounts) -> Obj:
    return {
        "usedWattHours": round(amounts.used_wh, 3),
        "savedWattHours": round(amounts.saved_wh, 3),
        "usedCost": round(amounts.used_cost, 4),
        "savedCost": round(amounts.saved_cost, 4),
    }


def energy_figures(status: NodeStatusView | GroupStatusView, now: dt.datetime) -> Obj | None:
    """Energy today and this month (and since accounting began), counted on to `now`."""
    account = account_from_status(status.energy)
    if account is None:
        return None
    current = account.at(now)
    return {
        "today": _amounts(current.today.amounts),
        "month": _amounts(current.month.amounts),
        "total": _amounts(current.total),
        "since": format_time(account.since),
        "watts": current.rate.watts,
        "currency": status.currency,
    }


def watt_hours(wh: float) -> str:
    """Energy as a person reads it: Wh below a kWh, kWh above."""
    return f"{wh:.1f} Wh" if wh < 1000 else f"{wh / 1000:.2f} kWh"


def _used(figures: Obj | None, period: str) -> str:
    return "-" if figures is None else watt_hours(figures[period]["usedWattHours"])


def _saved(figures: Obj | None) -> str:
    return "-" if figures is None else watt_hours(figures["month"]["savedWattHours"])


def _cost(figures: Obj | None) -> str:
    if figures is None or not figures["currency"]:
        return "-"
    month = figures["month"]
    return f"{_money(month['usedCost'])}/{_money(month['savedCost'])} {figures['currency']}"


def _money(amount: float) -> str:
    # A lab's first minutes cost fractions of a cent: show them rather than 0.00.
    return f"{amount:.2f}" if amount >= 1 else f"{amount:.4f}"


def machine_row(node: Obj, now: dt.datetime) -> Obj:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node_status(node)
    op, healthy = operation_from_status(status.last_operation), status.condition("Healthy")
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "group": spec.get("group", ""),
        "desired": spec.get("desiredPowerState", "Off"),
        "phase": str(status.phase or Phase.UNKNOWN),
        "age": _age(status.phase_since, now),
        "power": str(status.observed_power_state or "Unknown"),
        "lastAction": f"{op.action} {op.result}" if op else "-",
        "lastActionAge": _age(op.finished or op.started if op else None, now),
        "healthy": "-" if healthy is None else str(healthy.get("status") or "Unknown"),
        "energy": energy_figures(status, now),
        "message": status.message,
    }


def window_in_force(spec: Obj, now: dt.datetime) -> str:
    """The Group's schedule window open at `now` and until when ("evening until 23:00
    Europe/Berlin"), "-" when none is (or its windows do not validate)."""
    for raw in spec.get("windows") or ():
        try:
            times = ScheduleWindow.model_validate(raw).times()
        except ValueError:
            continue
        opened = times.open_at(now)
        if opened is not None:
            closes = times.closes_local(opened)
            return f"{times.name} until {closes:%H:%M} {times.time_zone}"
    return "-"


def price_in_force(
    spec: Obj,
    now: dt.datetime,
    namespace: str = "",
    maps: series.ConfigMaps | None = None,
    group: str = "",
) -> str:
    """The Group's price of a kWh at `now` and, with a tariff or a price series, until when
    ("0.2 EUR/kWh until 06:00 Europe/Berlin"); "-" without a price (or when it does not
    validate); a series that does not read is said ("series unreadable")."""
    try:
        electricity = Electricity.model_validate(spec["electricity"])
    except (KeyError, TypeError, ValueError):
        return "-"
    resolved = series.resolve(electricity, namespace, maps or {}, group=group)
    prices = resolved.prices
    said = f"{tariff.price_at(electricity, now, prices):.4g} {electricity.currency}/kWh"
    if resolved.problem is not None:
        said += " (series unreadable)"
    change = tariff.next_change(electricity, now, prices)
    if change is None:
        return said
    zone = ZoneInfo(electricity.time_zone)
    return f"{said} until {change.astimezone(zone):%H:%M} {electricity.time_zone}"


def ups_in_force(spec: Obj, status: GroupStatusView) -> str:
    """The Group's UPS as last read ("lab@10.0.0.5:3493 OnBattery 80% 900s left, Shed"),
    "-" without one."""
    if not spec.get("battery"):
        return "-"
    try:
        policy = BatteryPolicy.model_validate(spec["battery"])
    except ValueError:
        return "invalid spec.battery"
    if status.battery_problem is not None:
        return "invalid status.battery"
    read = status.battery or BatteryStatus()
    said = mains.describe(read) if read.observed_at or read.error else "not read yet"
    outage = ", machines off for an outage" if read.outage else ""
    return f"{source_name(policy)} {said}, {policy.tier}{outage}"


def group_row(
    group: Obj, machines: list[Obj], now: dt.datetime, maps: series.ConfigMaps | None = None
) -> Obj:
    meta, spec, status = group.get("metadata") or {}, group.get("spec") or {}, group_status(group)
    members = [m for m in machines if m["group"] == meta.get("name")]
    if meta.get("namespace"):
        members = [m for m in members if m["namespace"] == meta["namespace"]]
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "autoscaler": spec.get("autoscaler", "builtin"),
        "min": spec.get("minNodes", 0),
        "max": spec.get("maxNodes", "-"),
        "window": window_in_force(spec, now),
        "price": price_in_force(
            spec, now, str(meta.get("namespace") or ""), maps, str(meta.get("name") or "")
        ),
        "ups": ups_in_force(spec, status),
        "on": sum(1 for m in members if m["phase"] == "Ready"),
        "total": len(members),
        "failed": sum(1 for m in members if m["phase"] == "Failed"),
        "target": "-" if status.target_size is None else status.target_size,
        "energy": energy_figures(status, now),
    }


def rows(
    groups: list[Obj], nodes: list[Obj], now: dt.datetime, *, series_maps: Sequence[Obj] = ()
) -> Obj:
    """The tables' rows; `series_maps`: the ConfigMaps labelled `lightsout.dev/series` (the
    Groups' price series)."""
    place = itemgetter("namespace", "name")
    maps = series.config_maps(list(series_maps))
    machines = sorted((machine_row(n, now) for n in nodes), key=place)
    by_group = sorted((group_row(g, machines, now, maps) for g in groups), key=place)
    known = {(g["namespace"], g["name"]) for g in by_group}
    # A machine naming a Group that does not exist is the first thing a person should see.
    for machine in machines:
        if (machine["namespace"], machine["group"]) not in known:
            machine["message"] = f"Group {machine['group']!r} not found. {machine['message']}"
    return {"groups": by_group, "machines": machines}


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_WIDTH else text[: _MESSAGE_WIDTH - 1] + "…"


def _last(machine: Obj) -> str:
    if machine["lastAction"] == "-":
        return "-"
    return f"{machine['lastAction']} ({machine['lastActionAge']} ago)"


#: (header, cell) per column; NAMESPACE is put in front when listing every namespace.
GROUP_COLUMNS: list[tuple[str, Callable[[Obj], str]]] = [
    ("GROUP", lambda g: str(g["name"])),
    ("AUTOSCALER", lambda g: str(g["autoscaler"])),
    ("MIN", lambda g: str(g["min"])),
    ("MAX", lambda g: str(g["max"])),
    ("WINDOW", lambda g: str(g["window"])),
    ("PRICE", lambda g: str(g["price"])),
    ("UPS", lambda g: str(g["ups"])),
    ("ON", lambda g: str(g["on"])),
    ("TOTAL", lambda g: str(g["total"])),
    ("FAILED", lambda g: str(g["failed"])),
    ("TARGET", lambda g: str(g["target"])),
    ("USED TODAY", lambda g: _used(g["energy"], "today")),
    ("USED MONTH", lambda g: _used(g["energy"], "month")),
    ("SAVED MONTH", lambda g: _saved(g["energy"])),
    ("COST USED/SAVED MONTH", lambda g: _cost(g["energy"])),
]
MACHINE_COLUMNS: list[tuple[str, Callable[[Obj], str]]] = [
    ("NODE", lambda m: str(m["name"])),
    ("GROUP", lambda m: str(m["group"])),
    ("DESIRED", lambda m: str(m["desired"])),
    ("PHASE", lambda m: str(m["phase"])),
    ("AGE", lambda m: str(m["age"])),
    ("POWER", lambda m: str(m["power"])),
    ("LAST ACTION", _last),
    ("HEALTHY", lambda m: str(m["healthy"])),
    ("USED TODAY", lambda m: _used(m["energy"], "today")),
    ("USED MONTH", lambda m: _used(m["energy"], "month")),
    ("SAVED MONTH", lambda m: _saved(m["energy"])),
    ("MESSAGE", lambda m: _short(str(m["message"]))),
]
_NAMESPACE: tuple[str, Callable[[Obj], str]] = ("NAMESPACE", lambda r: str(r["namespace"]))


def _table(columns: list[tuple[str, Callable[[Obj], str]]], items: list[Obj]) -> list[str]:
    lines = [[h for h, _ in columns], *([cell(i) for _, cell in columns] for i in items)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return [
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def render_text(table: Obj, all_namespaces: bool) -> str:
    front = [_NAMESPACE] if all_namespaces else []
    sections = [
        _table([*front, *columns], items)
        for columns, items in (
            (GROUP_COLUMNS, table["groups"]),
            (MACHINE_COLUMNS, table["machines"]),
        )
        if items
    ]
    if not sections:
        return "No Lights-Out Groups or Nodes found.\n"
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"
