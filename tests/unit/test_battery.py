"""On battery: the UPS reading as a Group's status (`planning.energy.mains`) and what the
planner does with it (`planning.autoscaler.battery`), tier by tier, through `plan` as the
operator calls it. The real upsd is in tests/e2e/test_battery.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from lightsout.actuation.memory import MemoryScale
from lightsout.actuation.plans import PlanApplier
from lightsout.commands.status import ups_in_force
from lightsout.models.battery import Outage
from lightsout.models.enums import Mains
from lightsout.planning.autoscaler.battery import needed_seconds, supplies
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.planning.energy import mains
from lightsout.planning.machine.effects import Decision, Drain
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import (
    DrainStatus,
    MachineState,
    Observations,
    ObservedPowerState,
    Phase,
)
from lightsout.state.status import group_status
from lightsout.state.types import ObjectKey
from tests.unit.test_autoscale_objects import (
    T0,
    at,
    group,
    machine,
    mkey,
    offs,
    ons,
    pod,
    pod_note,
    ready_machine,
    run,
    snap,
    ts,
)

pytestmark = pytest.mark.unit

UPS = {"nut": {"host": "127.0.0.1", "port": 13493, "ups": "lab"}}
SOURCE = "lab@127.0.0.1:13493"


def fed_group(
    name: str,
    tier: str,
    mains_state: str | None = None,
    since: datetime = T0,
    *,
    flags: str | None = None,
    charge: float = 90,
    runtime: int = 1800,
    outage: list[str] | None = None,
    policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    obj = group(name, battery={"source": UPS, "tier": tier, **(policy or {})}, **spec)
    if mains_state is not None:
        default = {"Online": "OL", "OnBattery": "OB DISCHRG", "LowBattery": "LB OB"}
        battery: dict[str, Any] = {
            "source": SOURCE,
            "mains": mains_state,
            "mainsSince": ts(since),
            "upsStatus": flags if flags is not None else default.get(mains_state, "OB"),
            "chargePercent": charge,
            "runtimeSeconds": runtime,
            "observedAt": ts(T0),
        }
        if outage is not None:
            battery["outage"] = {"since": ts(since), "restore": outage}
        obj["status"] = {"battery": battery}
    return obj


def fleet(mains_state: str, since: datetime, **kw: Any) -> list[Any]:
    """Three Groups on one UPS, a Ready machine each: shed, hold (below 1000 s), last."""
    hold = {"holdUntil": {"runtimeSeconds": 1000}}
    return [
        fed_group("shed", "Shed", mains_state, since, **kw),
        fed_group("hold", "Hold", mains_state, since, policy=hold, **kw),
        fed_group("last", "Last", mains_state, since, **kw),
        ready_machine("s1", group="shed"),
        ready_machine("h1", group="hold"),
        ready_machine("l1", group="last"),
    ]


# ---------------------------------------------------------------- the reading


def test_flags_tell_the_mains_as_upsmon_reads_them() -> None:
    assert mains.mains_of(frozenset({"OL", "CHRG"})) is Mains.ONLINE
    assert mains.mains_of(frozenset({"OB", "DISCHRG"})) is Mains.ON_BATTERY
    assert mains.mains_of(frozenset({"OB", "LB"})) is Mains.LOW_BATTERY
    assert mains.mains_of(frozenset({"FSD", "OL"})) is Mains.LOW_BATTERY  # a latch: treated as LB
    assert mains.mains_of(frozenset({"WAIT"})) is Mains.UNKNOWN


def test_a_reading_becomes_the_status_and_an_unreadable_spell_keeps_the_since() -> None:
    on_battery = mains.Reading({"ups.status": "OB DISCHRG", "battery.charge": "080"})
    first = mains.observe(None, SOURCE, on_battery, T0)
    assert (first.mains, first.mains_since, first.charge_percent) == (
        Mains.ON_BATTERY,
        T0,
        80.0,
    )
    lost = mains.observe(first, SOURCE, mains.Reading({}, "NUTOSError"), at(5))
    assert (lost.mains, lost.error, lost.ups_status) == (Mains.UNKNOWN, "NUTOSError", "DISCHRG OB")
    again = mains.observe(lost, SOURCE, on_battery, at(9))
    assert (again.mains, again.mains_since, again.error) == (Mains.ON_BATTERY, T0, None)
    back = mains.observe(again, SOURCE, mains.Reading({"ups.status": "OL CHRG"}), at(20))
    assert (back.mains, back.mains_since) == (Mains.ONLINE, at(20))
    reasons = [c.reason for c in mains.changes(first, lost) + mains.changes(lost, again)]
    assert reasons == ["PowerSourceUnreachable", "PowerSourceReachable"]
    assert [c.reason for c in mains.changes(again, back)] == ["MainsBack"]


def test_only_a_change_worth_it_is_written() -> None:
    def reading(runtime: str, charge: str = "90") -> mains.Reading:
        return mains.Reading(
            {"ups.status": "OB", "battery.runtime": runtime, "battery.charge": charge}
        )

    old = mains.observe(None, SOURCE, reading("1000"), T0)
    assert not mains.worth_writing(old, mains.observe(old, SOURCE, reading("1040"), at(5)))
    assert mains.worth_writing(old, mains.observe(old, SOURCE, reading("940"), at(5)))
    assert mains.worth_writing(old, mains.observe(old, SOURCE, reading("1000", "89"), at(5)))


# ---------------------------------------------------------------- on battery


def test_online_ups_changes_nothing() -> None:
    objects = [
        fed_group("shed", "Shed", "Online", at(-3600)),
        machine("s1", group="shed"),
        pod("p", cpu="1"),
    ]
    result = run(*objects)
    assert ons(result) == ["s1"]  # as without a UPS
    assert not [a for a in result.actions if a.outage]


def test_nothing_is_powered_on_while_on_battery_and_the_pod_is_told_why() -> None:
    objects = [
        fed_group("shed", "Shed", "OnBattery", at(-3)),
        machine("s1", group="shed"),
        pod("p", cpu="1"),
    ]
    result = run(*objects)
    assert ons(result) == []
    assert "the mains failed" in pod_note(result, "p")
    assert SOURCE in pod_note(result, "p")


def test_a_moment_on_battery_powers_nothing_off() -> None:
    assert offs(run(*fleet("OnBattery", at(-5)))) == []


def test_shed_goes_off_after_the_delay_and_the_outage_is_recorded_first() -> None:
    result = run(*fleet("OnBattery", at(-11)))
    assert offs(result) == ["s1"]
    outage = result.outages[mkey("shed")]
    assert outage.restore == ["s1"]
    assert [str(k.name) for k in result.outages] == ["shed"]


def test_hold_goes_off_below_its_runtime_and_last_stays() -> None:
    assert sorted(offs(run(*fleet("OnBattery", at(-60), runtime=1100)))) == ["s1"]
    result = run(*fleet("OnBattery", at(-60), runtime=900))
    assert sorted(offs(result)) == ["h1", "s1"]
    assert "runtime 900s is below holdUntil.runtimeSeconds" in " ".join(
        a.reason for a in result.actions
    )


def test_low_battery_shuts_down_tier_after_tier() -> None:
    first = run(*fleet("LowBattery", at(-1)))
    assert sorted(offs(first)) == ["s1"]  # the Shed tier first, the others wait for it
    objects = [
        *fleet("LowBattery", at(-1))[:3],
        machine("s1", group="shed", phase="Off"),
        ready_machine("h1", group="hold"),
        ready_machine("l1", group="last"),
    ]
    assert offs(run(*objects)) == ["h1"]
    objects[4] = machine("h1", group="hold", phase="Off")
    assert offs(run(*objects)) == ["l1"]


def test_runtime_below_what_the_shutdowns_need_is_low_battery() -> None:
    snapshot = snap(*fleet("OnBattery", at(-60), runtime=300))
    (supply,) = supplies(snapshot)
    # Three tiers, one machine each: (120 s shutdown + 60 s drain) x 3 + the 120 s margin.
    assert needed_seconds(supply) == 660
    # Below it, the shutdown goes tier by tier: Shed first, even before its delay is over.
    result = run(*fleet("OnBattery", at(-1), runtime=650))
    assert offs(result) == ["s1"]
    assert "650s of battery left, below the 660s" in result.actions[0].reason


def test_essential_group_keeps_its_minimum_until_low_battery() -> None:
    objects = [
        fed_group("core", "Shed", "OnBattery", at(-60), policy={"essential": True}, minNodes=1),
        ready_machine("c1", group="core"),
        machine("c2", group="core", phase="Off"),
    ]
    assert offs(run(*objects)) == []
    objects[1] = machine("c1", group="core", phase="Off", priority=5)
    assert ons(run(*objects)) == ["c1"]  # topped up to minNodes, on battery all the same
    low = [
        fed_group("core", "Shed", "LowBattery", at(-60), policy={"essential": True}, minNodes=1),
        *ready_machine("c1", group="core"),
    ]
    assert offs(run(*low)) == ["c1"]


def test_unreadable_ups_last_seen_on_battery_starts_nothing() -> None:
    objects = [
        fed_group("shed", "Shed", "Unknown", at(-600), flags="OB"),
        machine("s1", group="shed"),
        ready_machine("s2", group="shed"),
        pod("p", cpu="1"),
    ]
    result = run(*objects)
    assert (ons(result), offs(result)) == ([], [])
    assert "cannot be read" in pod_note(result, "p")


# ---------------------------------------------------------------- back


def outaged(since: datetime, charge: float, phases: dict[str, str]) -> list[Any]:
    """The fleet after an outage: all three recorded, machines in `phases`."""
    objects: list[Any] = [
        fed_group(name, tier, "Online", since, charge=charge, outage=[f"{name[0]}1"])
        for name, tier in (("shed", "Shed"), ("hold", "Hold"), ("last", "Last"))
    ]
    for name, phase in phases.items():
        group_name = {"s": "shed", "h": "hold", "l": "last"}[name[0]]
        desired = "Off" if phase == "Off" else "On"
        objects.append(machine(name, group=group_name, desired=desired, phase=phase))
    return objects


def test_restore_waits_for_the_hysteresis_and_the_charge() -> None:
    down = {"s1": "Off", "h1": "Off", "l1": "Off"}
    assert ons(run(*outaged(at(-30), 90, down))) == []
    assert ons(run(*outaged(at(-120), 40, down))) == []
    assert ons(run(*outaged(at(-120), 60, down))) == ["l1"]  # Last first


def test_restore_goes_in_reverse_tier_order_and_ends_the_outage() -> None:
    coming = run(*outaged(at(-120), 60, {"s1": "Off", "h1": "Off", "l1": "Booting"}))
    assert ons(coming) == []  # Hold waits for Last to be Ready
    assert ons(run(*outaged(at(-120), 60, {"s1": "Off", "h1": "Off", "l1": "Ready"}))) == ["h1"]
    assert ons(run(*outaged(at(-120), 60, {"s1": "Off", "h1": "Ready", "l1": "Ready"}))) == ["s1"]
    done = run(*outaged(at(-120), 60, {"s1": "Ready", "h1": "Ready", "l1": "Ready"}))
    assert sorted(k.name for k in done.outages_ended) == ["hold", "last", "shed"]


def test_restore_is_woken_for_by_time_alone() -> None:
    snapshot = snap(*outaged(at(-30), 90, {"s1": "Off", "h1": "Off", "l1": "Off"}))
    result = run(*outaged(at(-30), 90, {"s1": "Off", "h1": "Off", "l1": "Off"}))
    assert next_wake(snapshot, result, T0) == at(30)  # 60 s of mains after at(-30)


def test_flapping_mains_give_no_power_order() -> None:
    # OL and OB every 5 s for two minutes: planned at every second, nothing is ever ordered.
    for second in range(120):
        flipped = T0 + timedelta(seconds=second - second % 5)
        state = "OnBattery" if (second // 5) % 2 == 0 else "Online"
        result = run(*fleet(state, flipped), now=T0 + timedelta(seconds=second))
        assert result.actions == (), (second, result.actions)


# ---------------------------------------------------------------- applied


class Recording(MemoryScale):
    """A port that logs what it writes, in order, and can refuse the outage record."""

    def __init__(self, refuse: bool = False) -> None:
        super().__init__(machines={})
        self.log: list[str] = []
        self.refuse = refuse

    def record_outage(self, group: ObjectKey, outage: Outage | None) -> bool:
        self.log.append(f"outage {group.name}")
        return not self.refuse and super().record_outage(group, outage)

    def set_desired(self, machine: ObjectKey, state: ObservedPowerState) -> bool:
        self.log.append(f"{machine.name} {state}")
        return True


def test_the_outage_is_written_before_the_power_off_and_none_without_it() -> None:
    objects = fleet("OnBattery", at(-11))
    snapshot = snap(*objects)
    result = run(*objects)
    port = Recording()
    PlanApplier().apply(port, snapshot, result, T0)
    assert port.log == ["outage shed", "s1 Off"]
    refused = Recording(refuse=True)
    applied = PlanApplier().apply(refused, snapshot, result, T0)
    assert refused.log == ["outage shed"]
    assert applied.conflicts == 1  # planned again on the next change


def test_lightsout_status_shows_the_ups_as_read() -> None:
    spec = {"battery": {"source": UPS, "tier": "Shed"}}
    assert ups_in_force(spec, group_status(None)) == f"{SOURCE} not read yet, Shed"
    status = group_status(fed_group("shed", "Shed", "OnBattery", T0, charge=80, runtime=900))
    assert ups_in_force(spec, status) == f"{SOURCE} OnBattery 80% 900s left, Shed"
    assert ups_in_force({}, status) == "-"
    unreadable = group_status({"status": {"battery": {"chargePercent": "lots"}}})
    assert ups_in_force(spec, unreadable) == "invalid status.battery"


# ---------------------------------------------------------------- drain deadlines


def test_low_battery_sets_a_drain_deadline_from_the_runtime_left() -> None:
    # LB with 2000 s left and 660 s needed: PDBs are waited for 1340 s more, no longer.
    result = run(*fleet("LowBattery", at(-1), runtime=2000))
    assert set(result.drain_by) == {mkey("s1"), mkey("h1"), mkey("l1")}
    assert result.drain_by[mkey("s1")] == T0 + timedelta(seconds=2000 - 660)
    # Runtime unknown (0 is a driver's "don't know"): no waiting at all.
    assert run(*fleet("LowBattery", at(-1), runtime=0)).drain_by[mkey("h1")] == T0
    assert run(*fleet("OnBattery", at(-60))).drain_by == {}


def test_the_deadline_is_marked_moved_only_earlier_and_removed_after() -> None:
    objects = fleet("LowBattery", at(-1), runtime=2000)
    snapshot = snap(*objects)
    port = Recording()
    applier = PlanApplier()
    applier.apply(port, snapshot, run(*objects), T0)
    assert port.drain_mark(mkey("l1")) == ts(at(1340))
    later = fleet("LowBattery", at(-1), runtime=2005)  # the estimate wobbles up: kept
    applier.apply(port, snapshot, run(*later), T0)
    assert port.drain_mark(mkey("l1")) == ts(at(1340))
    sooner = fleet("LowBattery", at(-1), runtime=1000)
    applier.apply(port, snapshot, run(*sooner), T0)
    assert port.drain_mark(mkey("l1")) == ts(at(340))
    applier.apply(port, snapshot, run(*fleet("Online", at(-1))), T0)
    assert port.drain_mark(mkey("l1")) is None


def draining(drain_by: datetime | None) -> Decision:
    state = MachineState(
        name="m1",
        kubernetes_node_name="worker-1",
        phase=Phase.DRAINING,
        desired=ObservedPowerState.OFF,
        intent_generation=2,
        phase_since=T0,
        drain_by=drain_by,
    )
    blocked = DrainStatus(1, blocked_by="shop/db-pdb", blocked_message="needs 1 healthy pod")
    seen = Observations(node_exists=True, node_ready=True, node_cordoned=True, drain=blocked)
    return decide(state, seen, at(60))


def test_past_its_deadline_a_drain_deletes_what_a_pdb_protects() -> None:
    before = draining(at(120))
    assert Drain(force=False) in before.effects
    assert before.reason == "DrainBlocked"
    past = draining(at(30))
    assert Drain(force=True) in past.effects
    assert past.reason == "DrainForced"
    assert "past the drain deadline" in past.message
    assert Drain(force=False) in draining(None).effects


def test_lightsout_plan_says_what_an_outage_now_would_do() -> None:
    result = run(*fleet("Online", at(-3600)))
    notes = {key.name: " ".join(lines) for key, lines in result.explanations.groups.items()}
    assert (
        "if the mains failed now (lab@127.0.0.1:13493: 90% charge, 1800s of runtime"
        in (notes["shed"])
    )
    assert "the shutdowns need 660s with the margin" in notes["shed"]
    assert "Shed: s1 off after 10s on battery" in notes["shed"]
    assert "Hold: h1 off at runtime below 1000s, or low battery" in notes["hold"]
    assert "Last: l1 off at low battery, once the other tiers are off" in notes["last"]
    assert result.actions == ()


def test_the_operators_and_the_control_planes_machines_go_off_last_of_all() -> None:
    operator = pod("lightsout-7d9", node="s1", labels={"app.kubernetes.io/name": "lightsout"})
    objects = [*fleet("OnBattery", at(-60)), operator]
    # Shed: its only machine runs the operator, so it is not shed.
    assert offs(run(*objects)) == []
    # At low battery it waits for every other machine on the UPS, Last's included.
    low = [*fleet("LowBattery", at(-1))[:3], operator]
    low += [*ready_machine("s1", group="shed"), *ready_machine("h1", group="hold")]
    low += ready_machine("l1", group="last")
    assert offs(run(*low)) == ["h1"]
    down = [*low[:4], *ready_machine("s1", group="shed")]
    down += [machine("h1", group="hold", phase="Off"), machine("l1", group="last", phase="Off")]
    result = run(*down)
    assert offs(result) == ["s1"]
    assert "last of all" in result.actions[0].reason


def test_a_pinned_machine_is_not_shed_but_is_shut_down_at_low_battery() -> None:
    pinned = [
        fed_group("shed", "Shed", "OnBattery", at(-60)),
        *ready_machine("s1", group="shed", enabled=False),
    ]
    assert offs(run(*pinned)) == []
    low = [
        fed_group("shed", "Shed", "LowBattery", at(-1)),
        *ready_machine("s1", group="shed", enabled=False),
    ]
    assert offs(run(*low)) == ["s1"]
