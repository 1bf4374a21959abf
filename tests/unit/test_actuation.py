"""The one effect interpreter and the one plan applier (`lightsout.actuation`), on the in-memory
port both drivers share: the order of a pass (Lease → address → core Node → status → effects),
what a refused step leaves behind, and what applying a plan writes and says.

The decisions are the state machine's own (`fsm.decide` on what the port shows), so a row
fails when either the interpreter or the contract between them changes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from lightsout.actuation import interpreter
from lightsout.actuation.memory import (
    ADDRESS,
    CORE_NODE,
    LEASE,
    STATUS,
    MemoryMachine,
    MemoryPool,
    MemoryScale,
)
from lightsout.actuation.plans import PlanApplier
from lightsout.models.group import AddressPool
from lightsout.planning.autoscaler.decisions import Explanations, Plan, PowerOff, PowerOn
from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import Decision
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import MachineState, ObservedPowerState, Phase
from lightsout.state.parse import scheduling_requirements
from lightsout.state.types import Group, Machine, ObjectKey, Pod, ScaleDownPolicy, Snapshot

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 26, 12, tzinfo=dt.UTC)
POOL = AddressPool.model_validate(
    {"cidr": "10.77.0.0/24", "start": "10.77.0.10", "end": "10.77.0.10"}
)


def machine(
    phase: Phase = Phase.OFF,
    desired: ObservedPowerState = ObservedPowerState.ON,
    *,
    ephemeral: bool = False,
    fail: frozenset[str] = frozenset(),
    pool: MemoryPool | None = None,
    running: bool = False,
) -> MemoryMachine:
    state = MachineState(
        name="box",
        kubernetes_node_name="box",
        phase=phase,
        desired=desired,
        intent_generation=2,
        phase_since=NOW - dt.timedelta(hours=1),
        ephemeral=ephemeral,
    )
    return MemoryMachine(
        state=state,
        fail=fail,
        calls=[],
        pool=pool,
        node_exists=running,
        node_ready=running,
        registered=running,
        power=ObservedPowerState.ON if running else ObservedPowerState.OFF,
    )


def carry(m: MemoryMachine) -> interpreter.Carried:
    return interpreter.carry_out(m, m.state, decide(m.state, m.observations(NOW), NOW), NOW)


ON_ROWS = [
    # (name, ephemeral, refused step, calls in order, phase after, reason after, requeue)
    ("power-on", False, None,
     ["lease", "core-node", "status", "start startup", "event PowerOnRequested"],
     Phase.POWERING_ON, Reason.POWER_ON_REQUESTED, 30.0),
    ("provision", True, None,
     ["lease", "address", "core-node", "status", "start provision", "event PowerOnRequested"],
     Phase.PROVISIONING, Reason.POWER_ON_REQUESTED, 30.0),
    # Another holder won the Lease: nothing else is asked, the status is not written.
    ("lease lost", True, LEASE, ["lease"], Phase.OFF, None, interpreter.LEASE_RETRY),
    # No address: no core Node, no clone; the attempt failed (an event says why), and the next
    # one waits for its backoff.
    ("no address", True, ADDRESS,
     ["lease", "address", "status", "event AddressPoolExhausted"],
     Phase.PROVISIONING, Reason.RETRY_SCHEDULED, 30.0),
    # The core Node refused: no Job; the attempt failed the same way.
    ("core Node refused", False, CORE_NODE,
     ["lease", "core-node", "status", "event CoreNodeFailed"],
     Phase.POWERING_ON, Reason.RETRY_SCHEDULED, 30.0),
    # The status write lost a race: nothing after it happens, the pass comes back soon.
    ("status conflict", False, STATUS, ["lease", "core-node", "status"],
     Phase.OFF, None, interpreter.CONFLICT_RETRY),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ephemeral", "refused", "calls", "phase", "reason", "requeue"),
    [row[1:] for row in ON_ROWS],
    ids=[row[0] for row in ON_ROWS],
)
def test_a_power_on_pass_asks_the_port_in_order_and_stops_where_a_step_refuses(
    ephemeral: bool,
    refused: str | None,
    calls: list[str],
    phase: Phase,
    reason: str | None,
    requeue: float | None,
) -> None:
    pool = MemoryPool("lab", POOL) if ephemeral else None
    m = machine(ephemeral=ephemeral, fail=frozenset({refused} if refused else ()), pool=pool)
    carried = carry(m)
    assert m.calls == calls
    assert m.state.phase is phase
    assert m.state.reason == reason
    if requeue is not None:
        assert carried.requeue_after == requeue
    # A Job exists only when every step before it went through.
    assert (m.job is not None) == (refused is None)


def test_a_refused_core_node_keeps_the_passs_energy_checkpoint() -> None:
    """The attempt fails in the interpreter, after the pass decided: the account the pass
    checkpointed for the powered phase is written all the same (PoweringOn, retried, is powered
    too), so no interval is counted at the Off rate."""
    m = machine(fail=frozenset({CORE_NODE}))
    decided = replace(decide(m.state, m.observations(NOW), NOW), energy={"countedTo": "now"})
    carried = interpreter.carry_out(m, m.state, decided, NOW)
    assert carried.decision is not None and carried.decision.reason == Reason.RETRY_SCHEDULED
    assert m.status["energy"] == {"countedTo": "now"}


def test_a_pool_held_by_another_clone_is_exhausted_and_freed_when_that_clone_is_off() -> None:
    pool = MemoryPool("lab", POOL, holders={"other": "10.77.0.10"})
    m = machine(ephemeral=True, pool=pool)
    carry(m)
    assert m.events[-1].reason == Reason.ADDRESS_POOL_EXHAUSTED
    assert "all 1 addresses of 10.77.0.10-10.77.0.10" in m.state.message
    assert m.job is None
    pool.release("other")
    again = machine(ephemeral=True, pool=pool)
    carry(again)
    assert pool.holders == {"box": "10.77.0.10"}
    # Deprovisioned and Off: the address is free again (`settle` after the phase change).
    again.settle(str(Phase.DEPROVISIONING), str(Phase.OFF))
    assert pool.holders == {}


def test_a_power_off_pass_cordons_and_drains_then_the_next_starts_the_shutdown() -> None:
    m = machine(Phase.READY, ObservedPowerState.OFF, running=True)
    drained = carry(m)
    assert m.calls == ["lease", "status", "cordon", "drain", "event PowerOffRequested"]
    assert drained.drain is not None
    assert drained.drain.pods_remaining == 0
    assert m.state.phase is Phase.DRAINING
    assert m.cordoned
    m.calls = []
    carry(m)
    assert m.calls == ["lease", "status", "start shutdown", "event Drained"]
    assert m.state.phase is Phase.POWERING_OFF


def test_a_phase_change_without_an_event_of_its_own_still_gets_one() -> None:
    m = machine()
    carry(m)  # PoweringOn, with its own PowerOnRequested event: not posted twice
    assert [e.reason for e in m.events] == [Reason.POWER_ON_REQUESTED]
    quiet = Decision(phase=Phase.BOOTING, reason="Quiet", message="no event of its own")
    interpreter.carry_out(m, m.state, quiet, NOW)
    assert (m.events[-1].reason, m.events[-1].message) == ("Quiet", "Booting: no event of its own")
    interpreter.carry_out(m, m.state, quiet, NOW)  # no phase change: nothing more
    assert len(m.events) == 2


def test_a_lease_held_elsewhere_leaves_status_and_machine_alone() -> None:
    m = machine()
    m.held_elsewhere = True
    carried = carry(m)
    assert m.calls == []
    assert m.state.phase is Phase.OFF
    assert carried.requeue_after is not None
    assert carried.requeue_after >= interpreter.MIN_REQUEUE


# --- the plan applier --------------------------------------------------------------------

GROUP = Group(key=ObjectKey("lab", "lab"))
A, B = ObjectKey("lab", "a"), ObjectKey("lab", "b")
POD = ObjectKey("web", "p")


def fleet() -> dict[ObjectKey, MemoryMachine]:
    return {
        key: MemoryMachine(
            state=MachineState(
                name=key.name,
                kubernetes_node_name=key.name,
                phase=Phase.OFF,
                desired=ObservedPowerState.OFF,
                intent_generation=1,
            )
        )
        for key in (A, B)
    }


def snapshot(dry_run: bool = False, unneeded_seconds: int | None = 300) -> Snapshot:
    group = Group(
        key=GROUP.key,
        dry_run=dry_run,
        scale_down=ScaleDownPolicy(unneeded_seconds=unneeded_seconds),
    )
    machines = tuple(
        Machine(
            key=key,
            group="lab",
            kubernetes_node_name=key.name,
            phase=Phase.OFF,
            desired=ObservedPowerState.OFF,
        )
        for key in (A, B)
    )
    pending = Pod(POD, "uid-p", "Pending", None, scheduling_requirements({}))
    return Snapshot(pods=(pending,), nodes=(), machines=machines, groups=(group,), complete=True)


def on(key: ObjectKey, *, dry_run: bool = False) -> PowerOn:
    return PowerOn(machine=key, group=GROUP.key, reason="1 pod pending", pods=(POD,),
                   dry_run=dry_run)  # fmt: skip


def test_a_plan_sets_the_intent_records_the_scale_up_and_says_so_once() -> None:
    machines = fleet()
    port = MemoryScale(machines=machines, pods={POD: "uid-p"})
    applier = PlanApplier()
    plan = Plan(actions=(on(A),), unneeded_since={B: NOW}, explanations=Explanations())
    done = applier.apply(port, snapshot(), plan, NOW)
    assert done.powered_on == ["lab/a"]
    assert machines[A].state.desired is ObservedPowerState.ON
    assert machines[A].generation == 2  # a new intent
    assert [(g, up) for g, up, _, _ in port.scaled] == [(GROUP.key, True)]
    assert port.unneeded == {B: "2026-11-26T12:00:00Z"}
    said = [(kind, key, e.reason) for kind, key, e in port.events]
    assert said == [
        ("Node", A, "ScaleUp"),
        ("Pod", POD, "TriggeredScaleUp"),
        ("Node", B, "Unneeded"),
    ]
    assert "powered off after 300s (scaleDown.unneededSeconds)" in port.events[2][2].message
    # The same plan again: nothing new is said, nothing is written twice.
    applier.apply(port, snapshot(), plan, NOW)
    assert len(port.events) == 3


def test_an_automatic_unneeded_time_is_named_as_such() -> None:
    port = MemoryScale(machines=fleet())
    plan = Plan(unneeded_since={B: NOW})
    PlanApplier().apply(port, snapshot(unneeded_seconds=None), plan, NOW)
    ((_, _, said),) = port.events
    assert "powered off after one break-even time (scaleDown.unneededSeconds: auto)" in said.message


def test_a_conflicting_write_is_counted_and_nothing_is_recorded() -> None:
    machines = fleet()
    port = MemoryScale(machines=machines, conflicts=frozenset({A}))
    done = PlanApplier().apply(port, snapshot(), Plan(actions=(on(A),)), NOW)
    assert done.conflicts == 1
    assert done.outcomes == [(on(A), "conflict")]
    assert machines[A].state.desired is ObservedPowerState.OFF
    assert port.scaled == []
    assert port.events == []


@pytest.mark.parametrize("where", ["group", "operator"])
def test_dry_run_says_what_it_would_do_and_changes_nothing(where: str) -> None:
    machines = fleet()
    port = MemoryScale(machines=machines, pods={POD: "uid-p"})
    applier = PlanApplier(dry_run=where == "operator")
    action = on(A, dry_run=where == "group")
    off = PowerOff(machine=B, group=GROUP.key, reason="unneeded", dry_run=where == "group")
    done = applier.apply(port, snapshot(dry_run=where == "group"), Plan(actions=(action, off)), NOW)
    assert [outcome for _, outcome in done.outcomes] == ["dry_run", "dry_run"]
    assert all(m.state.desired is ObservedPowerState.OFF for m in machines.values())
    assert [(e.reason, e.message) for _, _, e in port.events] == [
        ("DryRunScaleUp", "dry run: would power on: 1 pod pending"),
        ("DryRunScaleUp", "dry run: would power on machine a (group lab) for this pod"),
        ("DryRunScaleDown", "dry run: would power off: unneeded"),
    ]


def test_a_machine_outside_the_snapshot_is_refused() -> None:
    machines = fleet()
    port = MemoryScale(machines=machines)
    stranger = ObjectKey("lab", "stranger")
    done = PlanApplier().apply(port, snapshot(), Plan(actions=(on(stranger),)), NOW)
    assert done.outcomes == []
    assert port.scaled == []
