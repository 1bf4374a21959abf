"""Table tests of how the planner counts pending pods on machines already coming up
(`absorb.absorb`): only on a machine Ready no later than a fresh power-on would be, and in
the order kube-scheduler binds them (the machine Ready first takes the oldest pods).

Same style as `test_autoscale`: raw API objects through `snapshot_from` and `plan`.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.models.enums import DesiredPowerState, Phase
from lightsout.planning.autoscaler.absorb import COMING_MARGIN_SECONDS, ready_in
from lightsout.planning.autoscaler.cluster import Availability, MachineInfo
from lightsout.state.types import Machine, ObjectKey
from tests.unit.test_autoscale_objects import (
    T0,
    at,
    group,
    machine,
    ons,
    pkey,
    pod,
    pod_note,
    run,
    ts,
)

pytestmark = pytest.mark.unit

NUC_BOOT = 50
BIG_BOOT = 240


def coming(name: str, cpu: str, boot: int, started: float, phase: str = "Booting") -> Any:
    """A machine coming up whose power-on Job started `started` seconds ago, with a learned
    boot of `boot` seconds."""
    return machine(
        name,
        cpu,
        "32Gi",
        desired="On",
        phase=phase,
        learned={"bootSeconds": boot, "powerOns": [ts(at(-started))]},
    )


def nuc(name: str = "nuc") -> Any:
    return machine(name, "4", "16Gi", learned={"bootSeconds": NUC_BOOT})


def test_a_pod_is_not_counted_on_a_slow_machine_when_a_quicker_one_is_off() -> None:
    # big: 230 s of boot left; a NUC powered on now is Ready in 50 s.
    result = run(group(), coming("big", "16", BIG_BOOT, started=10), nuc(), pod("ci-1", "2", "1Gi"))
    assert ons(result) == ["nuc"]
    note = pod_note(result, "ci-1")
    assert note.startswith("powering on machine nuc for it")
    assert (
        "not counted on machine big, already powering on: machine nuc powered on now would be "
        f"Ready sooner (boot about {NUC_BOOT}s)"
    ) in note


def test_a_pod_is_counted_on_a_machine_that_is_nearly_ready() -> None:
    # big has 40 s left, less than the NUC's 50 s: no second power-on.
    result = run(
        group(), coming("big", "16", BIG_BOOT, started=200), nuc(), pod("ci-1", "2", "1Gi")
    )
    assert result.actions == ()
    assert pod_note(result, "ci-1") == "will run on machine big, already powering on (Booting)"


def test_a_coming_machine_a_little_slower_than_a_fresh_one_still_takes_the_pod() -> None:
    # Within the margin a second machine would save only seconds of wait for a whole boot.
    left = NUC_BOOT + COMING_MARGIN_SECONDS - 1
    result = run(
        group(), coming("big", "16", BIG_BOOT, started=BIG_BOOT - left), nuc(), pod("ci-1", "2")
    )
    assert result.actions == ()
    just_past = run(
        group(), coming("big", "16", BIG_BOOT, started=BIG_BOOT - left - 2), nuc(), pod("ci-1", "2")
    )
    assert ons(just_past) == ["nuc"]


@pytest.mark.parametrize(
    ("why", "objects"),
    [
        # The quick machine cannot take the pod: it is too small.
        ("too small", [group(), nuc()]),
        # Its Group has no room: maxNodes reached with big coming.
        ("maxNodes", [group(maxNodes=1), nuc()]),
        # Its Group's scale-up window: the pod would wait 300 s before the NUC is even asked.
        ("window", [group(scaleUp={"stabilizationWindowSeconds": 300}), nuc()]),
        # Nothing is off at all.
        ("nothing off", [group()]),
    ],
)
def test_a_slow_coming_machine_takes_the_pod_when_nothing_quicker_can_be_powered_on(
    why: str, objects: list[Any]
) -> None:
    cpu = "6" if why == "too small" else "2"
    result = run(
        *objects,
        coming("big", "16", BIG_BOOT, started=10),
        pod("ci-1", cpu, "1Gi", pending_since=at(-5)),
    )
    assert result.actions == (), why
    assert pod_note(result, "ci-1") == "will run on machine big, already powering on (Booting)"


def test_a_coming_machine_whose_boot_is_not_learned_yet_still_takes_the_pod() -> None:
    # Its only estimate is the 600 s boot timeout, an upper bound: no second power-on on that.
    unlearned = machine(
        "big", "16", "32Gi", desired="On", phase="Booting", learned={"powerOns": [ts(at(-10))]}
    )
    result = run(group(), unlearned, nuc(), pod("ci-1", "2", "1Gi"))
    assert result.actions == ()
    assert pod_note(result, "ci-1") == "will run on machine big, already powering on (Booting)"


def test_coming_capacity_goes_to_the_oldest_pods_whatever_their_class() -> None:
    # kube-scheduler binds pending pods oldest first: when "booting" is Ready, small-1 (oldest)
    # and heavy-1 take its 4 CPUs and heavy-2 no longer fits. Counting the heavier class first
    # (heavy-1, heavy-2) would leave small-1, the oldest, for a machine that does not come.
    result = run(
        group(),
        coming("booting", "4", NUC_BOOT, started=40),
        machine("spare", "4", "16Gi", learned={"bootSeconds": NUC_BOOT}),
        pod("small-1", "1", "1Gi", pending_since=at(-30)),
        pod("heavy-1", "2", "4Gi", pending_since=at(-20)),
        pod("heavy-2", "2", "4Gi", pending_since=at(-10)),
    )
    coming_note = "will run on machine booting, already powering on (Booting)"
    assert pod_note(result, "small-1") == coming_note
    assert pod_note(result, "heavy-1") == coming_note
    assert ons(result) == ["spare"]
    assert pod_note(result, "heavy-2") == "powering on machine spare for it"


@pytest.mark.parametrize(("slow", "quick"), [("a-slow", "b-quick"), ("b-slow", "a-quick")])
def test_the_machine_ready_first_takes_the_oldest_pod(slow: str, quick: str) -> None:
    # The quick machine is Ready 80 s before the slow one, whatever their names: the oldest
    # pod waits for it, as the scheduler binds it there first; the younger for the slow one.
    result = run(
        group(),
        coming(slow, "2", BIG_BOOT, started=BIG_BOOT - 100),
        coming(quick, "2", NUC_BOOT, started=NUC_BOOT - 20),
        pod("old", "2", "1Gi", pending_since=at(-30)),
        pod("young", "2", "1Gi", pending_since=at(-10)),
    )
    assert result.actions == ()
    assert pod_note(result, "old") == f"will run on machine {quick}, already powering on (Booting)"
    assert pod_note(result, "young") == f"will run on machine {slow}, already powering on (Booting)"
    # The same, as data: what the operator's WaitingForScaleUp event and the simulator read.
    assert result.explanations.coming == {pkey("old"): quick, pkey("young"): slow}


def _info(phase: Phase | None = None, **fields: Any) -> MachineInfo:
    """A machine asked to power on, as the planner sees it."""
    m = Machine(
        key=ObjectKey("lightsout", "m"),
        group="lab",
        kubernetes_node_name="m",
        phase=phase,
        desired=DesiredPowerState.ON,
        boot_seconds=300,
        **fields,
    )
    return MachineInfo(m, None, Availability.COMING, "", None, None)


def test_ready_in_counts_from_the_power_on_job_start_with_the_learned_boot() -> None:
    # Asked on, no Job yet: a whole boot (learned, else the boot timeout).
    assert ready_in(_info(), T0) == 300
    assert ready_in(_info(learned_boot_seconds=50.0), T0) == 50
    # Booting: the boot less the time since the power-on Job started.
    booting = _info(Phase.BOOTING, learned_boot_seconds=50.0, power_ons=(at(-20),))
    assert ready_in(booting, T0) == 30
    # No power-on recorded: the phase's start stands in; an overdue boot is due now.
    assert ready_in(_info(Phase.BOOTING, phase_since=at(-100)), T0) == 200
    assert ready_in(_info(Phase.BOOTING, phase_since=at(-400)), T0) == 0
    # Ready, startup taint not removed yet.
    assert ready_in(_info(Phase.READY), T0) == 0
