"""The discrete-event replay: a trace, in simulated time, against the production decision code.

`replay(trace, options)` is called by `lightsout simulate` and the benchmarks. It owns a
simulated cluster (pods, core Nodes, action Jobs, the machines' power) and a clock, and for
every decision calls the operator's own pure functions with inputs it builds the way the
handlers build them:

- the planner `lightsout.planning.autoscale.plan(snapshot, now)` on a `Snapshot` of the
  simulated cluster, woken like the autoscaler handler wakes it: after every change
  (debounced by the handler's `DEBOUNCE`) and at `wake.next_wake` deadlines; its power actions
  set the machines' desiredPowerState (bumping their generation) and the Group's
  lastScaleUp/Down, as `execution.scaling.PlanApplier` does;
- the power state machine `lightsout.planning.fsm.decide(machine, observations, now)` on each
  machine, reconciled whenever something it watches changes and when its `Requeue` is due;
  its effects are carried out on the simulated cluster: a `StartJob` runs an action Job that
  succeeds after the machine's true duration (`trace.Durations`) and reports the power state,
  the core Node registers Ready `boot_seconds` after a power-on, `Drain` evicts pods (which go
  back to Pending and start over), `DeleteCoreNode` removes it;
- a kube-scheduler model that binds pending pods to Ready, schedulable nodes using the
  production fit check (`planning.scheduling.fits`) and scores candidates with LeastAllocated
  (kube-scheduler's default) or MostAllocated; a pod no node takes is marked Unschedulable,
  which is what the planner reacts to.

Energy is counted per machine with `planning.energy` (the same model as the operator's own
accounting); `simulate.report` turns the result into figures.

The `reactive` policy models cluster-autoscaler's defaults with the same placement code: a scan
every 10 s instead of event-driven planning, 10 minutes unneeded, a 0.5 utilisation threshold
and a 10 minute scale-down delay after a scale-up (see docs/simulator.md for what differs).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

from lightsout.actuation.inputs import group_spec, machine_state, node_spec
from lightsout.actuation.interpreter import carry_out
from lightsout.actuation.memory import MemoryJob, MemoryMachine, MemoryPool, MemoryScale
from lightsout.actuation.plans import PlanApplier
from lightsout.actuation.pool import pool_of
from lightsout.models.enums import PowerState as DesiredPowerState
from lightsout.planning.autoscale import plan
from lightsout.planning.decisions import Plan, PowerOn, ScaleAction
from lightsout.planning.effects import Decision, Event, StartJob
from lightsout.planning.energy import Draw, Ledger, is_powered
from lightsout.planning.fsm import decide
from lightsout.planning.learning import median
from lightsout.planning.scheduling import HOSTNAME_LABEL, NodeView, fits
from lightsout.planning.types import (
    DrainStatus,
    JobPhase,
    MachineState,
    Phase,
    PowerState,
)
from lightsout.planning.wake import next_wake
from lightsout.simulate.trace import Trace
from lightsout.state import (
    GROUPS_KEY,
    MACHINES_KEY,
    CoreNode,
    ExpectedPod,
    Group,
    Machine,
    ObjectKey,
    Pod,
    Snapshot,
    cron,
    snapshot_from,
)
from lightsout.state.parse import scheduling_requirements
from lightsout.state.resources import CPU, MEMORY, Resources

#: The autoscaler handler's debounce (`handlers.autoscale.DEBOUNCE`): a burst makes one plan.
PLAN_DEBOUNCE = 0.1
#: cluster-autoscaler's defaults, for the reactive baseline.
CA_SCAN_SECONDS = 10.0
CA_UNNEEDED_SECONDS = 600
CA_UTILIZATION_THRESHOLD = 0.5
CA_DELAY_AFTER_ADD_SECONDS = 600


class Policy(StrEnum):
    #: The built-in planner with the Groups as written in the trace (and --set).
    LIGHTSOUT = "lightsout"
    #: The same placement code driven like cluster-autoscaler with its defaults.
    REACTIVE = "reactive"
    #: Every machine powered on for the whole trace, nothing ever powered off.
    ALWAYS_ON = "always-on"


class Scoring(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"


@dataclass(frozen=True)
class Options:
    policy: Policy = Policy.LIGHTSOUT
    scoring: Scoring = Scoring.LEAST_ALLOCATED
    #: `path=value` overrides applied to every Group manifest, e.g.
    #: `spec.scaleDown.unneededSeconds=300` (a leading `group.` is accepted).
    overrides: tuple[str, ...] = ()
    #: Tell the planner about CronJobs' next runs (`Snapshot.expected`) so it pre-warms.
    prewarm: bool = True


class _Kind(IntEnum):
    """Event kinds, in the order they are handled at one instant."""

    JOB_DONE = 0
    NODE_READY = 1
    POD_DONE = 2
    CRON = 3
    ARRIVAL = 4
    RECONCILE = 5
    SCHEDULE = 6
    PLAN = 7


@dataclass
class SimPod:
    key: ObjectKey
    uid: str
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
    unschedulable_since: float | None = None
    done: bool = False
    #: Bumped on eviction so the finish event of an earlier run is ignored.
    run: int = 0


@dataclass(kw_only=True)
class SimMachine(MemoryMachine):
    """A machine of the replay: its objects in memory (the port the operator's own interpreter
    carries decisions out through) plus its truth: durations, draw, the pods bound to it."""

    sim: Simulator = field(repr=False)
    template: Machine
    draw: Draw
    power_on_seconds: float
    boot_seconds: float
    shutdown_seconds: float
    ledger: Ledger
    pods: dict[ObjectKey, SimPod] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    next_reconcile: float | None = None
    power_ons: int = 0
    #: Seconds since start of every power-on Job (for the wear figures).
    power_on_times: list[float] = field(default_factory=list)
    #: (seconds since start, phase) at every phase change.
    timeline: list[tuple[float, str]] = field(default_factory=list)
    #: The planner's `Machine` and `CoreNode` for the current state, and what they were built
    #: from: rebuilt only when that changes, so a snapshot costs no copy per machine and plan.
    record: tuple[tuple[Any, ...], Machine] | None = None
    core_node: tuple[tuple[Any, ...], CoreNode] | None = None

    @property
    def name(self) -> str:
        return self.template.kubernetes_node_name

    @property
    def allocatable(self) -> Resources:
        return self.template.resources or Resources()

    def utilisation(self) -> float:
        cpu = self.allocatable.get(CPU)
        return min(1.0, self.requested.get(CPU, 0) / cpu) if cpu else 0.0

    # What the simulated cluster does when the port is written: the replay's physics.
    def pods_left(self) -> int:
        return sum(1 for p in self.pods.values() if not p.pod.daemonset)

    def write_status(self, machine: MachineState, decision: Decision, now: datetime) -> bool:
        before = self.state.phase
        if decision.phase is not before:
            self.sim.count_energy(self)
        super().write_status(machine, decision, now)
        if decision.phase is not before:
            self.timeline.append((self.sim.now, decision.phase.value))
            self.sim.want_plan()
            self.sim.want_schedule()
        return True

    def start_job(self, effect: StartJob) -> None:
        job = self.job
        super().start_job(effect)
        if self.job is job or self.job is None:
            return  # create-unless-exists: the Job is already there
        on = effect.action.target is PowerState.ON
        if on:
            self.power_ons += 1
            self.power_on_times.append(self.sim.now)
        seconds = self.power_on_seconds if on else self.shutdown_seconds
        self.sim.push(self.sim.now + seconds, _Kind.JOB_DONE, (self.template.key, self.job))

    def cordon(self, unschedulable: bool) -> None:
        super().cordon(unschedulable)
        if not unschedulable:
            self.sim.want_schedule()

    def drain(self) -> DrainStatus:
        self.sim.evict(self)
        self.sim.reconcile_soon(self, self.sim.now)  # the drain's progress is seen at once
        return super().drain()


class _SimScale(MemoryScale):
    """The plan applier's port in the replay: a scale is recorded on the Group the planner
    reads next (its `lastScaleUp` / `lastScaleDown`)."""

    def __init__(self, sim: Simulator) -> None:
        super().__init__(machines=sim.machines)
        self.sim = sim

    def set_desired(self, machine: ObjectKey, state: PowerState) -> bool:
        found = self.sim.machines[machine]
        before = found.state.desired
        super().set_desired(machine, state)
        if found.state.desired is not before:
            self.sim.reconcile_soon(found, self.sim.now)
        return True

    def record_scale(
        self,
        group: ObjectKey,
        up: bool,
        actions: Sequence[ScaleAction],  # noqa: ARG002 - the replay's Groups keep no reason
        now: datetime,
    ) -> None:
        found = self.sim.group_index[group]
        scaled = replace(found, last_scale_up=now) if up else replace(found, last_scale_down=now)
        self.sim.group_index[group] = scaled

    def post_event(self, kind: str, key: ObjectKey, event: Event) -> None:
        pass  # nobody reads a replay's plan events


@dataclass
class Result:
    """What a replay produced; `simulate.report` computes the figures from it."""

    trace: Trace
    options: Options
    machines: list[SimMachine]
    groups: tuple[Group, ...]
    pods: list[SimPod]
    plans: int = 0
    decisions: int = 0
    skipped_cron_runs: int = 0
    replaced_cron_runs: int = 0


def apply_overrides(manifest: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of a Group manifest with `spec.a.b=value` settings (values read as YAML)."""
    import yaml

    out: dict[str, Any] = _deep_copy(manifest)
    for setting in overrides:
        path, sep, raw = setting.partition("=")
        if not sep or not path:
            raise ValueError(f"--set {setting!r}: expected PATH=VALUE")
        parts = path.split(".")
        if parts[0] == "group":
            parts = parts[1:]
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ValueError(f"--set {setting!r}: {part} is not an object")
        target[parts[-1]] = yaml.safe_load(raw)
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


class Simulator:
    """One replay. Use `replay()`; the class holds the simulated cluster between events."""

    def __init__(self, trace: Trace, options: Options) -> None:
        self.trace = trace
        self.options = options
        self.start = trace.start
        self.end = trace.duration_seconds
        self.queue: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.now = 0.0
        self.result_plans = 0
        self.result_decisions = 0
        self.skipped = 0
        self.replaced = 0
        self.unneeded: dict[ObjectKey, datetime] = {}
        self.plan_at: float | None = None
        #: Reactive scans: whether anything changed since the last plan, and the plan's next
        #: deadline; a scan with neither would return the same plan, so it is skipped.
        self.changed = True
        self.deadline: float | None = None
        self.schedule_due = False
        self.pods: list[SimPod] = []
        self.pending: dict[ObjectKey, SimPod] = {}
        self.cron_active: dict[str, list[SimPod]] = {}
        #: Per CronJob (by key): its spec and its fire times (seconds since start).
        self.cron_specs: list[cron.CronSpec] = []
        self.cron_times: dict[str, list[float]] = {}
        self.groups, machines = self._read_machines()
        self.group_index = {g.key: g for g in self.groups}
        self.machines = {m.template.key: m for m in machines}
        self.by_node = {m.name: m for m in machines}
        #: The operator's plan applier, writing through the replay's port.
        self.applier = PlanApplier()
        self.scale = _SimScale(self)

    # ------------------------------------------------------------------ setup
    def _read_machines(self) -> tuple[tuple[Group, ...], list[SimMachine]]:
        manifests = list(self.trace.machines)
        groups_raw = [m for m in manifests if m.get("kind") == "Group"]
        nodes_raw = [m for m in manifests if m.get("kind") == "Node"]
        overrides = list(self.options.overrides)
        if self.options.policy is Policy.REACTIVE:
            overrides = [
                *overrides,
                f"spec.scaleDown.unneededSeconds={CA_UNNEEDED_SECONDS}",
                f"spec.scaleDown.utilizationThreshold={CA_UTILIZATION_THRESHOLD}",
                f"spec.scaleDown.stabilizationWindowSeconds={CA_DELAY_AFTER_ADD_SECONDS}",
            ]
        groups_raw = [apply_overrides(g, overrides) for g in groups_raw]
        snapshot = snapshot_from({GROUPS_KEY: groups_raw, MACHINES_KEY: nodes_raw})
        if snapshot.problems:
            raise ValueError("trace machines: " + "; ".join(snapshot.problems))
        out: list[SimMachine] = []
        start = self.start
        group_specs = {str(g["metadata"]["name"]): group_spec(g) for g in groups_raw}
        pools = {
            name: MemoryPool(name, spec.address_pool)
            for name, spec in group_specs.items()
            if spec.address_pool is not None
        }
        specs = {str(n["metadata"]["name"]): (n, node_spec(n)) for n in nodes_raw}
        for template in snapshot.machines:
            manifest, spec = specs[template.key.name]
            group = group_specs.get(template.group)
            truth = self.trace.durations_of(template.key.name)
            # As the operator starts: from the spec's desired power state (a machine pinned On
            # with autoscaling off stays On all week), or On for every machine always-on.
            on = self.options.policy is Policy.ALWAYS_ON or template.desired is DesiredPowerState.ON
            state = replace(
                machine_state(manifest, spec, group),
                phase=Phase.OFF,
                desired=PowerState.ON if on else PowerState.OFF,
                intent_generation=1,
                phase_since=start,
            )
            machine = SimMachine(
                sim=self,
                state=state,
                pool=pools.get(template.group) if pool_of(spec, group) is not None else None,
                template=template,
                draw=Draw.declared(template.watts_on, template.watts_idle, template.watts_off),
                power_on_seconds=truth.power_on_seconds,
                boot_seconds=truth.boot_seconds,
                shutdown_seconds=truth.shutdown_seconds,
                ledger=Ledger(counted_to=start),
                timeline=[(0.0, Phase.OFF.value)],
            )
            out.append(machine)
        return snapshot.groups, out

    def push(self, at: float, kind: _Kind, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, int(kind), self.seq, payload))

    def _time(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def _seconds(self, moment: datetime) -> float:
        return (moment - self.start).total_seconds()

    # ------------------------------------------------------------------ the loop
    def run(self) -> Result:
        for index, trace_pod in enumerate(self.trace.pods):
            self.push(trace_pod.at, _Kind.ARRIVAL, index)
        end_time = self._time(self.end)
        for cronjob in self.trace.cronjobs:
            spec = cron.read(cronjob)
            times = cron.fire_times(spec, self.start, end_time)
            for moment in times:
                self.push(self._seconds(moment), _Kind.CRON, (spec, moment))
            self.cron_specs.append(spec)
            self.cron_times[spec.key] = [self._seconds(t) for t in times]
        for machine in self.machines.values():
            self.reconcile_soon(machine, 0.0)
        if self.options.policy is Policy.REACTIVE:
            self.push(0.0, _Kind.PLAN, "scan")
        else:
            self.want_plan()
        handlers: dict[int, Callable[[Any], None]] = {
            _Kind.JOB_DONE: self._job_done,
            _Kind.NODE_READY: self._node_ready,
            _Kind.POD_DONE: self._pod_done,
            _Kind.CRON: self._cron_fire,
            _Kind.ARRIVAL: self._arrival,
            _Kind.RECONCILE: self._reconcile_event,
            _Kind.SCHEDULE: lambda _: self._schedule(),
            _Kind.PLAN: self._plan_event,
        }
        while self.queue and self.queue[0][0] <= self.end:
            at, kind, _, payload = heapq.heappop(self.queue)
            self.now = at
            handlers[kind](payload)
        self.now = self.end
        for machine in self.machines.values():
            self.count_energy(machine)
        return Result(
            trace=self.trace,
            options=self.options,
            machines=list(self.machines.values()),
            groups=self.groups,
            pods=self.pods,
            plans=self.result_plans,
            decisions=self.result_decisions,
            skipped_cron_runs=self.skipped,
            replaced_cron_runs=self.replaced,
        )

    # ------------------------------------------------------------------ pods
    def _new_pod(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        owner_kind: str | None,
        *,
        run_seconds: float,
        cronjob: str | None = None,
    ) -> None:
        key = ObjectKey(namespace, name)
        uid = f"sim-{len(self.pods)}"
        pod = Pod(
            key=key,
            uid=uid,
            phase="Pending",
            node_name=None,
            scheduling=scheduling_requirements(spec),
            owner_kind=owner_kind,
            created=self._time(self.now),
        )
        sim = SimPod(key, uid, pod, self.now, run_seconds, cronjob=cronjob)
        self.pods.append(sim)
        self.pending[key] = sim
        if cronjob is not None:
            self.cron_active.setdefault(cronjob, []).append(sim)
        self.want_schedule()

    def _arrival(self, index: int) -> None:
        p = self.trace.pods[index]
        self._new_pod(p.namespace, p.name, p.spec, p.owner_kind, run_seconds=p.run_seconds)

    def _cron_fire(self, payload: tuple[cron.CronSpec, datetime]) -> None:
        spec, moment = payload
        active = [p for p in self.cron_active.get(spec.key, []) if not p.done]
        self.cron_active[spec.key] = active
        if active and spec.concurrency_policy == cron.FORBID:
            self.skipped += 1
            return
        if active and spec.concurrency_policy == cron.REPLACE:
            for pod in active:
                self._finish(pod)
            self.replaced += len(active)
        run = self.trace.cron_run_seconds.get(spec.key, 60.0)
        name = cron.job_name(spec, moment)
        self._new_pod(spec.namespace, name, spec.pod_spec, "Job", run_seconds=run, cronjob=spec.key)

    def _pod_done(self, payload: tuple[SimPod, int]) -> None:
        pod, run = payload
        if run == pod.run and not pod.done:
            self._finish(pod)

    def _finish(self, pod: SimPod) -> None:
        """The pod ends (succeeded, or deleted by a CronJob's Replace)."""
        pod.done = True
        self.pending.pop(pod.key, None)
        if pod.node is not None:
            self._unbind(pod)
        self.want_schedule()
        self.want_plan()

    def _bind(self, pod: SimPod, machine: SimMachine) -> None:
        self.count_energy(machine)
        pod.node = pod.host = machine.name
        pod.started = self.now
        if pod.wait is None:
            pod.wait = self.now - pod.arrival
            pod.first_host = machine.name
        pod.unschedulable_since = None
        pod.pod = replace(
            pod.pod, phase="Running", node_name=machine.name, unschedulable_since=None
        )
        machine.pods[pod.key] = pod
        for name, value in pod.pod.requests:
            machine.requested[name] = machine.requested.get(name, 0) + value
        self.pending.pop(pod.key, None)
        self.push(self.now + pod.run_seconds, _Kind.POD_DONE, (pod, pod.run))

    def _unbind(self, pod: SimPod) -> None:
        machine = self.by_node[pod.node] if pod.node else None
        if machine is None:
            return
        self.count_energy(machine)
        machine.pods.pop(pod.key, None)
        for name, value in pod.pod.requests:
            machine.requested[name] = machine.requested.get(name, 0) - value
        pod.node = None

    def evict(self, machine: SimMachine) -> None:
        """Drain: every pod on the node goes back to Pending and starts over elsewhere."""
        for pod in list(machine.pods.values()):
            self._unbind(pod)
            pod.run += 1
            pod.started = None
            pod.pod = replace(pod.pod, phase="Pending", node_name=None)
            self.pending[pod.key] = pod
        self.want_schedule()

    # ------------------------------------------------------------------ scheduler
    def want_schedule(self) -> None:
        if not self.schedule_due:
            self.schedule_due = True
            self.push(self.now, _Kind.SCHEDULE)

    def _schedulable(self) -> list[SimMachine]:
        return [
            m
            for m in self.machines.values()
            if m.node_exists and m.node_ready and not m.cordoned and m.state.phase is Phase.READY
        ]

    def _view(self, machine: SimMachine) -> NodeView:
        return NodeView(
            name=machine.name,
            labels={HOSTNAME_LABEL: machine.name, **machine.template.labels},
            taints=machine.template.taints,
            allocatable=machine.allocatable,
            requested=Resources.of({k: v for k, v in machine.requested.items() if v}),
        )

    def _score(self, machine: SimMachine, pod: SimPod) -> float:
        """kube-scheduler's NodeResourcesFit score over cpu and memory (0..1, higher wins)."""
        shares = []
        for name in (CPU, MEMORY):
            capacity = machine.allocatable.get(name)
            if capacity:
                used = machine.requested.get(name, 0) + pod.pod.requests.get(name)
                shares.append(min(1.0, used / capacity))
        used_share = sum(shares) / len(shares) if shares else 0.0
        if self.options.scoring is Scoring.MOST_ALLOCATED:
            return used_share
        return 1.0 - used_share

    def _schedule(self) -> None:
        self.schedule_due = False
        if not self.pending:
            return
        nodes = self._schedulable()
        changed = False
        for pod in sorted(self.pending.values(), key=lambda p: (p.arrival, p.key)):
            best: tuple[float, str] | None = None
            chosen: SimMachine | None = None
            for machine in nodes:
                if not fits(pod.pod, self._view(machine)):
                    continue
                rank = (self._score(machine, pod), machine.name)
                if best is None or rank[0] > best[0] or (rank[0] == best[0] and rank[1] < best[1]):
                    best, chosen = rank, machine
            if chosen is not None:
                self._bind(pod, chosen)
                changed = True
            elif pod.unschedulable_since is None:
                pod.unschedulable_since = self.now
                pod.pod = replace(pod.pod, unschedulable_since=self._time(self.now))
                changed = True
        if changed:
            self.want_plan()

    # ------------------------------------------------------------------ the planner
    def want_plan(self) -> None:
        self.changed = True
        if self.options.policy is not Policy.LIGHTSOUT:
            return  # the reactive baseline scans on its own clock; always-on never plans
        at = self.now + PLAN_DEBOUNCE
        if self.plan_at is None or at < self.plan_at:
            self.plan_at = at
            self.push(at, _Kind.PLAN, "change")

    def _plan_event(self, why: str) -> None:
        if why == "scan":
            self.push(self.now + CA_SCAN_SECONDS, _Kind.PLAN, "scan")
            if not self.changed and (self.deadline is None or self.now < self.deadline):
                return  # the plan is a pure function of the snapshot and these deadlines
        elif self.plan_at is None or abs(self.plan_at - self.now) > 1e-9:
            return  # superseded by an earlier wake-up
        else:
            self.plan_at = None
        snapshot = self.snapshot()
        now = self._time(self.now)
        result = plan(snapshot, now)
        self.result_plans += 1
        self.changed = False
        self._apply(result, now)
        wake = next_wake(snapshot, result, now)
        self.deadline = None if wake is None else self._seconds(wake)
        if why != "scan" and wake is not None:
            at = max(self._seconds(wake), self.now + PLAN_DEBOUNCE)
            if self.plan_at is None or at < self.plan_at:
                self.plan_at = at
                self.push(at, _Kind.PLAN, "wake")

    def snapshot(self) -> Snapshot:
        """The planner's view of the simulated cluster now (what `snapshot_from` would build
        from the same objects)."""
        pods = [p.pod for p in self.pending.values()]
        for machine in self.machines.values():
            pods.extend(p.pod for p in machine.pods.values())
        nodes = [self._core_node(m) for m in self.machines.values() if m.node_exists]
        machines = [self._record(m) for m in self.machines.values()]
        return Snapshot(
            pods=tuple(pods),
            nodes=tuple(nodes),
            machines=tuple(machines),
            groups=tuple(self.group_index.values()),
            expected=self._expected(),
            complete=True,
            unneeded_since=dict(self.unneeded),
        )

    @staticmethod
    def _core_node(m: SimMachine) -> CoreNode:
        """The machine's core Node as the planner reads it (built again only on a change)."""
        key = (m.cordoned, m.node_ready, m.node_ready_since)
        if m.core_node is None or m.core_node[0] != key:
            node = CoreNode(
                name=m.name,
                labels={HOSTNAME_LABEL: m.name, **m.template.labels},
                taints=m.template.taints,
                allocatable=m.allocatable,
                unschedulable=m.cordoned,
                ready=m.node_ready,
                ready_since=m.node_ready_since,
            )
            m.core_node = (key, node)
        return m.core_node[1]

    @staticmethod
    def _record(m: SimMachine) -> Machine:
        """The machine as `state.build` would read its Node (built again only on a change)."""
        state = m.state
        key = (state.phase, state.desired, state.phase_since, state.learned)
        if m.record is None or m.record[0] != key:
            learned = state.learned
            machine = replace(
                m.template,
                phase=state.phase,
                desired=DesiredPowerState(state.desired.value),
                phase_since=state.phase_since,
                learned_boot_seconds=_float(median(learned.boot_samples)),
                learned_shutdown_seconds=_float(median(learned.shutdown_samples)),
                power_ons=learned.power_ons,
            )
            m.record = (key, machine)
        return m.record[1]

    def _expected(self) -> tuple[ExpectedPod, ...]:
        """Each CronJob's next run, by the code `snapshot_from` uses for a live cluster's."""
        if not self.options.prewarm or self.options.policy is not Policy.LIGHTSOUT:
            return ()
        return cron.expected_pods(self.cron_specs, self._time(self.now), self._next_fire)

    def _next_fire(self, spec: cron.CronSpec, now: datetime) -> datetime | None:
        """`cron.next_run`, looked up in the trace's expansion (`cron.fire_times`)."""
        times = self.cron_times[spec.key]
        i = bisect.bisect_right(times, self._seconds(now))
        return self._time(times[i]) if i < len(times) else None

    def _apply(self, result: Plan, now: datetime) -> None:
        for key, coming in result.explanations.coming.items():
            waiting = self.pending.get(key)
            if waiting is not None and waiting.wait is None:
                waiting.counted_on = coming
        for action in result.actions:
            if isinstance(action, PowerOn) and not action.dry_run:
                for key in action.pods:
                    waiting = self.pending.get(key)
                    if waiting is not None and waiting.powered_for is None:
                        waiting.powered_for = action.machine.name
        self.applier.apply(self.scale, self.snapshot(), result, now)
        self.unneeded = dict(result.unneeded_since)

    # ------------------------------------------------------------------ the state machine
    def reconcile_soon(self, machine: SimMachine, at: float) -> None:
        if machine.next_reconcile is None or at < machine.next_reconcile:
            machine.next_reconcile = at
            self.push(at, _Kind.RECONCILE, machine.template.key)

    def _reconcile_event(self, key: ObjectKey) -> None:
        machine = self.machines[key]
        if machine.next_reconcile is None or abs(machine.next_reconcile - self.now) > 1e-9:
            return  # a stale wake-up: an earlier one was scheduled since
        machine.next_reconcile = None
        self._reconcile(machine)

    def _reconcile(self, machine: SimMachine) -> None:
        now = self._time(self.now)
        decision = decide(machine.state, machine.observations(now), now)
        self.result_decisions += 1
        carried = carry_out(machine, machine.state, decision, now)
        if carried.requeue_after is not None:
            self.reconcile_soon(machine, self.now + carried.requeue_after)

    def _job_done(self, payload: tuple[ObjectKey, MemoryJob]) -> None:
        key, job = payload
        machine = self.machines[key]
        if machine.job is not job:
            return  # deleted meanwhile
        target = job.action.target
        job.state = JobPhase.SUCCEEDED
        job.power_state = target
        if target is PowerState.ON:
            machine.power = PowerState.ON
            self.push(self.now + machine.boot_seconds, _Kind.NODE_READY, key)
        else:
            machine.power = PowerState.OFF
            machine.node_ready = False
        self.reconcile_soon(machine, self.now)

    def _node_ready(self, key: ObjectKey) -> None:
        machine = self.machines[key]
        if machine.power is not PowerState.ON:
            return  # powered off again before it finished booting
        machine.node_exists = machine.node_ready = machine.registered = True
        machine.node_ready_since = self._time(self.now)
        self.reconcile_soon(machine, self.now)
        self.want_schedule()

    # ------------------------------------------------------------------ energy
    def count_energy(self, machine: SimMachine) -> None:
        """Count the machine's draw up to now at the state it was in (call before a change)."""
        machine.ledger = machine.ledger.advance(
            self._time(self.now),
            machine.draw,
            is_powered(machine.state.phase),
            machine.utilisation(),
        )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def replay(trace: Trace, options: Options | None = None) -> Result:
    """Replay `trace` under `options` and return what happened."""
    return Simulator(trace, options or Options()).run()


__all__ = ["Options", "Policy", "Result", "Scoring", "replay"]
