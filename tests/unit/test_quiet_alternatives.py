"""A quiet window holds its Group back from a pod only while another Group has a machine that
could be powered on now for it (`planning.autoscaler.startable.could_power_on`: autoscaled, Off, not
pinned, its Group below its maximum and not itself quiet). A Failed or pinned machine, one in a
Group sized by `none` or at its maxNodes, or one whose Group is quiet too is no alternative: the
quiet Group's machine wakes for the pod, and says why the others were not alternatives. A
strict window wakes nothing whatever the others are.

Group lab (its window open at T0 + 60 s) has frugal, the lowest-energy machine for the pod;
Group spare has spare-1, hungrier, which the pod fits as well.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from lightsout.planning.autoscaler.absorb import absorb
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.cluster import PodClass, build_cluster, pod_weights
from lightsout.planning.autoscaler.scaleup import choose, eligible_classes, room_of
from lightsout.planning.autoscaler.windows import effective
from lightsout.planning.policy import EnergyModel
from lightsout.state.types import Snapshot
from tests.unit.test_autoscale_objects import (
    at,
    group,
    machine,
    ons,
    pod,
    pod_note,
    ready_machine,
    snap,
)

pytestmark = pytest.mark.unit

NOW = at(60)
QUIET = {
    "name": "evening",
    "schedule": "0 12 * * *",
    "durationSeconds": 3600,
    "timeZone": "UTC",
    "quiet": True,
}
NOTE = "window evening (12:00-13:00 UTC): quiet until 13:00"
STRICT_NOTE = "window evening (12:00-13:00 UTC): quiet, strict until 13:00"


def _cluster(*spare: Any, strict: bool = False) -> Snapshot:
    """lab (quiet, `strict` or not) with frugal; the objects of Group spare; one small pod."""
    return snap(
        group(windows=[{**QUIET, "strict": strict}]),
        machine("frugal", "8", "32Gi", watts=(30, 10, 1)),
        *spare,
        pod("small", "1", "1Gi"),
    )


def spare_1(**kw: Any) -> dict[str, Any]:
    return machine("spare-1", "4", "16Gi", group="spare", watts=(200, 80, 5), **kw)


def _quiet_notes(snapshot: Snapshot) -> dict[str, str]:
    """The scale-up steps as `plan` runs them: each machine chosen, with why a quiet window
    let it wake (`Chosen.quiet`, its PowerOn reason's first part)."""
    groups = tuple(effective(g, snapshot.machines, NOW) for g in snapshot.groups)
    cluster = build_cluster(replace(snapshot, groups=groups), NOW)
    classes = (PodClass(i, p.scheduling, (p,)) for i, p in enumerate(cluster.pending))
    sizes = [i.view.allocatable.as_dict() for i in cluster.infos if i.view is not None]
    room = room_of(cluster)
    absorbed = absorb(cluster, pod_weights(classes, sizes), room)
    wanting = eligible_classes(absorbed.cluster, absorbed.classes)
    energy = EnergyModel.of(snapshot.machines, groups)
    choice = choose(absorbed.cluster, wanting, room, energy)
    return {entry.bin.name: entry.quiet for entry in choice.chosen}


WOKEN = "woken, no other Group's machine can be powered on for the pods"
#: On and too small for the pod: with it, Group spare is at a maxNodes of 1.
SPARE_0 = ready_machine("spare-0", "500m", group="spare")


@pytest.mark.parametrize(
    ("spare", "strict", "woken", "said"),
    [
        pytest.param(
            [group("spare"), spare_1(desired="On", phase="Failed")],
            False,
            ["frugal"],
            {"frugal": f"{NOTE}: {WOKEN} (spare-1: Failed)"},
            id="the other machine Failed: the quiet Group's wakes",
        ),
        pytest.param(
            [group("spare"), spare_1(enabled=False)],
            False,
            ["frugal"],
            {"frugal": f"{NOTE}: {WOKEN} (spare-1: pinned (autoscaling.enabled=false))"},
            id="the other machine pinned: the quiet Group's wakes",
        ),
        pytest.param(
            [group("spare", autoscaler="none"), spare_1()],
            False,
            ["frugal"],
            {"frugal": f"{NOTE}: {WOKEN} (spare-1: group spare is sized by none)"},
            id="the other Group sized by none: the quiet Group's wakes",
        ),
        pytest.param(
            [group("spare", maxNodes=1), SPARE_0, spare_1()],
            False,
            ["frugal"],
            {
                "frugal": f"{NOTE}: {WOKEN} (spare-0: Ready | "
                "spare-1: group spare at maxNodes (1 of 1 on))"
            },
            id="the other Group at its maximum: the quiet Group's wakes",
        ),
        pytest.param(
            [group("spare", windows=[QUIET]), spare_1()],
            False,
            ["frugal"],  # both quiet, neither an alternative: lowest energy picks
            {"frugal": f"{NOTE}: {WOKEN} (spare-1: group spare is quiet too)"},
            id="the other Group quiet too: the lowest-energy machine wakes",
        ),
        pytest.param(
            [group("spare"), spare_1()],
            False,
            ["spare-1"],
            {"spare-1": ""},
            id="a healthy alternative: it wakes instead",
        ),
        pytest.param(
            [group("spare"), spare_1(desired="On", phase="Failed")],
            True,
            [],
            {},
            id="strict, no alternative: nothing wakes",
        ),
        pytest.param(
            [group("spare"), spare_1()],
            True,
            ["spare-1"],
            {"spare-1": ""},
            id="strict, a healthy alternative: it wakes",
        ),
    ],
)
def test_a_quiet_group_wakes_only_when_no_other_group_can_power_on_for_the_pod(
    spare: list[Any], strict: bool, woken: list[str], said: dict[str, str]
) -> None:
    snapshot = _cluster(*spare, strict=strict)
    result = plan(snapshot, NOW)
    assert ons(result) == woken
    assert _quiet_notes(snapshot) == said
    if woken:
        assert pod_note(result, "small") == f"powering on machine {woken[0]} for it"
    else:
        assert f"frugal: {STRICT_NOTE}: no power-on for any pending pod" in pod_note(
            result, "small"
        )


def test_a_held_back_pod_names_the_machine_that_can_be_powered_on_instead() -> None:
    """spare-1 could be powered on, but the pod has not waited out spare's scale-up window yet:
    nothing wakes, and the pod is told which machine the quiet window leaves it."""
    snapshot = _cluster(group("spare", scaleUp={"stabilizationWindowSeconds": 300}), spare_1())
    result = plan(snapshot, NOW)
    assert ons(result) == []
    assert pod_note(result, "small") == (
        "no machine can be powered on for it now: "
        f"frugal: {NOTE}: no power-on for pods another Group can host "
        "(spare-1 can be powered on for them) | "
        "spare-1: pods wait 300s before group spare scales up "
        "(scaleUp.stabilizationWindowSeconds)"
    )


def test_a_quiet_group_without_alternative_waits_out_its_own_scale_up_window() -> None:
    """The other machine Failed, the quiet Group not past its scale-up window: the window, not
    the quiet one, is why nothing wakes yet."""
    snapshot = snap(
        group(windows=[QUIET], scaleUp={"stabilizationWindowSeconds": 300}),
        machine("frugal", "8", "32Gi", watts=(30, 10, 1)),
        group("spare"),
        spare_1(desired="On", phase="Failed"),
        pod("small", "1", "1Gi"),
    )
    result = plan(snapshot, NOW)
    assert ons(result) == []
    assert "frugal: pods wait 300s before group lab scales up" in pod_note(result, "small")
    assert ons(plan(snapshot, at(300))) == ["frugal"]
