"""`snapshot_from`: the planner's `Snapshot` from raw API objects, never raising.

The handler that runs the autoscaler keeps kopf indexes (or watch caches) of pods, core Nodes,
Lights-Out Nodes and Groups, PodDisruptionBudgets and DaemonSets, and passes their items here as
plain dicts, keyed by the names below. An object the builder cannot read is skipped and named in
`Snapshot.problems`; a field it cannot read falls back to its API default. Defaults for the
Lights-Out kinds come from the pydantic models, so there is one source for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from lightsout.models.enums import DesiredPowerState, ProxmoxMode
from lightsout.models.group import GroupSpec
from lightsout.models.node import AutoscalingSettings, PowerProfile
from lightsout.state import cron, references, series
from lightsout.state.corenode import core_node_metadata, taints_of_models
from lightsout.state.jobs import deferred_jobs
from lightsout.state.measured import declared_resources, expected_resources, expected_watts
from lightsout.state.parse import (
    as_enum,
    as_int,
    as_str,
    condition,
    controller_kind,
    controller_name,
    dig,
    parse_label_selector,
    parse_taints,
    parse_time,
    scheduling_requirements,
    str_map,
)
from lightsout.state.resources import parse_resources
from lightsout.state.status import group_status, node_status
from lightsout.state.types import (
    DO_NOT_DISRUPT,
    MIRROR_POD,
    SAFE_TO_EVICT,
    UNNEEDED_SINCE,
    CoreNode,
    DaemonSet,
    DisruptionBudget,
    ExpectedPod,
    Group,
    Machine,
    ObjectKey,
    Pod,
    Snapshot,
    Window,
)
from lightsout.state.types import ScaleDownPolicy as ScaleDown
from lightsout.state.types import ScaleUpPolicy as ScaleUp

# Keys of the `objects` mapping: the resources' plural names, as `kubectl get` knows them.
PODS_KEY = "pods"
NODES_KEY = "nodes"
MACHINES_KEY = "nodes.lightsout.dev"
GROUPS_KEY = "groups.lightsout.dev"
PDBS_KEY = "poddisruptionbudgets"
DAEMONSETS_KEY = "daemonsets"
#: Secrets and ConfigMaps as `references.contents_entry` gives them: name and key names only.
SECRETS_KEY = "secrets"
CONFIGMAPS_KEY = "configmaps"
#: batch/v1 CronJobs: their next runs become the snapshot's `expected` pods (needs `now`).
CRONJOBS_KEY = "cronjobs.batch"
#: batch/v1 Jobs that may wait for cheap hours (`state.jobs`), finished ones included: they
#: teach how long the next run of their CronJob takes.
JOBS_KEY = "jobs.batch"
#: ConfigMaps labelled `lightsout.dev/series`, whole (data included): the Groups' price and
#: carbon series (`state.series`).
SERIES_KEY = "configmaps.series"


def snapshot_from(
    objects: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    complete: bool = False,
    unneeded_since: Mapping[ObjectKey, datetime] | None = None,
    now: datetime | None = None,
) -> Snapshot:
    """A `Snapshot` of `objects` (lists of API objects keyed by `PODS_KEY`, `NODES_KEY`, …).

    `complete` must be True only when every watch behind `objects` has synced: the planner will
    not decide otherwise. `unneeded_since` (from the previous `Plan`) wins over the
    `lightsout.dev/unneeded-since` annotation a handler may have persisted on the machines.
    With `now`, each CronJob under `CRONJOBS_KEY` announces its next run after `now`
    (`cron.expected_pods`, the simulator's code path too).
    """
    problems: list[str] = []
    maps = series.config_maps(_items(objects, SERIES_KEY))
    groups = _each(
        objects, GROUPS_KEY, lambda key, obj, notes: _group(key, obj, notes, maps), problems
    )
    by_group = {group.key: group for group in groups}
    check = _reference_check(objects)
    machines = _each(
        objects,
        MACHINES_KEY,
        lambda key, obj, notes: _machine(key, obj, notes, by_group, check),
        problems,
    )
    since = {
        key: time
        for key, time in (_annotated_since(o) for o in _items(objects, MACHINES_KEY))
        if key is not None and time is not None
    }
    since.update(unneeded_since or {})
    crons = _each(objects, CRONJOBS_KEY, lambda _key, obj, _notes: cron.read(obj), problems)
    expected = _expected(crons, now, problems) if now is not None else ()
    return Snapshot(
        pods=_each(objects, PODS_KEY, _pod, problems),
        nodes=_each(objects, NODES_KEY, _core_node, problems),
        machines=machines,
        groups=groups,
        disruption_budgets=_each(objects, PDBS_KEY, _pdb, problems),
        daemonsets=_each(objects, DAEMONSETS_KEY, _daemonset, problems),
        expected=expected,
        deferred=deferred_jobs([j for j in _items(objects, JOBS_KEY) if isinstance(j, Mapping)]),
        complete=complete,
        unneeded_since=since,
        problems=tuple(problems),
    )


def _items(objects: Mapping[str, Sequence[Mapping[str, Any]]], kind: str) -> Sequence[Any]:
    items = objects.get(kind)
    return items if isinstance(items, Sequence) and not isinstance(items, str) else ()


def _each[T](
    objects: Mapping[str, Sequence[Mapping[str, Any]]],
    kind: str,
    read: Callable[[ObjectKey, Mapping[str, Any], list[str]], T | None],
    problems: list[str],
) -> tuple[T, ...]:
    """Each object of `kind` that has a name, as `read` reads it (None: skipped, said in the
    notes it was given)."""
    out: list[T] = []
    for index, obj in enumerate(_items(objects, kind)):
        if not isinstance(obj, Mapping):
            problems.append(f"{kind}[{index}]: not an object, skipped")
            continue
        key = _key(obj)
        if key is None:
            problems.append(f"{kind} [{index}]: no name, skipped")
            continue
        notes: list[str] = []
        # Garbage must degrade the snapshot (one object skipped), never stop the planner.
        try:
            value = read(key, obj, notes)
        except Exception as error:
            value = None
            notes.append(f"unreadable ({type(error).__name__}: {error}), skipped")
        problems.extend(f"{kind} {key}: {note}" for note in notes)
        if value is not None:
            out.append(value)
    return tuple(out)


def _key(obj: Mapping[str, Any]) -> ObjectKey | None:
    name = as_str(dig(obj, "metadata", "name"))
    return ObjectKey(as_str(dig(obj, "metadata", "namespace")), name) if name else None


def _model[M: BaseModel](model: type[M], value: object, notes: list[str], where: str) -> M:
    """`value` read by an API model whose fields all have defaults. Top-level fields that do
    not validate are dropped (and noted) so they take their defaults; the rest still counts."""
    data = dict(value) if isinstance(value, Mapping) else {}
    while True:
        try:
            return model.model_validate(data)
        except ValidationError as error:
            bad = {str(e["loc"][0]) for e in error.errors() if e["loc"]} & data.keys()
        if not bad:
            notes.append(f"{where} unreadable, defaults used")
            return model()
        notes.append(f"{where}.{', '.join(sorted(bad))} unreadable, defaults used")
        data = {k: v for k, v in data.items() if k not in bad}


def _pod(key: ObjectKey, obj: Mapping[str, Any], _notes: list[str]) -> Pod:
    metadata, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    annotations = str_map(dig(metadata, "annotations"))
    created = parse_time(dig(metadata, "creationTimestamp"))
    scheduled = condition(status, "PodScheduled") or {}
    unschedulable_since = None
    if (scheduled.get("status"), scheduled.get("reason")) == ("False", "Unschedulable"):
        # When the scheduler first said no; the creation time when that is unreadable.
        unschedulable_since = parse_time(scheduled.get("lastTransitionTime")) or created
    return Pod(
        key=key,
        uid=as_str(dig(metadata, "uid")),
        phase=as_str(dig(status, "phase")) or "Pending",
        node_name=as_str(dig(spec, "nodeName")) or None,
        scheduling=scheduling_requirements(spec),
        labels=str_map(dig(metadata, "labels")),
        owner_kind=controller_kind(metadata),
        owner_name=controller_name(metadata),
        mirror=MIRROR_POD in annotations,
        do_not_disrupt=_do_not_disrupt(annotations),
        unschedulable_since=unschedulable_since,
        created=created,
        started=parse_time(dig(status, "startTime")),
        deleting=dig(metadata, "deletionTimestamp") is not None,
    )


def _do_not_disrupt(annotations: Mapping[str, str]) -> str:
    """Which annotation, if any, asks that the pod not be evicted to power its node off."""
    for name, value in ((DO_NOT_DISRUPT, "true"), (SAFE_TO_EVICT, "false")):
        if annotations.get(name, "").strip().lower() == value:
            return f"{name}={value}"
    return ""


def _core_node(key: ObjectKey, obj: Mapping[str, Any], _notes: list[str]) -> CoreNode:
    ready = condition(obj.get("status"), "Ready")
    return CoreNode(
        name=key.name,
        labels=str_map(dig(obj, "metadata", "labels")),
        taints=parse_taints(dig(obj, "spec", "taints")),
        allocatable=parse_resources(dig(obj, "status", "allocatable")),
        unschedulable=dig(obj, "spec", "unschedulable") is True,
        ready=bool(ready and ready.get("status") == "True"),
        ready_since=parse_time(ready.get("lastTransitionTime")) if ready else None,
        provider_id=as_str(dig(obj, "spec", "providerID")) or None,
        deleting=dig(obj, "metadata", "deletionTimestamp") is not None,
    )


def _group(
    key: ObjectKey, obj: Mapping[str, Any], notes: list[str], maps: series.ConfigMaps
) -> Group:
    spec = _model(GroupSpec, obj.get("spec"), notes, "spec")
    status = group_status(obj)
    resolved = series.resolve(spec.electricity, key.namespace, maps, group=key.name)
    up, down = spec.scale_up, spec.scale_down
    if spec.battery and status.battery_problem is not None:
        notes.append(f"status.battery unreadable, taken as not read yet: {status.battery_problem}")
    return Group(
        key=key,
        min_nodes=spec.min_nodes,
        max_nodes=spec.max_nodes,
        autoscaler=spec.autoscaler,
        dry_run=spec.dry_run,
        scale_up=ScaleUp(up.stabilization_window_seconds, up.max_concurrent_operations),
        scale_down=ScaleDown(
            enabled=down.enabled,
            unneeded_seconds=(
                down.unneeded_seconds if isinstance(down.unneeded_seconds, int) else None
            ),
            break_even_multiple=down.break_even_multiple,
            utilization_threshold=down.utilization_threshold,
            stabilization_seconds=down.stabilization_window_seconds,
            max_concurrent=down.max_concurrent_operations,
            job_grace_seconds=down.job_grace_seconds,
        ),
        selection_policy=spec.selection_policy,
        labels=dict(spec.labels or {}),
        taints=taints_of_models(spec.taints),
        price_per_kwh=spec.electricity.price_per_kwh if spec.electricity else None,
        electricity=spec.electricity,
        prices=resolved.prices,
        carbon=resolved.carbon,
        series_problem=resolved.problem,
        surplus=series.surplus(spec.electricity, key.namespace, maps, status.solar_surplus),
        last_scale_up=status.last_scale_up,
        last_scale_down=status.last_scale_down,
        windows=tuple(
            Window(window.times(), window.min_nodes, window.max_nodes, window.quiet, window.strict)
            for window in spec.windows or ()
        ),
        battery=spec.battery,
        # None: not written yet, or unreadable (noted above).
        battery_status=status.battery if spec.battery else None,
    )


def _reference_check(
    objects: Mapping[str, Sequence[Mapping[str, Any]]],
) -> Callable[[Mapping[str, Any]], str | None]:
    """Why a machine's power-on action cannot start, from the objects given (nothing is
    checked when the caller gave neither Secrets nor ConfigMaps: it did not look; Secrets are
    not checked when only ConfigMaps are given)."""
    if SECRETS_KEY not in objects and CONFIGMAPS_KEY not in objects:
        return lambda _obj: None
    groups = {_key(o): o for o in _items(objects, GROUPS_KEY)}
    # No Secrets given (a cluster-wide operator does not watch them): they are not checked.
    secrets = (
        references.contents_index(_items(objects, SECRETS_KEY)) if SECRETS_KEY in objects else None
    )
    config_maps = references.contents_index(_items(objects, CONFIGMAPS_KEY))

    def check(obj: Mapping[str, Any]) -> str | None:
        key = _key(obj)
        if key is None:
            return None
        spec = obj.get("spec")
        group = groups.get(ObjectKey(key.namespace, as_str(dig(spec, "group"))))
        ephemeral = dig(spec, "driver", "proxmox", "mode") == ProxmoxMode.EPHEMERAL
        problem = references.unresolved(
            obj,
            group,
            "provision" if ephemeral else "startup",
            None if secrets is None else lambda name: secrets.get((key.namespace, name)),
            lambda name: config_maps.get((key.namespace, name)),
        )
        return None if problem is None else f"{problem.reason}: {problem.message}"

    return check


def machine_of(
    obj: Mapping[str, Any], groups: Mapping[ObjectKey, Group], unresolved: str | None = None
) -> Machine | None:
    """One Lights-Out Node as `snapshot_from` reads it, for a caller that keeps its machines'
    objects itself: the replay builds each machine's view from its manifest and the status its
    passes wrote, so the planner's view of a replayed machine (learned figures, inspected
    capacity, measured draw) comes from the same reading as a live one's. `unresolved` is
    what `Machine.unresolved` says (the caller checked the references, or none)."""
    key = _key(obj)
    return None if key is None else _machine(key, obj, [], groups, lambda _obj: unresolved)


def _machine(
    key: ObjectKey,
    obj: Mapping[str, Any],
    notes: list[str],
    groups: Mapping[ObjectKey, Group],
    check: Callable[[Mapping[str, Any]], str | None],
) -> Machine | None:
    spec = obj.get("spec")
    node_name = as_str(dig(spec, "kubernetesNodeName"))
    if not node_name:
        notes.append("no spec.kubernetesNodeName, skipped")
        return None
    group_name = as_str(dig(spec, "group"))
    group = groups.get(ObjectKey(key.namespace, group_name))
    autoscaling = _model(AutoscalingSettings, dig(spec, "autoscaling"), notes, "spec.autoscaling")
    watts = expected_watts(obj)
    status = node_status(obj)
    desired = as_str(dig(spec, "desiredPowerState"))
    if dig(spec, "resources") is not None and declared_resources(dig(spec, "resources")) is None:
        notes.append("spec.resources unreadable (cpu and memory are required), ignored")
    power = _model(PowerProfile, dig(spec, "power"), notes, "spec.power")
    learned = status.learned
    labels, taints = core_node_metadata(
        key.name,
        group_name,
        group_labels=group.labels if group else {},
        group_taints=group.taints if group else (),
        labels=str_map(dig(spec, "labels")),
        taints=parse_taints(dig(spec, "taints")),
    )
    return Machine(
        key=key,
        group=group_name,
        kubernetes_node_name=node_name,
        phase=status.phase,
        desired=as_enum(DesiredPowerState, desired, DesiredPowerState.OFF),
        autoscaling_enabled=autoscaling.enabled,
        priority=autoscaling.priority,
        resources=expected_resources(obj),
        labels=labels,
        taints=taints,
        watts_on=watts.on,
        watts_idle=watts.idle,
        watts_off=watts.off,
        boot_seconds=power.boot_timeout_seconds,
        learned_boot_seconds=_float(learned.boot_seconds),
        learned_shutdown_seconds=_float(learned.shutdown_seconds),
        power_ons=learned.power_ons,
        minimum_on_seconds=autoscaling.minimum_on_seconds,
        max_power_cycles_per_day=autoscaling.max_power_cycles_per_day,
        phase_since=status.phase_since,
        provider_id=status.provider_id or as_str(dig(spec, "providerID")) or None,
        unresolved=check(obj),
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _pdb(key: ObjectKey, obj: Mapping[str, Any], _notes: list[str]) -> DisruptionBudget:
    return DisruptionBudget(
        key=key,
        selector=parse_label_selector(dig(obj, "spec", "selector")),
        # Unknown (no status yet, or garbage) is treated by the planner as "allows none".
        disruptions_allowed=as_int(dig(obj, "status", "disruptionsAllowed")),
    )


def _daemonset(key: ObjectKey, obj: Mapping[str, Any], _notes: list[str]) -> DaemonSet:
    template = dig(obj, "spec", "template", "spec")
    return DaemonSet(key=key, scheduling=scheduling_requirements(template))


def _expected(
    crons: Sequence[cron.CronSpec], now: datetime, problems: list[str]
) -> tuple[ExpectedPod, ...]:
    """The CronJobs' next runs; a CronJob whose schedule cannot be read announces nothing."""
    out: list[ExpectedPod] = []
    for spec in crons:
        try:
            out.extend(cron.expected_pods((spec,), now))
        except cron.CronError as error:
            problems.append(f"{CRONJOBS_KEY} {spec.key}: {error}, no run announced")
    return tuple(sorted(out, key=lambda e: (e.at, e.key)))


def _annotated_since(obj: object) -> tuple[ObjectKey | None, datetime | None]:
    if not isinstance(obj, Mapping):
        return None, None
    text = str_map(dig(obj, "metadata", "annotations")).get(UNNEEDED_SINCE)
    return _key(obj), parse_time(text)


__all__ = [
    "CRONJOBS_KEY",
    "DAEMONSETS_KEY",
    "GROUPS_KEY",
    "JOBS_KEY",
    "MACHINES_KEY",
    "NODES_KEY",
    "PDBS_KEY",
    "PODS_KEY",
    "SERIES_KEY",
    "snapshot_from",
]
