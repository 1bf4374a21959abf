"""The planner is a pure function: `plan(snapshot, now)` changes nothing it is given, and the
same inputs give the same plan however often it runs. Each scale-up step (`absorb`, `choose`,
`top_up`) returns what it decided, so running a step twice on the same inputs decides the same.

The cluster below makes every step decide something: a Ready node and a booting machine take
pods (`absorb`), two off machines are weighed and one is dropped again (`choose`), a Group
below minNodes gets a machine (`top_up`), a pod no machine could host is explained, and an idle
machine whose pod fits elsewhere is powered off (`scale_down`).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lightsout.planning.autoscaler.absorb import absorb
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.cluster import PodClass, build_cluster, pod_weights
from lightsout.planning.autoscaler.scaleup import choose, eligible_classes, room_of, top_up
from lightsout.planning.policy import EnergyModel
from lightsout.state.types import Snapshot
from tests.unit import test_autoscale_objects as objects

pytestmark = pytest.mark.unit


def _snapshot() -> Snapshot:
    items: list[Any] = [
        objects.group("lab", selectionPolicy="FastestBoot"),
        objects.machine("booting", "4", "8Gi", desired="On", phase="Booting"),
        objects.machine("quick", "2", "4Gi", boot=60),
        objects.machine("slow", "8", "16Gi", boot=600),
        objects.group("base", minNodes=1),
        objects.machine("base-1", "2", "4Gi", group="base"),
        objects.group("idle"),
        objects.ready_machine("idle-1", "1", "2Gi", group="idle"),
        objects.pod("web-1", "200m", "256Mi", node="idle-1"),  # fits on core next to core-1
        objects.core_node("core", "1500m", "4Gi"),
        objects.daemonset("agent", "100m", "64Mi"),
        # Fits on core, where the scheduler has not retried it yet.
        objects.pod("core-1", "1", "1Gi", pending_since=objects.at(-5)),
        objects.pod("boot-1", "3", "1Gi"),  # fits on the booting machine
        objects.pod("small-1", "1500m", "1Gi"),  # quick's, until slow is needed for big-1 anyway
        objects.pod("big-1", "6", "1Gi"),
        objects.pod("huge-1", "64", "1Gi"),
    ]
    return objects.snap(*items, unneeded_since={objects.mkey("idle-1"): objects.at(-3600)})


def test_plan_changes_none_of_its_inputs_and_gives_the_same_plan_twice() -> None:
    snapshot = _snapshot()
    before = copy.deepcopy(snapshot)
    first = plan(snapshot, objects.T0)
    assert snapshot == before
    second = plan(snapshot, objects.T0)
    assert snapshot == before
    assert first == second
    # Every step decided something, so each had inputs it could have changed.
    assert objects.ons(first) == ["base-1", "slow"]
    assert objects.offs(first) == ["idle-1"]
    assert objects.pod_note(first, "boot-1").startswith("will run on machine booting")
    assert objects.pod_note(first, "core-1").startswith("fits on node core")
    assert objects.pod_note(first, "small-1") == "powering on machine slow for it"
    assert objects.pod_note(first, "huge-1").startswith("no machine could ever host this pod")


def _classes(snapshot: Snapshot) -> list[PodClass]:
    cluster = build_cluster(snapshot, objects.T0)
    classes = (PodClass(i, pod.scheduling, (pod,)) for i, pod in enumerate(cluster.pending))
    return pod_weights(classes, [i.view.allocatable.as_dict() for i in cluster.infos if i.view])


def test_each_scale_up_step_decides_the_same_when_run_twice_on_its_inputs() -> None:
    snapshot = _snapshot()
    cluster = build_cluster(snapshot, objects.T0)
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    classes = tuple(_classes(snapshot))
    room = room_of(cluster)

    absorbed, again = absorb(cluster, classes, room), absorb(cluster, classes, room)
    assert absorbed.notes == again.notes and absorbed.notes
    assert absorbed.coming == again.coming and absorbed.coming
    assert [c.pods for c in absorbed.classes] == [c.pods for c in again.classes]
    assert all(not b.placed for b in (*cluster.ready_bins, *cluster.coming_bins))

    wanting = eligible_classes(absorbed.cluster, absorbed.classes)
    choice, again_choice = (choose(absorbed.cluster, wanting, room, energy) for _ in range(2))
    assert [(c.bin.name, c.pods) for c in choice.chosen] == [
        (c.bin.name, c.pods) for c in again_choice.chosen
    ]
    assert [c.bin.name for c in choice.chosen] == ["slow"]
    assert choice.room == again_choice.room != room
    assert room == room_of(cluster)

    topped = top_up(absorbed.cluster, choice.chosen, choice.room, energy)
    assert topped == top_up(absorbed.cluster, choice.chosen, choice.room, energy)
    assert [info.key for info, _ in topped.machines] == [objects.mkey("base-1")]
    assert topped.room[objects.mkey("base")] == choice.room[objects.mkey("base")] - 1
