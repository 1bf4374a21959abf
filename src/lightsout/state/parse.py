"""Readers for the pieces of raw API objects the snapshot needs, tolerant of garbage.

Each function takes plain JSON-like values (as `kubectl get -o json` prints them) and returns a
frozen snapshot value, degrading what it cannot read (a malformed toleration is dropped, an
unparseable time is None) instead of raising. `lightsout.state.build` calls them per object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeGuard

from lightsout.models.enums import ObservedPowerState
from lightsout.state.resources import PODS, Resources, parse_resources
from lightsout.state.types import (
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    SchedulingRequirements,
    Taint,
    Toleration,
)

#: Operators a node selector requirement may use; anything else makes the term match nothing.
NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """`isinstance(value, Mapping)`, answered at once for a plain dict (what a watch cache holds
    nearly always is): the ABC check is slow, and `dig` asks it a few dozen times per object."""
    return type(value) is dict or isinstance(value, Mapping)


def dig(value: object, *path: str) -> Any:
    """`value[path[0]][path[1]]…`, or None as soon as a step is not a mapping or is missing."""
    for step in path:
        if not is_mapping(value):
            return None
        value = value.get(step)
    return value


def as_list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if is_mapping(value) else {}


def as_str(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def as_int(value: object) -> int | None:
    """An integer (never a bool, which JSON keeps apart), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_enum[E: Enum, D](kind: type[E], value: object, default: D) -> E | D:
    """The member of `kind` whose value `value` is, else `default`."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        return default


def non_negative(value: object) -> float | None:
    """A non-negative number (a duration, a draw) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def str_map(value: object) -> dict[str, str]:
    """A labels/annotations/nodeSelector map, keeping only string keys and values."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time (`2024-05-01T10:00:00Z`) as an aware datetime, else None."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(moment: datetime) -> str:
    """A time as the API stores it: RFC 3339, whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_taints(value: object) -> tuple[Taint, ...]:
    taints: list[Taint] = []
    for item in as_list(value):
        key, effect = as_str(dig(item, "key")), as_str(dig(item, "effect"))
        if key and effect in TAINT_EFFECTS:
            taints.append(Taint(key, as_str(dig(item, "value")), effect))
    return tuple(taints)


def merge_taints(*layers: Sequence[Taint]) -> tuple[Taint, ...]:
    """Later layers replace earlier taints with the same key and effect (the Node's own taints
    override its Group's, as the API's list-map keys say)."""
    merged: dict[tuple[str, str], Taint] = {}
    for layer in layers:
        for taint in layer:
            merged[(taint.key, taint.effect)] = taint
    return tuple(merged.values())


def parse_tolerations(value: object) -> tuple[Toleration, ...]:
    tolerations: list[Toleration] = []
    for item in as_list(value):
        if not isinstance(item, Mapping):
            continue
        operator = as_str(item.get("operator"), "Equal") or "Equal"
        effect = as_str(item.get("effect"))
        if operator not in ("Equal", "Exists") or (effect and effect not in TAINT_EFFECTS):
            continue  # the API server refuses these; a garbage one tolerates nothing
        tolerations.append(
            Toleration(as_str(item.get("key")), operator, as_str(item.get("value")), effect)
        )
    return tuple(tolerations)


def _requirements(value: object, operators: frozenset[str]) -> tuple[Requirement, ...] | None:
    """A matchExpressions list, or None when an entry is unreadable (the whole term then
    matches nothing, which is what the API's validation would have prevented)."""
    out: list[Requirement] = []
    for item in as_list(value):
        key, operator = as_str(dig(item, "key")), as_str(dig(item, "operator"))
        if not key or operator not in operators:
            return None
        values = tuple(v for v in as_list(dig(item, "values")) if isinstance(v, str))
        out.append(Requirement(key, operator, values))
    return tuple(out)


def parse_node_affinity(pod_spec: object) -> tuple[NodeSelectorTerm, ...] | None:
    """The required node affinity's terms, or None when the pod has no required affinity."""
    required = dig(
        pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, Mapping):
        return None
    terms: list[NodeSelectorTerm] = []
    for term in as_list(required.get("nodeSelectorTerms")):
        expressions = _requirements(dig(term, "matchExpressions"), NODE_OPERATORS)
        fields = _requirements(dig(term, "matchFields"), NODE_OPERATORS)
        if expressions is None or fields is None:
            continue  # an unreadable term can match no node; the others still may
        terms.append(NodeSelectorTerm(expressions, fields))
    return tuple(terms)


def parse_label_selector(value: object) -> LabelSelector | None:
    if not isinstance(value, Mapping):
        return None
    expressions = _requirements(value.get("matchExpressions"), LABEL_OPERATORS)
    if expressions is None:
        return None  # unreadable: select nothing rather than everything
    return LabelSelector(tuple(sorted(str_map(value.get("matchLabels")).items())), expressions)


def _container_requests(container: object) -> Resources:
    # The API server defaults a missing request to the limit; objects built by hand may not
    # have been through it, so do the same here.
    resources = dig(container, "resources")
    limits = parse_resources(dig(resources, "limits")).as_dict()
    requests = parse_resources(dig(resources, "requests")).as_dict()
    return Resources.of({**limits, **requests})


def pod_requests(pod_spec: object) -> Resources:
    """The pod's effective request, as the scheduler computes it, plus `pods: 1`.

    Per resource: the larger of the sum over app containers and the largest init container,
    plus the pod overhead. Sidecars (init containers with restartPolicy Always, KEP-753) keep
    running: they add to the app containers' sum and to every init container started after them.
    """
    running: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in as_list(dig(pod_spec, "initContainers")):
        requests = _container_requests(container)
        if dig(container, "restartPolicy") == "Always":
            for name, value in requests:
                sidecars[name] = sidecars.get(name, 0) + value
            candidate = sidecars
        else:
            candidate = dict(sidecars)
            for name, value in requests:
                candidate[name] = candidate.get(name, 0) + value
        for name, value in candidate.items():
            init_peak[name] = max(init_peak.get(name, 0), value)
    for container in as_list(dig(pod_spec, "containers")):
        for name, value in _container_requests(container):
            running[name] = running.get(name, 0) + value
    for name, value in sidecars.items():
        running[name] = running.get(name, 0) + value
    overhead = parse_resources(dig(pod_spec, "overhead")).as_dict()
    effective: dict[str, int] = {}
    for name in {*running, *init_peak, *overhead}:
        effective[name] = max(running.get(name, 0), init_peak.get(name, 0)) + overhead.get(name, 0)
    effective[PODS] = 1
    return Resources.of(effective)


def scheduling_requirements(pod_spec: object) -> SchedulingRequirements:
    return SchedulingRequirements(
        requests=pod_requests(pod_spec),
        node_selector=tuple(sorted(str_map(dig(pod_spec, "nodeSelector")).items())),
        affinity=parse_node_affinity(pod_spec),
        tolerations=parse_tolerations(dig(pod_spec, "tolerations")),
    )


def controller_kind(metadata: object) -> str | None:
    """Kind of the owner marked `controller: true` (else of the first owner), None if none."""
    owner = _controller(metadata)
    return None if owner is None else str(owner["kind"])


def controller_name(metadata: object) -> str | None:
    """Name of the owner whose kind `controller_kind` gives (a Job's name for its pod)."""
    owner = _controller(metadata)
    return None if owner is None else as_str(owner.get("name")) or None


def _controller(metadata: object) -> Mapping[str, Any] | None:
    owners = [o for o in as_list(dig(metadata, "ownerReferences")) if isinstance(o, Mapping)]
    for owner in owners:
        if owner.get("controller") is True and isinstance(owner.get("kind"), str):
            return owner
    if owners and isinstance(owners[0].get("kind"), str):
        return owners[0]
    return None


def condition(status: object, kind: str) -> Mapping[str, Any] | None:
    for item in as_list(dig(status, "conditions")):
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def parse_power_state(value: Any) -> ObservedPowerState | None:
    """A power state as drivers and status word it (`on`, `Off`, ...); None if it is none."""
    if not isinstance(value, str):
        return None
    return {
        "on": ObservedPowerState.ON,
        "off": ObservedPowerState.OFF,
        "unknown": ObservedPowerState.UNKNOWN,
    }.get(value.strip().lower())


def parse_duration(text: str) -> float:
    """`90s`, `5m`, `2h`, `7d`, `1h30m` or a plain number of seconds; ValueError otherwise."""
    cleaned = text.strip().lower()
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _DURATION.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"{text!r} is not a duration (use 90s, 5m, 2h, 7d or 1h30m)") from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be more than 0 seconds")
    return seconds
