"""`lightsout simulate --plot FILE.png`: a replay's machines on a timeline, pending pods below;
with `--sweep`, energy against the other pods' p95 wait, one labelled point per value.

Called by `lightsout.cli` after a replay or a sweep. One row per machine shows when it was off
(blank), powering on or booting, Ready, or draining and powering off; under them, how many pods
were waiting to start at each moment. Needs matplotlib (`pip install 'kube-lightsout[plot]'`),
imported only here so the operator and the rest of the simulator never need it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

from lightsout.simulate.replay.engine import Result

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
        end = pod.arrival + pod.wait if pod.wait is not None else result.trace.duration_seconds
        steps += [(pod.arrival, 1), (end, -1)]
    steps.sort()
    times, counts, level = [0.0], [0], 0
    for moment, change in steps:
        level += change
        times.append(moment / 3600)
        counts.append(level)
    return times, counts


def _pyplot() -> tuple[Any, Any]:
    try:
        import matplotlib as mpl

        mpl.use("Agg")  # no display: write a file
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise PlotMissingError(
            "--plot needs matplotlib: pip install 'kube-lightsout[plot]'"
        ) from error
    return mpl, plt


def plot(result: Result, path: Path) -> None:
    """Draw `result` into `path` (PNG, or any format matplotlib infers from the suffix)."""
    mpl, plt = _pyplot()
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


def plot_sweep(document: Mapping[str, Any], path: Path) -> None:
    """Draw a sweep (`sweep.as_json`) into `path`: the two figures its knob trades (energy
    against the other pods' p95 wait, or cost against deadlines missed), the points joined in
    the order swept and labelled with their value, the default and the knee ringed, the
    baseline a cross."""
    _, plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 5.5), layout="constrained")
    points = document["points"]
    trade = document["axes"]
    xs = [p[trade["x"]] or 0.0 for p in points]
    ys = [p[trade["y"]] or 0.0 for p in points]
    axes.plot(xs, ys, marker="o", color="#34495e", label=f"{document['knob']} (Lights-Out)")
    for index, (point, x, y) in enumerate(zip(points, xs, ys, strict=True)):
        # Above and below by turns, so the labels of close points do not overlap.
        offset = (4, 8) if index % 2 == 0 else (4, -16)
        axes.annotate(point["value"], (x, y), textcoords="offset points", xytext=offset)
    marks: dict[str, tuple[str, Callable[[Mapping[str, Any]], bool]]] = {
        "default": ("#4d9078", lambda p: bool(p["isDefault"])),
        "knee": ("#f78154", lambda p: bool(p["value"] == document["knee"])),
    }
    for word, (colour, hit) in marks.items():
        marked = [(x, y) for p, x, y in zip(points, xs, ys, strict=True) if hit(p)]
        if marked:
            axes.scatter(
                *zip(*marked, strict=True),
                s=260,
                facecolors="none",
                edgecolors=colour,
                linewidths=2,
                label=word,
            )
    base = document["baseline"]
    reactive = base["policy"] == "reactive"
    axes.scatter(
        [base[trade["x"]] or 0.0],
        [base[trade["y"]] or 0.0],
        marker="X",
        s=120,
        color="#c0392b",
        label="reactive baseline (cluster-autoscaler defaults)" if reactive else base["label"],
    )
    # From zero (a few seconds' difference does not fill the height), room above the highest.
    highest = max([*ys, base[trade["y"]] or 0.0])
    axes.set_ylim(0, highest * 1.15 if highest > 0 else 1.0)
    currency = f", {document['currency']}" if trade["x"] == "cost" and document["currency"] else ""
    axes.set_xlabel(trade["xLabel"] + currency)
    axes.set_ylabel(trade["yLabel"])
    axes.set_title(f"{document['trace']}: sweep of {document['setting']}")
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=110)
    plt.close(figure)
