"""Table tests of pre-warming for announced CronJob runs (`planning.autoscaler.prewarm`, and how
`absorb.absorb` counts a run on a machine already coming up): one power-on per run at most, and
a lead time taken only over machines that can hold the run.

Same style as `test_autoscale_coming`: raw API objects through `snapshot_from` and `plan`, with
the runs announced as the CronJob watch announces them (`Snapshot.expected`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan, PowerOn
from lightsout.state.parse import scheduling_requirements
from lightsout.state.types import ExpectedPod, ObjectKey
from tests.unit.test_autoscale_objects import (
    APPS,
    at,
    core_node,
    group,
    machine,
    machine_note,
    mkey,
    offs,
    ons,
    pod,
    pod_note,
    ready_machine,
    snap,
    ts,
)

pytestmark = pytest.mark.unit

NUC_BOOT = 93
TOWER_BOOT = 180
#: A machine whose boot is not learned yet: its bootTimeoutSeconds stands in.
UNLEARNED_BOOT = 420


def backup(
    due_in: float,
    cpu: str = "2",
    memory: str = "1Gi",
    extended: Mapping[str, Any] | None = None,
    name: str = "backup-1",
) -> ExpectedPod:
    """The next run of a nightly backup CronJob, due `due_in` seconds after T0."""
    spec = pod(name, cpu, memory, extended=extended)["spec"]
    return ExpectedPod(ObjectKey(APPS, name), at(due_in), scheduling_requirements(spec))


def plan_with(*objects: Any, runs: tuple[ExpectedPod, ...], now: float = 0) -> Plan:
    snapshot = dataclasses.replace(snap(*objects), expected=runs)
    return plan(snapshot, at(now))


def tower_coming(started: float) -> Any:
    """The tower, powered on `started` seconds ago (learned boot 180 s)."""
    return machine(
        "tower",
        "8",
        "32Gi",
        desired="On",
        phase="Booting",
        learned={"bootSeconds": TOWER_BOOT, "powerOns": [ts(at(-started))]},
    )


def household() -> list[Any]:
    """A NUC that boots in 93 s, off; a big server that could take the run too, off, whose
    boot is not learned yet (so the run's lead time is its 420 s boot timeout)."""
    return [
        group(),
        machine("nuc", "4", "16Gi", learned={"bootSeconds": NUC_BOOT}),
        machine("server", "32", "128Gi", boot=UNLEARNED_BOOT),
    ]


# --- one power-on per announced run ----------------------------------------------------------


def test_a_run_is_counted_on_a_machine_coming_up_that_is_ready_before_it_is_due() -> None:
    # The tower is Ready in 150 s, the run is due in 300 s: it waits for nothing there. The
    # NUC would be Ready sooner (93 s), but sooner saves no wait: powering it on as well
    # would only have it idle and power off again.
    result = plan_with(*household(), tower_coming(started=30), runs=(backup(300),))
    assert ons(result) == []
    assert pod_note(result, "backup-1") == (
        "will run on machine tower, already powering on (Booting), "
        "Ready before the run is due at 12:05:00Z"
    )
    assert result.explanations.coming == {ObjectKey(APPS, "backup-1"): "tower"}


def test_a_run_due_before_the_machine_coming_up_is_ready_still_gets_a_quicker_one() -> None:
    # Due in 60 s: the tower (Ready in 150 s) would keep the run waiting 90 s, a NUC
    # powered on now about 33 s. Sooner matters here, and the explanation says why.
    result = plan_with(*household(), tower_coming(started=30), runs=(backup(60),))
    assert ons(result) == ["nuc"]
    note = pod_note(result, "backup-1")
    assert note.startswith("powering on machine nuc for it")
    assert (
        "not counted on machine tower, already powering on: Ready after the run is due at "
        f"12:01:00Z, and machine nuc powered on now would be Ready sooner (boot about {NUC_BOOT}s)"
    ) in note


def test_a_pod_waiting_now_gets_a_quicker_machine_while_the_run_waits_for_the_slow_one() -> None:
    # Same requirements, different needs: the waiting pod would wait 150 s for the tower and
    # gets the NUC; the run, due in 300 s, is served by the tower. One power-on, for the pod.
    result = plan_with(
        *household(), tower_coming(started=30), pod("ci-1", "2", "1Gi"), runs=(backup(300),)
    )
    assert ons(result) == ["nuc"]
    assert pod_note(result, "ci-1").startswith("powering on machine nuc for it")
    assert pod_note(result, "backup-1").startswith("will run on machine tower")


def test_a_machine_just_ready_whose_node_still_has_the_not_ready_taint_takes_the_run() -> None:
    # The tower has just become Ready; its core Node's `not-ready` taint is still there for the
    # few seconds until the node lifecycle controller's next pass lifts it. That is capacity
    # arriving, not a machine that cannot hold the run: powering on the NUC for it as well
    # (seen live, 21 s before the run) would only have it idle and power off again.
    tower = machine(
        "tower",
        "8",
        "32Gi",
        desired="On",
        phase="Ready",
        learned={"bootSeconds": TOWER_BOOT, "powerOns": [ts(at(-TOWER_BOOT))]},
    )
    lifting = core_node(
        "tower",
        "8",
        "32Gi",
        ready_since=at(-2),
        taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
    )
    result = plan_with(*household(), tower, lifting, runs=(backup(20),))
    assert ons(result) == []
    assert pod_note(result, "backup-1").startswith("will run on machine tower"), pod_note(
        result, "backup-1"
    )


# --- lead time over machines that can hold the run --------------------------------------------


@pytest.mark.parametrize(
    ("resource", "requests"),
    [
        ("cpu", {"cpu": "4"}),
        ("memory", {"memory": "8Gi"}),
        ("gpu", {"extended": {"nvidia.com/gpu": "1"}}),
    ],
)
def test_a_machine_too_small_for_the_run_does_not_set_its_lead_time(
    resource: str, requests: dict[str, Any]
) -> None:
    # The Pi (2 cpu, 4Gi, no GPU) cannot hold the run; its unlearned 420 s boot timeout must
    # not make the GPU tower (learned boot 60 s) come on minutes before every run.
    objects = [
        group(),
        machine("pi", "2", "4Gi", boot=UNLEARNED_BOOT),
        machine(
            "tower",
            "8",
            "32Gi",
            extended={"nvidia.com/gpu": "1"},
            learned={"bootSeconds": 60},
        ),
    ]
    run = backup(300, **{"cpu": "1", "memory": "1Gi", **requests})
    early = plan_with(*objects, runs=(run,))
    assert ons(early) == [], resource
    # Within its boot and margin (75 s) the tower is powered on, and the reason names it.
    timely = plan_with(*objects, runs=(run,), now=230)
    (action,) = timely.actions
    assert isinstance(action, PowerOn)
    assert action.machine.name == "tower"
    assert action.reason.startswith(
        "pre-warming for the CronJob run apps/backup-1 due at 12:05:00Z (in 70s, lead time 75s: "
        "learned boot 60s of machine tower, the slowest that can hold it, + 15s margin); "
    ), action.reason


def test_the_lead_time_names_an_unlearned_boot_timeout_when_it_is_what_counts() -> None:
    # The server can hold the run and has never booted under Lights-Out: its boot timeout is
    # the lead, and the power-on says so.
    result = plan_with(*household(), runs=(backup(300),))
    (action,) = result.actions
    assert "lead time 435s: boot timeout 420s (boot not learned yet) of machine server" in (
        action.reason
    ), action.reason


# --- a pre-warmed machine stays on until its run --------------------------------------------


def pre_warmed(powered_on: float) -> Plan:
    """The NUC, idle and Ready since its first power-on `powered_on` seconds before T0 (its
    60 s boot learned on the way), unneeded for 240 s, past its 120 s break-even and its
    Group's 300 s stabilisation window; the run is due in 315 s: its lead is 75 s now."""
    nuc = ready_machine(
        "nuc", "4", "16Gi", learned={"bootSeconds": 60, "powerOns": [ts(at(-powered_on))]}
    )
    objects = [group(last_scale_up=at(-powered_on)), *nuc]
    snapshot = dataclasses.replace(
        snap(*objects, unneeded_since={mkey("nuc"): at(-240)}), expected=(backup(315),)
    )
    return plan(snapshot, at(0))


def test_a_machine_pre_warmed_on_a_boot_timeout_stays_on_until_its_run() -> None:
    # Powered on 615 s before the run (its 600 s boot timeout + 15 s margin: its boot was not
    # learned yet), the NUC was Ready 555 s early. Its learned boot made the lead 75 s: the run
    # is no longer due, but the NUC was warmed for it and must not power off and on again.
    held = pre_warmed(powered_on=300)
    assert offs(held) == [] and ons(held) == []
    assert "pre-warmed for apps/backup-1, due in 315s: powered on 615s before it" in (
        machine_note(held, "nuc")
    ), machine_note(held, "nuc")
    # Powered on longer ago than any lead of the run (for something else, long done), it is
    # unneeded like any idle machine, the run 315 s away: a power cycle pays.
    assert offs(pre_warmed(powered_on=301)) == ["nuc"]
