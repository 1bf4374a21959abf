"""The labels and taints a machine's core Node carries are said once (`state.corenode`): what the
operator applies (`actuation.inputs.wanted_metadata`) is what the planner's machine, its view
of a machine that is off, and the replay's machine and core Node carry."""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.planning.autoscaler.scheduling import view_of_machine
from lightsout.simulate.replay.engine import Options, Simulator
from lightsout.state.build import GROUPS_KEY, MACHINES_KEY, snapshot_from
from lightsout.state.corenode import GROUP_LABEL, NODE_LABEL
from lightsout.state.parse import parse_taints
from tests.unit import test_autoscale_objects as objects
from tests.unit.test_simulate import group, node, trace

pytestmark = pytest.mark.unit

GROUP_LABELS = {"site": "home", "zone": "a"}
GROUP_TAINTS = [
    {"key": "lab", "effect": "NoSchedule"},
    {"key": "power", "value": "group", "effect": "NoExecute"},
]
MACHINE_LABELS = {"zone": "b", "disk": "ssd"}
MACHINE_TAINTS = [{"key": "power", "value": "machine", "effect": "NoExecute"}]


def _machine() -> dict[str, Any]:
    box = node("m1")
    box["spec"] |= {"labels": MACHINE_LABELS, "taints": MACHINE_TAINTS}
    return box


def test_the_live_planner_and_replay_paths_agree_on_a_machines_node_metadata() -> None:
    rack, box = group(labels=GROUP_LABELS, taints=GROUP_TAINTS), _machine()
    # Live: what the operator puts on the core Node (before power-on, at registration, at Ready).
    labels, taints = inputs.wanted_metadata(box, inputs.node_spec(box), inputs.group_spec(rack))
    assert labels == {
        "site": "home",
        "zone": "b",
        "disk": "ssd",
        NODE_LABEL: "m1",
        GROUP_LABEL: "lab",
    }
    assert taints == [
        {"key": "lab", "effect": "NoSchedule"},
        {"key": "power", "value": "machine", "effect": "NoExecute"},
    ]
    wanted = parse_taints(taints)
    # The planner's machine, and its view of it while it is off (no core Node).
    (machine,) = snapshot_from({GROUPS_KEY: [rack], MACHINES_KEY: [box]}).machines
    assert (dict(machine.labels), machine.taints) == (labels, wanted)
    view = view_of_machine(machine, ())
    assert view is not None
    assert (dict(view.labels), view.taints) == ({"kubernetes.io/hostname": "m1", **labels}, wanted)
    # The replay: the machine its plans see and the core Node its scheduler places pods on.
    sim = Simulator(trace([], machines=[box], labels=GROUP_LABELS, taints=GROUP_TAINTS), Options())
    (replayed,) = sim.machines.values()
    assert (dict(replayed.as_machine().labels), replayed.as_machine().taints) == (labels, wanted)
    core = replayed.as_core_node()
    assert (dict(core.labels), core.taints) == ({"kubernetes.io/hostname": "m1", **labels}, wanted)


def test_a_pod_selecting_a_machine_by_its_node_label_powers_that_one_on() -> None:
    # The label is on the view of a machine that is off, and (unlike the hostname) a pod
    # selecting by it keeps the machines' shapes apart in the placement cache.
    result = objects.run(
        objects.group(),
        objects.machine("a", watts=(60, 30, 1)),
        objects.machine("b", watts=(60, 30, 1)),
        objects.pod("web-1", selector={NODE_LABEL: "b"}),
    )
    assert objects.ons(result) == ["b"]
    grouped = objects.run(
        objects.group(),
        objects.group("other"),
        objects.machine("a", watts=(60, 30, 1)),
        objects.machine("b", group="other", watts=(60, 30, 1)),
        objects.pod("web-1", selector={GROUP_LABEL: "other"}),
    )
    assert objects.ons(grouped) == ["b"]
