"""`/metrics` after a real power cycle: the operator's figures match what happened, and a real
Prometheus (Debian's, scraping the operator every second during the cycle) answers every query
of the Grafana dashboard (`deploy/grafana/lightsout.json`) with data from it."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lightsout_lab import Cluster
from lightsout_lab.dashboard import Prometheus, prometheus_binary, query_panels
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import SushyEmulator
from tests.e2e.conftest import PATIENCE, patch_desired, wait_phase
from tests.harness import fleet
from tests.harness.wait import wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lightsout.json"


def scrape(operator: OperatorProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(operator.metrics_url, timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# The built-in autoscaler plans for the Group (minNodes 1) without acting: its decisions reach the
# dashboard while the test alone powers the machine.
@pytest.mark.operator_env(LIGHTSOUT_AUTOSCALER_DRY_RUN="true")
def test_power_cycle_shows_in_action_counters_durations_and_phase_gauges(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    target = urllib.parse.urlsplit(operator.metrics_url).netloc
    with Prometheus(prometheus_binary(), target, scrape_seconds=1) as prom:
        start = time.time()
        power_cycle(crds, namespace, operator, bmc, machine)
        check_dashboard(prom, start, namespace, machine.name)


def power_cycle(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
) -> None:
    group = fleet.group(
        autoscaler="builtin", minNodes=1, electricity={"pricePerKWh": 0.3, "currency": "EUR"}
    )
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), group, fleet.redfish_node(machine, bmc)])
    wait_phase(crds, namespace, machine.name, "Off")
    patch_desired(crds, namespace, machine.name, "On")
    wait_phase(crds, namespace, machine.name, "Ready")
    patch_desired(crds, namespace, machine.name, "Off")
    wait_phase(crds, namespace, machine.name, "Off")

    phase = {"namespace": namespace, "group": "homelab"}
    # The Off phase reaches the watch a moment after kubectl sees it.
    samples = wait_for(
        lambda: (
            (s := scrape(operator))
            and value(s, "lightsout_machines", phase="Off", **phase) == 1.0
            and s
        ),
        30,
        "the phase gauge to show the machine Off",
    )
    assert value(samples, "lightsout_machines", phase="Ready", **phase) == 0.0
    for action in ("startup", "shutdown"):
        labels = {"driver": "redfish", "action": action}
        assert value(samples, "lightsout_actions_total", result="succeeded", **labels) == 1.0
        # At zero from the start, so Prometheus' increase() sees a first failure.
        assert value(samples, "lightsout_actions_total", result="failed", **labels) == 0.0
        assert value(samples, "lightsout_action_duration_seconds_count", **labels) == 1.0
        took = value(samples, "lightsout_action_duration_seconds_sum", **labels)
        assert took is not None and 0 < took < PATIENCE
    for desired in ("On", "Off"):
        assert value(samples, "lightsout_power_transition_seconds_count", desired=desired) == 1.0
    # Every replica exports its own process figures.
    rss = value(samples, "process_resident_memory_bytes")
    assert rss is not None and rss > 0


def check_dashboard(prom: Prometheus, start: float, namespace: str, node: str) -> None:
    """Every panel's query, as Grafana sends it over the run, returns the run's data."""
    wait_for(
        lambda: prom.api("query", query=f'lightsout_machine_power_state{{node="{node}"}} == 0')[
            "result"
        ],
        30,
        "Prometheus to scrape the machine Off",
    )
    results = query_panels(prom, json.loads(DASHBOARD.read_text()), start)
    print("\n".join(f"{r.series:>3} series {r.points:>4} points  {r.title}" for r in results))
    empty = {r.title for r in results if r.points == 0}
    assert not empty, f"dashboard panels without data: {sorted(empty)}"
    # The power-state timeline shows the machine powering on (1), then off (0). A range
    # query's last step may fall just before the scrape that saw it Off: ask until it ends Off.

    def timeline() -> list[float]:
        state = prom.api(
            "query_range",
            query=f'lightsout_machine_power_state{{namespace="{namespace}", node="{node}"}}',
            start=f"{start:.3f}",
            end=f"{time.time():.3f}",
            step="1",
        )["result"]
        assert len(state) == 1, state  # one series per machine, whatever its phase
        values = [float(v) for _, v in state[0]["values"]]
        return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]

    shown = wait_for(
        lambda: (s := timeline()) and s[-1] == 0.0 and s, 30, "the power-state timeline to end Off"
    )
    assert 1.0 in shown, shown
