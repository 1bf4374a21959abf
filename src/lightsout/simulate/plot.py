"""`lightsout simulate --plot FILE.png`: a replay's machines on a timeline, pending pods below.

Called by `lightsout.cli` after a replay. One row per machine shows when it was off (blank),
powering on or booting, Ready, or draining and powering off; under them, how many pods were
waiting to start at each moment. Needs matplotlib (`pip install 'kube-lightsout[plot]'`),
imported only here so the operator and the rest of the simulator never need it.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

from lightsout.simulate.engine import Result

#: Colour of each phase on the timeline; Off is left blank.
COLOURS = {
    "PoweringOn": "#f2c14e",
    "Provisioning": "#f2c14e",
    "Booting": "#f78154",
    "Ready": "#4d9078",
    "Draining": "#8c8c8c",
    "PoweringOff": "#b4b4b4",
    "Deprovisioning": "#b4b4b4",
    "Failed": "#c0392b",
    "Unknown": "#5d576b",
}


class PlotMissingError(RuntimeError):
    """matplotlib is not installed."""


def _pending_curve(result: Result) -> tuple[list[float], list[int]]:
    """Pods waiting to start (arrived, not yet started the first time) over time, in hours."""
    steps: list[tuple[float, int]] = []
    for pod in result.pods:
        if pod.wait is not None and pod.wait <= 0:
            continue  # started the moment it came: never waiting
        steps.append((pod.arrival, 1))
        end = pod.arrival + pod.wait if pod.wait is not None else result.trace.duration_seconds
        steps.append((end, -1))
    steps.sort()
    times, counts, level = [0.0], [0], 0
    for moment, change in steps:
        level += change
        times.append(moment / 3600)
        counts.append(level)
    return times, counts


def plot(result: Result, path: Path) -> None:
    """Draw `result` into `path` (PNG, or any format matplotlib infers from the suffix)."""
    try:
        import matplotlib as mpl

        mpl.use("Agg")  # no display: write a file
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise PlotMissingError(
            "--plot needs matplotlib: pip install 'kube-lightsout[plot]'"
        ) from error
    end = result.trace.duration_seconds
    machines = result.machines
    # Constrained layout keeps a band above the axes for the title and the legend, so the
    # legend covers no machine's row (inside the axes it hid the top row's last 70 hours).
    figure, (top, bottom) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(14, 1.2 + 0.45 * len(machines) + 2.0 + 0.4),
        gridspec_kw={"height_ratios": [max(len(machines), 1), 3]},
        layout="constrained",
    )
    for row, machine in enumerate(machines):
        spans = [*machine.timeline, (end, "end")]
        for (start, phase), (stop, _) in pairwise(spans):
            colour = COLOURS.get(phase)
            if colour is not None and stop > start:
                top.broken_barh(
                    [(start / 3600, (stop - start) / 3600)], (row - 0.4, 0.8), facecolors=colour
                )
    top.set_yticks(range(len(machines)), [m.template.key.name for m in machines])
    top.set_ylim(len(machines) - 0.5, -0.5)  # every row, top down: one never on included
    handles: list[Any] = [
        mpl.patches.Patch(color=COLOURS[p], label=p)
        for p in ("PoweringOn", "Booting", "Ready", "Draining", "PoweringOff")
    ]
    top.set_title(
        f"{result.trace.name}: policy {result.options.policy}, scoring {result.options.scoring}"
    )
    figure.legend(handles=handles, loc="outside upper center", ncols=5, fontsize="small")
    times, counts = _pending_curve(result)
    bottom.step(times, counts, where="post", color="#34495e")
    bottom.set_ylabel("pods waiting")
    bottom.set_ylim(bottom=0)
    bottom.yaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))  # whole pods
    bottom.set_xlabel("hours since the trace's start")
    bottom.set_xlim(0, end / 3600)
    figure.savefig(path, dpi=110)
    plt.close(figure)


__all__ = ["PlotMissingError", "plot"]
