"""Table tests of the scheduling simulation `lightsout.planning.autoscaler.scheduling`.

Each row is (pod, node) -> the reasons a person reads; an empty list means the pod fits. Pods
and nodes are raw API objects run through `snapshot_from`, as in production.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.planning.autoscaler.scheduling import (
    NodeView,
    fits,
    selector_matches,
    view_of_machine,
    view_of_node,
)
from lightsout.state.resources import Resources
from lightsout.state.types import LabelSelector, Pod, Requirement
from tests.unit.test_autoscale_objects import core_node, daemonset, group, machine, pod, snap

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def _pod(**kw: Any) -> Pod:
    kw.setdefault("cpu", "1")
    kw.setdefault("memory", "1Gi")
    (only,) = snap(pod("p-1", kw.pop("cpu"), kw.pop("memory"), **kw)).pods
    return only


def _node(**kw: Any) -> NodeView:
    bound = kw.pop("bound", [])
    (node,) = snap(core_node("n1", **kw)).nodes
    return view_of_node(node, [_pod(**b) for b in bound])


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def _terms(
    *terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        out.append({"matchFields": fields})
    return out


TAINT_DB = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}

CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("fits", {}, {}, []),
    (
        "cpu",
        {"cpu": "6"},
        {"cpu": "4", "bound": [{"cpu": "500m", "node": "n1"}]},
        ["insufficient cpu: needs 6, free 3.5"],
    ),
    (
        "memory",
        {"memory": "12Gi"},
        {"memory": "8Gi"},
        ["insufficient memory: needs 12Gi, free 8Gi"],
    ),
    (
        "both",
        {"cpu": "5", "memory": "9Gi"},
        {},
        ["insufficient cpu: needs 5, free 4", "insufficient memory: needs 9Gi, free 8Gi"],
    ),
    (
        "pods limit",
        {},
        {"pods": 1, "bound": [{"node": "n1"}]},
        ["insufficient pods: needs 1, free 0"],
    ),
    ("gpu missing", {"extended": {GPU: 1}}, {}, [f"insufficient {GPU}: needs 1, free 0"]),
    ("gpu present", {"extended": {GPU: 1}}, {"extended": {GPU: "2"}}, []),
    (
        "gpu taken",
        {"extended": {GPU: 2}},
        {"extended": {GPU: "2"}, "bound": [{"extended": {GPU: 1}, "node": "n1"}]},
        [f"insufficient {GPU}: needs 2, free 1"],
    ),
    ("selector", {"selector": {"gpu": "true"}}, {}, ["node selector gpu=true does not match"]),
    ("selector ok", {"selector": {"gpu": "true"}}, {"labels": {"gpu": "true"}}, []),
    (
        "In",
        {"affinity": _terms([_expr("zone", "In", "a", "b")])},
        {"labels": {"zone": "c"}},
        ["required node affinity does not match: zone In [a, b]"],
    ),
    ("In ok", {"affinity": _terms([_expr("zone", "In", "a", "b")])}, {"labels": {"zone": "b"}}, []),
    (
        "NotIn",
        {"affinity": _terms([_expr("zone", "NotIn", "c")])},
        {"labels": {"zone": "c"}},
        ["required node affinity does not match: zone NotIn [c]"],
    ),
    ("NotIn absent", {"affinity": _terms([_expr("zone", "NotIn", "c")])}, {}, []),
    (
        "Exists",
        {"affinity": _terms([_expr("ssd", "Exists")])},
        {},
        ["required node affinity does not match: ssd Exists"],
    ),
    (
        "DoesNotExist",
        {"affinity": _terms([_expr("spot", "DoesNotExist")])},
        {"labels": {"spot": ""}},
        ["required node affinity does not match: spot DoesNotExist"],
    ),
    ("Gt", {"affinity": _terms([_expr("cores", "Gt", "8")])}, {"labels": {"cores": "16"}}, []),
    (
        "Gt fails",
        {"affinity": _terms([_expr("cores", "Gt", "8")])},
        {"labels": {"cores": "8"}},
        ["required node affinity does not match: cores Gt 8"],
    ),
    ("Lt", {"affinity": _terms([_expr("gen", "Lt", "3")])}, {"labels": {"gen": "2"}}, []),
    (
        "Gt not a number",
        {"affinity": _terms([_expr("cores", "Gt", "8")])},
        {"labels": {"cores": "many"}},
        ["required node affinity does not match: cores Gt 8"],
    ),
    (
        "terms are ORed",
        {"affinity": _terms([_expr("zone", "In", "x")], [_expr("ssd", "Exists")])},
        {"labels": {"ssd": "1"}},
        [],
    ),
    (
        "expressions are ANDed",
        {"affinity": _terms([_expr("zone", "In", "a"), _expr("ssd", "Exists")])},
        {"labels": {"zone": "a"}},
        ["required node affinity does not match: ssd Exists"],
    ),
    ("matchFields name", {"affinity": _terms(fields=[_expr("metadata.name", "In", "n1")])}, {}, []),
    (
        "matchFields other",
        {"affinity": _terms(fields=[_expr("metadata.name", "In", "n2")])},
        {},
        ["required node affinity does not match: metadata.name In [n2]"],
    ),
    ("empty term", {"affinity": [{}]}, {}, ["required node affinity does not match: empty term"]),
    ("taint", {}, {"taints": [TAINT_DB]}, ["untolerated taint dedicated=db:NoSchedule"]),
    (
        "taint tolerated",
        {"tolerations": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
        {"taints": [TAINT_DB]},
        [],
    ),
    (
        "wrong value",
        {"tolerations": [{"key": "dedicated", "value": "web"}]},
        {"taints": [TAINT_DB]},
        ["untolerated taint dedicated=db:NoSchedule"],
    ),
    (
        "wrong effect",
        {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]},
        {"taints": [TAINT_DB]},
        ["untolerated taint dedicated=db:NoSchedule"],
    ),
    (
        "key Exists",
        {"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
        {"taints": [TAINT_DB]},
        [],
    ),
    ("tolerate all", {"tolerations": [{"operator": "Exists"}]}, {"taints": [TAINT_DB]}, []),
    (
        "NoExecute",
        {},
        {"taints": [{"key": "k", "effect": "NoExecute"}]},
        ["untolerated taint k:NoExecute"],
    ),
    ("PreferNoSchedule ignored", {}, {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}, []),
    ("cordoned", {}, {"unschedulable": True}, ["node is cordoned (unschedulable)"]),
    (
        "cordon tolerated",
        {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
        {"unschedulable": True},
        [],
    ),
]


@pytest.mark.parametrize(
    ("pod_kw", "node_kw", "reasons"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_fits(pod_kw: dict[str, Any], node_kw: dict[str, Any], reasons: list[str]) -> None:
    result = fits(_pod(**pod_kw), _node(**node_kw))
    assert list(result.reasons) == reasons
    assert result.ok is (not reasons)
    assert bool(result) is result.ok


def test_finished_pods_hold_no_room() -> None:
    done = [{"cpu": "4", "node": "n1", "phase": "Succeeded"}]
    assert fits(_pod(cpu="4"), _node(bound=done)).ok


def test_a_powered_off_machine_looks_like_its_expected_node_less_daemonsets() -> None:
    snapshot = snap(
        group(
            labels={"site": "home"}, taints=[{"key": "lab", "value": "yes", "effect": "NoSchedule"}]
        ),
        machine("m1", "8", "16Gi", labels={"disk": "ssd"}, extended={GPU: 1}),
        daemonset("agent", "500m", "256Mi", tolerations=[{"operator": "Exists"}]),
        daemonset("gpu-agent", "250m", "128Mi", nodeSelector={"gpu": "true"}),
        daemonset("picky-agent", "1", "1Gi"),  # does not tolerate the group's taint
    )
    view = view_of_machine(snapshot.machines[0], snapshot.daemonsets)
    assert view is not None
    assert view.name == "m1"
    assert view.labels == {
        "kubernetes.io/hostname": "m1",
        "site": "home",
        "disk": "ssd",
        "lightsout.dev/node": "m1",
        "lightsout.dev/group": "lab",
    }
    assert [str(t) for t in view.taints] == ["lab=yes:NoSchedule"]
    assert view.free == Resources.of(
        {"cpu": 7500, "memory": 15 * 2**30 + 768 * 2**20, "pods": 109, GPU: 1}
    )


def test_a_machine_with_a_kept_core_node_uses_its_real_allocatable_and_drops_transient_taints() -> (
    None
):
    snapshot = snap(
        machine("m1", "8", "16Gi"),
        core_node(
            "m1",
            "7",
            "15Gi",
            ready=False,
            labels={"kubernetes.io/arch": "amd64"},
            taints=[
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "owner", "value": "me", "effect": "NoSchedule"},
            ],
        ),
    )
    view = view_of_machine(snapshot.machines[0], (), snapshot.nodes[0])
    assert view is not None
    assert view.allocatable.get("cpu") == 7000
    assert view.labels["kubernetes.io/arch"] == "amd64"
    assert [str(t) for t in view.taints] == ["owner=me:NoSchedule"]


def test_a_machine_without_resources_or_node_has_no_view() -> None:
    snapshot = snap(machine("m1", resources=False))
    assert view_of_machine(snapshot.machines[0], ()) is None


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"app": "web"}, False),
        (LabelSelector(), {"app": "web"}, True),
        (LabelSelector((("app", "web"),)), {"app": "web"}, True),
        (LabelSelector((("app", "web"),)), {"app": "db"}, False),
        (LabelSelector((), (Requirement("tier", "In", ("a", "b")),)), {"tier": "b"}, True),
        (LabelSelector((), (Requirement("tier", "NotIn", ("a",)),)), {}, True),
        (LabelSelector((), (Requirement("tier", "Exists"),)), {}, False),
    ],
)
def test_pdb_selectors(
    selector: LabelSelector | None, labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(selector, labels) is expected
