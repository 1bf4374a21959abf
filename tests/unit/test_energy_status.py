"""Energy in status (`planning.energy.status`, `execution.energy`) and in `/metrics`
(`metrics.energy`): checkpoints that survive a restart, a Group that sums its machines without
rewriting itself, counters that never go down."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lightsout.execution import energy
from lightsout.metrics.energy import MachineCollector
from lightsout.metrics.machines import MachineTracker
from lightsout.models.enums import Phase
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.energy import status as energystatus
from lightsout.planning.energy.status import account_from_status

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 11, 24, 8, 0, tzinfo=dt.UTC)
GROUP = {
    "metadata": {"name": "lab", "namespace": "ns"},
    "spec": {"electricity": {"pricePerKWh": 0.25, "currency": "EUR"}},
}
GROUP_SPEC = GroupSpec.model_validate(GROUP["spec"])
SPEC_RAW: dict[str, Any] = {
    "group": "lab",
    "kubernetesNodeName": "box",
    "driver": {"ipmi": {"host": "10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}},
    "resources": {"cpu": "8", "memory": "16Gi"},
    "power": {"onWatts": 120, "idleWatts": 40, "offWatts": 5},
}
SPEC = NodeSpec.model_validate(SPEC_RAW)


def checkpoint(
    node: dict[str, Any], phase: str, utilisation: float, now: dt.datetime
) -> dict[str, Any] | None:
    """What the machine's pass checkpoints (`planning.machine.passes.with_energy`): the account
    its status holds, at the draw it reads (`execution.energy.draw`)."""
    current = account_from_status(node["status"].get("energy"))
    return energystatus.checkpoint(
        current, energy.draw(node), GROUP_SPEC, Phase(phase), utilisation, now=now
    )


def machine(name: str = "box", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": SPEC_RAW,
        "status": status,
    }


def pod(cpu: str, phase: str = "Running") -> dict[str, Any]:
    """A pod as the operator's cache of pods holds it (the API's, without managedFields)."""
    requests = {"resources": {"requests": {"cpu": cpu}}}
    return {"spec": {"containers": [{"name": "c", **requests}]}, "status": {"phase": phase}}


def later(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_checkpoints_only_when_the_rate_changes_and_reads_back_what_it_wrote() -> None:
    node = machine()
    opened = checkpoint(node, "Off", 0.0, T0)
    assert opened is not None
    assert (opened["watts"], opened["savingWatts"], opened["pricePerKWh"]) == (5.0, 35.0, 0.25)
    assert opened["countedTo"] == opened["since"] == "2026-11-24T08:00:00Z"
    node["status"]["energy"] = opened
    # Same phase, same cpu: nothing to write, however much time passed.
    assert checkpoint(node, "Off", 0.0, later(90)) is None
    # Powered on at 09:30 with 2 of its 8 cores requested: 40 + 80 x 0.25 = 60 W from then on.
    on = checkpoint(node, "Ready", energy.cpu_utilisation(node, None, []), later(90))
    assert on is not None and on["watts"] == 40.0  # no pods yet
    pods = [pod("2"), pod("4000m", "Succeeded")]  # the second one finished
    busy = checkpoint(node, "Ready", energy.cpu_utilisation(node, None, pods), T0)
    assert busy is not None and busy["watts"] == 60.0
    node["status"]["energy"] = on
    assert on["usedWattHours"] == pytest.approx(1.5 * 5)
    assert on["savedWattHours"] == pytest.approx(1.5 * 35)
    assert on["usedCost"] == pytest.approx(1.5 * 5 / 1000 * 0.25)
    assert on["currency"] == "EUR"
    assert checkpoint(node, "Ready", 0.0, later(95)) is None


def test_the_core_nodes_allocatable_cpu_is_the_capacity_when_known() -> None:
    core = {"status": {"allocatable": {"cpu": "4"}}}
    pods = [pod("3")]
    node = machine()
    assert energy.cpu_utilisation(node, core, pods) == 0.75
    assert energy.cpu_utilisation(node, None, pods) == 0.38  # of the declared 8, to 1 %
    assert energy.cpu_utilisation(node, core, pods * 3) == 1.0
    undeclared = {**node, "spec": {k: v for k, v in SPEC_RAW.items() if k != "resources"}}
    assert energy.cpu_utilisation(undeclared, None, pods) == 0.0
    inspected = {**undeclared, "status": {"inspected": {"cpu": 6, "memory": "8Gi"}}}
    assert energy.cpu_utilisation(inspected, None, pods) == 0.5  # of the inspected 6


def test_a_restarted_operator_counts_the_gap_at_the_rate_status_recorded() -> None:
    node = machine()
    node["status"]["energy"] = checkpoint(node, "Ready", 0.5, T0)
    # The operator is away from 08:00 to 11:00; its first pass finds the machine Off.
    back = checkpoint(node, "Off", 0.0, later(180))
    assert back is not None
    assert back["usedWattHours"] == pytest.approx(3 * 80)
    assert back["today"]["usedWattHours"] == pytest.approx(3 * 80)
    assert back["month"]["start"] == "2026-11-01T00:00:00Z"


def test_unreadable_energy_starts_accounting_afresh() -> None:
    node = machine(energy={"wattHours": 12.0})  # an older shape
    fresh = checkpoint(node, "Off", 0.0, T0)
    assert fresh is not None and fresh["usedWattHours"] == 0.0


def test_group_energy_is_the_sum_and_is_not_rewritten_while_it_follows_from_status() -> None:
    a, b = machine("a"), machine("b")
    a["status"]["energy"] = checkpoint(a, "Ready", 0.5, T0)
    b["status"]["energy"] = checkpoint(b, "Off", 0.0, later(30))
    group: dict[str, Any] = {**GROUP, "status": {}}
    summed = energy.group_energy(group, GROUP_SPEC, [a, b], later(60))
    assert summed is not None
    assert summed["usedWattHours"] == pytest.approx(80 + 0.5 * 5)
    assert summed["watts"] == 85.0
    group["status"]["energy"] = summed
    # Its own write brings a recount: nothing changed, so nothing is written (no loop).
    assert energy.group_energy(group, GROUP_SPEC, [a, b], later(61)) is None
    assert energy.group_energy(group, GROUP_SPEC, [a, b], later(600)) is None
    # A machine's checkpoint changes the sum's rate: rewritten.
    a["status"]["energy"] = checkpoint(a, "Off", 0.0, later(120))
    assert energy.group_energy(group, GROUP_SPEC, [a, b], later(121)) is not None


def scrape(collector: MachineCollector) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("node", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_each_account_on_to_the_scrape_in_joules() -> None:
    clock = [later(60)]
    tracker = MachineTracker()
    node = machine()
    node["status"] = {"phase": "Ready", "energy": checkpoint(node, "Ready", 0.5, T0)}
    tracker.observe(node, T0)
    collector = MachineCollector(tracker, clock=lambda: clock[0])
    first = scrape(collector)
    assert first[("lightsout_energy_used_joules_total", "box")] == pytest.approx(80 * 3600)
    assert first[("lightsout_energy_saved_joules_total", "box")] == 0.0
    assert first[("lightsout_energy_used_cost_total", "box")] == pytest.approx(0.08 * 0.25)
    assert first[("lightsout_machine_power_watts", "box")] == 80.0
    assert first[("lightsout_machine_power_state", "box")] == 2.0
    # A checkpoint that rounds a hair below what was exported never makes the counter go down.
    rounded = dict(node["status"]["energy"])
    rounded.update(countedTo="2026-11-24T09:00:00Z", usedWattHours=79.9999999, watts=5.0)
    node["status"] = {"phase": "Off", "energy": rounded}
    tracker.observe(node, later(60))
    again = scrape(collector)
    assert again[("lightsout_energy_used_joules_total", "box")] == pytest.approx(80 * 3600)
    assert (
        again[("lightsout_energy_used_joules_total", "box")]
        >= first[("lightsout_energy_used_joules_total", "box")]
    )
    assert again[("lightsout_machine_power_state", "box")] == 0.0
