"""The observe step of a pass: one machine's objects into what its pass decides from.

A pass reads the machine's objects from the watch caches (`MachineView`) and a few
from the API itself (`LiveReads`: the core Node once its providerID is set, a Lease whose
namespace is not watched, the kubelet's heartbeat while a power-off waits for the OS, a live
count of the pods a drain still waits for). `observe` turns them into the machine's
`MachineState`, the state machine's `Observations` and the `Readings` the pass reads beside them
(the newest health check judged, CPU use, draw, provider IDs), which
`planning.machine.passes.pass_decision` takes, as the replay's passes do. Pure: every read is
made before, so a unit test feeds it any objects.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightsout.actuation import inputs
from lightsout.actuation.nodeops import pods_to_drain
from lightsout.execution import energy, health, leases, providerid
from lightsout.execution.results import observe_job
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.machine import fsm, healthjudge
from lightsout.planning.machine.passes import Readings
from lightsout.planning.types import (
    Action,
    DrainStatus,
    MachineState,
    Observations,
    ObservedJob,
    Phase,
)
from lightsout.state.references import Unresolved
from lightsout.state.series import Series
from lightsout.state.status import node_status

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class MachineView:
    """What the watch caches hold about one machine at the start of a pass."""

    node: Obj
    spec: NodeSpec
    group_spec: GroupSpec | None = None
    #: Its Group's price series, per kWh (`state.series`; None: none, or unreadable).
    prices: Series | None = None
    #: Its Group's solar surplus in W (`state.series.surplus`; None: none known), and what the
    #: Group's other machines draw by their accounts (the surplus is shared by draw).
    surplus: Series | None = None
    beside: float = 0.0
    jobs: Sequence[Obj] = ()
    #: Pods of each action Job, by Job name.
    job_pods: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    #: `FailedMount` events of those pods, by Job name (a real kubelet says only there that a
    #: pod's Secret or ConfigMap is missing).
    job_events: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    core_node: Obj | None = None
    lease: Obj | None = None
    #: False when the Lease's namespace is not watched: the pass reads the Lease live.
    lease_cached: bool = True
    #: Pods on the core Node (filled unless the machine is Off): what a drain waits for, and
    #: whose cpu requests set the machine's energy draw.
    pods_on_node: Sequence[Obj] = ()
    #: Per power action, the first object its Job needs that is missing (`state.references`).
    unresolved: Mapping[Action, Unresolved] = field(default_factory=dict)
    #: Results of health-check pods that named this machine (`health.pod_record`).
    health: Sequence[Obj] = ()
    #: Why the machine is left out of its Group's health check (`Caches.health_problem`).
    health_problem: Unresolved | None = None


@dataclass(frozen=True)
class LiveReads:
    """What a pass reads from the API itself rather than from the watch caches."""

    #: The core Node, its providerID set if it lacked one (`providerid.ensure`).
    core_node: Obj | None
    #: The machine's Lease: the cached one, or read live when its namespace is not watched.
    lease: Obj | None
    #: The kubelet's heartbeat Lease, read only when `needs_kubelet` says so.
    kubelet_lease: Obj | None = None
    #: Pods a drain still waits for, by a live list when the cache says none are left (a pod
    #: bound just before the cordon may not be cached yet); None when not draining.
    pods_left: int | None = None


@dataclass(frozen=True)
class Observed:
    """What one pass decides from."""

    machine: MachineState
    observations: Observations
    readings: Readings


def job_of(view: MachineView, machine: MachineState, now: dt.datetime) -> ObservedJob | None:
    """The action Job the state machine observes (`fsm.select_job` among the machine's)."""
    observed = []
    for job in view.jobs:
        name = job["metadata"]["name"]
        found = observe_job(job, view.job_pods.get(name, ()), now, view.job_events.get(name, ()))
        if found is not None:
            observed.append(found)
    return fsm.select_job(observed, machine.operation)


@dataclass(frozen=True)
class Needed:
    """Which live reads a pass needs besides the core Node and the Lease."""

    #: The kubelet's heartbeat: only while a power-off waits for the kubelet to stop (its
    #: evidence of a shut-down OS), so one GET per pass of such a machine, none for others.
    kubelet: bool
    #: A live count of the pods on the core Node: draining, and the cache says none are left
    #: ("drained", which powers the machine off, is believed only after a live list agrees).
    drain_count: bool
    #: What deciding that read of the machine (its state and its Job), which `observe` reuses.
    machine: MachineState
    job: ObservedJob | None


def needed(view: MachineView, now: dt.datetime) -> Needed:
    machine = inputs.machine_state(view.node, view.spec, view.group_spec)
    job = job_of(view, machine, now)
    pending = machine.operation is not None and machine.operation.cut_pending
    waiting = pending or (job is not None and bool(job.values.get("cut_pending")))
    draining = machine.phase == Phase.DRAINING and view.core_node is not None
    return Needed(waiting, draining and cached_pods_left(view) == 0, machine, job)


def cached_pods_left(view: MachineView) -> int:
    """Pods a drain waits for, as the cache holds them."""
    return len(pods_to_drain(view.pods_on_node))


def observe(
    view: MachineView,
    reads: LiveReads,
    *,
    identity: str,
    last_drain: DrainStatus | None,
    now: dt.datetime,
    need: Needed | None = None,
) -> Observed:
    """The machine, its observations and its readings from `view` and `reads`; `last_drain`
    is what the previous pass's drain reported (which PodDisruptionBudget blocked it), `need`
    what `needed` read of the machine for this pass (read again when not given)."""
    node, spec, group = view.node, view.spec, view.group_spec
    need = need or needed(view, now)
    machine, job = need.machine, need.job
    core_node = reads.core_node
    drain = None
    if machine.phase == Phase.DRAINING and core_node is not None:
        left = reads.pods_left if reads.pods_left is not None else cached_pods_left(view)
        drain = DrainStatus(
            pods_remaining=left,
            blocked_by=last_drain.blocked_by if last_drain and left else None,
            blocked_message=last_drain.blocked_message if last_drain and left else "",
        )
    lease = leases.lease_state(reads.lease, identity, now)
    status = node_status(node)
    checked = healthjudge.assess(status, health.newest(view.health, spec.group), lease)
    if view.health_problem is not None:
        checked = healthjudge.not_checked(checked, view.health_problem)
    else:
        checked = healthjudge.included_again(checked, status)
    labels, taints = inputs.wanted_metadata(node, spec, group)
    observations = inputs.observations(
        job=job,
        core_node=core_node,
        labels=labels,
        taints=taints,
        drain=drain,
        lease=lease,
        lease_expires=leases.lease_expiry(reads.lease),
        power_state=checked.power_state,
        power_state_at=checked.power_state_at,
        unresolved=view.unresolved,
        kubelet=leases.kubelet_heartbeat(reads.kubelet_lease),
    )
    readings = Readings(
        health=checked,
        spec=spec,
        status=status,
        utilisation=energy.cpu_utilisation(node, core_node, view.pods_on_node),
        draw=energy.draw(node),
        group=group,
        prices=view.prices,
        surplus=view.surplus,
        beside=view.beside,
        provider_ids=providerid.ids(core_node, providerid.wanted(node, spec)),
    )
    return Observed(machine, observations, readings)
