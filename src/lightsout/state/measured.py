"""What a machine is expected to offer and to draw, from its Node's declared and measured figures.

The one place that chooses between what a person declared (`spec.resources`, `spec.power`) and
what the machine's controller reported (`status.inspected`, the draw learned from measured
watts in `status.learned`): the planner's snapshot (`state.build`), the energy accounting of
the live operator (`execution.energy`) and, through the snapshot's machines, the replay
simulator all read it here.

- Capacity: declared, else inspected. A person may declare less than the hardware has (to keep
  room for the system) and is believed; a Node with no `spec.resources` is planned with the
  inspected cpu and memory.
- Draw: measured, else declared. A meter is believed over a figure copied from a data sheet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from lightsout.state.parse import dig, non_negative
from lightsout.state.resources import CPU, MEMORY, PODS, Resources, parse_amount, parse_resources

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


def expected_resources(node: Mapping[str, Any]) -> Resources | None:
    """What the machine offers once it has joined: declared, else inspected, else unknown."""
    return declared_resources(dig(node, "spec", "resources")) or inspected_resources(
        dig(node, "status", "inspected")
    )


def expected_watts(node: Mapping[str, Any]) -> Watts:
    """The machine's draw: learned from measured watts (`status.learned`), else declared
    (`spec.power`)."""
    learned = dig(node, "status", "learned")
    power = dig(node, "spec", "power")

    def pick(measured: str, declared: str) -> float | None:
        found = non_negative(dig(learned, measured))
        return found if found is not None else non_negative(dig(power, declared))

    on, idle = pick("busyWatts", "onWatts"), pick("idleWatts", "idleWatts")
    measured_idle = non_negative(dig(learned, "idleWatts"))
    if measured_idle and on is not None and on < measured_idle:
        on = idle  # a measured idle draw above the declared busy one: the declaration is wrong
    return Watts(on=on, idle=idle, off=pick("offWatts", "offWatts"))


__all__ = [
    "DEFAULT_PODS",
    "Watts",
    "declared_resources",
    "expected_resources",
    "expected_watts",
    "inspected_resources",
]
