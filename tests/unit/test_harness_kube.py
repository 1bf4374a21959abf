"""The harness's in-process `kubectl get -o json` (tests/harness/kube.py): which arguments it
maps, how it resolves kubectl's resource names, and kubectl's output shape."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client

from tests.harness.kube import (
    REDISCOVERY,
    UNHANDLED,
    GetArgs,
    Kube,
    Resource,
    ResourceIndex,
    build_index,
    parse_get_args,
    shape_list,
)


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        (("node", "box"), GetArgs("node", "box")),
        (("lsn", "box", "-n", "t-1"), GetArgs("lsn", "box", namespace="t-1")),
        (("cronjob", "-n", "t-1", "nightly"), GetArgs("cronjob", "nightly", namespace="t-1")),
        (
            ("Pods", "--namespace=t-1", "-l", "a=b"),
            GetArgs("pods", namespace="t-1", selector="a=b"),
        ),
        (
            ("events", "-n", "t-1", "--field-selector", "involvedObject.name=box"),
            GetArgs("events", namespace="t-1", field_selector="involvedObject.name=box"),
        ),
        (("nodes.lightsout.dev", "x", "-n", "t"), GetArgs("nodes.lightsout.dev", "x", "t")),
        (("leases", "-n", "t-1"), GetArgs("leases", namespace="t-1")),
    ],
)
def test_mapped_arguments(args: tuple[str, ...], parsed: GetArgs) -> None:
    assert parse_get_args(args) == parsed


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("node/box",),
        ("pods,jobs", "-n", "t"),
        ("pods", "-A"),
        ("pods", "--all-namespaces"),
        ("pod", "a", "b"),
        ("pods", "-n"),
        ("pods", "-n", "a", "-n", "b"),
        ("pod", "a", "-l", "x=y"),
        ("pods", "-o", "yaml"),
        ("pods", "--chunk-size=1"),
        ("pod", ""),
    ],
)
def test_other_arguments_are_left_to_kubectl(args: tuple[str, ...]) -> None:
    assert parse_get_args(args) is None


def _entry(name: str, kind: str, namespaced: bool, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list"], **extra}


CORE = {
    "resources": [
        _entry("nodes", "Node", False, shortNames=["no"], singularName="node"),
        _entry("nodes/status", "Node", False),
        _entry("pods", "Pod", True, shortNames=["po"], singularName=""),
        _entry("events", "Event", True, shortNames=["ev"]),
        _entry("bindings", "Binding", True, verbs=["create"]),
    ]
}
EVENTS = {"resources": [_entry("events", "Event", True, shortNames=["ev"])]}
LIGHTSOUT = {
    "resources": [
        _entry("nodes", "Node", True, shortNames=["lsn"], singularName="node"),
        _entry("groups", "Group", True, shortNames=["lsg"], singularName="group"),
    ]
}
INDEX = build_index(
    [("", "v1", CORE), ("events.k8s.io", "v1", EVENTS), ("lightsout.dev", "v1alpha1", LIGHTSOUT)]
)
CORE_NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
LS_NODES = Resource("lightsout.dev", "v1alpha1", "nodes", "Node", namespaced=True)


@pytest.mark.parametrize(
    ("token", "resource"),
    [
        ("node", CORE_NODES),
        ("nodes", CORE_NODES),
        ("no", CORE_NODES),
        ("lsn", LS_NODES),
        ("nodes.lightsout.dev", LS_NODES),
        ("node.lightsout.dev", LS_NODES),
        ("nodes.v1alpha1.lightsout.dev", LS_NODES),
        ("pod", Resource("", "v1", "pods", "Pod", namespaced=True)),
        ("events", Resource("", "v1", "events", "Event", namespaced=True)),
        ("events.events.k8s.io", Resource("events.k8s.io", "v1", "events", "Event", True)),
        ("lsg", Resource("lightsout.dev", "v1alpha1", "groups", "Group", namespaced=True)),
    ],
)
def test_names_resolve_as_kubectl_resolves_them(token: str, resource: Resource) -> None:
    """The core group first, then the others in discovery's order; subresources and types
    that cannot be listed are not names."""
    assert INDEX.lookup(token) == resource


@pytest.mark.parametrize("token", ["nodes/status", "bindings", "lsx"])
def test_unknown_names_are_not_resolved(token: str) -> None:
    assert INDEX.lookup(token) is None


def test_paths() -> None:
    assert CORE_NODES.path(None, "box") == "/api/v1/nodes/box"
    assert LS_NODES.path("t-1", None) == "/apis/lightsout.dev/v1alpha1/namespaces/t-1/nodes"
    assert LS_NODES.path("t-1", "box") == "/apis/lightsout.dev/v1alpha1/namespaces/t-1/nodes/box"


def test_lists_have_kubectls_shape() -> None:
    items = [{"metadata": {"name": "a", "managedFields": [{}]}, "spec": {}}]
    assert shape_list(LS_NODES, items) == {
        "apiVersion": "v1",
        "items": [
            {
                "apiVersion": "lightsout.dev/v1alpha1",
                "kind": "Node",
                "metadata": {"name": "a"},
                "spec": {},
            }
        ],
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


class CountingKube(Kube):
    """A Kube whose discovery is INDEX, counted."""

    def __init__(self) -> None:
        super().__init__(api=cast(client.ApiClient, None))
        self.discoveries = 0

    def _discover(self) -> ResourceIndex:
        self.discoveries += 1
        return INDEX


def test_discovery_runs_once_and_again_only_for_an_unknown_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("tests.harness.kube.time.monotonic", lambda: now[0])
    kube = CountingKube()
    assert kube.resolve("lsn") == LS_NODES
    assert kube.resolve("node") == CORE_NODES
    assert kube.resolve("lsn") == LS_NODES
    assert kube.discoveries == 1
    assert kube.resolve("lsx") is None, "unknown right after a discovery: kubectl answers"
    assert kube.discoveries == 1
    now[0] += REDISCOVERY + 1
    assert kube.resolve("lsx") is None
    assert kube.discoveries == 2, "a CRD applied since the last discovery is looked for"
    kube.forget()
    assert kube.resolve("lsn") == LS_NODES
    assert kube.discoveries == 3


def test_unmapped_arguments_are_unhandled_without_a_request() -> None:
    kube = CountingKube()
    assert kube.get(("pods", "-A")) is UNHANDLED
    assert kube.discoveries == 0
