"""The planner's use of what a machine's history teaches: learned boot and shutdown durations
(`planning.learning`, through `fsm.decide` into status and back), the break-even time behind
`scaleDown.unneededSeconds: auto`, announced demand holding a machine on across a short gap,
the wear limits (`minimumOnSeconds`, `maxPowerCyclesPerDay`) and FastestBoot ranking by the
learned boot time.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from lightsout.models.enums import SelectionPolicy
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.breakeven import break_even_seconds
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.planning.learning import learn, median
from lightsout.planning.machine.fsm import decide
from lightsout.planning.policy import EnergyModel
from lightsout.planning.types import (
    Action,
    JobPhase,
    Learned,
    LeaseState,
    MachineState,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)
from lightsout.state.learned import learned_from_status, learned_to_status
from lightsout.state.parse import scheduling_requirements
from lightsout.state.types import ExpectedPod, ObjectKey
from tests.unit.test_autoscale_objects import (
    at,
    core_node,
    group,
    machine,
    machine_note,
    mkey,
    offs,
    ons,
    pod,
    ready_machine,
    run,
    snap,
    ts,
)

pytestmark = pytest.mark.unit

LEARNED = {"bootSeconds": 60, "shutdownSeconds": 30}  # break-even 90 s


def idle_cluster(learned: dict[str, Any] | None = LEARNED, **kw: Any) -> list[Any]:
    """An always-on core node with room and an idle Lights-Out machine whose pod fits there."""
    return [
        group(),
        core_node("base", "8", "16Gi"),
        ready_machine("idle", "4", "8Gi", learned=learned, watts=(50, 20, 2), **kw),
        pod("web-1", "500m", "512Mi", node="idle", labels={"app": "web"}),
    ]


# --- learning from the phase history ----------------------------------------------------------


NOTHING = Learned()


def _state(phase: Phase, op: Operation | None, learned: Learned = NOTHING) -> MachineState:
    return MachineState(
        name="m",
        kubernetes_node_name="m",
        phase=phase,
        desired=ObservedPowerState.ON if phase is Phase.BOOTING else ObservedPowerState.OFF,
        intent_generation=2,
        phase_since=at(-100),
        operation=op,
        learned=learned,
    )


def test_a_boot_is_timed_from_its_job_start_to_ready_through_decide() -> None:
    started = at(-95)
    op = Operation(Action.STARTUP, 2, 1, started=started, result=OperationResult.SUCCEEDED)
    machine_state = _state(Phase.BOOTING, op, Learned(boot_samples=(50,)))
    obs = Observations(
        job=ObservedJob(Action.STARTUP, 2, 1, JobPhase.SUCCEEDED),
        node_exists=True,
        node_ready=True,
        node_metadata_applied=True,
        lease=LeaseState.HELD_BY_ME,
    )
    decision = decide(machine_state, obs, at(0))
    assert decision.phase is Phase.READY
    assert decision.learned is not None
    assert decision.learned.boot_samples == (50, 95)
    # Nothing new on the next pass in the same phase: nothing to write.
    again = decide(MachineState(**{**machine_state.__dict__, "phase": Phase.READY}), obs, at(1))
    assert again.learned is None


def test_shutdowns_and_power_ons_are_learned_and_old_power_ons_forgotten() -> None:
    op = Operation(Action.SHUTDOWN, 3, 1, started=at(-25), result=OperationResult.SUCCEEDED)
    learned = learn(_state(Phase.POWERING_OFF, op), Phase.OFF, op, at(0))
    assert learned is not None and learned.shutdown_samples == (25,)

    old = Learned(power_ons=(at(-90_000), at(-3600)))
    requested = learn(_state(Phase.OFF, None, old), Phase.POWERING_ON, None, at(0))
    assert requested is not None and requested.power_ons == (at(-3600), at(0))

    failed = Operation(Action.SHUTDOWN, 3, 1, started=at(-25), result=OperationResult.FAILED)
    assert learn(_state(Phase.POWERING_OFF, failed), Phase.FAILED, failed, at(0)) is None


def test_the_learned_figure_is_a_median_so_one_slow_boot_does_not_move_it() -> None:
    assert median((50, 52, 49, 600, 51)) == 51
    assert median(()) is None


def test_status_round_trip_keeps_samples_and_writes_the_medians() -> None:
    learned = Learned(boot_samples=(40, 44, 300), shutdown_samples=(20,), power_ons=(at(0),))
    status = learned_to_status(learned)
    assert (status["bootSeconds"], status["shutdownSeconds"]) == (44, 20)
    assert status["powerOns"] == [ts(at(0))]
    assert learned_from_status(status) == learned
    assert learned_from_status({"bootSamples": ["x", -1, 7]}) == Learned(boot_samples=(7,))
    assert "bootSeconds" not in learned_to_status(Learned(power_ons=(at(0),)))


# --- break-even and unneededSeconds: auto -----------------------------------------------------


def test_break_even_is_boot_plus_shutdown_and_needs_the_boot_learned() -> None:
    (m,) = snap(idle_cluster()).machines[:1] or ()
    energy = EnergyModel.of([m], [])
    assert break_even_seconds(m, energy) == 90
    (unlearned,) = snap(idle_cluster(learned=None)).machines
    assert break_even_seconds(unlearned, energy) is None
    # Booted once, never shut down yet: the shutdown is taken to be as long as the boot.
    (booted,) = snap(idle_cluster(learned={"bootSeconds": 60})).machines
    assert break_even_seconds(booted, energy) == 120
    (flat,) = snap(
        group(), machine("flat", learned=LEARNED, watts=(20, 20, 20), phase="Ready")
    ).machines
    assert break_even_seconds(flat, EnergyModel.of([flat], [])) == math.inf


def test_auto_waits_one_break_even_time_then_powers_off_and_says_why() -> None:
    early = run(idle_cluster(), unneeded_since={mkey("idle"): at(-80)})
    assert offs(early) == []
    assert "only for 80s of 90s (auto: break-even, learned boot 60s + shutdown 30s)" in (
        machine_note(early, "idle")
    )
    due = run(idle_cluster(), unneeded_since={mkey("idle"): at(-91)})
    assert offs(due) == ["idle"]
    (action,) = due.actions
    assert "unneeded for 91s (auto: break-even, learned boot 60s + shutdown 30s 90s)" in (
        action.reason
    )
    # The planner wakes itself at the break-even deadline.
    snapshot = snap(idle_cluster(), unneeded_since={mkey("idle"): at(-80)})
    assert next_wake(snapshot, plan(snapshot, at(0)), at(0)) == at(10)


def test_auto_waits_the_old_600_seconds_until_the_boot_is_learned() -> None:
    result = run(idle_cluster(learned=None), unneeded_since={mkey("idle"): at(-500)})
    assert offs(result) == []
    assert "of 600s (auto: boot time not learned yet)" in machine_note(result, "idle")


def test_before_its_first_shutdown_auto_counts_the_shutdown_as_long_as_the_boot() -> None:
    # A machine the operator booted (boot timed: 60 s) but never powered off: the first
    # power-off waits 60 + 60 s, not the flat 600 s, and the explanation says why.
    booted = idle_cluster(learned={"bootSeconds": 60})
    early = run(booted, unneeded_since={mkey("idle"): at(-100)})
    assert offs(early) == []
    assert (
        "only for 100s of 120s (auto: break-even, learned boot 60s + shutdown not timed yet, "
        "taken as the boot 60s)"
    ) in machine_note(early, "idle")
    assert offs(run(booted, unneeded_since={mkey("idle"): at(-121)})) == ["idle"]
    snapshot = snap(booted, unneeded_since={mkey("idle"): at(-100)})
    assert next_wake(snapshot, plan(snapshot, at(0)), at(0)) == at(20)


def test_a_fixed_unneeded_time_still_wins_over_auto() -> None:
    objects = idle_cluster()
    objects[0] = group(scaleDown={"unneededSeconds": 300})
    result = run(objects, unneeded_since={mkey("idle"): at(-200)})
    assert offs(result) == []
    assert "only for 200s of 300s (scaleDown.unneededSeconds)" in machine_note(result, "idle")


def _expected(seconds: float, cpu: str = "3") -> ExpectedPod:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    return ExpectedPod(ObjectKey("backup", "nightly-1"), at(seconds), scheduling_requirements(spec))


def test_announced_demand_keeps_a_machine_on_across_a_gap_shorter_than_break_even() -> None:
    # Break-even 90 s; a CronJob run that only "idle" can take (3 cpu: base has 8 free, so
    # base is full for it here) comes in 100 s: shutdown 30 s + lead 60 + 15 s = 105 s.
    objects = [*idle_cluster(), pod("big", "7500m", "1Gi", node="base")]
    since = {mkey("idle"): at(-200)}
    soon = snap(objects, unneeded_since=since)
    soon = type(soon)(**{**soon.__dict__, "expected": (_expected(100),)})
    held = plan(soon, at(0))
    assert offs(held) == []
    assert "backup/nightly-1 is due in 100s, sooner than a power cycle pays" in (
        machine_note(held, "idle")
    )
    later = type(soon)(**{**soon.__dict__, "expected": (_expected(400),)})
    assert offs(plan(later, at(0))) == ["idle"]
    # A run another Ready machine (that stays on) can take does not hold this one.
    roomy = snap(idle_cluster(), unneeded_since=since)
    roomy = type(roomy)(**{**roomy.__dict__, "expected": (_expected(100),)})
    assert offs(plan(roomy, at(0))) == ["idle"]


# --- wear limits ------------------------------------------------------------------------------


def test_minimum_on_seconds_holds_a_machine_on_and_wakes_the_planner_when_it_lets_go() -> None:
    # The machine has been Ready for an hour (phaseSince); a 2 h minimum keeps it on.
    objects = idle_cluster(wear={"minimumOnSeconds": 7200})
    snapshot = snap(objects, unneeded_since={mkey("idle"): at(-1000)})
    result = plan(snapshot, at(0))
    assert offs(result) == []
    assert "wear limit: Ready for 3600s of minimumOnSeconds 7200" in machine_note(result, "idle")
    assert next_wake(snapshot, result, at(0)) == at(3600)
    assert offs(
        run(idle_cluster(wear={"minimumOnSeconds": 600}), unneeded_since={mkey("idle"): at(-1000)})
    ) == ["idle"]


def test_max_power_cycles_per_day_keeps_a_machine_on_until_the_oldest_power_on_is_a_day_old() -> (
    None
):
    power_ons = [ts(at(-80_000)), ts(at(-40_000)), ts(at(-3700))]
    learned = {**LEARNED, "powerOns": power_ons}
    objects = idle_cluster(learned=learned, wear={"maxPowerCyclesPerDay": 3})
    snapshot = snap(objects, unneeded_since={mkey("idle"): at(-1000)})
    result = plan(snapshot, at(0))
    assert offs(result) == []
    assert "powered on 3 times in 24 h (maxPowerCyclesPerDay 3)" in machine_note(result, "idle")
    assert next_wake(snapshot, result, at(0)) == at(-80_000) + timedelta(days=1)
    looser = idle_cluster(learned=learned, wear={"maxPowerCyclesPerDay": 4})
    assert offs(run(looser, unneeded_since={mkey("idle"): at(-1000)})) == ["idle"]


# --- FastestBoot ranks by the learned boot time -----------------------------------------------


def test_fastest_boot_prefers_a_machine_learned_to_boot_fast_over_a_short_timeout() -> None:
    objects = [
        group(selectionPolicy=SelectionPolicy.FASTEST_BOOT.value),
        machine("timeout-120", boot=120),
        machine("learned-40", boot=600, learned={"bootSeconds": 40}),
        pod("job", "1", "1Gi", unschedulable=True),
    ]
    result = run(objects)
    assert ons(result) == ["learned-40"]
    assert "boots in about 40s (learned)" in result.actions[0].reason
