"""What a health check measured and inspected, and how it lands in a Node's status.

A driver role may report `power_watts` (the draw its controller measured) and `inspected` (cpu,
memory, architecture, gpus) besides the power state (`playbooks/tasks/report.yml`). The
health-result cache keeps them in each pod's record (`health.pod_record`); a machine's
reconcile pass (`execution.reconcile`) turns a new record's values into `status.power` and
`status.inspected` (`measured_status`), learns the draw from the watts
(`planning.learning.learn_draw`), and compares what a person declared with what was inspected
on every pass (`mismatch`), so an edit of `spec.resources` is judged at once. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lightsout.models.node import NodeSpec
from lightsout.models.types import parse_quantity
from lightsout.planning.effects import Event, SetCondition
from lightsout.planning.types import ConditionStatus, ConditionType, EventType
from lightsout.state.parse import condition

Obj = Mapping[str, Any]
#: The arch label a person may set in spec.labels, compared with the inspected architecture.
ARCH_LABEL = "kubernetes.io/arch"
MISMATCH = "DeclaredExceedsInspected"
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


def _exceeds(declared: str, inspected: str) -> bool:
    return parse_quantity(declared) > parse_quantity(inspected)


def disagreements(spec: NodeSpec, inspected: Obj | None) -> list[str]:
    """Each declared figure the inspected machine contradicts, naming both values: cpu or
    memory declared above what the machine has, extended GPUs above its GPUs, an arch label
    other than its architecture. Declaring less than the machine has is a person's choice
    (room for the system), not a disagreement."""
    if not inspected:
        return []
    found: list[str] = []
    resources = spec.resources
    if resources is not None:
        for name, declared in (("cpu", resources.cpu), ("memory", resources.memory)):
            have = inspected.get(name)
            if have is not None and _exceeds(str(declared), str(have)):
                found.append(f"spec.resources.{name} {declared} > inspected {have}")
        gpus = inspected.get("gpus")
        declared_gpus = sum(
            (parse_quantity(str(q)) for n, q in (resources.extended or {}).items() if "gpu" in n),
            Decimal(0),
        )
        if isinstance(gpus, int) and declared_gpus > gpus:
            found.append(f"GPUs in spec.resources.extended {declared_gpus} > inspected {gpus}")
    arch, label = inspected.get("architecture"), (spec.labels or {}).get(ARCH_LABEL)
    if arch and label and arch != label:
        found.append(f"spec.labels {ARCH_LABEL}={label} but inspected architecture {arch}")
    return found


@dataclass(frozen=True)
class Judgement:
    """The InspectionMismatch condition to set, and the event when its verdict changed."""

    condition: SetCondition | None
    event: Event | None


def judge(spec: NodeSpec, status: Obj) -> Judgement:
    """InspectionMismatch for the declared spec against `status.inspected` (nothing before a
    first inspection); an event naming both values when the disagreement is new or changed."""
    inspected = status.get("inspected")
    if not isinstance(inspected, Mapping):
        return Judgement(None, None)
    found = disagreements(spec, inspected)
    if found:
        message = "; ".join(found) + " (the planner uses the declared figures)"
        status_and_reason = ConditionStatus.TRUE, MISMATCH
    else:
        message = "the declared resources fit what the controller reported"
        status_and_reason = ConditionStatus.FALSE, MATCH
    verdict = SetCondition(ConditionType.INSPECTION_MISMATCH, *status_and_reason, message)
    current = condition(status, ConditionType.INSPECTION_MISMATCH) or {}
    news = current.get("message") != message and (found or current.get("status") == "True")
    event = Event(EventType.WARNING if found else EventType.NORMAL, verdict.reason, message)
    return Judgement(verdict, event if news else None)
