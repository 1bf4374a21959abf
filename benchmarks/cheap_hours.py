"""Benchmark: deferrable work on four weeks of real day-ahead prices and grid carbon.

A household (three machines, a dynamic tariff: the DE-LU day-ahead price plus 0.20 EUR/kWh of
fees and taxes) runs a nightly backup created at 18:00 and a photo index at 20:00 that may both
wait 22 h, a weekly scrub on Saturday morning that may wait 30 h, and evening pods that may not
wait (`generate.household_deferrable`). The prices and the carbon intensity
are the shared data set's (`../shared/data/electricity`, Bundesnetzagentur | SMARD.de,
CC BY 4.0), from Monday 11 March 2024 for 28 days.

Each objective (Cost, Carbon) is replayed twice with the operator's planner: Lights-Out holding
the deferrable runs (`planning.autoscaler.deferral`) and the same runs released at once (as
without the admission webhook). It prints the electricity cost, the grams of CO2 and the kWh
of each, the deferrable runs' delays and missed deadlines, and the saving. The saving is given
on the whole bill and on the work's share of it: the bill less what the machines draw switched
off all four weeks (their standby, which no schedule changes). Then the offline optimum for the
objective, knowing prices and deadlines (`optimum.solve_windows`: the time-indexed MIP, each
deferrable run by its deadline, every other pod within the longest wait of the two replays,
started from Lights-Out's schedule): its proven lower bound, its gap, and Lights-Out's ratio to
it. Figures are printed, never asserted.

Run: `.venv/bin/python -m benchmarks.cheap_hours [solver seconds [slot seconds]]` (part of
`make bench`; about 15 minutes, most of it HiGHS).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from lightsout.planning.energy import tariff
from lightsout.simulate.analysis.optimum import solve_windows
from lightsout.simulate.analysis.report import longest_wait, summarise
from lightsout.simulate.replay.engine import Options, Result, replay
from lightsout.simulate.traces.generate import household_deferrable

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "electricity"
#: The solver's seconds per objective, and the model's slot: the default slot for four weeks
#: (900 s) leaves the bound 5% under the best schedule after 300 s, 300 s slots 4% (a slot
#: loses up to two of its lengths of idle per up interval: docs/simulator.md).
TIME_LIMIT, SLOT = 400.0, 300.0


def standby(result: Result) -> tuple[float, float]:
    """What the machines would cost and emit switched off for the whole trace."""
    groups = {group.key: group for group in result.groups}
    start = result.trace.start
    end = start + timedelta(seconds=result.trace.duration_seconds)
    money = grams = 0.0
    for machine in result.machines:
        group = groups[machine.template.group_key]
        watts = machine.draw.off
        if group.electricity is not None:
            money += tariff.cost(group.electricity, watts, start, end, group.prices)
        if group.carbon is not None:
            grams += group.carbon.integral(watts, start, end)
    return money, grams


def figures(result: Result) -> dict[str, Any]:
    summary = summarise(result)
    return {
        "cost": summary["electricity"]["cost"],
        "grams": summary["electricity"]["gCO2"],
        "kwh": summary["energy"]["usedKWh"],
        "deferred": summary["deferred"],
    }


def share(saved: float, of: float) -> str:
    return f"{saved / of * 100:.1f}%" if of else "-"


def main() -> int:
    if not DATA.is_dir():
        print(f"no data at {DATA}: the shared electricity data set sits beside the project")
        return 1
    time_limit = float(sys.argv[1]) if len(sys.argv) > 1 else TIME_LIMIT
    slot = float(sys.argv[2]) if len(sys.argv) > 2 else SLOT
    prices = (DATA / "de_lu_price_hourly.csv").read_text()
    carbon = (DATA / "de_carbon_intensity_hourly.csv").read_text()
    for objective in ("Cost", "Carbon"):
        trace = household_deferrable(prices, carbon, objective=objective)
        held = replay(trace, Options(defer=True))
        at_once = replay(trace, Options(defer=False))
        lo, now = figures(held), figures(at_once)
        idle_cost, idle_grams = standby(at_once)
        runs = lo["deferred"]
        print(f"objective {objective}: {trace.name}, {trace.duration_seconds / 86_400:.0f} days")
        for name, f in (("run at once", now), ("Lights-Out", lo)):
            print(
                f"  {name:<12} {f['cost']:.3f} EUR, {f['grams'] / 1000:.3f} kg CO2, "
                f"{f['kwh']:.3f} kWh"
            )
        print(
            f"  deferrable runs {runs['runs']}: delay mean {runs['meanDelayHours']} h, "
            f"max {runs['maxDelayHours']} h, deadlines missed {runs['deadlinesMissed']}"
        )
        saved_cost, saved_grams = now["cost"] - lo["cost"], now["grams"] - lo["grams"]
        print(
            f"  saved: {saved_cost:.3f} EUR ({share(saved_cost, now['cost'])} of the bill, "
            f"{share(saved_cost, now['cost'] - idle_cost)} of the work's "
            f"{now['cost'] - idle_cost:.3f} EUR above standby {idle_cost:.3f}); "
            f"{saved_grams / 1000:.3f} kg CO2 ({share(saved_grams, now['grams'])} of all, "
            f"{share(saved_grams, now['grams'] - idle_grams)} of the work's)"
        )
        optimum(held, at_once, objective, lo, time_limit=time_limit, slot=slot)
    return 0


def optimum(
    held: Result,
    at_once: Result,
    objective: str,
    lo: dict[str, Any],
    *,
    time_limit: float,
    slot: float,
) -> None:
    """The offline optimum for the objective, and Lights-Out's ratio to it."""
    waited = max(longest_wait(held), longest_wait(at_once))
    key = "cost" if objective == "Cost" else "carbon"
    bound = solve_windows(held.trace, time_limit, waited, objective=key, slot=slot, replayed=[held])
    ours = lo["cost"] if key == "cost" else lo["grams"] / 1000
    scale, unit = (1.0, "EUR") if key == "cost" else (1000.0, "kg CO2")
    if bound.value is None:
        print(f"  offline optimum ({key}): none ({bound.note})")
        return
    gap = "gap unknown" if bound.gap is None else f"gap {bound.gap * 100:.1f}%"
    best = "" if bound.incumbent is None else f", best schedule {bound.incumbent / scale:.3f}"
    missed = lo["deferred"]["deadlinesMissed"]
    covered = "" if not missed else f" (Lights-Out missed {missed} deadline(s): not covered)"
    print(
        f"  offline optimum ({key}, {bound.slot:.0f} s slots, each pod within {waited:.0f} s, "
        f"deferrable runs by their deadlines): >= {bound.value / scale:.3f} {unit} "
        f"({bound.source}, {gap}{best}, {bound.seconds:.0f} s); Lights-Out / bound = "
        f"{ours / (bound.value / scale):.3f}{covered}"
    )


if __name__ == "__main__":
    sys.exit(main())
