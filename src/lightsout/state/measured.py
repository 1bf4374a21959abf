"""What a machine is expected to offer and to draw, from its Node's declared and measured figures.

The one place that chooses between what a person declared (`spec.resources`, `spec.power`) and
what the machine's controller reported (`status.inspected`, the draw learned from measured
watts in `status.learned`): the planner's snapshot (`state.build`), the energy accounting of
the live operator (`execution.energy`) and, through the snapshot's machines, the replay
simulator all read it here.

- Capacity: inspected, else declared. Once the controller reported cpu and memory, they
  replace the declared ones (and the inspected GPU count replaces the one GPU resource
  declared in `spec.resources.extended`), unless `spec.resources.pinned` says to plan with the
  declared figures (room kept for the system, a BMC that counts wrong). The declared pods and
  other extended resources stay: no controller reports them. `planning.machine.inspection` words the
  differences and which figure is used in the InspectionMismatch condition.
- Draw: measured, else declared. A meter is believed over a figure copied from a data sheet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from lightsout.state.parse import dig, non_negative
from lightsout.state.resources import CPU, MEMORY, PODS, Resources, parse_amount, parse_resources
from lightsout.state.status import node_status

#: Pods a machine offers when nothing says otherwise (the kubelet's default maxPods).
DEFAULT_PODS = 110


class Watts(NamedTuple):
    """A machine's draw when busy, idle and off; None where neither a meter nor a person said."""

    on: float | None
    idle: float | None
    off: float | None


def declared_resources(value: object) -> Resources | None:
    """spec.resources as amounts; None unless cpu and memory are both readable."""
    found = inspected_resources(value)
    if found is None or not isinstance(value, Mapping):
        return None
    pods = value.get("pods", DEFAULT_PODS)
    pods = pods if isinstance(pods, int) and pods > 0 else DEFAULT_PODS
    return Resources.of({**found.as_dict(), PODS: pods}) + parse_resources(value.get("extended"))


def inspected_resources(value: object) -> Resources | None:
    """status.inspected as amounts (cpu, memory, the default pods); None unless the controller
    reported both cpu and memory."""
    if not isinstance(value, Mapping):
        return None
    cpu, memory = parse_amount(CPU, value.get("cpu")), parse_amount(MEMORY, value.get("memory"))
    if not cpu or not memory:
        return None
    return Resources.of({CPU: cpu, MEMORY: memory, PODS: DEFAULT_PODS})


def uses_inspected(spec_resources: object) -> bool:
    """Whether inspected figures replace the declared `spec.resources` (not pinned)."""
    return not (isinstance(spec_resources, Mapping) and spec_resources.get("pinned") is True)


def gpu_names(extended: object) -> list[str]:
    """The declared extended resources that are GPUs (their name says so: `nvidia.com/gpu`)."""
    return (
        sorted(n for n in extended if isinstance(n, str) and "gpu" in n.lower())
        if isinstance(extended, Mapping)
        else []
    )


def expected_resources(node: Mapping[str, Any]) -> Resources | None:
    """What the machine offers once it has joined: inspected (over declared unless pinned),
    else declared, else unknown."""
    value = dig(node, "spec", "resources")
    declared = declared_resources(value)
    inspected_value = node_status(node).inspected
    inspected = inspected_resources(inspected_value)
    if declared is None or inspected is None or not uses_inspected(value):
        return declared or inspected
    amounts = {**declared.as_dict(), CPU: inspected.get(CPU), MEMORY: inspected.get(MEMORY)}
    gpus, names = dig(inspected_value, "gpus"), gpu_names(dig(value, "extended"))
    if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 and len(names) == 1:
        amounts[names[0]] = gpus  # which vendor's resource name a GPU has, only a person says
    return Resources.of(amounts)


def expected_watts(node: Mapping[str, Any]) -> Watts:
    """The machine's draw: learned from measured watts (`status.learned`), else declared
    (`spec.power`)."""
    learned = node_status(node).learned
    power = dig(node, "spec", "power")

    def pick(measured: float | None, declared: str) -> float | None:
        return measured if measured is not None else non_negative(dig(power, declared))

    on, idle = pick(learned.busy_watts, "onWatts"), pick(learned.idle_watts, "idleWatts")
    if learned.idle_watts and on is not None and on < learned.idle_watts:
        on = idle  # a measured idle draw above the declared busy one: the declaration is wrong
    return Watts(on=on, idle=idle, off=pick(learned.off_watts, "offWatts"))


__all__ = [
    "DEFAULT_PODS",
    "Watts",
    "declared_resources",
    "expected_resources",
    "expected_watts",
    "gpu_names",
    "inspected_resources",
    "uses_inspected",
]
