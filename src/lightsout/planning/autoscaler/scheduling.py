"""Scheduling simulation: would the kube-scheduler put this pod on this node?

Pure and deliberately partial: it checks what decides whether *capacity* exists — requests
against free allocatable (cpu, memory, pods, extended resources such as nvidia.com/gpu), the
node selector, required node affinity, NoSchedule/NoExecute taints and cordoning. Preferences
(PreferNoSchedule, preferred affinity) cannot stop a pod and are ignored; inter-pod affinity,
topology spread, host ports and volume topology are not simulated (the planner copes with that by
trusting the scheduler's verdict on nodes it has already tried, see
`planning.autoscaler.autoscale`).

`lightsout.planning.autoscaler.autoscale` calls it for every placement it simulates; `lightsout
plan` and the events show its reasons verbatim, so they are written for a person: "insufficient cpu:
needs 6, free 3.5", "node selector gpu=true does not match", "untolerated taint
dedicated=db:NoSchedule".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lightsout.planning.types import STARTUP_TAINT_KEY
from lightsout.state.parse import merge_taints
from lightsout.state.resources import Resources, format_amount
from lightsout.state.types import (
    CoreNode,
    DaemonSet,
    LabelSelector,
    Machine,
    NodeSelectorTerm,
    Pod,
    Requirement,
    SchedulingRequirements,
    Taint,
    Toleration,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Taints the node lifecycle controller and cloud providers set and lift on their own while a
#: node boots or loses contact; a machine that is off or booting will shed them once Ready.
TRANSIENT_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the simulation sees it: a real one, or the one a machine would become."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=Resources)
    requested: Resources = field(default_factory=Resources)
    unschedulable: bool = False

    @property
    def free(self) -> Resources:
        return self.allocatable - self.requested


@dataclass(frozen=True, slots=True)
class FitResult:
    ok: bool
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


def fits(pod: Pod | SchedulingRequirements, view: NodeView) -> FitResult:
    """Whether `pod` fits on `view` now, and if not, every reason why."""
    req = pod.scheduling if isinstance(pod, Pod) else pod
    reasons = [*placement_reasons(req, view), *shortfalls(req.requests, view.free.as_dict())]
    return FitResult(not reasons, tuple(reasons))


def placement_reasons(req: SchedulingRequirements, view: NodeView) -> list[str]:
    """Why the pod may never run on this node whatever its free capacity (empty: it may)."""
    reasons: list[str] = []
    if view.unschedulable and not tolerates(req.tolerations, UNSCHEDULABLE_TAINT):
        reasons.append("node is cordoned (unschedulable)")
    for key, value in req.node_selector:
        if view.labels.get(key) != value:
            reasons.append(f"node selector {key}={value} does not match")
    if req.affinity is not None and not affinity_matches(req.affinity, view.labels, view.name):
        reasons.append(_affinity_reason(req.affinity, view.labels, view.name))
    for taint in view.taints:
        if taint.effect in BLOCKING_EFFECTS and not tolerates(req.tolerations, taint):
            reasons.append(f"untolerated taint {taint}")
    return reasons


def shortfalls(requests: Resources, free: Mapping[str, int]) -> list[str]:
    """One reason per resource the pod needs more of than `free` holds."""
    reasons: list[str] = []
    for name, need in requests:
        have = free.get(name, 0)
        if need > have:
            shown = format_amount(name, max(have, 0))
            reasons.append(f"insufficient {name}: needs {format_amount(name, need)}, free {shown}")
    return reasons


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.key:
            if toleration.key != taint.key:
                continue
        elif toleration.operator != "Exists":
            continue  # an empty key only means "every key" together with Exists
        if toleration.operator == "Exists" or toleration.value == taint.value:
            return True
    return False


def requirement_matches(req: Requirement, value: str | None) -> bool:
    """`value` is the label's (or field's) value, None when the node has no such label."""
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            if value is None or len(req.values) != 1:
                return False
            try:
                have, bound = int(value), int(req.values[0])
            except ValueError:
                return False
            return have > bound if req.operator == "Gt" else have < bound
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], name: str) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # the API: an empty term matches no node
    return all(requirement_matches(r, labels.get(r.key)) for r in term.match_expressions) and all(
        requirement_matches(r, name if r.key == "metadata.name" else None)
        for r in term.match_fields
    )


def affinity_matches(
    terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str], name: str
) -> bool:
    """Required node affinity: the terms are ORed."""
    return any(term_matches(term, labels, name) for term in terms)


def _affinity_reason(
    terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str], name: str
) -> str:
    failing: list[str] = []
    for term in terms:
        checks = [(r, labels.get(r.key)) for r in term.match_expressions]
        checks += [(r, name if r.key == "metadata.name" else None) for r in term.match_fields]
        unmet = (str(r) for r, value in checks if not requirement_matches(r, value))
        failing.append(next(unmet, "empty term"))
    return "required node affinity does not match: " + " or ".join(failing or ["no term"])


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: None selects nothing, an empty one everything."""
    if selector is None:
        return False
    return all(labels.get(k) == v for k, v in selector.match_labels) and all(
        requirement_matches(r, labels.get(r.key)) for r in selector.match_expressions
    )


def view_of_node(node: CoreNode, pods: Iterable[Pod]) -> NodeView:
    """A registered node: its allocatable less what the pods bound to it request."""
    requested: dict[str, int] = {}
    for pod in pods:
        if not pod.terminal:
            for name, value in pod.requests:
                requested[name] = requested.get(name, 0) + value
    return NodeView(
        name=node.name,
        labels=node.labels,
        taints=node.taints,
        allocatable=node.allocatable,
        requested=Resources.of(requested),
        unschedulable=node.unschedulable,
    )


def view_of_machine(
    machine: Machine, daemonsets: Iterable[DaemonSet], node: CoreNode | None = None
) -> NodeView | None:
    """The node `machine` would be once powered on and Ready, before any workload: expected
    (or, once learned, real) allocatable, the labels and taints it gets on registration, and
    the DaemonSet pods that would land on it. None when its capacity is unknown (no
    spec.resources and never registered)."""
    allocatable = node.allocatable if node is not None and node.allocatable.get("cpu") else None
    allocatable = allocatable or machine.resources
    if allocatable is None:
        return None
    labels = {
        **(node.labels if node is not None else {}),
        HOSTNAME_LABEL: machine.kubernetes_node_name,
        **machine.labels,
    }
    kept = [] if node is None else [t for t in node.taints if not _transient(t)]
    bare = NodeView(
        name=machine.kubernetes_node_name,
        labels=labels,
        taints=merge_taints(kept, machine.taints),
        allocatable=allocatable,
    )
    load = daemonset_load(bare, daemonsets)
    if not load:
        return bare  # the planner builds this for every machine on every plan: no copy
    return replace(bare, requested=load)


def daemonset_load(view: NodeView, daemonsets: Iterable[DaemonSet]) -> Resources:
    """What the DaemonSets whose pods would run on `view` request there together."""
    total: dict[str, int] = {}
    for daemonset in daemonsets:
        if not placement_reasons(daemonset.scheduling, view):
            for name, value in daemonset.scheduling.requests:
                total[name] = total.get(name, 0) + value
    return Resources.of(total) if total else Resources()


def _transient(taint: Taint) -> bool:
    # The startup taint goes when the machine is Ready: capacity on its way, not a limit.
    return taint.key.startswith(TRANSIENT_TAINT_PREFIXES) or taint.key == STARTUP_TAINT_KEY


#: What the node lifecycle controller taints a Node with while its Ready condition is not True;
#: it lifts them on its next pass (every few seconds) after the Node turns Ready.
CONDITION_TAINT_KEYS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def starting(node: CoreNode | None) -> bool:
    """The core Node is capacity on its way that no pod can use yet: it carries Lights-Out's
    startup taint (its machine is powering on or has not been labelled yet), or it is Ready
    but the node lifecycle controller has not lifted its `not-ready`/`unreachable` taint yet.
    Counted as nothing for those seconds, a machine that has just come up for an announced run
    would have another powered on for the same run."""
    if node is None:
        return False
    return any(
        t.key == STARTUP_TAINT_KEY or (node.ready and t.key in CONDITION_TAINT_KEYS)
        for t in node.taints
    )
