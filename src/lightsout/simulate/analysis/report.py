"""Figures from a replay: energy and cost per Group, savings, pod waits, power cycles.

`summarise(result, reference)` turns an `engine.Result` into a plain dict (what `-o json`
prints); `render_text` prints it for a person, with the offline bound and the reactive baseline
beside it when they were computed. Energy comes from the machines'
`planning.energy.account.Account`s of their true draw.

"Always-on" is one reference for every policy of a trace (`AlwaysOn`, from
`always_on_reference`): the always-on replay of the same trace, so "% saved" of Lights-Out, of
the reactive baseline and of always-on itself (0%) share a denominator. Waits are split by why
the pod could not be placed (`machines.WaitCause`, decided by the scheduler): waiting for a
power-on, and waiting for busy capacity on a machine that was up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lightsout.planning.autoscaler.scaledown import JOB
from lightsout.planning.energy.account import cost
from lightsout.simulate.replay.engine import Policy, Result, Scoring, replay
from lightsout.simulate.replay.machines import SimPod, WaitCause

#: A pod that waited for a power-on longer than its machine's power-on and boot plus this is
#: reported. "Its machine" is the one it first ran on or, when slower, the one the planner
#: powered on for it or counted it on while that one was coming up (a pod waiting for a machine
#: that is booting may start earlier elsewhere as room frees up: it waited less than the boot
#: it was promised). The planner only counts a pod on a coming machine Ready no later than a
#: fresh power-on would be (`absorb.COMING_MARGIN_SECONDS`), so that machine is the pod's
#: quickest one. Only the time it waited for a power-on counts: time spent waiting for busy
#: capacity (every machine that could hold it up, their room taken) is no power-on's fault.
BOOT_SLACK_SECONDS = 5.0

#: How the always-on reference places its pods: kube-scheduler's default scoring, whatever the
#: replay being judged used, so the reference depends on the trace (and `--set`) alone.
REFERENCE_SCORING = Scoring.LEAST_ALLOCATED

#: What each wait cause is called in the text report.
CAUSE_WORDS = {
    WaitCause.POWER_ON: "waiting for a power-on (a machine that could hold the pod was not up)",
    WaitCause.BUSY_CAPACITY: (
        "waiting for busy capacity (every machine that could hold the pod was up, "
        "other pods held the room)"
    ),
}
#: ... and in `-o json`, under each kind of pod's waits.
CAUSE_KEYS = {WaitCause.POWER_ON: "forPowerOn", WaitCause.BUSY_CAPACITY: "forBusyCapacity"}


@dataclass(frozen=True)
class AlwaysOn:
    """The always-on reference: the trace's machines all on all week, none ever powered off.

    Why one replay rather than each policy's own: every policy runs the same pods, so the idle
    draw of every machine all week is the same whatever the policy, but the busy draw (`on -
    idle` times each pod's cpu share of its machine) depends on where each pod ran, and each
    policy places pods differently. Adding each policy's own busy draw to the idle draw (used
    plus the accounts' `saved`) made one reference per policy, so "% saved" of Lights-Out and of
    the reactive baseline had different denominators. One placement has to be chosen, and the
    always-on replay's (kube-scheduler's default scoring over every machine, on from the start)
    is the one a cluster that never powers anything off would make: the reference is a schedule
    that happens, and always-on saves 0% against it by construction. (Its machines power on at
    the start; powering on and booting draw idle, so each is counted at idle or above all week.)
    """

    #: kWh per Group.
    kwh: Mapping[str, float]

    @classmethod
    def of(cls, result: Result) -> AlwaysOn:
        """The reference from an always-on replay (`always_on_reference` makes it)."""
        kwh: dict[str, float] = {}
        for m in result.machines:
            kwh[m.template.group] = kwh.get(m.template.group, 0.0) + m.energy.total.used_wh / 1000
        return cls(kwh)


def always_on_reference(result: Result) -> AlwaysOn:
    """The always-on reference for `result`'s trace: `result` itself when it is that replay,
    else the trace replayed always-on (same `--set` overrides, `REFERENCE_SCORING`)."""
    options = result.options
    if options.policy is Policy.ALWAYS_ON and options.scoring is REFERENCE_SCORING:
        return AlwaysOn.of(result)
    reference = replace(options, policy=Policy.ALWAYS_ON, scoring=REFERENCE_SCORING)
    return AlwaysOn.of(replay(result.trace, reference))


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
    pods = [p for p in result.pods if p.arrival < end]
    return max(((end if p.started is None else p.started) - p.arrival for p in pods), default=0.0)


def _waits(pods: Sequence[SimPod], end: float, boot_of: Mapping[str, float]) -> dict[str, Any]:
    waits = [p.wait for p in pods if p.wait is not None]
    figures: dict[str, Any] = {
        "pods": len(pods),
        "started": len(waits),
        "neverStarted": len(pods) - len(waits),
        "p50Seconds": _round(percentile(waits, 0.50)),
        "p95Seconds": _round(percentile(waits, 0.95)),
        "maxSeconds": _round(max(waits, default=None)),
    }
    waited = [p.waited(end) for p in pods]
    for cause, key in CAUSE_KEYS.items():
        seconds = [w[cause] for w in waited if w.get(cause, 0.0) > 0]
        figures[key] = {
            "pods": len(seconds),
            "p95Seconds": _round(percentile(seconds, 0.95)),
            "maxSeconds": _round(max(seconds, default=None)),
        }
    figures[CAUSE_KEYS[WaitCause.POWER_ON]]["pastBoot"] = sum(
        1
        for p, w in zip(pods, waited, strict=True)
        if p.first_host is not None
        and w.get(WaitCause.POWER_ON, 0.0)
        > max(boot_of.get(name or "", 0.0) for name in (p.first_host, p.powered_for, p.counted_on))
        + BOOT_SLACK_SECONDS
    )
    return figures


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


def _energy(used: float, always: float) -> dict[str, float]:
    return {
        "usedKWh": round(used, 3),
        "alwaysOnKWh": round(always, 3),
        "savedKWh": round(always - used, 3),
        "savedShare": round(1 - used / always, 4) if always else 0.0,
    }


def summarise(result: Result, reference: AlwaysOn | None = None) -> dict[str, Any]:
    """The figures of `result`, its savings against `reference` (by default the trace's
    always-on reference, replayed here: pass it in when summarising several policies)."""
    if reference is None:
        reference = always_on_reference(result)
    end = result.trace.duration_seconds
    days = end / 86_400
    prices = {g.key.name: g.price_per_kwh for g in result.groups}
    groups: dict[str, dict[str, float]] = {}
    machines: list[dict[str, Any]] = []
    boot_of: dict[str, float] = {}
    for m in result.machines:
        g = groups.setdefault(m.template.group, {"usedKWh": 0.0})
        used = m.energy.total.used_wh / 1000
        g["usedKWh"] += used
        boot_of[m.name] = m.truth.power_on_seconds + m.truth.boot_seconds
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
        g["alwaysOnKWh"] = reference.kwh.get(name, 0.0)
        g["savedKWh"] = g["alwaysOnKWh"] - g["usedKWh"]
        price = prices.get(name)
        g["cost"] = cost(g["usedKWh"] * 1000, price) if price is not None else float("nan")
        g["alwaysOnCost"] = cost(g["alwaysOnKWh"] * 1000, price) if price else float("nan")
    used = sum(g["usedKWh"] for g in groups.values())
    cron_pods = [p for p in result.pods if p.cronjob is not None]
    other = [p for p in result.pods if p.cronjob is None]
    return {
        "trace": result.trace.name,
        "policy": result.options.policy.value,
        "scoring": result.options.scoring.value,
        "days": round(days, 3),
        "energy": {
            **_energy(used, sum(reference.kwh.values())),
            "alwaysOnReference": {
                "policy": Policy.ALWAYS_ON.value,
                "scoring": REFERENCE_SCORING.value,
            },
        },
        "groups": {
            name: {k: round(v, 3) if not math.isnan(v) else None for k, v in g.items()}
            for name, g in sorted(groups.items())
        },
        "waits": {
            "cronjob": _waits(cron_pods, end, boot_of),
            "other": _waits(other, end, boot_of),
        },
        "evictions": _evictions(result.pods),
        "cronRunsSkipped": result.skipped_cron_runs,
        "cronRunsLate": result.late_cron_runs,
        "cronRunsReplaced": result.replaced_cron_runs,
        "machines": machines,
        "plans": result.plans,
        "decisions": result.decisions,
        "outages": _outages(result),
        "electricity": _electricity(result),
        "deferred": _deferred(result),
    }


def _electricity(result: Result) -> dict[str, Any]:
    """What the machines' true draw cost, each moment at its Group's price then (series,
    tariff or one price), and weighed in grams of CO2 where a Group has a carbon series."""
    currencies = {g.electricity.currency for g in result.groups if g.electricity is not None}
    carbon = any(g.carbon is not None for g in result.groups)
    return {
        "cost": round(sum(m.cost for m in result.machines), 4),
        "currency": currencies.pop() if len(currencies) == 1 else None,
        "gCO2": round(sum(m.grams for m in result.machines), 1) if carbon else None,
    }


def _deferred(result: Result) -> dict[str, Any] | None:
    """The held Jobs (CronJob runs and bare Jobs): how many, their delay from creation to
    release, and the deadlines missed (finished late, or not finished by a deadline within the
    trace; a run its CronJob's Replace deleted has none left to meet)."""
    runs = result.deferred
    if not runs:
        return None
    end = result.trace.start + timedelta(seconds=result.trace.duration_seconds)
    delays = sorted(r.released - r.created for r in runs if r.released is not None)
    unfinished = [
        r
        for r in runs
        if r.finished is None and r.deleted is None and r.deadline is not None and r.deadline < end
    ]
    return {
        "runs": len(runs),
        "released": len(delays),
        "meanDelayHours": round(sum(delays) / len(delays) / 3600, 2) if delays else None,
        "maxDelayHours": round(delays[-1] / 3600, 2) if delays else None,
        "deadlinesMissed": sum(1 for r in runs if r.missed) + len(unfinished),
    }


def _outages(result: Result) -> list[dict[str, Any]]:
    """Each mains failure of the trace's UPS: how the battery fared and the machines came back."""
    if result.ups is None:
        return []
    return [
        {
            "startSeconds": round(o.started, 1),
            "seconds": None if o.ended is None else round(o.ended - o.started, 1),
            "loadWatts": round(o.load_watts, 1),
            "runtimeSeconds": _round(o.runtime_seconds),
            "allOffSeconds": None if o.all_off_at is None else round(o.all_off_at - o.started, 1),
            "batteryLeftShare": None if o.left_share is None else round(o.left_share, 3),
            "cutByDeadBattery": list(o.cut),
            "restoredSeconds": (
                None
                if o.restored_at is None or o.ended is None
                else round(o.restored_at - o.ended, 1)
            ),
        }
        for o in result.ups.outages
    ]


def _outage_line(o: Mapping[str, Any]) -> str:
    runtime = _fmt(o["runtimeSeconds"], " s")
    left = o["batteryLeftShare"]
    off = (
        "not all off before the mains returned"
        if o["allOffSeconds"] is None
        else f"all fed machines off after {_fmt(o['allOffSeconds'], ' s')} with "
        f"{left * 100:.0f}% of the battery left"
    )
    cut = ", ".join(o["cutByDeadBattery"]) or "none"
    return (
        f"outage at {_fmt(o['startSeconds'], ' s')} for {_fmt(o['seconds'], ' s')}: load "
        f"{_fmt(o['loadWatts'], ' W')}, runtime {runtime} at it; {off}; cut by a dead battery: "
        f"{cut}; back {_fmt(o['restoredSeconds'], ' s')} after the mains"
    )


def _fmt(value: object, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def _cause_line(cause: WaitCause, figures: Mapping[str, Any]) -> str:
    text = (
        f"  {CAUSE_WORDS[cause]}: {figures['pods']} pods, p95 {_fmt(figures['p95Seconds'], ' s')}, "
        f"max {_fmt(figures['maxSeconds'], ' s')}"
    )
    if "pastBoot" in figures:
        text += (
            f"; {figures['pastBoot']} past their machine's power-on and boot "
            f"+ {BOOT_SLACK_SECONDS:.0f} s"
        )
    return text


def render_text(
    summary: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    bound: Mapping[str, Any] | None = None,
) -> str:
    e = summary["energy"]
    reference = e["alwaysOnReference"]
    lines = [
        f"trace {summary['trace']}: {summary['days']} days, policy {summary['policy']}, "
        f"scheduler scoring {summary['scoring']}",
        f"energy: {e['usedKWh']:.2f} kWh used, {e['savedKWh']:.2f} kWh saved "
        f"({e['savedShare'] * 100:.1f}%) against always-on {e['alwaysOnKWh']:.2f} kWh "
        f"(every machine on all week, pods placed by {reference['scoring']}; "
        "the same reference for every policy)",
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
    money = summary["electricity"]
    grams = "" if money["gCO2"] is None else f", {money['gCO2'] / 1000:.2f} kg CO2"
    lines.append(f"electricity: {money['cost']:.2f} {money['currency'] or ''}{grams}".rstrip())
    held = summary["deferred"]
    if held is not None:
        lines.append(
            f"deferrable runs: {held['runs']}, released {held['released']}, delay mean "
            f"{_fmt(held['meanDelayHours'], ' h')}, max {_fmt(held['maxDelayHours'], ' h')}, "
            f"deadlines missed {held['deadlinesMissed']}"
        )
    for kind, w in summary["waits"].items():
        lines.append(
            f"waits ({kind} pods): {w['pods']} pods, p50 {_fmt(w['p50Seconds'], ' s')}, "
            f"p95 {_fmt(w['p95Seconds'], ' s')}, max {_fmt(w['maxSeconds'], ' s')}, "
            f"never started {w['neverStarted']}"
        )
        if w["pods"]:
            lines.extend(_cause_line(cause, w[key]) for cause, key in CAUSE_KEYS.items())
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
    lines.extend(_outage_line(o) for o in summary.get("outages", ()))
    if baseline is not None:
        b = baseline["energy"]
        other = baseline["waits"]["other"]
        power_on = other[CAUSE_KEYS[WaitCause.POWER_ON]]
        busy = other[CAUSE_KEYS[WaitCause.BUSY_CAPACITY]]
        lines.append(
            f"reactive baseline (cluster-autoscaler defaults): {b['usedKWh']:.2f} kWh, "
            f"{b['savedKWh']:.2f} kWh saved ({b['savedShare'] * 100:.1f}%) against the same "
            f"always-on; other pods' wait p95 {_fmt(other['p95Seconds'], ' s')}, "
            f"{power_on['pastBoot']} waiting for a power-on past boot "
            f"+ {BOOT_SLACK_SECONDS:.0f} s, {busy['pods']} waiting for busy capacity"
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
