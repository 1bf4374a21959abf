"""The labels and taints a machine's core Node carries, said in one place (`core_node_metadata`).

The operator applies them (`actuation.inputs.wanted_metadata`: before power-on, at
registration, at Ready); the planner's and the replay's machine (`Machine.labels`/`taints`,
built by `state.build`) is the core Node it would become, so the view of a machine that is off
(`planning.autoscaler.scheduling.view_of_machine`), cluster-autoscaler's template node
(`planning.autoscaler.nodegroups`) and the replay's core Node are what the live Node carries.
The kubelet's own labels (`kubernetes.io/hostname`, ...) and the operator's startup taint
(`planning.types.STARTUP_TAINT_KEY`, there only until Ready) are not in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from lightsout.models.common import Taint as TaintModel
from lightsout.state.parse import merge_taints
from lightsout.state.types import Taint

#: Labels on every machine's core Node besides its Group's and its own: the Node resource and
#: the Group it belongs to (a pod can select a Group by them).
NODE_LABEL = "lightsout.dev/node"
GROUP_LABEL = "lightsout.dev/group"


def core_node_metadata(
    machine: str,
    group: str,
    *,
    group_labels: Mapping[str, str],
    group_taints: Sequence[Taint],
    labels: Mapping[str, str],
    taints: Sequence[Taint],
) -> tuple[dict[str, str], tuple[Taint, ...]]:
    """The labels and taints the core Node of machine `machine` (the Lights-Out Node's name) in
    Group `group` carries: the Group's, then the machine's (which win: a label by key, a taint
    by key and effect), and the two labels naming the machine and its Group."""
    return (
        {**group_labels, **labels, NODE_LABEL: machine, GROUP_LABEL: group},
        merge_taints(group_taints, taints),
    )


def taints_of_models(taints: Iterable[TaintModel] | None) -> tuple[Taint, ...]:
    """A Group's or a Node's `spec.taints` as read by its model."""
    return tuple(Taint(t.key, t.value or "", t.effect.value) for t in taints or ())


def taint_object(taint: Taint) -> dict[str, str]:
    """A taint as the API holds it (an empty value left out)."""
    value = {"value": taint.value} if taint.value else {}
    return {"key": taint.key, **value, "effect": taint.effect}
