"""`/metrics` after a real power cycle: the operator's figures match what happened."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import SushyEmulator
from tests.e2e.conftest import PATIENCE, patch_desired, wait_phase
from tests.harness import fleet
from tests.harness.wait import wait_for


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


def test_power_cycle_shows_in_action_counters_durations_and_phase_gauges(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    fleet.apply(
        crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), fleet.redfish_node(machine, bmc)]
    )
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
        assert value(samples, "lightsout_actions_total", result="failed", **labels) is None
        assert value(samples, "lightsout_action_duration_seconds_count", **labels) == 1.0
        took = value(samples, "lightsout_action_duration_seconds_sum", **labels)
        assert took is not None and 0 < took < PATIENCE
    for desired in ("On", "Off"):
        assert value(samples, "lightsout_power_transition_seconds_count", desired=desired) == 1.0
    # Every replica exports its own process figures.
    rss = value(samples, "process_resident_memory_bytes")
    assert rss is not None and rss > 0
