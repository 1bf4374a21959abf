"""The replay runs the operator's whole pass: its Groups' health checks are simulated, judged by
the operator's own code (`planning.machine.healthjudge`, `planning.machine.passes`), and what they
teach (the learned draw) reaches the planner, so a regression there shows in `lightsout simulate`
too."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.status import account_from_status
from lightsout.simulate.replay.engine import Options, Simulator
from lightsout.simulate.traces.trace import Durations, Trace, TracePod, load, write
from lightsout.state.types import ObjectKey
from tests.unit.test_simulate import node as simulate_node
from tests.unit.test_simulate import pod_spec

pytestmark = pytest.mark.unit

START = datetime(2026, 11, 2, tzinfo=UTC)
HOUR = 3600.0
DECLARED = (120, 40, 5)
#: What machine `a` really draws: its idle draw is more than twice the declared one.
A_TRUTH = Draw.declared(200, 90, 5)


def group(health: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "lab"},
        "spec": {
            "maxNodes": 2,
            "selectionPolicy": "LowestEnergy",
            "electricity": {"pricePerKWh": 0.30, "currency": "EUR"},
            "healthCheck": health,
        },
    }


def node(name: str) -> dict[str, Any]:
    """A machine behind a Redfish BMC, which measures its draw (a WoL one would not)."""
    manifest = simulate_node(name, watts=DECLARED)
    manifest["spec"]["driver"] = {
        "redfish": {
            "endpoint": f"https://{name}.bmc.example",
            "systemId": name,
            "credentialsSecretRef": {"name": "bmc"},
        }
    }
    return manifest


def job(at: float, run: float, name: str) -> TracePod:
    # 100m of 4 cpus: the machine reads as idle (`learning.IDLE_AT_MOST`).
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    return TracePod(at, run, "default", name, spec, "Job", name)


def week(health: dict[str, Any]) -> Simulator:
    """Two machines declared alike; `first` runs on one for 3 h, `second` comes at 6 h."""
    trace = Trace(
        name="health",
        start=START,
        duration_seconds=8 * HOUR,
        machines=(group(health), node("a"), node("b")),
        pods=(job(60, 3 * HOUR, "first"), job(6 * HOUR, 600, "second")),
        durations={n: Durations(10, 50, 20) for n in ("a", "b")},
    )
    sim = Simulator(trace, Options())
    sim.machines[ObjectKey("", "a")].draw = A_TRUTH
    return sim


def hosts(sim: Simulator) -> dict[str, str | None]:
    result = sim.run()
    return {p.key.name: p.first_host for p in result.pods}


def test_a_check_teaches_the_true_idle_draw_and_the_next_pod_goes_to_the_frugal_machine() -> None:
    sim = week({"schedule": "0 * * * *"})
    assert hosts(sim) == {"first": "a", "second": "b"}
    a = sim.machines[ObjectKey("", "a")]
    # One first check at the start, then one per hour of the 8.
    assert a.checks == 1 + 8
    last = a.status["lastHealthCheck"]
    assert (last["result"], last["reason"], last["powerState"]) == ("Healthy", "Healthy", "Off")
    # Read at 100m of 4 cpus: 90 W idle plus 2.5 % of the 110 W to busy.
    learned_idle = a.state.learned.idle_watts
    assert learned_idle is not None and 90 < learned_idle < 93
    assert a.as_machine().watts_idle == learned_idle
    # b was on only between two checks (6 h to 6 h 10): only its off draw is known.
    b = sim.machines[ObjectKey("", "b")].state.learned
    assert (b.idle_watts, b.off_watts) == (None, 5.0)


def test_the_replay_keeps_the_operators_energy_account_beside_its_true_one() -> None:
    """Each pass checkpoints the machine's `status.energy` as the operator's does; for a
    machine that draws what it declares, that account and the replay's own (its truth)
    agree within 1 %."""
    sim = week({"enabled": False})
    sim.run()
    end = sim.clock.time(sim.end)
    b = sim.machines[ObjectKey("", "b")]
    account = account_from_status(b.status["energy"])
    assert account is not None
    used = account.at(end).total.used_wh
    assert b.energy.total.used_wh > 0
    assert used == pytest.approx(b.energy.total.used_wh, rel=0.01)


def test_without_checks_nothing_is_learned_and_the_declared_draw_picks_the_same_machine() -> None:
    sim = week({"enabled": False})
    assert hosts(sim) == {"first": "a", "second": "a"}
    a = sim.machines[ObjectKey("", "a")]
    assert a.checks == 0
    assert "lastHealthCheck" not in a.status
    assert a.state.learned.idle_watts is None


def test_a_check_reports_the_true_capacity_and_the_replay_plans_with_it() -> None:
    """`a` declares 4 cpus and is really 16, which its BMC's check reports (Redfish inspects):
    the operator's pass keeps it in `status.inspected`, the replay's view of the machine reads
    it as a live snapshot does, and a pod asking 8 cpus gets `a` powered on. Without checks the
    planner believes the declared 4 and nothing can take the pod."""

    def replay(health: dict[str, Any]) -> Simulator:
        big = TracePod(2 * HOUR, 600, "default", "big", pod_spec("8"), "Job", "big")
        trace = Trace(
            name="inspection",
            start=START,
            duration_seconds=4 * HOUR,
            machines=(group(health), node("a"), node("b")),
            pods=(big,),
            durations={n: Durations(10, 50, 20) for n in ("a", "b")},
        )
        sim = Simulator(trace, Options())
        sim.machines[ObjectKey("", "a")].inspected = {"cpu": 16, "memory": "64Gi"}
        return sim

    checked = replay({"schedule": "0 * * * *"})
    assert hosts(checked) == {"big": "a"}
    a = checked.machines[ObjectKey("", "a")]
    assert a.status["inspected"]["cpu"] == 16
    assert a.as_machine().resources is not None and a.as_machine().resources.get("cpu") == 16_000
    mismatch = [c for c in a.status.get("conditions", []) if c["type"] == "InspectionMismatch"]
    assert [c["reason"] for c in mismatch] == ["InspectedCapacityUsed"], mismatch
    # The condition is kept, so its Warning is said once, not at every pass after.
    said = [e for e in a.events if e.reason == "InspectedCapacityUsed"]
    assert len(said) == 1 and "16" in said[0].message, said

    unchecked = replay({"enabled": False})
    assert hosts(unchecked) == {"big": None}
    assert "inspected" not in unchecked.machines[ObjectKey("", "a")].status


def test_a_traces_truth_of_draw_and_capacity_is_what_the_replayed_checks_read(
    tmp_path: Path,
) -> None:
    """`trace.yaml` says what `a` really draws and is (as `lightsout trace record` writes what
    a live cluster measured): written and read back through the format, its checks teach the
    replay both, as the test above sets them by hand."""
    big = TracePod(2 * HOUR, 600, "default", "big", pod_spec("8"), "Job", "big")
    truth = Durations(10, 50, 20, watts=(200.0, 90.0, 8.0), inspected={"cpu": 16, "memory": "64Gi"})
    trace = Trace(
        name="truth",
        start=START,
        duration_seconds=4 * HOUR,
        machines=(group({"schedule": "0 * * * *"}), node("a"), node("b")),
        pods=(big,),
        durations={"a": truth, "b": Durations(10, 50, 20)},
    )
    read = load(write(trace, tmp_path / "truth"))
    assert read.durations["a"] == truth
    sim = Simulator(read, Options())
    assert hosts(sim) == {"big": "a"}
    a = sim.machines[ObjectKey("", "a")]
    assert a.status["inspected"]["cpu"] == 16
    # Its standby draw, read while it was off: the truth's 8 W, not the 5 W it declares.
    assert a.state.learned.off_watts == 8.0


def test_a_check_in_an_unreachable_window_fails_and_teaches_nothing(tmp_path: Path) -> None:
    """`trace.yaml` says `a`'s controller did not answer the first check (`unreachable`): the
    replayed check fails as a refused connection is judged live (Healthy=False,
    BMCUnreachable, the power state unknown), so neither its standby draw nor its capacity is
    read; the next check, outside the window, reads both."""
    truth = Durations(
        10,
        50,
        20,
        watts=(120.0, 40.0, 8.0),
        inspected={"cpu": 16, "memory": "64Gi"},
        unreachable=((0.0, 60.0),),
    )
    trace = Trace(
        name="unreachable",
        start=START,
        duration_seconds=2 * HOUR,
        machines=(group({"schedule": "0 * * * *"}), node("a"), node("b")),
        durations={"a": truth, "b": Durations(10, 50, 20)},
    )
    read = load(write(trace, tmp_path / "unreachable"))
    assert read.durations["a"] == truth

    def a_at(seconds: float) -> Any:
        sim = Simulator(read, Options())
        sim.end = seconds
        sim.run()
        return sim.machines[ObjectKey("", "a")]

    first = a_at(HOUR - 1)
    assert first.checks == 2  # the first check and the schedule's at 00:00, both in the window
    last = first.status["lastHealthCheck"]
    assert (last["result"], last["reason"]) == ("Unhealthy", "BMCUnreachable"), last
    healthy = [c for c in first.status["conditions"] if c["type"] == "Healthy"]
    assert [(c["status"], c["reason"]) for c in healthy] == [("False", "BMCUnreachable")]
    assert "inspected" not in first.status
    assert first.state.learned.off_watts is None
    assert first.as_machine().resources is not None
    assert first.as_machine().resources.get("cpu") == 4_000  # as declared

    second = a_at(HOUR + 1)
    assert second.checks == 3
    assert second.status["lastHealthCheck"]["result"] == "Healthy"
    assert second.status["inspected"]["cpu"] == 16
    assert second.state.learned.off_watts == 8.0


def test_a_machine_coming_up_is_planned_as_declared_until_its_kubelet_registers() -> None:
    """The core Node the operator makes before the first power-on carries no allocatable (a
    kubelet fills it in when it registers), so live the planner counts pods on a machine coming
    up by what it declares. `a` declares 4 cpus and has 2 (a Wake-on-LAN machine: no check
    inspects it): `late` (1.5 cpus) is counted on it beside `first` (2 cpus) while it boots,
    and `b` is powered on only once `a`'s kubelet has said 2."""
    trace = Trace(
        name="declared",
        start=START,
        duration_seconds=HOUR,
        machines=(group({"enabled": False}), simulate_node("a"), simulate_node("b")),
        pods=(job_of(10, 600, "first", "2"), job_of(20, 600, "late", "1500m")),
        durations={
            "a": Durations(10, 50, 20, inspected={"cpu": 2, "memory": "16Gi"}),
            "b": Durations(10, 50, 20),
        },
    )
    result = Simulator(trace, Options()).run()
    a, b = (m for m in result.machines)
    a_ready = next(t for t, phase in a.timeline if phase == "Ready")
    b_on = next(t for t, phase in b.timeline if phase == "PoweringOn")
    assert b_on >= a_ready, (a.timeline, b.timeline)
    assert {p.key.name: p.first_host for p in result.pods} == {"first": "a", "late": "b"}


def job_of(at: float, run: float, name: str, cpu: str) -> TracePod:
    return TracePod(at, run, "default", name, pod_spec(cpu), "Job", name)
