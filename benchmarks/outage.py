"""Benchmark: a mains failure under the homelab week's fleet, on a 15-minute UPS.

traces/homelab-week's machines, its Groups given battery tiers (`homelab` Hold until 600 s of
runtime are left, `gpu` Shed), and a UPS that lasts 15 minutes at the load when the mains fail
(capacity = that load x 15 min / efficiency 0.9, the load from a first replay). The mains fail
for 30 minutes at moments of the week with different loads (a weekday evening's CI burst, a
night's backups, the weekend's GPU training). For each it prints how the replay (the
operator's planner, its battery rules, the machines' passes) fared: the load and the battery's
runtime at it, when every fed machine was off and how much of the battery was left then, the
machines cut by a dead battery (the goal is none) and how long after the mains the machines
were back. Figures are printed, never asserted.

Run: `.venv/bin/python -m benchmarks.outage` (part of `make bench`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from lightsout.simulate.analysis.report import summarise
from lightsout.simulate.replay.engine import replay
from lightsout.simulate.traces.trace import MainsOutage, Trace, TraceUps, load

TRACE = Path(__file__).resolve().parents[1] / "traces" / "homelab-week"
MINUTES = 15
EFFICIENCY = 0.9
SOURCE = {"nut": {"host": "nut.home.arpa", "ups": "rack"}}
TIERS: dict[str, dict[str, Any]] = {
    "homelab": {"tier": "Hold", "holdUntil": {"runtimeSeconds": 600}},
    "gpu": {"tier": "Shed"},
}
#: (what, seconds after the trace's start: Monday 00:00 UTC).
MOMENTS = (
    ("Tuesday 19:00, evening CI", 86_400 + 19 * 3600),
    ("Wednesday 02:30, nightly backups", 2 * 86_400 + 2 * 3600 + 1800),
    ("Saturday 10:00, GPU training", 5 * 86_400 + 10 * 3600),
)


def with_battery(trace: Trace, at_seconds: float, capacity_wh: float) -> Trace:
    machines: list[dict[str, Any]] = []
    for manifest in trace.machines:
        copied = dict(manifest)
        if manifest.get("kind") == "Group":
            tier = TIERS[str(manifest["metadata"]["name"])]
            copied["spec"] = {**manifest["spec"], "battery": {"source": SOURCE, **tier}}
        machines.append(copied)
    ups = TraceUps(
        capacity_wh=capacity_wh,
        efficiency=EFFICIENCY,
        outages=[MainsOutage(at_seconds=at_seconds, seconds=1800)],
    )
    # Six hours past the outage's start: the machines are back and the battery full by then.
    end = min(trace.duration_seconds, at_seconds + 6 * 3600)
    return replace(trace, machines=tuple(machines), ups=ups, duration_seconds=end)


def main() -> None:
    trace = load(TRACE)
    print(
        f"{trace.name}: each outage on a UPS that lasts {MINUTES} min at the load when the "
        f"mains fail (efficiency {EFFICIENCY}); tiers "
        + ", ".join(f"{group} {tier['tier']}" for group, tier in TIERS.items())
    )
    header = (
        f"{'outage (30 min)':<36}{'UPS Wh':>8}{'load W':>8}{'runtime s':>11}{'all off s':>11}"
        f"{'battery left':>14}{'cut':>6}{'back s':>8}"
    )
    print(header)
    for what, at in MOMENTS:
        # The load at that moment, from a replay on a battery too big to matter.
        (probe,) = summarise(replay(with_battery(trace, at, 1_000_000)))["outages"]
        capacity = max(1.0, probe["loadWatts"]) * MINUTES / 60 / EFFICIENCY
        summary = summarise(replay(with_battery(trace, at, capacity)))
        (outage,) = summary["outages"]
        left = outage["batteryLeftShare"]
        print(
            f"{what:<36}{capacity:>8.0f}{outage['loadWatts']:>8.0f}"
            f"{outage['runtimeSeconds'] or 0:>11.0f}"
            f"{outage['allOffSeconds'] if outage['allOffSeconds'] is not None else '-':>11}"
            f"{'-' if left is None else f'{left * 100:.0f}%':>14}"
            f"{len(outage['cutByDeadBattery']):>6}"
            f"{outage['restoredSeconds'] if outage['restoredSeconds'] is not None else '-':>8}"
        )


if __name__ == "__main__":
    main()
