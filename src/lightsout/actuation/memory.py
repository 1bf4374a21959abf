"""The in-memory port: the objects of a cluster a decision or a plan touches, kept in memory.

`MemoryMachine` is one machine's `MachinePort` (its status as a `MachineState`, its Lease, its
action Job, its core Node, its clone's address, the events posted on it) and `MemoryScale` the
`ScalePort` over a set of them. The effect interpreter (`actuation.interpreter`) and the plan
applier (`actuation.plans.PlanApplier`) run on them exactly as on the Kubernetes API:
`lightsout simulate` replays a trace on them (its machines extend `MemoryMachine` with their
true durations and draw), and the unit tests carry decisions out on them, making any step
refuse (`fail`) and reading the order the port was asked in (`calls`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lightsout.actuation.inputs import checked_status, merge_conditions
from lightsout.actuation.pool import RELEASED, PoolExhaustedError, exhausted, free_addresses
from lightsout.models.battery import Outage
from lightsout.models.group import AddressPool
from lightsout.planning.autoscaler.decisions import ScaleAction
from lightsout.planning.machine.effects import Decision, DeleteJob, Event, SetCondition, StartJob
from lightsout.planning.types import (
    Action,
    DrainStatus,
    JobPhase,
    LeaseState,
    MachineState,
    Observations,
    ObservedJob,
    ObservedPowerState,
)
from lightsout.state.types import ObjectKey

#: The steps a test can make refuse (`MemoryMachine.fail`).
LEASE, ADDRESS, CORE_NODE, STATUS = "lease", "address", "core-node", "status"


@dataclass
class MemoryPool:
    """A Group's `spec.addressPool` and which machine holds which of its addresses."""

    group: str
    spec: AddressPool
    holders: dict[str, str] = field(default_factory=dict)

    def take(self, machine: str) -> str:
        """The machine's address (its own, or the first free one); PoolExhaustedError."""
        if machine in self.holders:
            return self.holders[machine]
        free = free_addresses(self.spec, set(self.holders.values()))
        if not free:
            raise exhausted(self.group, self.spec)
        self.holders[machine] = free[0]
        return free[0]

    def release(self, machine: str) -> None:
        self.holders.pop(machine, None)


@dataclass
class MemoryJob:
    action: Action
    generation: int
    attempt: int
    state: JobPhase = JobPhase.RUNNING
    power_state: ObservedPowerState | None = None


@dataclass(kw_only=True)
class MemoryMachine:
    """One machine's objects in memory: the `MachinePort` of the replay and the unit tests."""

    state: MachineState
    #: Its Group's address pool, when it is a clone that joins by itself (shared by the Group).
    pool: MemoryPool | None = None
    #: Another operator holds its Lease.
    held_elsewhere: bool = False
    job: MemoryJob | None = None
    node_exists: bool = False
    node_ready: bool = False
    node_ready_since: dt.datetime | None = None
    #: A kubelet has registered the core Node (one made before power-on has not, yet).
    registered: bool = False
    cordoned: bool = False
    power: ObservedPowerState = ObservedPowerState.OFF
    #: `metadata.generation` of its spec: a new desired power state is a new intent.
    generation: int = 1
    events: list[Event] = field(default_factory=list)
    #: Steps that refuse (LEASE, ADDRESS, CORE_NODE, STATUS), for tests.
    fail: frozenset[str] = frozenset()
    #: What the port was asked, in order (None: not recorded, as in a replay).
    calls: list[str] | None = None
    #: The status a pass's readings wrote (`inputs.checked_status`: the last health check,
    #: measured power and inspection, the energy) and its conditions
    #: (`inputs.merge_conditions`), as the next pass reads them back.
    status: dict[str, Any] = field(default_factory=dict)

    def _called(self, what: str) -> bool:
        """Record `what`; True when the test made that step refuse."""
        if self.calls is not None:
            self.calls.append(what)
        return what in self.fail

    # ---------------------------------------------------------------- what a pass observes
    def pods_left(self) -> int:
        """Pods a drain still waits for (none here; the replay's machines count theirs)."""
        return 0

    def observations(self, now: dt.datetime) -> Observations:
        job = self.job
        return Observations(
            job=None
            if job is None
            else ObservedJob(
                job.action, job.generation, job.attempt, job.state, power_state=job.power_state
            ),
            node_exists=self.node_exists,
            node_ready=self.node_ready,
            node_cordoned=self.cordoned,
            node_metadata_applied=self.node_exists,
            node_unregistered=self.node_exists and not self.registered,
            drain=DrainStatus(self.pods_left()) if self.node_exists else None,
            lease=LeaseState.HELD_BY_OTHER if self.held_elsewhere else LeaseState.HELD_BY_ME,
            power_state=self.power,
            power_state_observed_at=now,
        )

    # ---------------------------------------------------------------- the MachinePort
    @property
    def phase(self) -> str | None:
        return str(self.state.phase)

    @property
    def renew_lease_every(self) -> float | None:
        return None  # a Lease in memory never expires

    def acquire_lease(self, now: dt.datetime) -> bool:  # noqa: ARG002 - never expires
        return not (self._called(LEASE) or self.held_elsewhere)

    def release_lease(self, now: dt.datetime) -> None:  # noqa: ARG002 - never expires
        self._called("release-lease")

    def allocate_address(self) -> str | None:
        if self._called(ADDRESS):
            return "refused"
        if self.pool is None:
            return None
        try:
            self.pool.take(self.state.name)
        except PoolExhaustedError as exc:
            return str(exc)
        return None

    def prepare_core_node(self) -> str | None:
        if self._called(CORE_NODE):
            return "refused"
        self.node_exists = True
        return None

    def write_status(self, machine: MachineState, decision: Decision, now: dt.datetime) -> bool:
        if self._called(STATUS):
            return False
        self.state = persisted(machine, decision, now)
        self.status.update(checked_status(decision))
        current = self.status.get("conditions") or []
        self.status["conditions"] = merge_conditions(current, decision, self.generation, now)
        return True

    def settle(self, previous_phase: str | None, phase: str) -> None:
        if previous_phase != phase and phase in RELEASED and self.pool is not None:
            self.pool.release(self.state.name)

    def post_event(self, event: Event) -> None:
        self._called(f"event {event.reason}")
        self.events.append(event)

    def start_job(self, effect: StartJob) -> None:
        self._called(f"start {effect.action}")
        wanted = (effect.action, effect.generation, effect.attempt)
        if self.job is None or (self.job.action, self.job.generation, self.job.attempt) != wanted:
            self.job = MemoryJob(*wanted)

    def delete_job(self, effect: DeleteJob) -> None:
        self._called(f"delete {effect.action}")
        self.job = None

    def cordon(self, unschedulable: bool) -> None:
        self._called("cordon" if unschedulable else "uncordon")
        self.cordoned = unschedulable

    def apply_metadata(self) -> None:
        self._called("metadata")

    def drain(self, force: bool) -> DrainStatus:
        self._called("drain forced" if force else "drain")
        return DrainStatus(self.pods_left())

    def delete_core_node(self, unregistered_only: bool) -> None:
        self._called("delete-node")
        if not (unregistered_only and self.registered):
            self.node_exists = self.node_ready = self.registered = False
            self.node_ready_since = None

    def set_desired(self, state: ObservedPowerState) -> None:
        self._called(f"desired {state}")
        if self.state.desired is not state:
            self.generation += 1
            self.state = replace(self.state, desired=state, intent_generation=self.generation)


def _mark(marks: dict[ObjectKey, str], machine: ObjectKey, value: str | None) -> None:
    """Store a machine's mark (an annotation, in memory); None removes it."""
    if value is None:
        marks.pop(machine, None)
    else:
        marks[machine] = value


def persisted(machine: MachineState, decision: Decision, now: dt.datetime) -> MachineState:
    """The machine as the next pass reads it back after its status was written."""
    return replace(
        machine,
        phase=decision.phase,
        phase_since=decision.phase_since or now,
        reason=decision.reason,
        message=decision.message,
        operation=decision.operation,
        learned=decision.learned or machine.learned,
        drift_corrections=(
            machine.drift_corrections
            if decision.drift_corrections is None
            else decision.drift_corrections
        ),
    )


@dataclass
class MemoryScale:
    """The `ScalePort` over machines in memory (the replay's, a test's), by key."""

    machines: Mapping[ObjectKey, MemoryMachine]
    #: Pods known by key (events are said only about these) and the uid of each.
    pods: Mapping[ObjectKey, str] = field(default_factory=dict)
    scaled: list[tuple[ObjectKey, bool, tuple[ScaleAction, ...], dt.datetime]] = field(
        default_factory=list
    )
    unneeded: dict[ObjectKey, str] = field(default_factory=dict)
    outages: dict[ObjectKey, Outage | None] = field(default_factory=dict)
    drain_deadlines: dict[ObjectKey, str] = field(default_factory=dict)
    #: Deferrable Jobs known by key, with their uid; released ones, and held ones' starts.
    jobs: Mapping[ObjectKey, str] = field(default_factory=dict)
    released: list[ObjectKey] = field(default_factory=list)
    job_starts: dict[ObjectKey, str] = field(default_factory=dict)
    #: The Groups' conditions the applier set, by (Group, type).
    group_conditions: dict[tuple[ObjectKey, str], SetCondition] = field(default_factory=dict)
    events: list[tuple[str, ObjectKey, Event]] = field(default_factory=list)
    #: Machines whose write loses a race (tests).
    conflicts: frozenset[ObjectKey] = frozenset()

    def set_desired(self, machine: ObjectKey, state: ObservedPowerState) -> bool:
        if machine in self.conflicts:
            return False
        self.machines[machine].set_desired(state)
        return True

    def record_scale(
        self, group: ObjectKey, up: bool, actions: Sequence[ScaleAction], now: dt.datetime
    ) -> None:
        self.scaled.append((group, up, tuple(actions), now))

    def record_outage(self, group: ObjectKey, outage: Outage | None) -> bool:
        self.outages[group] = outage
        return True

    def drain_mark(self, machine: ObjectKey) -> str | None:
        return self.drain_deadlines.get(machine)

    def mark_drain_by(self, machine: ObjectKey, deadline: str | None) -> None:
        _mark(self.drain_deadlines, machine, deadline)

    def unneeded_mark(self, machine: ObjectKey) -> str | None:
        return self.unneeded.get(machine)

    def mark_unneeded(self, machine: ObjectKey, since: str | None) -> None:
        _mark(self.unneeded, machine, since)

    def set_group_condition(
        self, group: ObjectKey, condition: SetCondition, now: dt.datetime
    ) -> bool:
        del now  # a condition's transition time is the API's business; here only its value
        self.group_conditions[(group, str(condition.type))] = condition
        return True

    def release_job(self, job: ObjectKey) -> bool:
        if job not in self.jobs:
            return False
        self.released.append(job)
        self.job_starts.pop(job, None)
        return True

    def mark_job_start(self, job: ObjectKey, start: str) -> None:
        self.job_starts[job] = start

    def uid(self, kind: str, key: ObjectKey) -> str | None:
        if kind == "Job":
            return self.jobs.get(key)
        if kind == "Node":
            return str(key) if key in self.machines else None
        if kind == "Group":  # the plan's Groups are the caller's: known by key
            return str(key)
        return self.pods.get(key)

    def post_event(self, kind: str, key: ObjectKey, event: Event) -> None:
        self.events.append((kind, key, event))
