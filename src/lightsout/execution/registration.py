"""What the core-Node admission webhook does with a kubelet's registration (pure, no I/O).

A kubelet registers by POSTing its Node with its own `--node-labels` and
`--register-with-taints`. When the operator made that Node before power-on, the API server
answers AlreadyExists and the kubelet never applies them (docs/architecture.md, "The core Node
before power-on"). The refused POST still passes through admission first, so the webhook
(`lightsout.handlers.admission`) sees the kubelet's labels and taints and, with the functions
here, either merges them into the existing Node or, when there is no Node yet, adds the
Group's and the machine's labels and taints and the startup taint to the kubelet's object.

Precedence: the Group's and the machine's `spec.labels`/`spec.taints` win over the kubelet's;
the kubelet's win over whatever else the Node carried. Only labels a kubelet may set on its own
Node under the NodeRestriction admission plugin are copied, so the operator's credentials never
launder a label the kubelet could not set itself; taints in `node.kubernetes.io/` belong to the
node lifecycle controller and the startup taint to the operator, so neither is copied.

The admission configurations the operator writes (or the Helm chart, with the same fields) are
built here too: the mutating one sends Node CREATEs and, in the watched namespaces, people's Job
CREATEs (the deferrable-Jobs webhook, `state.admission`); the validating one Group changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightsout.actuation.nodeops import STARTUP_TAINT, has_startup_taint, node_patch, taints_of
from lightsout.execution.jobs import LABEL_MANAGED_BY, MANAGED_BY
from lightsout.planning.types import STARTUP_TAINT_KEY

Obj = Mapping[str, Any]
Taint = dict[str, str]

#: Labels a kubelet may set on its own Node (k8s.io/kubelet/pkg/apis, `IsKubeletLabel`).
KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)
#: Label namespaces (and their subdomains) a kubelet may set labels in.
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"
#: Taints owned by the node lifecycle controller (not-ready, unreachable, unschedulable, …).
CONTROLLER_TAINT_NAMESPACE = "node.kubernetes.io"


def _namespace(key: str) -> str:
    prefix, slash, _ = key.partition("/")
    return prefix if slash else ""


def _in(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def kubelet_may_set(key: str) -> bool:
    """NodeRestriction's rule (plugin/pkg/admission/noderestriction, `getForbiddenLabels`): no
    `node-restriction.kubernetes.io` label, and within `kubernetes.io`/`k8s.io` only the
    kubelet's own labels and namespaces."""
    namespace = _namespace(key)
    if _in(namespace, NODE_RESTRICTION_NAMESPACE):
        return False
    if _in(namespace, "kubernetes.io") or _in(namespace, "k8s.io"):
        return key in KUBELET_LABELS or any(
            _in(namespace, allowed) for allowed in KUBELET_LABEL_NAMESPACES
        )
    return True


def _clean(taint: Obj) -> Taint:
    return {k: str(taint[k]) for k in ("key", "value", "effect") if taint.get(k) is not None}


def _taint_id(taint: Obj) -> tuple[str, str]:
    return (str(taint.get("key", "")), str(taint.get("effect", "")))


def kubelet_metadata(node: Obj) -> tuple[dict[str, str], list[Taint], list[str]]:
    """The labels and taints of a kubelet's Node that may be copied, and the label keys left
    out because a kubelet may not set them."""
    labels = dict((node.get("metadata") or {}).get("labels") or {})
    allowed = {k: str(v) for k, v in labels.items() if kubelet_may_set(k)}
    refused = sorted(k for k in labels if k not in allowed)
    taints = [
        _clean(t)
        for t in taints_of(node)
        if str(t.get("key")) != STARTUP_TAINT_KEY
        and not _in(_namespace(str(t.get("key", ""))), CONTROLLER_TAINT_NAMESPACE)
    ]
    return allowed, taints, refused


def _merged_taints(
    current: Sequence[Obj], kubelet: Sequence[Obj], wanted: Sequence[Obj]
) -> list[Taint]:
    """By (key, effect): the wanted taints over the kubelet's over the current ones."""
    merged: dict[tuple[str, str], Taint] = {}
    for taint in [*current, *kubelet, *wanted]:
        merged[_taint_id(taint)] = _clean(taint)
    return list(merged.values())


def merge_patch(
    existing: Obj,
    kubelet: Obj,
    wanted_labels: Mapping[str, str],
    wanted_taints: Sequence[Obj],
) -> dict[str, Any] | None:
    """The merge patch that gives the existing core Node the kubelet's labels and taints, or
    None when there is nothing to add or the Node is not one waiting for its kubelet.

    Only a Node still carrying the startup taint is merged into (the one the operator made
    before power-on, until the machine is Ready): a kubelet restarting on a running machine
    POSTs its Node too, and there, as without the webhook, its flags change nothing. The patch
    carries the Node's resourceVersion (the taint list is replaced whole)."""
    if not has_startup_taint(existing):
        return None
    labels, taints, _ = kubelet_metadata(kubelet)
    return node_patch(
        existing,
        {k: v for k, v in labels.items() if k not in wanted_labels},
        _merged_taints(taints_of(existing), taints, wanted_taints),
    )


def registration_metadata(
    kubelet: Obj, wanted_labels: Mapping[str, str], wanted_taints: Sequence[Obj]
) -> tuple[dict[str, str], list[Taint]]:
    """No core Node yet: the labels and taints the kubelet's own Node object is created with —
    its own, then the wanted ones over them, plus the startup taint (removed at Ready)."""
    labels = {**((kubelet.get("metadata") or {}).get("labels") or {}), **wanted_labels}
    taints = _merged_taints(taints_of(kubelet), [], [*wanted_taints, STARTUP_TAINT])
    return labels, taints


def _webhook(
    name: str,
    client_config: Mapping[str, Any],
    rule: Mapping[str, Any],
    *,
    side_effects: str,
    timeout_seconds: int,
    namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    """One webhook as the operator's configurations have them: `rule` (CREATEs of v1 unless
    it says otherwise), failurePolicy Ignore, only in the `namespaces` named (all when
    empty)."""
    webhook: dict[str, Any] = {
        "name": name,
        "clientConfig": dict(client_config),
        "rules": [{"apiVersions": ["v1"], "operations": ["CREATE"], **rule}],
        "failurePolicy": "Ignore",
        "sideEffects": side_effects,
        "timeoutSeconds": timeout_seconds,
        "matchPolicy": "Equivalent",
        "admissionReviewVersions": ["v1"],
    }
    if namespaces:
        names = sorted(namespaces)
        webhook["namespaceSelector"] = {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}
            ]
        }
    return webhook


def _configuration(kind: str, name: str, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "webhooks": webhooks,
    }


def jobs_webhook(
    client_config: Mapping[str, Any], *, timeout_seconds: int, namespaces: Sequence[str] = ()
) -> dict[str, Any]:
    """The webhook that sends Job CREATEs to the operator (`handlers.admission`, the
    deferrable-Jobs one), in the `namespaces` it watches (all when empty).

    failurePolicy Ignore: a down or slow operator lets the Job run at once, which never misses
    its deadline. sideEffects None: it only patches the Job it is asked about. Only Jobs without
    the managed-by label, the ones the planner watches (`handlers.autoscale`, with
    `handlers.node.NOT_OURS`): not the operator's own, and none the planner would not see to
    release."""
    rule = {"apiGroups": ["batch"], "resources": ["jobs"], "scope": "Namespaced"}
    return {
        **_webhook(
            "jobs.lightsout.dev",
            client_config,
            rule,
            side_effects="None",
            timeout_seconds=timeout_seconds,
            namespaces=namespaces,
        ),
        "objectSelector": {
            "matchExpressions": [{"key": LABEL_MANAGED_BY, "operator": "DoesNotExist"}]
        },
        "reinvocationPolicy": "Never",
    }


def mutating_webhook_configuration(
    name: str,
    client_config: Mapping[str, Any],
    *,
    timeout_seconds: int,
    jobs_client_config: Mapping[str, Any],
    namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration that sends Node CREATEs (`client_config`) and, in the
    watched `namespaces` (all when empty), Job CREATEs (`jobs_client_config`, `jobs_webhook`)
    to the operator. The core-Node webhook comes first.

    failurePolicy Ignore: a webhook that is down or slow never keeps a kubelet from
    registering (it then registers as without the webhook). NoneOnDryRun: the webhook patches
    the existing Node, so it must be told about dry runs, and does nothing for them."""
    nodes = _webhook(
        "core-nodes.lightsout.dev",
        client_config,
        {"apiGroups": [""], "resources": ["nodes"], "scope": "Cluster"},
        side_effects="NoneOnDryRun",
        timeout_seconds=timeout_seconds,
    )
    jobs = jobs_webhook(jobs_client_config, timeout_seconds=timeout_seconds, namespaces=namespaces)
    return _configuration(
        "MutatingWebhookConfiguration", name, [{**nodes, "reinvocationPolicy": "Never"}, jobs]
    )


def validating_webhook_configuration(
    name: str,
    client_config: Mapping[str, Any],
    *,
    timeout_seconds: int,
    namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends Group CREATEs and UPDATEs to the operator
    (`handlers.admission.group_admitted`), for what CEL cannot check: a window schedule's full
    parse and windows open at once.

    Only the `namespaces` the operator watches (all when empty). failurePolicy Ignore: a down
    operator never blocks editing a Group; it then reads such a Group with its windows ignored
    and says so in the plan, as before the webhook."""
    rule = {
        "apiGroups": ["lightsout.dev"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["groups"],
        "scope": "Namespaced",
    }
    groups = _webhook(
        "groups.lightsout.dev",
        client_config,
        rule,
        side_effects="None",
        timeout_seconds=timeout_seconds,
        namespaces=namespaces,
    )
    return _configuration("ValidatingWebhookConfiguration", name, [groups])
