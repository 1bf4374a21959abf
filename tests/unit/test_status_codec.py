"""`state.status`: a Node's and a Group's status read once, typed, tolerant of garbage (each
malformed field reads as absent, nothing raises), and what the operator writes reads back."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lightsout.models.battery import BatteryStatus
from lightsout.models.enums import ObservedPowerState, Phase
from lightsout.models.group import SolarSurplusStatus
from lightsout.planning.energy.account import Account, Rate
from lightsout.planning.energy.status import account_from_status, account_to_status
from lightsout.state.learned import Learned, learned_to_status
from lightsout.state.parse import format_time
from lightsout.state.status import group_status, machine_status, node_status

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
STAMP = format_time(T0)
CONDITION = {"type": "Healthy", "status": "True", "reason": "Healthy", "lastTransitionTime": STAMP}
FULL_NODE: dict[str, Any] = {
    "phase": "Ready",
    "phaseSince": STAMP,
    "providerID": "lightsout://lab/n1",
    "reason": "DriftAdopted",
    "message": "on",
    "observedGeneration": 3,
    "observedPowerState": "On",
    "intent": {"desired": "On", "generation": 2},
    "lastOperation": {"action": "PowerOn", "intent": 2, "attempt": 1, "started": STAMP},
    "driftCorrections": [STAMP],
    "learned": {"bootSamples": [60, 80], "shutdownSamples": [20], "idleWatts": 40.0},
    "energy": {"countedTo": STAMP, "since": STAMP, "watts": 40.0},
    "lastHealthCheck": {"time": STAMP, "result": "Healthy"},
    "inspected": {"cpu": 8, "memory": "32Gi", "observedAt": STAMP, "source": "redfish"},
    "clone": {"vmid": 120, "host": "pve1"},
    "conditions": [CONDITION],
}


def _node(status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "namespace": "lab"}, "status": status}


@pytest.mark.unit
def test_a_full_node_status_reads_every_field() -> None:
    status = node_status(_node(FULL_NODE))
    assert status.phase is Phase.READY
    assert status.phase_since == T0
    assert status.provider_id == "lightsout://lab/n1"
    assert (status.reason, status.message) == ("DriftAdopted", "on")
    assert status.observed_generation == 3
    assert status.observed_power_state is ObservedPowerState.ON
    assert (status.intent_desired, status.intent_generation) == ("On", 2)
    assert status.last_operation == FULL_NODE["lastOperation"]
    assert status.drift_corrections == (T0,)
    assert status.learned == Learned(boot_samples=(60, 80), shutdown_samples=(20,), idle_watts=40.0)
    assert status.learned.boot_seconds == 70
    assert account_from_status(status.energy) is not None
    assert status.last_health_check == FULL_NODE["lastHealthCheck"]
    assert status.inspected == FULL_NODE["inspected"]
    assert status.clone == {"vmid": 120, "host": "pve1"}
    assert status.conditions == (CONDITION,)
    assert status.stored == FULL_NODE


@pytest.mark.unit
@pytest.mark.parametrize("obj", [None, {}, _node(None), _node({}), _node("garbage"), _node([1])])
def test_an_absent_node_status_reads_as_nothing_known(obj: Any) -> None:
    status = node_status(obj)
    assert status.stored == {}
    assert status.phase is None
    assert status.phase_since is None
    assert status.provider_id is None
    assert (status.reason, status.message) == (None, "")
    assert status.observed_generation is None
    assert status.observed_power_state is None
    assert (status.intent_desired, status.intent_generation) == (None, None)
    assert status.last_operation is None
    assert status.drift_corrections == ()
    assert status.learned == Learned()
    assert status.energy is None
    assert status.last_health_check is None
    assert status.inspected is None
    assert status.clone is None
    assert status.conditions == ()


MALFORMED_NODE: dict[str, Any] = {
    "phase": 7,
    "phaseSince": "yesterday",
    "providerID": ["x"],
    "reason": {"a": 1},
    "observedGeneration": "3",
    "observedPowerState": "sideways",
    "intent": "On",
    "lastOperation": "PowerOn",
    "driftCorrections": "often",
    "learned": "fast",
    "energy": 12,
    "lastHealthCheck": "today",
    "inspected": [8],
    "clone": 120,
    "conditions": {"type": "Healthy"},
}


@pytest.mark.unit
@pytest.mark.parametrize("field", sorted(MALFORMED_NODE))
def test_each_malformed_node_field_reads_as_absent(field: str) -> None:
    read, empty = node_status(_node({field: MALFORMED_NODE[field]})), node_status(_node({}))
    names = [
        "phase",
        "phase_since",
        "provider_id",
        "reason",
        "message",
        "observed_generation",
        "observed_power_state",
        "intent_desired",
        "intent_generation",
        "last_operation",
        "drift_corrections",
        "learned",
        "energy",
        "last_health_check",
        "inspected",
        "clone",
        "conditions",
    ]
    assert {n: getattr(read, n) for n in names} == {n: getattr(empty, n) for n in names}


@pytest.mark.unit
def test_a_word_that_is_no_phase_reads_as_unknown_and_bad_entries_are_dropped() -> None:
    status = node_status(
        _node(
            {
                "phase": "Sideways",
                "driftCorrections": [STAMP, "later", 3],
                "conditions": [CONDITION, "Healthy", None],
                "learned": {"bootSamples": [60, -1, "x", True]},
            }
        )
    )
    assert status.phase is Phase.UNKNOWN
    assert status.drift_corrections == (T0,)
    assert status.conditions == (CONDITION,)
    assert status.learned.boot_samples == (60,)


@pytest.mark.unit
def test_what_the_operator_writes_of_a_node_reads_back() -> None:
    learned = Learned(boot_samples=(50, 70), power_ons=(T0,), off_watts=2.0, busy_watts=90.0)
    account = Account.opened(T0, Rate(40.0, 0.0, 0.3))
    written = {
        "phase": str(Phase.OFF),
        "phaseSince": format_time(T0),
        "learned": learned_to_status(learned),
        "energy": account_to_status(account, "EUR"),
    }
    status = node_status(_node(written))
    assert status.phase is Phase.OFF
    assert status.phase_since == T0
    assert status.learned == learned
    assert account_from_status(status.energy) == account


FULL_GROUP: dict[str, Any] = {
    "conditions": [CONDITION],
    "energy": {"countedTo": STAMP, "since": STAMP},
    "battery": {"source": "ups@nut:3493", "chargePercent": 80},
    "solarSurplus": {"entity": "sensor.pv@ha:8123", "watts": 500.0, "readAt": STAMP},
    "lastScaleUp": {"time": STAMP, "reason": "pods pending", "nodes": ["n1"]},
    "lastScaleDown": {"time": STAMP, "reason": "unneeded", "nodes": ["n2"]},
}


@pytest.mark.unit
def test_a_full_group_status_reads_every_field() -> None:
    status = group_status({"status": FULL_GROUP})
    assert status.conditions == (CONDITION,)
    assert account_from_status(status.energy) is not None
    assert status.battery == BatteryStatus.model_validate(FULL_GROUP["battery"])
    assert status.battery_problem is None
    assert status.solar_surplus == SolarSurplusStatus(
        entity="sensor.pv@ha:8123", watts=500.0, read_at=T0
    )
    assert (status.last_scale_up, status.last_scale_down) == (T0, T0)


@pytest.mark.unit
def test_an_absent_group_status_reads_as_nothing_known() -> None:
    for obj in (None, {}, {"status": None}, {"status": "x"}):
        status = group_status(obj)
        assert status.conditions == ()
        assert status.energy is None
        assert (status.battery, status.battery_problem) == (None, None)
        assert status.solar_surplus is None
        assert (status.last_scale_up, status.last_scale_down) == (None, None)


@pytest.mark.unit
def test_each_malformed_group_field_reads_as_absent() -> None:
    status = group_status(
        {
            "status": {
                "conditions": "Ready",
                "energy": [],
                "battery": {"chargePercent": "lots"},
                "solarSurplus": {"watts": -5},
                "lastScaleUp": {"time": "soon"},
                "lastScaleDown": "yesterday",
            }
        }
    )
    assert status.conditions == ()
    assert status.energy is None
    assert status.battery is None
    assert status.battery_problem is not None  # said in the snapshot's problems
    assert status.solar_surplus is None
    assert (status.last_scale_up, status.last_scale_down) == (None, None)


@pytest.mark.unit
def test_what_the_sensors_write_of_a_group_reads_back() -> None:
    surplus = SolarSurplusStatus(entity="sensor.pv@ha:8123", watts=250.0, read_at=T0)
    battery = BatteryStatus(source="ups@nut:3493")
    written = {
        "solarSurplus": surplus.model_dump(mode="json", by_alias=True),
        "battery": battery.model_dump(mode="json", by_alias=True, exclude={"outage"}),
    }
    status = group_status({"status": written})
    assert status.solar_surplus == surplus
    assert status.battery == battery


@pytest.mark.unit
def test_what_a_pass_writes_of_a_machines_place_reads_back() -> None:
    learned = Learned(boot_samples=(40,), idle_watts=30.0)
    written = machine_status(
        Phase.BOOTING,
        T0,
        (ObservedPowerState.ON, 4),
        reason="WaitingForNode",
        message="x" * 5000,
        learned=learned,
    )
    status = node_status(_node(written))
    assert (status.phase, status.phase_since, status.reason) == (
        Phase.BOOTING,
        T0,
        "WaitingForNode",
    )
    assert (status.intent_desired, status.intent_generation) == ("On", 4)
    assert status.learned == learned
    assert len(status.message.encode()) <= 1024 and status.message.startswith("x")
    # Without a learned record or a time (the replay's first look), those are left out.
    bare = machine_status(Phase.OFF, None, ("Off", 1), reason=None, message="")
    assert "learned" not in bare and node_status(_node(bare)).phase_since is None


@pytest.mark.unit
def test_conditions_currency_power_and_target_size_read_typed() -> None:
    power = {"watts": 42.5, "observedAt": STAMP, "source": "redfish"}
    node = node_status(_node({**FULL_NODE, "power": power, "energy": {"currency": "EUR"}}))
    assert node.condition("Healthy") == CONDITION and node.condition("Drifted") is None
    assert node.currency == "EUR"
    assert node.power is not None and (node.power.watts, node.power.source) == (42.5, "redfish")
    assert node_status(_node({"power": {"watts": "lots"}})).power is None
    group = group_status({"status": {"targetSize": 3, "energy": {"currency": 7}}})
    assert (group.target_size, group.currency) == (3, None)
    assert group_status({"status": {"targetSize": "3"}}).target_size is None
