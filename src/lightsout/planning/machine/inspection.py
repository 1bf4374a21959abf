"""What a health check measured and inspected, and how it lands in a Node's status.

A driver role may report `power_watts` (the draw its controller measured) and `inspected` (cpu,
memory, architecture, gpus) besides the power state (`playbooks/tasks/report.yml`). The
health-result cache keeps them in each pod's record (`execution.health.pod_record`); a
machine's pass (`planning.machine.passes`, the operator's and the replay's) turns a new record's
values into `status.power` and `status.inspected` (`measured_status`), learns the draw from the
watts (`planning.learning.learn_draw`), and compares what a person declared with what was inspected
on every pass (`judge`), so an edit of `spec.resources` is judged at once: a declared figure
above or below the inspected one is a mismatch, and the condition says which figure the planner
uses (the inspected one, unless `spec.resources.pinned`; the choice itself is
`state.measured.expected_resources`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lightsout.models.node import NodeSpec
from lightsout.models.types import parse_quantity
from lightsout.planning.machine.effects import Event, SetCondition
from lightsout.planning.types import ConditionStatus, ConditionType, EventType
from lightsout.state.measured import gpu_names, inspected_resources

Obj = Mapping[str, Any]
#: The arch label a person may set in spec.labels, compared with the inspected architecture.
ARCH_LABEL = "kubernetes.io/arch"
#: InspectionMismatch reasons: declared capacity differs and the planner uses the inspected
#: figures; it differs and the planner uses the declared ones (`spec.resources.pinned`, or cpu
#: and memory not both inspected); only the arch label differs (applied as declared); nothing.
INSPECTED_USED = "InspectedCapacityUsed"
DECLARED_PINNED = "DeclaredCapacityUsed"
LABEL_DIFFERS = "ArchitectureLabelDiffers"
MATCH = "DeclaredMatchesInspected"
_MAX_WATTS = 100_000.0


def parse_watts(value: object) -> float | None:
    """A reported draw in watts; None when absent or not a plausible number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return round(float(value), 1) if 0 <= value <= _MAX_WATTS else None


def _count(value: object, low: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        return None
    return value


def _memory(value: object) -> str | None:
    """A memory amount as a quantity string (`64Gi`, `8192Mi`); None when unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return value if parse_quantity(value) > 0 else None
    except ValueError:
        return None


def parse_inspected(value: object) -> dict[str, Any] | None:
    """A reported inspection as `status.inspected` fields (cpu, memory, architecture, gpus),
    unreadable ones left out; None when nothing is readable."""
    if not isinstance(value, Mapping):
        return None
    arch = value.get("architecture")
    found = {
        "cpu": _count(value.get("cpu"), 1),
        "memory": _memory(value.get("memory")),
        "architecture": arch if isinstance(arch, str) and 0 < len(arch) <= 63 else None,
        "gpus": _count(value.get("gpus"), 0),
    }
    kept = {k: v for k, v in found.items() if v is not None}
    return kept or None


def measured_status(record: Obj, time: str) -> dict[str, Any]:
    """`status.power` and `status.inspected` from a successful check's record (only those it
    reported; the previous ones stay otherwise)."""
    source = str(record.get("powerSource") or record.get("driver") or "driver")
    out: dict[str, Any] = {}
    if (watts := parse_watts(record.get("powerWatts"))) is not None:
        out["power"] = {"watts": watts, "observedAt": time, "source": source}
    if (inspected := parse_inspected(record.get("inspected"))) is not None:
        driver = str(record.get("driver") or "driver")
        out["inspected"] = {**inspected, "observedAt": time, "source": driver}
    return out


def _compare(declared: object, inspected: object) -> str:
    """`>` or `<` between two amounts, "" when equal."""
    left, right = parse_quantity(str(declared)), parse_quantity(str(inspected))
    return ">" if left > right else "<" if left < right else ""


@dataclass(frozen=True)
class Disagreements:
    """What the declared spec and the inspected machine disagree on, each naming both values."""

    capacity: list[str]
    label: list[str]

    def __bool__(self) -> bool:
        return bool(self.capacity or self.label)


def disagreements(spec: NodeSpec, inspected: Obj | None) -> Disagreements:
    """Each declared figure the inspected machine contradicts, naming both values: cpu or
    memory declared above or below what the machine has, GPUs in the extended resources other
    than its GPUs, an arch label other than its architecture."""
    found = Disagreements([], [])
    if not inspected:
        return found
    resources = spec.resources
    if resources is not None:
        for name, declared in (("cpu", resources.cpu), ("memory", resources.memory)):
            have = inspected.get(name)
            if have is not None and (sign := _compare(declared, have)):
                found.capacity.append(f"spec.resources.{name} {declared} {sign} inspected {have}")
        gpus, names = inspected.get("gpus"), gpu_names(resources.extended)
        declared_gpus = sum(
            (parse_quantity(str((resources.extended or {})[n])) for n in names), Decimal(0)
        )
        if isinstance(gpus, int) and (sign := _compare(declared_gpus, gpus)):
            unnamed = "" if len(names) == 1 or resources.pinned else _UNNAMED
            found.capacity.append(
                f"GPUs in spec.resources.extended {declared_gpus} {sign} inspected {gpus}{unnamed}"
            )
    arch, label = inspected.get("architecture"), (spec.labels or {}).get(ARCH_LABEL)
    if arch and label and arch != label:
        found.label.append(f"spec.labels {ARCH_LABEL}={label} but inspected architecture {arch}")
    return found


_UNNAMED = " (the declared count is planned: no single GPU resource name to give the inspected one)"
_USES_INSPECTED = (
    "the planner uses the inspected cpu, memory and GPUs; spec.resources.pinned: true keeps "
    "the declared ones"
)
_USES_DECLARED = "spec.resources.pinned: the planner uses the declared figures"
_UNTIL_BOTH = "the planner uses the declared figures until cpu and memory are both inspected"
_LABELS = "the label is applied as declared"


def _verdict(
    spec: NodeSpec, found: Disagreements, usable: bool
) -> tuple[ConditionStatus, str, str]:
    """InspectionMismatch's status, reason and message: what differs and which figure is used
    (`usable`: the inspection holds both cpu and memory, so it can replace the declared)."""
    if not found:
        if spec.resources is None:
            return (
                ConditionStatus.FALSE,
                MATCH,
                "no spec.resources: the planner uses the inspected figures",
            )
        return (
            ConditionStatus.FALSE,
            MATCH,
            "the declared resources match what the controller reported",
        )
    pinned = spec.resources is not None and spec.resources.pinned
    inspected_used = usable and not pinned
    used = _USES_INSPECTED if inspected_used else _USES_DECLARED if pinned else _UNTIL_BOTH
    parts = []
    if found.capacity:
        parts.append("; ".join(found.capacity) + f" ({used})")
    if found.label:
        parts.append("; ".join(found.label) + f" ({_LABELS})")
    reason = (
        (INSPECTED_USED if inspected_used else DECLARED_PINNED) if found.capacity else LABEL_DIFFERS
    )
    return ConditionStatus.TRUE, reason, "; ".join(parts)


@dataclass(frozen=True)
class Judgement:
    """The InspectionMismatch condition to set, and the event when its verdict changed."""

    condition: SetCondition | None
    event: Event | None


def judge(spec: NodeSpec, inspected: Obj | None, current: Obj | None) -> Judgement:
    """InspectionMismatch for the declared spec against `status.inspected` (nothing before a
    first inspection), saying which figure the planner uses; an event naming both values when
    the disagreement is new or changed from the `current` condition."""
    if inspected is None:
        return Judgement(None, None)
    found = disagreements(spec, inspected)
    state, reason, message = _verdict(spec, found, inspected_resources(inspected) is not None)
    verdict = SetCondition(ConditionType.INSPECTION_MISMATCH, state, reason, message)
    current = current or {}
    news = current.get("message") != message and (found or current.get("status") == "True")
    event = Event(EventType.WARNING if found else EventType.NORMAL, reason, message)
    return Judgement(verdict, event if news else None)
