"""Benchmark: Lights-Out against the offline optimum and the reactive baseline, per trace.

For each shipped trace (traces/homelab-week, batch-heavy, bursty-random,
household-contention) it replays the
built-in planner, the reactive baseline (cluster-autoscaler's defaults) and always-on, solves
the offline bound with HiGHS and prints one table: energy / bound for both policies, energy
saved against the one always-on reference (`report.always_on_reference`), pod waits (CronJob
pods apart; pods waiting for a power-on past boot + 5 s, pods waiting for busy capacity),
power cycles, evictions of running pods (a Job's restarts from zero). Then, per trace, where
Lights-Out spends above the bound's schedule, by machine and cause
(`simulate.analysis.breakdown`), and the replay time of a synthetic week of 20 machines and
5,000 pods. Figures are printed, never asserted.

Run: `.venv/bin/python -m benchmarks.simulator [solver seconds]` (part of `make bench`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lightsout.simulate.analysis.breakdown import GROUPS, breakdown
from lightsout.simulate.analysis.optimum import Bound, solve
from lightsout.simulate.analysis.report import always_on_reference, longest_wait, summarise
from lightsout.simulate.replay.engine import Options, Policy, replay
from lightsout.simulate.traces.generate import scale_week
from lightsout.simulate.traces.trace import load

TRACES = Path(__file__).resolve().parents[1] / "traces"
NAMES = ("homelab-week", "batch-heavy", "bursty-random", "household-contention")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio(used: float, bound: float | None) -> str:
    return "-" if not bound else f"{used / bound:.3f}"


def _bound(bound: Bound) -> str:
    if bound.kwh is None:
        return f"none ({bound.note})"
    gap = "gap unknown" if bound.gap is None else f"{bound.gap * 100:.1f}%"
    return f"{bound.kwh:.2f} ({bound.kind}, {bound.source}, {gap}, {bound.seconds:.0f} s)"


def row(name: str, time_limit: float) -> dict[str, Any]:
    trace = load(TRACES / name)
    started = time.monotonic()
    ours_result = replay(trace)
    replay_seconds = time.monotonic() - started
    reference = always_on_reference(ours_result)
    ours = summarise(ours_result, reference)
    reactive_result = replay(trace, Options(policy=Policy.REACTIVE))
    reactive = summarise(reactive_result, reference)
    waited = max(longest_wait(ours_result), longest_wait(reactive_result))
    bound = solve(trace, time_limit, max_wait=waited)
    return {
        "trace": name,
        "ours": ours,
        "reactive": reactive,
        "bound": bound,
        "replay": replay_seconds,
        "breakdown": breakdown(ours_result.machines, bound.schedule),
    }


def above_bound(name: str, rows: list[dict[str, Any]], bound: Bound, shown: int = 4) -> None:
    """The machines where Lights-Out spends most above the bound's schedule, and on what."""
    print(f"\n{name}: Lights-Out above the bound's schedule ({bound.schedule_source}), kWh")
    print("| machine | Lights-Out | schedule | above | up: Lights-Out's causes | cycles | load |")
    print("|---|---|---|---|---|---|---|")
    rows = [r for r in rows if "aboveBound" in r]
    rows.sort(key=lambda r: -sum(r["aboveBound"].values()))
    for r in rows[:shown]:
        above, causes = r["aboveBound"], r["causes"]
        up = [(f"idle {hold}", kwh) for hold, kwh in causes["idle"].items()]
        up += [(cause, causes[cause]) for cause in GROUPS["up"] if cause != "idle"]
        up.sort(key=lambda item: -item[1])
        words = ", ".join(f"{cause} {kwh:.3f}" for cause, kwh in up[:3] if kwh >= 0.0005)
        print(
            f"| {r['name']} | {r['kWh']:.3f} | {r['bound']['kWh']:.3f} "
            f"| {sum(above.values()):+.3f} | {above['up']:+.3f} ({words}) "
            f"| {above['cycles']:+.3f} | {above['load']:+.3f} |"
        )


def main() -> None:
    time_limit = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    print(f"offline bound: HiGHS MIP, {time_limit:.0f} s limit (LP relaxation solved first)\n")
    header = (
        "| trace | Lights-Out kWh | / bound | reactive kWh | / bound | bound kWh (kind, gap) "
        "| saved vs always-on | CronJob wait p95 | other wait p50/p95/max s "
        "| power-on past boot+5 s (reactive) | busy-capacity waits "
        "| cycles/day (max) | evictions (of Job pods) ours / reactive | replay s |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    rows = []
    for name in NAMES:
        r = row(name, time_limit)
        rows.append(r)
        ours, reactive, bound = r["ours"], r["reactive"], r["bound"]
        e = ours["energy"]
        other = ours["waits"]["other"]
        cycles = max(m["powerCyclesPerDay"] for m in ours["machines"])
        evicted = " / ".join(
            f"{s['evictions']['pods']} ({s['evictions']['jobPods']})" for s in (ours, reactive)
        )
        print(
            f"| {name} | {e['usedKWh']:.2f} | {_ratio(e['usedKWh'], bound.kwh)} "
            f"| {reactive['energy']['usedKWh']:.2f} "
            f"| {_ratio(reactive['energy']['usedKWh'], bound.kwh)} "
            f"| {_bound(bound)} "
            f"| {e['savedKWh']:.1f} kWh ({e['savedShare'] * 100:.0f}%) "
            f"| {_seconds(ours['waits']['cronjob']['p95Seconds'])} "
            f"| {_seconds(other['p50Seconds'])}/{_seconds(other['p95Seconds'])}/"
            f"{_seconds(other['maxSeconds'])} "
            f"| {other['forPowerOn']['pastBoot']} "
            f"({reactive['waits']['other']['forPowerOn']['pastBoot']}) "
            f"| {other['forBusyCapacity']['pods']} | {cycles:.1f} | {evicted} "
            f"| {r['replay']:.1f} |",
            flush=True,
        )
    for r in rows:
        if r["bound"].schedule:
            above_bound(r["trace"], r["breakdown"], r["bound"])
    big = scale_week()
    started = time.monotonic()
    result = replay(big)
    print(
        f"\nreplay speed: {big.name} (20 machines, {len(big.pods)} pods, 7 days): "
        f"{time.monotonic() - started:.1f} s, {result.plans} plans, "
        f"{result.decisions} state-machine decisions"
    )


if __name__ == "__main__":
    main()
