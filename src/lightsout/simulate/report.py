"""Figures from a replay: energy and cost per Group, savings, pod waits, power cycles.

`summarise(result)` turns an `engine.Result` into a plain dict (what `-o json` prints);
`render_text` prints it for a person, with the offline bound and the reactive baseline beside
it when they were computed. Energy comes from the machines' `planning.energy.Ledger`s; "always
on" is what the same machines would have drawn never powered off (used + saved, the energy
module's definition of saved).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightsout.planning.energy import cost
from lightsout.planning.scaledown import JOB
from lightsout.simulate.engine import Result
from lightsout.simulate.machines import SimPod

#: A pod that waited longer than its machine's power-on and boot plus this is reported. "Its
#: machine" is the one it first ran on or, when slower, the one the planner powered on for it
#: or counted it on while that one was coming up (a pod waiting for a machine that is booting
#: may start earlier elsewhere as room frees up: it waited less than the boot it was promised).
#: The planner only counts a pod on a coming machine Ready no later than a fresh power-on
#: would be (`absorb.COMING_MARGIN_SECONDS`), so that machine is the pod's quickest one.
BOOT_SLACK_SECONDS = 5.0


def percentile(values: Sequence[float], share: float) -> float | None:
    """Nearest-rank percentile (`share` in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def max_in_window(times: Sequence[float], window: float) -> int:
    """The most of `times` (seconds, ascending) within any `window` seconds: the wear figure
    `maxPowerCyclesPerDay` bounds."""
    best = first = 0
    for last, moment in enumerate(times):
        while moment - times[first] >= window:
            first += 1
        best = max(best, last - first + 1)
    return best


def longest_wait(result: Result) -> float:
    """The longest any pod of the replay waited before its last start, seconds: a pod that never
    (re)started counts as waiting to the trace's end. The with-waits offline bound
    (`optimum.solve(max_wait=...)`) covers every schedule waiting no longer, this one included."""
    end = result.trace.duration_seconds
    return (
        max(
            (end if p.started is None else p.started) - p.arrival
            for p in result.pods
            if p.arrival < end
        )
        if result.pods
        else 0.0
    )


def _waits(pods: Sequence[SimPod]) -> dict[str, Any]:
    waits = [p.wait for p in pods if p.wait is not None]
    return {
        "pods": len(pods),
        "started": len(waits),
        "neverStarted": len(pods) - len(waits),
        "p50Seconds": _round(percentile(waits, 0.50)),
        "p95Seconds": _round(percentile(waits, 0.95)),
        "maxSeconds": _round(max(waits, default=None)),
    }


def _evictions(pods: Sequence[SimPod]) -> dict[str, int]:
    """Running pods a drain sent back to Pending, each to start over (`SimPod.run` counts a
    pod's evictions); a Job's pod loses the work it had done."""
    jobs = [p for p in pods if p.pod.owner_kind == JOB]
    return {
        "pods": sum(p.run for p in pods),
        "distinctPods": sum(1 for p in pods if p.run),
        "jobPods": sum(p.run for p in jobs),
        "distinctJobPods": sum(1 for p in jobs if p.run),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def summarise(result: Result) -> dict[str, Any]:
    days = result.trace.duration_seconds / 86_400
    prices = {g.key.name: g.price_per_kwh for g in result.groups}
    groups: dict[str, dict[str, float]] = {}
    machines: list[dict[str, Any]] = []
    boot_of: dict[str, float] = {}
    for m in result.machines:
        g = groups.setdefault(m.template.group, {"usedKWh": 0.0, "alwaysOnKWh": 0.0})
        used = m.ledger.used_wh / 1000
        g["usedKWh"] += used
        g["alwaysOnKWh"] += used + m.ledger.saved_wh / 1000
        boot_of[m.name] = m.power_on_seconds + m.boot_seconds
        machines.append(
            {
                "name": m.template.key.name,
                "group": m.template.group,
                "usedKWh": round(used, 3),
                "powerOns": m.power_ons,
                "powerCyclesPerDay": round(m.power_ons / days, 2) if days else 0.0,
                "maxPowerOnsIn24h": max_in_window(m.power_on_times, 86_400.0),
                "maxPowerCyclesPerDay": m.template.max_power_cycles_per_day,
                "phase": m.state.phase.value,
            }
        )
    for name, g in groups.items():
        g["savedKWh"] = g["alwaysOnKWh"] - g["usedKWh"]
        price = prices.get(name)
        g["cost"] = cost(g["usedKWh"] * 1000, price) if price is not None else float("nan")
        g["alwaysOnCost"] = cost(g["alwaysOnKWh"] * 1000, price) if price else float("nan")
    used = sum(g["usedKWh"] for g in groups.values())
    always = sum(g["alwaysOnKWh"] for g in groups.values())
    cron_pods = [p for p in result.pods if p.cronjob is not None]
    other = [p for p in result.pods if p.cronjob is None]
    late = [
        p
        for p in other
        if p.wait is not None
        and p.first_host is not None
        and p.wait
        > max(boot_of.get(name or "", 0.0) for name in (p.first_host, p.powered_for, p.counted_on))
        + BOOT_SLACK_SECONDS
    ]
    return {
        "trace": result.trace.name,
        "policy": result.options.policy.value,
        "scoring": result.options.scoring.value,
        "days": round(days, 3),
        "energy": {
            "usedKWh": round(used, 3),
            "alwaysOnKWh": round(always, 3),
            "savedKWh": round(always - used, 3),
            "savedShare": round(1 - used / always, 4) if always else 0.0,
        },
        "groups": {
            name: {k: round(v, 3) if not math.isnan(v) else None for k, v in g.items()}
            for name, g in sorted(groups.items())
        },
        "waits": {"cronjob": _waits(cron_pods), "other": _waits(other)},
        "otherPodsWaitingPastBoot": len(late),
        "evictions": _evictions(result.pods),
        "cronRunsSkipped": result.skipped_cron_runs,
        "cronRunsReplaced": result.replaced_cron_runs,
        "machines": machines,
        "plans": result.plans,
        "decisions": result.decisions,
    }


def _fmt(value: object, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def render_text(
    summary: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    bound: Mapping[str, Any] | None = None,
) -> str:
    e = summary["energy"]
    lines = [
        f"trace {summary['trace']}: {summary['days']} days, policy {summary['policy']}, "
        f"scheduler scoring {summary['scoring']}",
        f"energy: {e['usedKWh']:.2f} kWh used, {e['alwaysOnKWh']:.2f} kWh always-on, "
        f"{e['savedKWh']:.2f} kWh saved ({e['savedShare'] * 100:.1f}%)",
    ]
    for name, g in summary["groups"].items():
        price = (
            ""
            if g["cost"] is None
            else f", cost {g['cost']:.2f} (always-on {g['alwaysOnCost']:.2f})"
        )
        lines.append(
            f"  group {name}: {g['usedKWh']:.2f} kWh used, {g['savedKWh']:.2f} kWh saved{price}"
        )
    for kind, w in summary["waits"].items():
        lines.append(
            f"waits ({kind} pods): {w['pods']} pods, p50 {_fmt(w['p50Seconds'], ' s')}, "
            f"p95 {_fmt(w['p95Seconds'], ' s')}, max {_fmt(w['maxSeconds'], ' s')}, "
            f"never started {w['neverStarted']}"
        )
    lines.append(
        f"other pods waiting longer than their machine's boot + {BOOT_SLACK_SECONDS:.0f} s: "
        f"{summary['otherPodsWaitingPastBoot']}"
    )
    ev = summary["evictions"]
    lines.append(
        f"evictions of running pods (each restarts from zero): {ev['pods']} "
        f"({ev['distinctPods']} distinct), of them Job pods {ev['jobPods']} "
        f"({ev['distinctJobPods']} distinct)"
    )
    lines.append(
        "power cycles per day (most power-ons in any 24 h, wear limit): "
        + ", ".join(
            f"{m['name']} {m['powerCyclesPerDay']:.2f} ({m['maxPowerOnsIn24h']}, "
            f"{m['maxPowerCyclesPerDay'] or 'none'})"
            for m in summary["machines"]
        )
    )
    if baseline is not None:
        b = baseline["energy"]
        lines.append(
            f"reactive baseline (cluster-autoscaler defaults): {b['usedKWh']:.2f} kWh, "
            f"other pods' wait p95 {_fmt(baseline['waits']['other']['p95Seconds'], ' s')}"
        )
    if bound is not None:
        lines.append(_bound_line(summary, baseline, bound))
    return "\n".join(lines) + "\n"


def _bound_line(
    summary: Mapping[str, Any], baseline: Mapping[str, Any] | None, bound: Mapping[str, Any]
) -> str:
    """The bound, its kind, gap and why, and only then the ratios (none without a bound)."""
    kwh = bound["kWh"]
    if kwh is None:
        return f"offline bound: none, so no ratio ({bound['note']})"
    gap = "unknown" if bound["gap"] is None else f"{bound['gap'] * 100:.2f}%"
    text = (
        f"offline bound ({bound['kind']}, {bound['source']}, solver {bound['status']}, gap {gap}): "
        f"{kwh:.2f} kWh"
    )
    if kwh > 0:
        text += f"; Lights-Out / bound = {summary['energy']['usedKWh'] / kwh:.3f}"
        if baseline is not None:
            text += f", reactive / bound = {baseline['energy']['usedKWh'] / kwh:.3f}"
    return text + f"\n  ({bound['note']})"
