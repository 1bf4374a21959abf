"""What `lightsout simulate` reports about a replay: the timeline plot's legend.

Small hand-built traces (the helpers of `test_simulate`) whose figures can be worked out by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lightsout.simulate.engine import replay
from tests.unit.test_simulate import node, trace

pytestmark = pytest.mark.unit


def test_the_plot_legend_covers_no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.figure
    import matplotlib.pyplot  # first: on import it wraps Figure.savefig, unpatched

    from lightsout.simulate.plot import plot

    drawn: list[tuple[Any, list[Any], list[str]]] = []
    original = matplotlib.figure.Figure.savefig

    def save_and_measure(figure: Any, *args: Any, **kwargs: Any) -> None:
        """The legend's and the axes' boxes on the figure as saved (laid out and drawn)."""
        original(figure, *args, **kwargs)
        renderer = figure.canvas.get_renderer()
        legends = [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]
        (legend,) = legends
        drawn.append(
            (
                legend.get_window_extent(renderer),
                [axes.get_window_extent(renderer) for axes in figure.axes],
                [text.get_text() for text in legend.get_texts()],
            )
        )

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save_and_measure)
    # A week whose top machine is on to the very end (the old legend sat over its last hours).
    result = replay(trace([], machines=[node("m1"), node("m2")], hours=168, minNodes=2))
    plot(result, tmp_path / "week.png")
    ((legend, areas, labels),) = drawn
    assert labels == ["PoweringOn", "Booting", "Ready", "Draining", "PoweringOff"]
    assert len(areas) == 2  # the machines' rows, and the pods waiting under them
    for area in areas:
        assert not legend.overlaps(area), (legend, area)
