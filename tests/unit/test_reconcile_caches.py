"""What one reconcile pass reads from the watch caches: `Caches.view` picks the machine's own
objects out of the indexes (plain dicts of key → objects here, as kopf's indexes are)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.config import OperatorConfig
from lightsout.execution import reconcile as rc
from lightsout.models.group import GroupSpec
from lightsout.state.build import MACHINES_KEY, PODS_KEY

pytestmark = pytest.mark.unit


REDFISH = {"endpoint": "https://bmc", "systemId": "1", "credentialsSecretRef": {"name": "bmc"}}


def machine(name: str, phase: str = "Off", core: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "lab", "resourceVersion": "7"},
        "spec": {
            "group": "g",
            "kubernetesNodeName": core or name,
            "driver": {"redfish": REDFISH},
        },
        "status": {"phase": phase},
    }


def job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "lab"}}


POD = {"metadata": {"name": "pod-1", "labels": {"lightsout.dev/node": "a"}}}
PENDING = {"metadata": {"name": "web-2"}}  # bound to no core Node yet
MOUNT = {"reason": "FailedMount", "message": 'secret "bmc" not found'}


def caches(lease_namespace: str | None = None, phase: str = "Off") -> rc.Caches:
    indexes: dict[str, dict[Any, list[Any]]] = {
        rc.MACHINES: {("lab", "a"): [machine("a", phase, core="core-a")], ("lab", "b"): []},
        rc.MACHINE_REFS: {
            (rc.REF_CORE, "core-a"): [("lab", "a")],
            (rc.REF_GROUP, "lab", "g"): [("lab", "a"), ("lab", "b")],
        },
        rc.GROUPS: {("lab", "g"): [{"metadata": {"name": "g", "namespace": "lab"}}]},
        rc.JOBS: {("lab", "a"): [job("lo-a-startup-g1-a1")], ("lab", "b"): [job("lo-b")]},
        rc.JOB_PODS: {("lab", "lo-a-startup-g1-a1"): [POD]},
        rc.CORE_NODES: {"core-a": [{"metadata": {"name": "core-a"}}]},
        rc.LEASES: {("lab", "lightsout.lab.a"): [{"metadata": {"name": "lightsout.lab.a"}}]},
        rc.PODS: {"core-a": [{"metadata": {"name": "web-1"}}], None: [PENDING]},
        rc.HEALTH: {("lab", "a"): [{"pod": "check-0", "group": "g"}], ("lab", "b"): []},
        rc.MOUNT_FAILURES: {("lab", "pod-1"): [MOUNT], ("lab", "web-1"): [{"reason": "x"}]},
        rc.SECRETS: {("lab", "bmc"): [frozenset({"username", "password"})]},
        rc.CONFIG_MAPS: {},
    }
    config = OperatorConfig(identity="me", lease_namespace=lease_namespace)
    return rc.Caches(indexes, config)


def test_a_view_holds_the_machine_and_only_its_own_objects() -> None:
    view = caches().view("lab", "a")
    assert view is not None
    assert view.node["metadata"]["resourceVersion"] == "7"
    assert view.spec.kubernetes_node_name == "core-a", "its spec, read once"
    assert view.group_spec == GroupSpec(), "its Group's (all defaults)"
    assert [j["metadata"]["name"] for j in view.jobs] == ["lo-a-startup-g1-a1"]
    assert view.job_pods == {"lo-a-startup-g1-a1": [POD]}
    assert view.job_events == {"lo-a-startup-g1-a1": [MOUNT]}, "only its own pods' events"
    assert view.core_node == {"metadata": {"name": "core-a"}}
    assert view.lease == {"metadata": {"name": "lightsout.lab.a"}}
    assert view.lease_cached
    assert view.pods_on_node == (), "pods are only read while the machine drains"
    assert view.health == [{"pod": "check-0", "group": "g"}]


def test_a_draining_machine_sees_the_pods_on_its_core_node() -> None:
    view = caches(phase="Draining").view("lab", "a")
    assert view is not None
    assert [p["metadata"]["name"] for p in view.pods_on_node] == ["web-1"]


def test_a_lease_namespace_of_its_own_is_read_live_not_from_the_cache() -> None:
    view = caches(lease_namespace="leases").view("lab", "a")
    assert view is not None
    assert not view.lease_cached
    assert view.lease is None


def test_a_machine_gone_from_the_cache_has_no_view_and_references_resolve() -> None:
    found = caches()
    assert found.view("lab", "b") is None
    assert found.view("lab", "nope") is None
    assert found.machines_of_group("lab", "g") == [("lab", "a"), ("lab", "b")]
    assert found.machines_on("core-a") == [("lab", "a")]
    assert found.machines_on("core-z") == []


def test_a_spec_the_models_refuse_is_an_error_of_the_view_not_a_pass() -> None:
    found = caches()
    found.indexes[rc.MACHINES][("lab", "a")][0]["spec"]["desiredPowerState"] = "Sideways"
    with pytest.raises(inputs.InvalidSpecError, match="Node lab/a"):
        found.view("lab", "a")


def test_a_mount_failure_finds_the_machine_of_its_pod() -> None:
    found = caches()
    assert found.machine_of_pod("lab", "pod-1") == "a"
    assert found.machine_of_pod("lab", "web-1") is None
    assert found.machine_of_pod("other", "pod-1") is None


def test_a_machine_whose_secret_is_missing_is_left_out_of_its_groups_health_check() -> None:
    found = caches()
    group: dict[str, Any] = {"metadata": {"name": "g", "namespace": "lab"}, "spec": {}}
    node = machine("a")
    node["spec"]["driver"]["redfish"]["credentialsSecretRef"]["name"] = "gone"
    checked = GroupSpec()
    problem = found.health_problem(node, group, checked)
    assert problem is not None and problem.reason == "SecretNotFound"
    assert "credentials Secret lab/gone not found" in problem.message
    node["spec"]["driver"]["redfish"]["credentialsSecretRef"]["name"] = "bmc"
    assert found.health_problem(node, group, checked) is None
    node["spec"]["driver"]["redfish"]["credentialsSecretRef"]["name"] = "gone"
    unchecked = GroupSpec.model_validate({"healthCheck": {"enabled": False}})
    assert found.health_problem(node, group, unchecked) is None
    assert found.health_problem(node, None, None) is None, "no Group, no check"


def test_a_configmap_named_by_a_group_concerns_its_machines() -> None:
    found = caches()
    groups = found.indexes[rc.GROUPS]
    groups[("lab", "g")][0]["spec"] = {"playbooks": {"configMapName": "site"}}
    groups[("lab", "bad")] = [{"metadata": {"name": "bad"}, "spec": {"minNodes": 9, "maxNodes": 1}}]
    assert found.machines_naming(rc.REF_CONFIG_MAP, "lab", "site") == [("lab", "a"), ("lab", "b")]
    assert found.machines_naming(rc.REF_CONFIG_MAP, "lab", "other") == []


def test_the_planner_reads_every_object_of_the_caches_a_pass_reads() -> None:
    """One cache per kind: the drain finds a core Node's pods by its name, the autoscaler's
    planner takes every pod (pending ones too) out of the same index."""
    from lightsout.handlers import autoscale, node

    bound = {"metadata": {"name": "web-1", "managedFields": [{}]}, "spec": {"nodeName": "core-a"}}
    pending = {"metadata": {"name": "web-2"}, "spec": {}}
    pods: dict[Any, list[Any]] = {}
    for body in (bound, pending):
        for key, value in asyncio.run(node.pods(body=body, spec=body["spec"])).items():
            pods.setdefault(key, []).append(value)
    assert list(pods) == ["core-a", None]
    assert pods["core-a"][0]["metadata"] == {"name": "web-1"}, "no managedFields kept"
    indexes = {**caches(phase="Draining").indexes, rc.PODS: pods}
    view = rc.Caches(indexes, OperatorConfig(identity="me")).view("lab", "a")
    assert view is not None and [p["metadata"]["name"] for p in view.pods_on_node] == ["web-1"]
    for index in autoscale.INDEXES.values():
        indexes.setdefault(index, {})
    # No client: copying the caches calls no API.
    objects = autoscale.Planner(OperatorConfig(identity="me"), indexes, api=None).objects()
    assert [p["metadata"]["name"] for p in objects[PODS_KEY]] == ["web-1", "web-2"]
    assert objects[MACHINES_KEY] == [machine("a", "Draining", core="core-a")]
