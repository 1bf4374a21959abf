"""The Grafana dashboard (`deploy/grafana/lightsout.json`) asks only for series the operator
exports, with the dashboard's variables in every machine query.

Whether each panel's query returns data from a real Prometheus scraping a real run is checked
by `tests/e2e/test_metrics.py` and `make dashboard-check`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

import lightsout.metrics.families  # noqa: F401  (registers the operator's own metrics)
from lightsout.metrics.energy import MachineCollector
from lightsout.metrics.machines import MachineTracker, PhaseCollector

pytestmark = pytest.mark.unit

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lightsout.json"
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}


def exported() -> set[str]:
    tracker = MachineTracker()
    families = [
        *REGISTRY.collect(),
        *PhaseCollector(tracker).collect(),
        *MachineCollector(tracker).collect(),
    ]
    return {f.name + suffix for f in families for suffix in _SUFFIXES.get(f.type, ("",))}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_every_query_names_a_series_the_operator_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    queried = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            used = set(re.findall(r"\blightsout_[a-z_]+\b", target["expr"]))
            assert used, (panel["title"], target["expr"])
            assert used <= names, (panel["title"], used - names)
            queried |= used
            if "lightsout_machine" in target["expr"] or "lightsout_energy" in target["expr"]:
                assert "$namespace" in target["expr"] and "$group" in target["expr"], target
    # The panels the issue asks for are there.
    titles = {p["title"] for p in panels(dashboard)}
    assert {"Power state per machine", "Pending pods waiting for capacity"} <= titles
    assert {"lightsout_energy_used_cost_total", "lightsout_actions_total"} <= queried
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_the_dashboard_check_sets_every_variable_grafana_would() -> None:
    from lightsout_lab.dashboard import grafana_expr

    dashboard = json.loads(DASHBOARD.read_text())
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            expr = grafana_expr(target["expr"], 600)
            assert "$" not in expr, expr
    assert grafana_expr('x{namespace=~"$namespace"}[$__range]', 600) == 'x{namespace=~".*"}[600s]'
