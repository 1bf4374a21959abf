"""`lightsout power` decides when a wait is over, `lightsout status` what a person reads."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from lightsout.commands import status
from lightsout.commands.power import ExitCode, verdict
from lightsout.models.enums import DesiredPowerState

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


def node(
    phase: str, observed: int, desired: str, *, group: str = "lab", **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "box", "namespace": "ns", "generation": 7},
        "spec": {"group": group, "desiredPowerState": desired},
        "status": {
            "phase": phase,
            "observedGeneration": observed,
            "intent": {"desired": desired, "generation": observed},
            **status,
        },
    }


@pytest.mark.parametrize(
    ("asked", "phase", "observed", "intent", "expected"),
    [
        ("On", "Ready", 7, "On", ExitCode.DONE),
        ("On", "Booting", 7, "On", None),
        # A status from before the patch proves nothing, whatever its phase.
        ("On", "Ready", 6, "On", None),
        ("On", "Failed", 6, "On", None),
        # Off was asked for; the machine is still Ready and the operator has not seen it yet.
        ("Off", "Ready", 7, "On", None),
        ("Off", "Off", 7, "Off", ExitCode.DONE),
        ("On", "Failed", 7, "On", ExitCode.FAILED),
    ],
)
def test_verdict_counts_only_the_status_of_the_patched_generation(
    asked: str, phase: str, observed: int, intent: str, expected: ExitCode | None
) -> None:
    result = verdict(node(phase, observed, intent), DesiredPowerState(asked), generation=7)
    assert result.code == expected


def test_a_failure_names_the_task_and_the_bmc_message() -> None:
    failed = node(
        "Failed",
        7,
        "Off",
        reason="RetriesExhausted",
        lastOperation={
            "action": "shutdown",
            "started": "2026-11-24T11:59:00Z",
            "result": "Failed",
            "failedTask": "redfish_power : Power off",
            "message": "HTTP 400: no",
        },
    )
    result = verdict(failed, DesiredPowerState.OFF, generation=7)
    assert result.code is ExitCode.FAILED
    assert result.progress.line("box") == (
        "box: Failed (RetriesExhausted): task 'redfish_power : Power off': HTTP 400: no"
    )


def test_status_rows_count_machines_per_group_and_flag_a_missing_group() -> None:
    ready = node(
        "Ready",
        7,
        "On",
        phaseSince="2026-11-24T11:55:00Z",
        observedPowerState="On",
        lastOperation={
            "action": "startup",
            "started": "2026-11-24T11:54:00Z",
            "result": "Succeeded",
            "finished": "2026-11-24T11:54:30Z",
        },
        # On at 100 W since 10:00 after 1200 Wh counted this month (200 of them today).
        energy={
            "countedTo": "2026-11-24T10:00:00Z",
            "since": "2026-11-01T00:00:00Z",
            "watts": 100.0,
            "savingWatts": 0.0,
            "pricePerKWh": 0.25,
            "currency": "EUR",
            "usedWattHours": 1200.0,
            "savedWattHours": 3000.0,
            "usedCost": 0.3,
            "today": {"start": "2026-11-24T00:00:00Z", "usedWattHours": 200.0},
            "month": {"start": "2026-11-01T00:00:00Z", "usedWattHours": 1200.0},
        },
    )
    stray = node("Off", 7, "Off", group="gone")
    stray["metadata"]["name"] = "stray"
    group = {"metadata": {"name": "lab", "namespace": "ns"}, "spec": {"maxNodes": 3}}
    table = status.rows([group], [ready, stray], NOW)

    assert table["groups"] == [
        {
            "namespace": "ns",
            "name": "lab",
            "autoscaler": "builtin",
            "min": 0,
            "max": 3,
            "window": "-",
            "price": "-",
            "ups": "-",
            "on": 1,
            "total": 1,
            "failed": 0,
            "target": "-",
            "energy": None,
        }
    ]
    box, lost = table["machines"]
    assert (box["phase"], box["age"], box["lastAction"], box["lastActionAge"]) == (
        "Ready",
        "5m",
        "startup Succeeded",
        "5m",
    )
    # Counted on from the checkpoint to 12:00 at 100 W: 200 Wh more.
    assert box["energy"]["today"]["usedWattHours"] == pytest.approx(400.0)
    assert box["energy"]["month"]["usedWattHours"] == pytest.approx(1400.0)
    assert box["energy"]["month"]["savedWattHours"] == 0.0
    assert box["energy"]["total"]["usedCost"] == pytest.approx(0.35)
    assert lost["energy"] is None
    assert lost["message"].startswith("Group 'gone' not found.")

    text = status.render_text(table, all_namespaces=False)
    header = text.splitlines()[3]
    assert header.split()[:4] == ["NODE", "GROUP", "DESIRED", "PHASE"]
    assert "startup Succeeded (5m ago)" in text
    assert re.search(r"\bbox .* 400\.0 Wh +1\.40 kWh +0\.0 Wh", text)
    assert "NAMESPACE" in status.render_text(table, all_namespaces=True)


def test_status_of_nothing_says_so() -> None:
    assert status.render_text(status.rows([], [], NOW), False).startswith("No Lights-Out")
