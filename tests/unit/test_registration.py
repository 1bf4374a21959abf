"""The core-Node webhook's rules (`execution.registration`): which of a kubelet's labels and
taints may be copied, how they merge into the Node made before power-on (the Group's and the
machine's win), and the labels and taints a kubelet's own object gets when no Node exists."""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.actuation.nodeops import STARTUP_TAINT
from lightsout.execution import registration as reg

WANTED_LABELS = {"example.com/pool": "gpu", "lightsout.dev/node": "box"}
WANTED_TAINTS = [{"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}]


def _node(labels: dict[str, str], taints: list[dict[str, str]], version: str = "") -> Any:
    meta: dict[str, Any] = {"name": "box", "labels": labels}
    if version:
        meta["resourceVersion"] = version
    return {"metadata": meta, "spec": {"taints": taints}}


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("example.com/rack", True),
        ("plain", True),
        ("kubernetes.io/hostname", True),
        ("topology.kubernetes.io/zone", True),
        ("node.kubernetes.io/instance-type", True),
        ("node.kubernetes.io/anything", True),
        ("foo.kubelet.kubernetes.io/x", True),
        ("node-restriction.kubernetes.io/x", False),
        ("a.node-restriction.kubernetes.io/x", False),
        ("node-role.kubernetes.io/worker", False),
        ("kubernetes.io/made-up", False),
        ("k8s.io/x", False),
        ("sub.k8s.io/x", False),
        ("notkubernetes.io/x", True),
    ],
)
def test_kubelet_may_set_follows_node_restriction(key: str, allowed: bool) -> None:
    assert reg.kubelet_may_set(key) is allowed


def test_kubelet_metadata_leaves_out_forbidden_labels_and_controller_taints() -> None:
    kubelet = _node(
        {"example.com/a": "1", "node-restriction.kubernetes.io/x": "1", "kubernetes.io/os": "l"},
        [
            {"key": "example.com/t", "value": "v", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            dict(STARTUP_TAINT),
        ],
    )
    labels, taints, refused = reg.kubelet_metadata(kubelet)
    assert labels == {"example.com/a": "1", "kubernetes.io/os": "l"}
    assert taints == [{"key": "example.com/t", "value": "v", "effect": "NoSchedule"}]
    assert refused == ["node-restriction.kubernetes.io/x"]


def test_merge_adds_the_kubelets_labels_and_taints_and_the_wanted_ones_win() -> None:
    existing = _node(
        {**WANTED_LABELS, "example.com/other": "old"}, [*WANTED_TAINTS, dict(STARTUP_TAINT)], "7"
    )
    kubelet = _node(
        {
            "example.com/pool": "cpu",  # conflicts with the Group's: the Group wins
            "example.com/other": "new",  # not the Group's: the kubelet's value wins
            "example.com/kubelet": "yes",
            "node-role.kubernetes.io/evil": "",
        },
        [
            {"key": "example.com/dedicated", "value": "none", "effect": "NoSchedule"},
            {"key": "example.com/kt", "value": "1", "effect": "NoExecute"},
        ],
    )
    patch = reg.merge_patch(existing, kubelet, WANTED_LABELS, WANTED_TAINTS)
    assert patch is not None
    assert patch["metadata"] == {
        "labels": {"example.com/other": "new", "example.com/kubelet": "yes"},
        "resourceVersion": "7",
    }
    taints = patch["spec"]["taints"]
    assert WANTED_TAINTS[0] in taints and dict(STARTUP_TAINT) in taints
    assert {"key": "example.com/kt", "value": "1", "effect": "NoExecute"} in taints
    assert len(taints) == 3


def test_merge_is_idempotent_and_skips_a_node_without_the_startup_taint() -> None:
    kubelet = _node({"example.com/kubelet": "yes"}, [])
    merged = _node({**WANTED_LABELS, "example.com/kubelet": "yes"}, [dict(STARTUP_TAINT)])
    assert reg.merge_patch(merged, kubelet, WANTED_LABELS, []) is None
    # A kubelet restarting on a running machine (its Node Ready, the startup taint gone):
    # its flags change nothing, as without the webhook.
    running = _node(dict(WANTED_LABELS), [])
    assert reg.merge_patch(running, kubelet, WANTED_LABELS, []) is None


def test_no_node_yet_the_kubelets_object_gets_the_wanted_metadata_and_the_startup_taint() -> None:
    kubelet = _node(
        {"example.com/pool": "cpu", "example.com/kubelet": "yes"},
        [{"key": "example.com/dedicated", "value": "none", "effect": "NoSchedule"}],
    )
    labels, taints = reg.registration_metadata(kubelet, WANTED_LABELS, WANTED_TAINTS)
    assert labels == {**WANTED_LABELS, "example.com/kubelet": "yes"}
    assert taints == [WANTED_TAINTS[0], dict(STARTUP_TAINT)]


def test_webhook_configuration_never_blocks_a_kubelet_and_skips_dry_runs() -> None:
    body = reg.mutating_webhook_configuration(
        "lightsout-core-nodes",
        {"url": "https://127.0.0.1:9443/core-nodes"},
        timeout_seconds=5,
        jobs_client_config={"url": "https://127.0.0.1:9443/deferrable-jobs"},
    )
    hook, _jobs = body["webhooks"]  # the Jobs one: tests/unit/test_deferrable_admission.py
    assert hook["name"] == "core-nodes.lightsout.dev"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert hook["timeoutSeconds"] == 5
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert hook["rules"][0]["resources"] == ["nodes"]
