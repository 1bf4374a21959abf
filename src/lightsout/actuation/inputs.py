"""Turns API objects into the state machine's inputs (pure: dicts in, frozen dataclasses out).

Called by the Node reconciler (`execution.reconcile`) with what the watch caches hold: the Node
resource, its Group, its newest action Job and pods, the core Node, drain progress and the Lease
state; and by the replay (`lightsout.simulate`), which starts its machines from the same
`machine_state`. A Node's and a Group's spec are read once per pass into the API models
(`node_spec`, `group_spec`), with the models' defaults; everything in `execution` reads
those. A spec the models refuse (the API server's schema refuses it too) raises
`InvalidSpecError`: the pass is skipped. A Node's status is read through `state.status`
(`node_status`): anything malformed in it (a person's edit, an old version's leftovers)
degrades to "unknown" rather than raising: the operator never crashes on someone else's
garbage.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from lightsout.actuation.nodeops import (
    metadata_applied,
    node_cordoned,
    node_ready,
    node_unregistered,
)
from lightsout.models.drivers import ProxmoxDriver
from lightsout.models.enums import ConditionStatus, ConditionType, DriftPolicy, ProxmoxMode
from lightsout.models.group import (
    DEFAULT_CORRECTION_WINDOW_SECONDS,
    DEFAULT_MAX_CORRECTIONS,
    GroupSpec,
)
from lightsout.models.node import NodeSpec
from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import Decision, SetCondition
from lightsout.planning.machine.outages import credentials_source
from lightsout.planning.types import (
    Action,
    DrainStatus,
    KubeletHeartbeat,
    LeaseState,
    MachineState,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
    operation_from_status,
)
from lightsout.state.corenode import core_node_metadata, taint_object, taints_of_models
from lightsout.state.parse import as_int, dig, format_time, parse_time, str_map
from lightsout.state.references import Unresolved
from lightsout.state.status import node_status
from lightsout.state.types import DRAIN_BY
from lightsout.text import clip_middle

Obj = Mapping[str, Any]
GENERATION_LABEL = "lightsout.dev/generation"
ATTEMPT_LABEL = "lightsout.dev/attempt"
ACTION_LABEL = "lightsout.dev/action"


class InvalidSpecError(ValueError):
    """A Node's or Group's spec the API models refuse."""


def _parse[M: BaseModel](model: type[M], obj: Obj) -> M:
    # The one place a spec is read raw (a Group's is `{}` when omitted).
    try:
        return model.model_validate(obj.get("spec", {}))
    except ValidationError as error:
        meta = obj.get("metadata") or {}
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in error.errors()[:3]
        )
        raise InvalidSpecError(
            f"{model.__name__.removesuffix('Spec')} {meta.get('namespace')}/{meta.get('name')}:"
            f" spec refused by the model ({problems})"
        ) from error


def node_spec(node: Obj) -> NodeSpec:
    """The machine's spec as the Node model reads it; raises `InvalidSpecError`."""
    return _parse(NodeSpec, node)


def group_spec(group: Obj) -> GroupSpec:
    """The Group's spec as the Group model reads it; raises `InvalidSpecError`."""
    return _parse(GroupSpec, group)


def status_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch turning `current` status into `wanted` (only the fields that differ).

    A JSON merge patch merges nested objects key by key, so a key that is gone from a nested
    object must be sent as null, or the old value would stay: e.g. a startup's
    `lastOperation.values.vmid` under the shutdown that followed it. The other way round, a
    null in `wanted` is stored as an absent key, so fields are compared as stored: otherwise a
    `lastOperation` with `finished: null` would differ from its own stored self on every pass.
    """
    return {
        key: _replacing(current.get(key), value)
        for key, value in wanted.items()
        if current.get(key) != _as_stored(value)
    }


def _as_stored(value: Any) -> Any:
    """`value` as the API server keeps it after a merge patch: keys set to null are gone."""
    if not isinstance(value, Mapping):
        return value
    return {key: _as_stored(item) for key, item in value.items() if item is not None}


def _replacing(old: Any, new: Any) -> Any:
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return new
    out = {key: _replacing(old.get(key), value) for key, value in new.items()}
    out.update({key: None for key in old if key not in new})
    return out


def merge_conditions(
    current: Iterable[Mapping[str, Any]], decision: Decision, generation: int, now: dt.datetime
) -> list[dict[str, Any]]:
    """`status.conditions` with the decision's SetCondition effects merged in: the operator's
    status writer and the in-memory port both keep them so."""
    wanted = (e for e in decision.effects if isinstance(e, SetCondition))
    return merged_conditions(current, wanted, generation, now)


class Wanted(Protocol):
    """A condition to set: a machine's `SetCondition` effect, a Group's `mains.Condition`."""

    @property
    def type(self) -> ConditionType: ...
    @property
    def status(self) -> ConditionStatus: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


def merged_conditions(
    current: Iterable[Mapping[str, Any]],
    wanted: Iterable[Wanted],
    generation: int | None,
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """`status.conditions` with `wanted` merged in by type (a condition's
    `lastTransitionTime` moves only when its status changes); a Node's and a Group's alike."""
    by_type = {c.get("type"): dict(c) for c in current if isinstance(c, Mapping)}
    stamp = format_time(now)
    for effect in wanted:
        old = by_type.get(str(effect.type))
        changed = old is None or old.get("status") != str(effect.status)
        condition = {
            "type": str(effect.type),
            "status": str(effect.status),
            "reason": effect.reason,
            "message": clip_middle(effect.message),
            "lastTransitionTime": stamp
            if changed or old is None
            else old.get("lastTransitionTime", stamp),
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        by_type[str(effect.type)] = condition
    return [by_type[k] for k in sorted(by_type, key=str)]


def checked_status(decision: Decision) -> dict[str, Any]:
    """What a pass's readings add to status (`planning.machine.passes`): the new `lastHealthCheck`,
    the `power` / `inspected` a check reported and the checkpointed `energy`; empty when nothing
    new. The operator's status writer and the in-memory port both store exactly this (the
    `learned` record the readings taught is the machine's: `state.status.machine_status`)."""
    new: dict[str, Any] = {}
    if decision.energy is not None:
        new["energy"] = dict(decision.energy)
    if decision.health_check is not None:
        new["lastHealthCheck"] = dict(decision.health_check)
    if decision.measured is not None:
        new.update(decision.measured)
    return new


def clone_to_status(previous: Any, op: Operation | None) -> dict[str, Any] | None:
    """`status.clone`: the ephemeral VM made for this machine, from what its actions reported.

    A provision that made (or found) a clone reports its `vmid` and `host`, even when a later
    step of it failed; the record then stays until a deprovision confirms the clone is gone, so
    a person can always see which VM is this machine's while one may exist.
    """
    kept = dict(previous) if isinstance(previous, Mapping) else None
    if op is None:
        return kept
    vmid, host = op.values.get("vmid"), op.values.get("host")
    if op.action is Action.PROVISION and as_int(vmid) is not None:
        record: dict[str, Any] = {"vmid": vmid}
        if isinstance(host, str) and host:
            record["host"] = host
        return record
    if (
        op.action is Action.DEPROVISION
        and op.result is OperationResult.SUCCEEDED
        and op.power_state is ObservedPowerState.OFF
    ):
        return None
    return kept


def machine_state(node: Obj, spec: NodeSpec, group: GroupSpec | None) -> MachineState:
    """MachineState of one Node resource (its Group supplies the drift policy)."""
    meta, status = node["metadata"], node_status(node)
    desired = ObservedPowerState(spec.desired_power_state)  # the planner's power states (+ Unknown)
    generation = int(meta.get("generation") or 1)
    # The intent only changes when the desired power state does: editing labels bumps the
    # generation but must not look like a new power command.
    # After a failure, though, any spec edit (a fixed Secret name, a new endpoint) is a new
    # intent, so the machine is retried from scratch.
    phase = status.phase or Phase.UNKNOWN
    held = status.intent_generation
    kept = phase is not Phase.FAILED and status.intent_desired == str(desired)
    intent_generation = held if kept and held is not None else generation
    policy = group or GroupSpec()  # no Group: its defaults
    health = policy.health_check
    adopted = status.observed_power_state or desired
    adopting = (
        adopted
        if status.reason == Reason.DRIFT_ADOPTED
        and status.observed_generation == generation
        and adopted is not desired
        else None
    )
    proxmox = spec.driver.block(ProxmoxDriver)
    return MachineState(
        name=meta["name"],
        kubernetes_node_name=spec.kubernetes_node_name,
        phase=phase,
        desired=desired,
        intent_generation=intent_generation,
        phase_since=status.phase_since,
        drain_by=parse_time((meta.get("annotations") or {}).get(DRAIN_BY)),
        reason=status.reason,
        message=status.message,
        operation=operation_from_status(status.last_operation),
        max_retries=spec.max_retries,
        boot_timeout_seconds=spec.power.boot_timeout_seconds,
        shutdown_timeout_seconds=spec.power.shutdown_timeout_seconds,
        ephemeral=proxmox is not None and proxmox.mode is ProxmoxMode.EPHEMERAL,
        # The machine's own choice, else its Group's (whose default is Delete).
        node_removal_policy=spec.node_removal_policy or policy.node_removal_policy,
        correct_drift=health.drift_policy is DriftPolicy.CORRECT,
        learned=status.learned,
        max_corrections=health.max_corrections or DEFAULT_MAX_CORRECTIONS,
        correction_window_seconds=(
            health.correction_window_seconds or DEFAULT_CORRECTION_WINDOW_SECONDS
        ),
        drift_corrections=status.drift_corrections,
        adopt_drift=health.drift_policy is DriftPolicy.ADOPT,
        adopting=adopting,
        force_power_off=spec.driver.plug is not None and spec.driver.plug.force,
        credentials=credentials_source(spec, str(meta.get("namespace") or "")),
    )


def job_identity(job: Obj) -> tuple[Action, int, int] | None:
    """(action, generation, attempt) of an action Job; None without Lights-Out's labels."""
    labels = str_map(dig(job, "metadata", "labels"))
    try:
        action = Action(labels.get(ACTION_LABEL, ""))
        return action, int(labels.get(GENERATION_LABEL, "")), int(labels.get(ATTEMPT_LABEL, ""))
    except ValueError:
        return None


def observations(
    *,
    job: ObservedJob | None,
    core_node: Obj | None,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, str]],
    drain: DrainStatus | None,
    lease: LeaseState,
    lease_expires: dt.datetime | None = None,
    power_state: ObservedPowerState = ObservedPowerState.UNKNOWN,
    power_state_at: dt.datetime | None = None,
    unresolved: Mapping[Action, Unresolved] | None = None,
    kubelet: KubeletHeartbeat | None = None,
) -> Observations:
    """What one pass sees; `kubelet` is the machine's kubelet heartbeat, when it was read (only
    while a power-off waits for the kubelet to stop)."""
    return Observations(
        job=job,
        node_exists=core_node is not None,
        node_ready=node_ready(core_node),
        node_cordoned=node_cordoned(core_node),
        node_metadata_applied=metadata_applied(core_node, labels, taints),
        node_unregistered=node_unregistered(core_node),
        drain=drain,
        lease=lease,
        lease_expires=lease_expires,
        power_state=power_state,
        power_state_observed_at=power_state_at,
        unresolved=dict(unresolved or {}),
        kubelet=kubelet,
    )


def wanted_metadata(
    node: Obj, spec: NodeSpec, group: GroupSpec | None
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Labels and taints the core Node must carry (`state.corenode.core_node_metadata`, as the
    planner's machine says): the Group's, then the Node's (which win)."""
    policy = group or GroupSpec()
    labels, taints = core_node_metadata(
        node["metadata"]["name"],
        spec.group,
        group_labels=policy.labels or {},
        group_taints=taints_of_models(policy.taints),
        labels=spec.labels or {},
        taints=taints_of_models(spec.taints),
    )
    return labels, [taint_object(taint) for taint in taints]
