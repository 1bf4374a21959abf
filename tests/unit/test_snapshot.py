"""`snapshot_from`: raw API objects into the planner's frozen snapshot, garbage included.

Request math follows the scheduler (init containers, sidecars, overhead, limits as default
requests); Lights-Out defaults come from the API models; nothing an API server or a hand-made
object might hold makes the builder raise.
"""

from __future__ import annotations

import copy
import random
from types import MappingProxyType
from typing import Any

import pytest

from lightsout.models.enums import Autoscaler, DesiredPowerState, Phase, SelectionPolicy
from lightsout.state.build import (
    DAEMONSETS_KEY,
    GROUPS_KEY,
    MACHINES_KEY,
    PDBS_KEY,
    PODS_KEY,
    snapshot_from,
)
from lightsout.state.parse import dig
from lightsout.state.resources import Resources, format_amount, parse_amount
from lightsout.state.types import UNNEEDED_SINCE, ObjectKey, Taint
from tests.unit.test_autoscale_objects import (
    NS,
    at,
    core_node,
    daemonset,
    group,
    machine,
    mkey,
    pdb,
    pod,
    snap,
    ts,
)

pytestmark = pytest.mark.unit


def test_dig_reads_any_mapping_as_a_dict_and_stops_at_anything_else() -> None:
    obj = {"spec": MappingProxyType({"driver": {"redfish": {"systemId": "7"}}}), "items": [1]}
    assert dig(obj, "spec", "driver", "redfish", "systemId") == "7"
    assert dig(obj, "spec", "driver", "wol") is None
    assert dig(obj, "items", "0") is None
    assert dig("garbage", "spec") is None
    assert dig(obj) is obj


Mi, Gi = 2**20, 2**30


def _requests(spec: dict[str, Any]) -> Resources:
    obj = pod("p-1")
    obj["spec"] = spec
    (only,) = snap(obj).pods
    return only.requests


def _c(cpu: str | None = None, memory: str | None = None, **kw: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **kw}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"containers": [_c("500m", "1Gi"), _c("500m", "1Gi")]},
            {"cpu": 1000, "memory": 2 * Gi},
            id="sum of containers",
        ),
        pytest.param(
            {"containers": [_c("500m", "1Gi")], "initContainers": [_c("2", "256Mi")]},
            {"cpu": 2000, "memory": Gi},
            id="largest init container wins per resource",
        ),
        pytest.param(
            {
                "containers": [_c("500m", "1Gi")],
                "initContainers": [_c("1"), _c("3")],
                "overhead": {"cpu": "100m", "memory": "64Mi"},
            },
            {"cpu": 3100, "memory": Gi + 64 * Mi},
            id="init containers run one at a time; overhead is added",
        ),
        pytest.param(
            {
                "containers": [_c("1", "1Gi")],
                "initContainers": [_c("200m", "128Mi", restartPolicy="Always"), _c("2", "1Gi")],
            },
            {"cpu": 2200, "memory": Gi + 128 * Mi},
            id="a sidecar adds to the containers and to later init containers",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]},
            {"cpu": 2000, "memory": Gi},
            id="limits stand in for missing requests",
        ),
        pytest.param(
            {
                "containers": [
                    _c("100m"),
                    {
                        "name": "g",
                        "resources": {
                            "requests": {"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}
                        },
                    },
                ]
            },
            {"cpu": 100, "nvidia.com/gpu": 1, "ephemeral-storage": Gi},
            id="extended resources and ephemeral storage",
        ),
        pytest.param(
            {"containers": [_c("0.1m")]}, {"cpu": 1}, id="fractions of a millicore round up"
        ),
        pytest.param(
            {"containers": [_c("lots", "1Gi")]},
            {"memory": Gi},
            id="an unreadable quantity is skipped",
        ),
        pytest.param({}, {}, id="no containers"),
    ],
)
def test_effective_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert _requests(spec) == Resources.of({**expected, "pods": 1})


def test_a_pending_unschedulable_pod_and_its_facts() -> None:
    obj = pod(
        "web-1",
        pending_since=at(-30),
        selector={"disk": "ssd"},
        tolerations=[{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Bogus"}],
        annotations={"lightsout.dev/do-not-disrupt": "true"},
        affinity=[
            {
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}],
            },
            {"matchExpressions": [{"key": "zone", "operator": "Sideways"}]},
        ],
    )
    (p,) = snap(obj).pods
    assert p.key == ObjectKey("apps", "web-1")
    assert p.pending_unschedulable
    assert p.unschedulable_since == at(-30)
    assert p.created == at(-3600)
    assert p.owner_kind == "ReplicaSet"
    assert p.do_not_disrupt == "lightsout.dev/do-not-disrupt=true"
    assert not p.mirror and not p.daemonset
    assert p.scheduling.node_selector == (("disk", "ssd"),)
    assert [t.key for t in p.scheduling.tolerations] == ["a"]  # the bogus operator is dropped
    assert p.scheduling.affinity is not None
    (term,) = p.scheduling.affinity  # the unreadable term is dropped
    assert [str(r) for r in term.match_expressions] == ["zone In [a]"]
    assert [str(r) for r in term.match_fields] == ["metadata.name NotIn [n9]"]


def test_bound_daemonset_and_mirror_pods() -> None:
    (ds,) = snap(pod("agent-1", node="n1", owner="DaemonSet")).pods
    assert ds.daemonset and ds.node_name == "n1" and not ds.pending_unschedulable
    (mirror,) = snap(
        pod("etcd-1", node="n1", owner="Node", annotations={"kubernetes.io/config.mirror": "h"})
    ).pods
    assert mirror.mirror
    (bare,) = snap(pod("bare-1", node="n1", owner=None)).pods
    assert bare.owner_kind is None
    assert (bare.owner_name, bare.started) == (None, None)


def test_a_running_job_pod_names_its_job_and_when_it_started() -> None:
    obj = pod("build-7-x2k", node="n1", owner="Job")
    obj["metadata"]["ownerReferences"][0]["name"] = "build-7"
    obj["status"]["startTime"] = ts(at(-90))
    (p,) = snap(obj).pods
    assert (p.owner_kind, p.owner_name, p.started) == ("Job", "build-7", at(-90))


def test_core_nodes() -> None:
    obj = core_node(
        "n1",
        "4",
        "8Gi",
        labels={"a": "b"},
        taints=[
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            {"key": "x", "effect": "Weird"},
        ],
        unschedulable=True,
        ready_since=at(-5),
    )
    (n,) = snap(obj).nodes
    assert n.ready and n.unschedulable and n.ready_since == at(-5)
    assert n.taints == (Taint("k", "v", "NoSchedule"),)
    assert n.allocatable == Resources.of({"cpu": 4000, "memory": 8 * Gi, "pods": 110})
    (down,) = snap(core_node("n2", ready=False)).nodes
    assert not down.ready


def test_groups_take_the_models_defaults() -> None:
    (g,) = snap(group()).groups
    assert (g.min_nodes, g.max_nodes, g.autoscaler, g.dry_run) == (0, 10, Autoscaler.BUILTIN, False)
    assert g.selection_policy is SelectionPolicy.LOWEST_ENERGY
    assert (g.scale_up.stabilization_seconds, g.scale_up.max_concurrent) == (0, 2)
    down = g.scale_down
    assert (down.enabled, down.unneeded_seconds, down.utilization_threshold) == (True, None, 0.5)
    assert (down.stabilization_seconds, down.max_concurrent) == (300, 1)
    assert g.last_scale_up is None and g.price_per_kwh is None


def test_a_group_field_that_does_not_validate_falls_back_to_its_default_alone() -> None:
    obj = group(
        minNodes=2,
        maxNodes=5,
        scaleDown={"utilizationThreshold": 7},
        selectionPolicy="Cheapest",
        electricity={"pricePerKWh": 0.3},
    )
    snapshot = snap(obj)
    (g,) = snapshot.groups
    assert (g.min_nodes, g.max_nodes, g.price_per_kwh) == (2, 5, 0.3)
    assert g.scale_down.utilization_threshold == 0.5
    assert g.selection_policy is SelectionPolicy.LOWEST_ENERGY
    assert any("scaleDown" in p and "selectionPolicy" in p for p in snapshot.problems)


def test_machines_merge_their_groups_labels_and_taints() -> None:
    snapshot = snap(
        group(
            labels={"site": "home", "disk": "hdd"},
            taints=[
                {"key": "lab", "effect": "NoSchedule"},
                {"key": "t", "value": "g", "effect": "NoExecute"},
            ],
        ),
        machine(
            "m1",
            "8",
            "16Gi",
            desired="On",
            phase="Booting",
            watts=(120, 60, 2),
            priority=5,
            boot=300,
            labels={"disk": "ssd"},
            taints=[{"key": "t", "value": "m", "effect": "NoExecute"}],
            extended={"nvidia.com/gpu": 2},
        ),
    )
    (m,) = snapshot.machines
    assert m.key == mkey("m1") and m.group_key == ObjectKey(NS, "lab")
    assert (m.phase, m.desired) == (Phase.BOOTING, DesiredPowerState.ON)
    assert m.labels == {
        "site": "home",
        "disk": "ssd",
        "lightsout.dev/node": "m1",
        "lightsout.dev/group": "lab",
    }
    assert m.taints == (Taint("lab", "", "NoSchedule"), Taint("t", "m", "NoExecute"))
    assert (m.watts_on, m.watts_idle, m.watts_off, m.priority, m.boot_seconds) == (
        120,
        60,
        2,
        5,
        300,
    )
    assert m.resources == Resources.of(
        {"cpu": 8000, "memory": 16 * Gi, "pods": 110, "nvidia.com/gpu": 2}
    )
    assert m.phase_since == at(-3600)


def test_a_machine_with_an_unknown_phase_or_unreadable_resources_degrades() -> None:
    obj = machine("m1")
    obj["status"]["phase"] = "Levitating"
    obj["spec"]["resources"] = {"cpu": "many"}
    snapshot = snap(obj)
    (m,) = snapshot.machines
    assert m.phase is Phase.UNKNOWN and m.resources is None
    assert any("spec.resources unreadable" in p for p in snapshot.problems)


def test_pdbs_and_daemonsets() -> None:
    snapshot = snap(
        pdb("web", {"app": "web"}, 0),
        pdb("db", {"app": "db"}, None),
        daemonset("agent", "100m", "64Mi"),
    )
    allowed = {b.key.name: b.disruptions_allowed for b in snapshot.disruption_budgets}
    assert allowed == {"web": 0, "db": None}
    (ds,) = snapshot.daemonsets
    assert ds.scheduling.requests == Resources.of({"cpu": 100, "memory": 64 * Mi, "pods": 1})


def test_completeness_is_the_callers_word_and_unneeded_times_persist() -> None:
    obj = machine("m1")
    obj["metadata"]["annotations"] = {UNNEEDED_SINCE: ts(at(-100))}
    assert not snapshot_from({MACHINES_KEY: [obj]}).complete
    assert snapshot_from({MACHINES_KEY: [obj]}).unneeded_since == {mkey("m1"): at(-100)}
    given = snapshot_from({MACHINES_KEY: [obj]}, complete=True, unneeded_since={mkey("m1"): at(-5)})
    assert given.complete
    assert given.unneeded_since == {mkey("m1"): at(-5)}


GARBAGE: list[Any] = [
    None,
    7,
    -1,
    "x",
    "",
    [],
    {},
    [1, "a"],
    {"a": None},
    True,
    1.5,
    "-3Gi",
    {"key": 1},
]


def _mutations(obj: Any, rng: random.Random, count: int) -> list[Any]:
    """Copies of `obj` with one random subtree replaced by garbage each."""
    paths: list[tuple[Any, ...]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*path, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, (*path, i))

    walk(obj, ())
    out = []
    for _ in range(count):
        path = rng.choice(paths[1:])
        mutated = copy.deepcopy(obj)
        parent = mutated
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = rng.choice(GARBAGE)
        out.append(mutated)
    return out


def test_garbage_degrades_the_snapshot_and_never_raises() -> None:
    rng = random.Random(20260301)  # noqa: S311 - reproducible data, not secrets
    valid = [
        pod(
            "web-1",
            pending_since=at(-5),
            selector={"a": "b"},
            tolerations=[{"key": "k", "operator": "Exists"}],
            affinity=[{"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}],
        ),
        pod("web-2", node="n1", initContainers=[_c("1", "1Gi")], overhead={"cpu": "1"}),
        core_node("n1", taints=[{"key": "k", "effect": "NoSchedule"}]),
        machine(
            "m1",
            watts=(10, 5, 1),
            labels={"a": "b"},
            taints=[{"key": "k", "effect": "NoSchedule"}],
            extended={"x.io/y": 1},
        ),
        group(
            minNodes=1, scaleDown={"unneededSeconds": 60}, labels={"a": "b"}, last_scale_up=at(-5)
        ),
        pdb("p", {"a": "b"}, 1),
        daemonset("d", "1", "1Gi", tolerations=[{"operator": "Exists"}]),
    ]
    for obj in valid:
        (kind,) = [k for k, v in vars(snap(obj)).items() if v and isinstance(v, tuple)]
        key = {
            "pods": PODS_KEY,
            "nodes": "nodes",
            "machines": MACHINES_KEY,
            "groups": GROUPS_KEY,
            "disruption_budgets": PDBS_KEY,
            "daemonsets": DAEMONSETS_KEY,
        }[kind]
        for mutated in _mutations(obj, rng, 80):
            snapshot_from({key: [mutated]}, complete=True)  # must not raise
    broken = snapshot_from(
        {
            PODS_KEY: [None, {"metadata": {}}, "pod"],
            MACHINES_KEY: 5,
            "nodes": [{"metadata": {"name": 3}}],
        }
    )
    assert broken.pods == () and broken.machines == () and broken.nodes == ()
    assert len(broken.problems) == 4


@pytest.mark.parametrize(
    ("name", "text", "amount", "shown"),
    [
        ("cpu", "3500m", 3500, "3.5"),
        ("cpu", "2", 2000, "2"),
        ("cpu", "250m", 250, "0.25"),
        ("memory", "1536Mi", 1536 * Mi, "1.5Gi"),
        ("memory", "1G", 10**9, "953.67Mi"),
        ("nvidia.com/gpu", "1", 1, "1"),
        ("pods", 110, 110, "110"),
    ],
)
def test_amounts_round_trip_into_words(name: str, text: Any, amount: int, shown: str) -> None:
    assert parse_amount(name, text) == amount
    assert format_amount(name, amount) == shown


def test_unparseable_amounts_are_none() -> None:
    assert parse_amount("cpu", "lots") is None
    assert parse_amount("cpu", True) is None
    assert parse_amount("cpu", None) is None
    assert parse_amount("memory", float("nan")) is None


def test_resources_arithmetic() -> None:
    a = Resources.of({"cpu": 1000, "memory": 5})
    b = Resources.of({"cpu": 1000, "pods": 1})
    assert a - b == Resources.of({"memory": 5, "pods": -1})
    assert (a + b).get("cpu") == 2000
    assert str(Resources()) == "nothing"
