"""The replay's side of the in-memory port: its machines and pods, and the plan applier's port.

A `SimMachine` is the operator's `MemoryMachine` (what the one effect interpreter carries
decisions out through) with the machine's truth: its power-on, boot and shutdown durations
(`trace.Durations`), its draw (`planning.energy.account`) and the pods bound to it; what a write
sets off elsewhere in the replay (a plan, a scheduling pass, an eviction) goes through `Cluster`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from lightsout.actuation.inputs import group_spec, machine_state, node_spec
from lightsout.actuation.memory import MemoryJob, MemoryMachine, MemoryPool, MemoryScale
from lightsout.actuation.pool import pool_of
from lightsout.models.battery import BatteryStatus, Outage
from lightsout.models.enums import DesiredPowerState
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.autoscaler.decisions import Hold, ScaleAction
from lightsout.planning.autoscaler.scheduling import HOSTNAME_LABEL
from lightsout.planning.energy import tariff
from lightsout.planning.energy.account import Account, Draw, Rate, is_powered
from lightsout.planning.energy.status import cpu_use
from lightsout.planning.machine.effects import Decision, Event, StartJob
from lightsout.planning.machine.healthjudge import assess
from lightsout.planning.machine.passes import Readings
from lightsout.planning.types import (
    DrainStatus,
    JobPhase,
    LeaseState,
    MachineState,
    ObservedPowerState,
    OperationResult,
    Phase,
)
from lightsout.simulate.replay.charges import Charges
from lightsout.simulate.replay.clock import Clock, Kind
from lightsout.simulate.traces.trace import Durations, Trace, snapshot_of
from lightsout.state.build import machine_of
from lightsout.state.measured import expected_resources
from lightsout.state.parse import format_time
from lightsout.state.resources import CPU, Resources
from lightsout.state.status import machine_status, node_status
from lightsout.state.types import CoreNode, Group, Machine, ObjectKey, Pod


class WaitCause(StrEnum):
    """Why the scheduler could not place a pod (`scheduler.Scheduler.schedule` decides it)."""

    #: A machine that could hold the pod is off, still coming up or going down (or no machine
    #: up could hold it at all): a power-on can end its wait.
    POWER_ON = "powerOn"
    #: Every machine that could hold the pod, were its pods gone, is up and schedulable, and
    #: other pods hold the room it needs (a GPU taken by another job): only they can end its
    #: wait, by finishing; no power-on would.
    BUSY_CAPACITY = "busyCapacity"


@dataclass
class SimPod:
    key: ObjectKey
    pod: Pod
    #: When it could have started at the earliest (arrival, or the CronJob's schedule time).
    arrival: float
    run_seconds: float
    cronjob: str | None = None
    node: str | None = None
    #: The node it last ran on (kept after it finished).
    host: str | None = None
    #: The node of the first machine the planner powered on for it, if any.
    powered_for: str | None = None
    #: The node it first ran on (its wait ends there; an evicted pod may end up elsewhere).
    first_host: str | None = None
    #: The node of the machine already coming up that the last plan before its start counted
    #: it on (`Explanations.coming`), if any: the machine it was waiting for.
    counted_on: str | None = None
    started: float | None = None
    #: Wait before the first start (an evicted pod's restart does not count again).
    wait: float | None = None
    #: That wait split by cause: seconds spent unplaced for each reason, closed intervals only
    #: (`waited` adds the open one).
    waits: dict[WaitCause, float] = field(default_factory=dict)
    #: Why the last scheduling pass before its first start could not place it, and since when.
    blocked: tuple[WaitCause, float] | None = None
    done: bool = False
    #: Bumped on eviction so the finish event of an earlier run is ignored.
    run: int = 0

    def block(self, cause: WaitCause, now: float) -> None:
        """The scheduler could not place it now, for `cause` (before its first start only:
        a restart after an eviction is not a wait)."""
        if self.wait is not None:
            return
        if self.blocked is None:
            self.blocked = (cause, self.arrival)  # scheduled the instant it arrived
        elif self.blocked[0] is not cause:
            self._close(now)
            self.blocked = (cause, now)

    def unblock(self, now: float) -> None:
        """It starts for the first time: its wait for the last cause ends."""
        self._close(now)
        self.blocked = None

    def waited(self, end: float) -> dict[WaitCause, float]:
        """Seconds it waited for each cause, up to its first start or else `end`."""
        waits = dict(self.waits)
        if self.blocked is not None:
            cause, since = self.blocked
            waits[cause] = waits.get(cause, 0.0) + max(0.0, end - since)
        return waits

    def _close(self, now: float) -> None:
        if self.blocked is not None:
            cause, since = self.blocked
            self.waits[cause] = self.waits.get(cause, 0.0) + max(0.0, now - since)


class Cluster(Protocol):
    """The rest of the replay, as a machine's port reaches it (the `Simulator`)."""

    clock: Clock

    def want_plan(self) -> None: ...
    def want_schedule(self) -> None: ...
    def evict(self, machine: SimMachine) -> None: ...
    def count_battery(self) -> None: ...
    def beside(self, machine: SimMachine) -> float: ...


@dataclass(kw_only=True)
class SimMachine(MemoryMachine):
    """A machine of the replay: its objects in memory plus its truth."""

    sim: Cluster = field(repr=False)
    template: Machine
    draw: Draw
    #: What its power-on Job, its boot and its shutdown Job really take.
    truth: Durations
    #: Its true energy, counted at its true draw (the operator's own estimate is the account
    #: its passes checkpoint into `status.energy`): the same `Account` arithmetic, two draws.
    energy: Account
    pods: dict[ObjectKey, SimPod] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    power_ons: int = 0
    #: Seconds since start of every power-on Job (for the wear figures).
    power_on_times: list[float] = field(default_factory=list)
    #: (seconds since start, phase) at every phase change.
    timeline: list[tuple[float, str]] = field(default_factory=list)
    #: Its energy by cause (`charges`), counted with `energy`.
    charges: Charges = field(default_factory=Charges)
    #: Why the last plan kept it on, if it did (`Plan.holds`): what its idle time is charged to.
    hold: Hold | None = None
    #: Its true energy priced as its Group prices each moment (series, tariff, one price),
    #: and weighed by its Group's carbon series, if any: counted with `energy`.
    cost: float = 0.0
    grams: float = 0.0
    #: The planner's `Machine` and `CoreNode` for the current state, and what they were built
    #: from: rebuilt only when that changes, so a snapshot costs no copy per machine and plan.
    record: tuple[tuple[Any, ...], Machine] | None = None
    core_node: tuple[tuple[Any, ...], CoreNode] | None = None
    #: Its Node as the trace gives it, its spec as read from there (what inspection is judged
    #: against), its Group's spec and its Group as the planner reads it (by key, for
    #: `machine_of`).
    manifest: Mapping[str, Any]
    spec: NodeSpec
    group_spec: GroupSpec | None
    groups: Mapping[ObjectKey, Group] = field(default_factory=dict)
    #: Its Group's health-check schedule (None: the Group checks nothing) and the newest
    #: simulated check's record, in the shape the health-result cache files a pod's under.
    health_schedule: str | None = None
    last_check: Mapping[str, Any] | None = None
    checks: int = 0
    #: What the machine really is (cpu, memory, ...: a check's `inspected`), where the replay
    #: knows it: its core Node offers that, and a driver that inspects reports it.
    inspected: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.template.kubernetes_node_name

    @property
    def labels(self) -> dict[str, str]:
        return {HOSTNAME_LABEL: self.name, **self.template.labels}

    @property
    def allocatable(self) -> Resources:
        """What its kubelet offers: what it really is, else what was declared."""
        if self.inspected is not None:
            spec_resources = {**(self.manifest.get("spec", {}).get("resources") or {})}
            spec_resources.pop("pinned", None)  # a kubelet reports the truth regardless
            node = {"spec": {"resources": spec_resources}, "status": {"inspected": self.inspected}}
            if (truth := expected_resources(node)) is not None:
                return truth
        return self.template.resources or Resources()

    def utilisation(self) -> float:
        """Its true CPU use (what it draws at; a pass reads it rounded, `Readings`)."""
        cpu = self.allocatable.get(CPU)
        return min(1.0, self.requested.get(CPU, 0) / cpu) if cpu else 0.0

    def count_energy(self) -> None:
        """Count its draw up to now at the state it was in (call before a change); the UPS
        feeding it, if any, is counted up to now too."""
        self.sim.count_battery()
        now, utilisation = self.sim.clock.time(), self.utilisation()
        self._price(self.energy.counted_to, now, utilisation)
        self.charges.charge(
            (now - self.energy.counted_to).total_seconds(),
            self.draw,
            self.state.phase,
            utilisation,
            pods=self.pods_left() > 0,
            hold=self.hold,
        )
        rate = Rate.of(self.draw, is_powered(self.state.phase), utilisation)
        self.energy = self.energy.counted(now, rate)

    def _price(self, start: datetime, end: datetime, utilisation: float) -> None:
        group = self.groups.get(self.template.group_key)
        if group is None or end <= start:
            return
        watts = self.draw.watts(is_powered(self.state.phase), utilisation)
        if group.electricity is not None:
            # A solar surplus is shared with what the Group's other machines draw now (they
            # are counted when they change, not when this one does: close, not exact).
            beside = self.sim.beside(self) if group.surplus is not None else 0.0
            self.cost += tariff.cost(
                group.electricity,
                watts,
                start,
                end,
                group.prices,
                surplus=group.surplus,
                beside=beside,
            )
        if group.carbon is not None:
            self.grams += group.carbon.integral(watts, start, end)

    def held(self, hold: Hold | None) -> None:
        """A plan kept it on for `hold` (None: it did not keep it)."""
        if hold is not self.hold:
            self.count_energy()  # the time so far goes to the old reason
            self.hold = hold

    def reconcile_soon(self, after: float = 0.0) -> None:
        """Reconcile it `after` seconds from now (on a watched change, or a Requeue)."""
        clock = self.sim.clock
        clock.wake(clock.now + after, Kind.RECONCILE, self.template.key)

    def as_machine(self) -> Machine:
        """The machine as a live snapshot reads its Node: its manifest with the desired state
        and the status its passes wrote, through `state.build.machine_of` (built again only
        when what that reads changed)."""
        state = self.state
        inspected = self.status.get("inspected")
        key = (state.phase, state.desired, state.phase_since, state.learned, repr(inspected))
        if self.record is None or self.record[0] != key:
            machine = machine_of(self.node_object(), self.groups, self.template.unresolved)
            if machine is None:  # its manifest was read at the start: it has a name and node
                raise AssertionError(f"{self.name}: its Node cannot be read")
            self.record = (key, machine)
        return self.record[1]

    def node_object(self) -> dict[str, Any]:
        """Its Node as the API would hold it now: the trace's manifest, the desired state set
        and the status written (its place in the state machine, written as the operator writes
        it, and what checks reported)."""
        state = self.state
        status = {
            **self.manifest.get("status", {}),
            **self.status,
            **machine_status(
                state.phase,
                state.phase_since,
                (state.desired, state.intent_generation),
                reason=state.reason,
                message=state.message,
                learned=state.learned,
            ),
        }
        spec = {**self.manifest.get("spec", {}), "desiredPowerState": str(state.desired)}
        return {**self.manifest, "spec": spec, "status": status}

    def as_core_node(self) -> CoreNode:
        """Its core Node as the planner reads it (built again only on a change). The one the
        operator makes before the first power-on carries no allocatable until a kubelet
        registers it, as live (the planner then reads the machine's expected figures)."""
        key = (self.cordoned, self.node_ready, self.node_ready_since, self.registered)
        if self.core_node is None or self.core_node[0] != key:
            node = CoreNode(
                name=self.name,
                labels=self.labels,
                taints=self.template.taints,
                allocatable=self.allocatable if self.registered else Resources(),
                unschedulable=self.cordoned,
                ready=self.node_ready,
                ready_since=self.node_ready_since,
            )
            self.core_node = (key, node)
        return self.core_node[1]

    def health_check(self, job: str) -> None:
        """Its Group's check reads its controller now: the true power state and, where the
        driver has a meter, the true draw, filed as the operator files a check pod's result;
        its next pass judges it (`planning.machine.healthjudge`, `planning.machine.passes`).
        Within a window the trace says its controller does not answer (`unreachable`), the
        check fails as a driver role words a refused connection."""
        now = self.sim.clock.time()
        powered = self.power is ObservedPowerState.ON
        driver = self.spec.driver
        metered = driver.entry.metered(driver.config)
        record: dict[str, Any] = {
            "job": job,
            "group": self.template.group,
            "started": format_time(now),
            "finished": format_time(now),
            "driver": driver.kind,
        }
        if self.truth.answers(self.sim.clock.now):
            record |= {
                "result": str(OperationResult.SUCCEEDED),
                "message": "",
                "powerState": str(self.power),
                "powerWatts": self.draw.watts(powered, self.utilisation()) if metered else None,
                "inspected": dict(self.inspected)
                if self.inspected is not None and driver.entry.inspects
                else None,
            }
        else:
            record |= {
                "result": str(OperationResult.FAILED),
                "message": f"reading the power state of {self.name} failed: connection refused "
                "(its controller does not answer: the trace's unreachable window)",
            }
        self.last_check = record
        self.checks += 1
        self.reconcile_soon()

    def readings(self) -> Readings:
        """What its pass reads beside the state machine's observations: the newest check,
        judged as the operator judges it."""
        status = node_status({"status": {**self.status, "phase": str(self.state.phase)}})
        lease = LeaseState.HELD_BY_OTHER if self.held_elsewhere else LeaseState.FREE
        seen = self.as_machine()  # its draw as the planner reads it, as the operator's pass does
        group = self.groups.get(self.template.group_key)
        surplus = group.surplus if group is not None else None
        return Readings(
            health=assess(status, self.last_check, lease),
            spec=self.spec,
            status=status,
            utilisation=cpu_use(self.requested.get(CPU, 0), self.allocatable.get(CPU)),
            draw=Draw.declared(seen.watts_on, seen.watts_idle, seen.watts_off),
            group=self.group_spec,
            prices=group.prices if group is not None else None,
            surplus=surplus,
            beside=self.sim.beside(self) if surplus is not None else 0.0,
        )

    # What the simulated cluster does when the port is written: the replay's physics.
    def pods_left(self) -> int:
        return sum(1 for p in self.pods.values() if not p.pod.daemonset)

    def write_status(self, machine: MachineState, decision: Decision, now: datetime) -> bool:
        changed = decision.phase is not self.state.phase
        if changed:
            self.count_energy()
        super().write_status(machine, decision, now)
        if changed:
            self.timeline.append((self.sim.clock.now, decision.phase.value))
            self.sim.want_plan()
            self.sim.want_schedule()
        return True

    def start_job(self, effect: StartJob) -> None:
        job = self.job
        super().start_job(effect)
        if self.job is job or self.job is None:
            return  # create-unless-exists: the Job is already there
        clock = self.sim.clock
        on = effect.action.target is ObservedPowerState.ON
        if on:
            self.power_ons += 1
            self.power_on_times.append(clock.now)
        seconds = self.truth.power_on_seconds if on else self.truth.shutdown_seconds
        clock.push(clock.now + seconds, Kind.JOB_DONE, (self, self.job))

    def job_done(self, job: MemoryJob) -> None:
        """The action Job succeeds after the machine's true duration."""
        if self.job is not job:
            return  # deleted meanwhile
        target = job.action.target
        job.state, job.power_state = JobPhase.SUCCEEDED, target
        if target is ObservedPowerState.ON:
            self.power = ObservedPowerState.ON
            self.sim.clock.push(self.sim.clock.now + self.truth.boot_seconds, Kind.NODE_READY, self)
        else:
            self.power = ObservedPowerState.OFF
            self.node_ready = False
        self.reconcile_soon()

    def booted(self) -> None:
        """The core Node registers Ready its boot time after the power-on."""
        if self.power is not ObservedPowerState.ON:
            return  # powered off again before it finished booting
        self.node_exists = self.node_ready = self.registered = True
        self.node_ready_since = self.sim.clock.time()
        self.reconcile_soon()
        self.sim.want_schedule()

    def cordon(self, unschedulable: bool) -> None:
        super().cordon(unschedulable)
        if not unschedulable:
            self.sim.want_schedule()

    def drain(self, force: bool) -> DrainStatus:
        # The replay's pods honour no budget: forced or not, they move the same way.
        self.sim.evict(self)
        self.reconcile_soon()  # the drain's progress is seen at once
        return super().drain(force)


@dataclass
class SimScale(MemoryScale):
    """The plan applier's port in the replay: a scale is recorded on the Group the planner
    reads next (its `lastScaleUp` / `lastScaleDown`)."""

    machines: Mapping[ObjectKey, SimMachine]
    groups: dict[ObjectKey, Group] = field(default_factory=dict)
    #: The engine's release of a held deferrable Job (its pod is created then).
    on_release: Callable[[ObjectKey], bool] | None = None

    def release_job(self, job: ObjectKey) -> bool:
        return self.on_release is not None and self.on_release(job)

    def set_desired(self, machine: ObjectKey, state: ObservedPowerState) -> bool:
        found = self.machines[machine]
        before = found.state.desired
        written = super().set_desired(machine, state)
        if found.state.desired is not before:
            found.reconcile_soon()  # the machine's handler watches its spec
        return written

    def record_scale(
        self,
        group: ObjectKey,
        up: bool,
        actions: Sequence[ScaleAction],  # noqa: ARG002 - the replay's Groups keep no reason
        now: datetime,
    ) -> None:
        found = self.groups[group]
        scaled = replace(found, last_scale_up=now) if up else replace(found, last_scale_down=now)
        self.groups[group] = scaled

    def record_outage(self, group: ObjectKey, outage: Outage | None) -> bool:
        found = self.groups[group]
        status = found.battery_status or BatteryStatus()
        self.groups[group] = replace(
            found, battery_status=status.model_copy(update={"outage": outage})
        )
        return super().record_outage(group, outage)

    def post_event(self, kind: str, key: ObjectKey, event: Event) -> None:
        pass  # nobody reads a replay's plan events


def draw_of(trace: Trace, machine: Machine) -> Draw:
    """What the machine really draws: the trace's truth, else what it declares."""
    truth = trace.durations_of(machine.key.name).watts
    return Draw.declared(*(truth or (machine.watts_on, machine.watts_idle, machine.watts_off)))


def read_machines(
    trace: Trace, overrides: Sequence[str], all_on: bool, sim: Cluster
) -> tuple[tuple[Group, ...], list[SimMachine]]:
    """The trace's Groups (with `overrides`) and its machines, Off at the start; `all_on`
    makes every machine desired On (always-on)."""
    groups_raw, nodes_raw = trace.groups(overrides), trace.nodes()
    snapshot = snapshot_of(groups_raw, nodes_raw, trace.configmaps)
    if snapshot.problems:
        raise ValueError("trace machines: " + "; ".join(snapshot.problems))
    group_specs = {str(g["metadata"]["name"]): group_spec(g) for g in groups_raw}
    pools = {
        name: MemoryPool(name, spec.address_pool)
        for name, spec in group_specs.items()
        if spec.address_pool is not None
    }
    specs = {str(n["metadata"]["name"]): (n, node_spec(n)) for n in nodes_raw}
    groups = {group.key: group for group in snapshot.groups}
    out: list[SimMachine] = []
    for template in snapshot.machines:
        manifest, spec = specs[template.key.name]
        group = group_specs.get(template.group)
        # As the operator starts: from the spec's desired power state (a machine pinned On
        # with autoscaling off stays On all week), or On for every machine always-on.
        on = all_on or template.desired is DesiredPowerState.ON
        state = replace(
            machine_state(manifest, spec, group),
            phase=Phase.OFF,
            desired=ObservedPowerState.ON if on else ObservedPowerState.OFF,
            intent_generation=1,
            phase_since=trace.start,
        )
        truth = trace.durations_of(template.key.name)
        machine = SimMachine(
            sim=sim,
            state=state,
            pool=pools.get(template.group) if pool_of(spec, group) is not None else None,
            template=template,
            draw=draw_of(trace, template),
            truth=truth,
            inspected=truth.inspected,
            energy=Account.opened(trace.start, Rate()),
            timeline=[(0.0, Phase.OFF.value)],
            manifest=manifest,
            spec=spec,
            group_spec=group,
            groups=groups,
            health_schedule=(
                group.health_check.schedule
                if group is not None and group.health_check.enabled
                else None
            ),
        )
        out.append(machine)
    return snapshot.groups, out
