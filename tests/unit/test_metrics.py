"""Machine figures derived from watched Nodes (`metrics.machines`): counted once, labelled right."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from lightsout.metrics.machines import MachineTracker, PhaseCollector

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


def node(phase: str, desired: str, op: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "box", "namespace": "ns"},
        "spec": {"group": "lab", "desiredPowerState": desired, "driver": {"ipmi": {"host": "h"}}},
        "status": {"phase": phase, **({"lastOperation": op} if op else {})},
    }


def startup(result: str, attempt: int = 1) -> dict[str, Any]:
    return {
        "action": "startup",
        "intent": 2,
        "attempt": attempt,
        "job": f"lo-box-startup-g2-a{attempt}",
        "result": result,
        "started": "2026-11-24T12:00:01Z",
        "finished": "2026-11-24T12:00:13Z" if result != "Running" else None,
    }


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_power_on_counts_one_action_its_duration_and_the_time_to_ready() -> None:
    labels = {"driver": "ipmi", "action": "startup"}
    before = (
        sample("lightsout_actions_total", result="succeeded", **labels),
        sample("lightsout_action_duration_seconds_sum", **labels),
        sample("lightsout_power_transition_seconds_count", desired="On"),
        sample("lightsout_power_transition_seconds_sum", desired="On"),
    )
    tracker = MachineTracker()
    tracker.observe(node("Off", "Off"), T0)
    tracker.observe(node("Off", "On"), T0)  # a person asks for On
    tracker.observe(node("PoweringOn", "On", startup("Running")), T0 + dt.timedelta(seconds=1))
    finished = node("Booting", "On", startup("Succeeded"))
    tracker.observe(finished, T0 + dt.timedelta(seconds=13))
    tracker.observe(finished, T0 + dt.timedelta(seconds=14))  # the same status seen again
    tracker.observe(node("Ready", "On", startup("Succeeded")), T0 + dt.timedelta(seconds=20))
    tracker.observe(node("Ready", "On", startup("Succeeded")), T0 + dt.timedelta(seconds=90))

    after = (
        sample("lightsout_actions_total", result="succeeded", **labels),
        sample("lightsout_action_duration_seconds_sum", **labels),
        sample("lightsout_power_transition_seconds_count", desired="On"),
        sample("lightsout_power_transition_seconds_sum", desired="On"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1.0, 12.0, 1.0, 20.0]


def test_history_found_at_first_sight_is_not_counted_again() -> None:
    before = sample("lightsout_actions_total", driver="ipmi", action="startup", result="failed")
    tracker = MachineTracker()
    # An operator restarting finds the machine Failed after a startup it did not watch.
    tracker.observe(node("Failed", "On", startup("Failed")), T0)
    tracker.observe(node("Failed", "On", startup("Failed")), T0 + dt.timedelta(seconds=5))
    assert (
        sample("lightsout_actions_total", driver="ipmi", action="startup", result="failed")
        == before
    )
    # The retry's Job is a new one, and counts.
    tracker.observe(node("Failed", "On", startup("Failed", attempt=2)), T0)
    after = sample("lightsout_actions_total", driver="ipmi", action="startup", result="failed")
    assert after == before + 1


def test_phase_gauge_lists_every_phase_per_group_and_forgets_deleted_machines() -> None:
    registry = CollectorRegistry()
    tracker = MachineTracker()
    registry.register(PhaseCollector(tracker))
    tracker.observe(node("Ready", "On"), T0)
    other = node("Off", "Off")
    other["metadata"]["name"] = "spare"
    tracker.observe(other, T0)

    def machines(phase: str) -> float | None:
        return registry.get_sample_value(
            "lightsout_machines", {"namespace": "ns", "group": "lab", "phase": phase}
        )

    assert (machines("Ready"), machines("Off"), machines("Draining")) == (1.0, 1.0, 0.0)
    tracker.forget("ns", "box")
    assert (machines("Ready"), machines("Off")) == (0.0, 1.0)


def test_a_machine_first_seen_has_its_drivers_action_series_at_zero() -> None:
    """Prometheus' increase() sees no rise in a series born at 1: a first failure must rise
    from an existing zero to show on the dashboard."""
    clone = node("Off", "Off")
    clone["spec"]["driver"] = {"proxmox": {"mode": "Ephemeral", "template": {"vmid": 9000}}}

    def failed(action: str) -> float | None:
        labels = {"driver": "proxmox", "action": action, "result": "failed"}
        return REGISTRY.get_sample_value("lightsout_actions_total", labels)

    MachineTracker().observe(clone, T0)

    assert (failed("provision"), failed("deprovision"), failed("startup")) == (0.0, 0.0, None)
    count = {"driver": "proxmox", "action": "provision"}
    assert REGISTRY.get_sample_value("lightsout_action_duration_seconds_count", count) == 0.0
    for desired in ("On", "Off"):
        labels = {"desired": desired}
        assert (
            REGISTRY.get_sample_value("lightsout_power_transition_seconds_count", labels)
            is not None
        )
