"""The replay's event loop: a trace, in simulated time, against the operator's own code.

`replay(trace, options)` (behind `lightsout simulate` and the benchmarks) plays the trace's pods
and CronJob runs in order of time (`clock`) on the in-memory port (`machines`) and a model of
kube-scheduler (`scheduler`). Every decision is the operator's, on inputs built the way its
handlers build them: the planner, woken by the autoscaler handler's rule
(`planning.autoscaler.wake.PlanningRound`), its plan applied by the one plan applier
(`actuation.plans.PlanApplier`); the power state machine on a machine
whenever something it watches changes or its Requeue is due, its decision carried out by the one
effect interpreter (`actuation.interpreter.carry_out`). The `reactive` policy drives the same
code like cluster-autoscaler with its defaults (docs/simulator.md says what differs).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from lightsout.actuation.interpreter import carry_out
from lightsout.actuation.plans import PlanApplier
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan, PowerOn
from lightsout.planning.autoscaler.wake import PlanningRound, next_wake
from lightsout.planning.energy import mains
from lightsout.planning.energy.account import is_powered
from lightsout.planning.machine.passes import pass_decision
from lightsout.simulate.replay.clock import Clock, Kind
from lightsout.simulate.replay.deferred import DeferredRun, HeldJobs, job_of_pod
from lightsout.simulate.replay.machines import SimMachine, SimPod, SimScale, read_machines
from lightsout.simulate.replay.scheduler import Scheduler, Scoring
from lightsout.simulate.replay.ups import SOURCE, SimUps
from lightsout.simulate.traces.trace import Trace, TracePod
from lightsout.state import cron
from lightsout.state.parse import scheduling_requirements
from lightsout.state.types import ExpectedPod, Group, ObjectKey, Pod, Snapshot

#: cluster-autoscaler's defaults, for the reactive baseline.
CA_SCAN_SECONDS = 10.0
CA_UNNEEDED_SECONDS = 600
CA_UTILIZATION_THRESHOLD = 0.5
CA_DELAY_AFTER_ADD_SECONDS = 600
SCAN = "scan"


class Policy(StrEnum):
    #: The built-in planner with the Groups as written in the trace (and --set).
    LIGHTSOUT = "lightsout"
    #: The same placement code driven like cluster-autoscaler with its defaults.
    REACTIVE = "reactive"
    #: Every machine powered on for the whole trace, nothing ever powered off.
    ALWAYS_ON = "always-on"


@dataclass(frozen=True)
class Options:
    policy: Policy = Policy.LIGHTSOUT
    scoring: Scoring = Scoring.LEAST_ALLOCATED
    #: `path=value` overrides applied to every Group manifest, e.g.
    #: `spec.scaleDown.unneededSeconds=300` (a leading `group.` is accepted).
    overrides: tuple[str, ...] = ()
    #: Tell the planner about CronJobs' next runs (`Snapshot.expected`) so it pre-warms.
    prewarm: bool = True
    #: Hold deferrable Jobs (CronJob runs, and a trace's bare Jobs whose lines give their
    #: annotations) for cheap hours (`planning.autoscaler.deferral`); False runs them at once,
    #: as without the admission webhook: the baseline they are measured by.
    defer: bool = True


@dataclass
class Result:
    """What a replay produced; `analysis.report` computes the figures from it."""

    trace: Trace
    options: Options
    machines: list[SimMachine]
    groups: tuple[Group, ...]
    pods: list[SimPod]
    plans: int = 0
    decisions: int = 0
    #: Scheduled times the controller never started (Forbid, a run still active then and
    #: no late start for them when it ended).
    skipped_cron_runs: int = 0
    #: Of the started runs, those started late: when the Forbid run in their way ended.
    late_cron_runs: int = 0
    replaced_cron_runs: int = 0
    #: The trace's UPS and its outages (None: the trace has none).
    ups: SimUps | None = None
    #: Each held Job (CronJob run or bare Job): created, released, done, its deadline.
    deferred: list[DeferredRun] = field(default_factory=list)


class Simulator:
    """One replay. Use `replay()`; the class holds the simulated cluster between events."""

    def __init__(self, trace: Trace, options: Options) -> None:
        self.trace = trace
        self.options = options
        self.start = trace.start
        self.end = trace.duration_seconds
        self.clock = Clock(trace.start)
        self.unneeded: dict[ObjectKey, datetime] = {}
        #: When the planner plans: the operator's rule (a plan takes no simulated time).
        self.round = PlanningRound()
        #: Reactive scans: whether anything changed since the last plan, and the plan's next
        #: deadline; a scan with neither would return the same plan, so it is skipped.
        self.changed = True
        self.deadline: float | None = None
        self.cron_active: dict[str, list[SimPod]] = {}
        #: Per CronJob (by key): its spec and its fire times (seconds since start).
        self.cron_spec: dict[str, cron.CronSpec] = {}
        self.cron_times: dict[str, list[float]] = {}
        #: Per CronJob: the scheduled time of its last started run (`status.lastScheduleTime`).
        self.cron_last: dict[str, float] = {}
        self.cron_started = 0
        overrides = list(options.overrides)
        if options.policy is Policy.REACTIVE:
            overrides += [
                f"spec.scaleDown.unneededSeconds={CA_UNNEEDED_SECONDS}",
                f"spec.scaleDown.utilizationThreshold={CA_UTILIZATION_THRESHOLD}",
                f"spec.scaleDown.stabilizationWindowSeconds={CA_DELAY_AFTER_ADD_SECONDS}",
                # cluster-autoscaler evicts a Job's running pod like any other movable pod.
                "spec.scaleDown.jobGraceSeconds=0",
            ]
        groups, machines = read_machines(trace, overrides, options.policy is Policy.ALWAYS_ON, self)
        #: What the replay produced: its counts are kept as it goes.
        self.result = Result(trace, options, machines, groups, pods=[])
        self.machines = {m.template.key: m for m in machines}
        self.scheduler = Scheduler(machines, options.scoring, self.clock)
        #: The operator's plan applier, writing through the replay's port.
        self.applier = PlanApplier()
        self.scale = SimScale(
            machines=self.machines, groups={g.key: g for g in groups}, on_release=self._release
        )
        #: Deferrable Jobs, as the API would hold them.
        self.held = HeldJobs()
        fed = {g.key for g in groups if g.battery is not None}
        self.fed = [m for m in machines if m.template.group_key in fed]
        if trace.ups is not None and fed:
            self.result.ups = SimUps.full(trace.ups)
            self.poll = min(g.battery.poll_seconds for g in groups if g.battery is not None)

    def run(self) -> Result:
        clock = self.clock
        for trace_pod in self.trace.pods:
            clock.push(trace_pod.at, Kind.ARRIVAL, trace_pod)
        for cronjob in self.trace.cronjobs:
            spec = cron.read(cronjob)
            times = cron.fire_times(spec, self.start, clock.time(self.end))
            for moment in times:
                clock.push(clock.seconds(moment), Kind.CRON, (spec, moment))
            self.cron_spec[spec.key] = spec
            self.cron_times[spec.key] = [clock.seconds(t) for t in times]
        self._schedule_health_checks()
        if self.result.ups is not None:
            for outage in self.result.ups.spec.outages:
                clock.push(outage.at_seconds, Kind.MAINS, False)
                clock.push(outage.at_seconds + outage.seconds, Kind.MAINS, True)
            clock.wake(0.0, Kind.UPS_READ)
        for machine in self.machines.values():
            machine.reconcile_soon()
        if self.options.policy is Policy.REACTIVE:
            clock.push(0.0, Kind.PLAN, SCAN)
        else:
            self.want_plan()
        handlers: dict[Kind, Callable[[Any], None]] = {
            Kind.JOB_DONE: lambda done: done[0].job_done(done[1]),
            Kind.NODE_READY: SimMachine.booted,
            Kind.POD_DONE: self._pod_done,
            Kind.CRON: self._cron_fire,
            Kind.ARRIVAL: self._arrive,
            Kind.RECONCILE: lambda key: self._reconcile(self.machines[key]),
            Kind.SCHEDULE: self._schedule,
            Kind.PLAN: self._plan,
            Kind.HEALTH_CHECK: self._health_check,
            Kind.MAINS: self._mains,
            Kind.UPS_READ: self._read_ups,
        }
        for kind, payload in clock.until(self.end):
            handlers[kind](payload)
        clock.now = self.end
        fired = sum(bisect.bisect_left(t, self.end) for t in self.cron_times.values())
        self.result.skipped_cron_runs = fired - self.cron_started
        self.result.deferred = list(self.held.runs.values())
        for machine in self.machines.values():
            machine.count_energy()
        return self.result

    # ------------------------------------------------------------------ pods
    def _arrive(self, new: TracePod) -> None:
        """A trace pod arrives. One whose line gives its Job's annotations comes with its Job,
        created now and admitted as the webhook would: a deferrable one is held (no pod until
        the planner releases it, `_release`)."""
        clock = self.clock
        job = new.owner_kind == "Job" and self.options.defer and bool(new.job_annotations)
        if job and self.held.admit(job_of_pod(new, clock.time()), new, clock.now):
            self.want_plan()
            return
        self._new_pod(new)

    def _new_pod(self, new: TracePod, cronjob: str | None = None) -> None:
        """`new` is created now (a trace pod as it arrives, or a CronJob's run)."""
        key = ObjectKey(new.namespace, new.name)
        pod = Pod(
            key=key,
            uid=f"sim-{len(self.result.pods)}",
            phase="Pending",
            node_name=None,
            scheduling=scheduling_requirements(new.spec),
            owner_kind=new.owner_kind,
            owner_name=new.owner_name,
            created=self.clock.time(),
        )
        sim = SimPod(key, pod, self.clock.now, new.run_seconds, cronjob=cronjob)
        self.result.pods.append(sim)
        if cronjob is not None:
            self.cron_active.setdefault(cronjob, []).append(sim)
        self.scheduler.pending[key] = sim
        self.want_schedule()

    def _cron_fire(self, payload: tuple[cron.CronSpec, datetime]) -> None:
        """The controller at a scheduled time (`cron.next_created` is what it announces)."""
        spec, moment = payload
        if self.cron_last.get(spec.key) == self.clock.seconds(moment):
            return  # already started, late, the instant a Forbid run ended
        # A held run is an active Job to the controller (unfinished: no Complete or Failed
        # condition), so Forbid waits for it and Replace deletes it.
        active, held = self._cron_running(spec), self.held.waiting(spec.key)
        if (active or held) and spec.concurrency_policy == cron.FORBID:
            return  # not now; maybe when the active run ends (`_cron_run_ended`)
        if (active or held) and spec.concurrency_policy == cron.REPLACE:
            for pod in active:
                self.held.delete(pod.key, self.clock.now)
                self._finish(pod)
            for job in held:
                self.held.delete(job, self.clock.now)
            self.result.replaced_cron_runs += len(active) + len(held)
        self._cron_start(spec, moment)

    def _cron_running(self, spec: cron.CronSpec) -> list[SimPod]:
        active = [p for p in self.cron_active.get(spec.key, []) if not p.done]
        self.cron_active[spec.key] = active
        return active

    def _cron_start(self, spec: cron.CronSpec, moment: datetime) -> None:
        self.cron_last[spec.key] = self.clock.seconds(moment)
        self.cron_started += 1
        run = self.trace.cron_run_seconds.get(spec.key, 60.0)
        clock = self.clock
        name = cron.job_name(spec, moment)
        run_pod = TracePod(clock.now, run, spec.namespace, name, spec.pod_spec, "Job", name)
        if self.options.defer:
            job = cron.job_of(spec, moment, clock.time(), suspend=False)
            if self.held.admit(job, run_pod, clock.now, spec.key):
                # Admitted suspended: no pod until the planner releases its Job (`_release`).
                self.want_plan()
                return
        self._new_pod(run_pod, cronjob=spec.key)

    def _cron_run_ended(self, spec: cron.CronSpec) -> None:
        """A run ended: the controller, re-queued by its Job's update, starts the most recent
        scheduled time missed meanwhile (Forbid), if `startingDeadlineSeconds` allows."""
        if spec.concurrency_policy != cron.FORBID or self._cron_running(spec):
            return
        if self.held.waiting(spec.key):  # a held run is active too
            return
        times = self.cron_times[spec.key]
        i = bisect.bisect_right(times, self.clock.now) - 1
        if i < 0 or times[i] <= self.cron_last.get(spec.key, -1.0):
            return
        deadline = spec.starting_deadline
        if deadline is not None and self.clock.now - times[i] > deadline.total_seconds():
            return
        self.result.late_cron_runs += times[i] < self.clock.now
        self._cron_start(spec, self.clock.time(times[i]))

    def _release(self, job: ObjectKey) -> bool:
        """The planner released a held Job: its pods are created now."""
        found = self.held.release(job, self.clock.now)
        if found is None:
            return False
        pods, cronjob = found
        for pod in pods:
            self._new_pod(pod, cronjob=cronjob)
        return True

    def _pod_done(self, payload: tuple[SimPod, int]) -> None:
        pod, run = payload
        if run == pod.run and not pod.done:
            self.held.pod_done(pod.key, self.clock.time(), self.clock.now)
            self._finish(pod)
            if pod.cronjob is not None:
                self._cron_run_ended(self.cron_spec[pod.cronjob])

    def _finish(self, pod: SimPod) -> None:
        """The pod ends (succeeded, or deleted by a CronJob's Replace)."""
        pod.done = True
        self.scheduler.remove(pod)
        self.want_schedule()
        self.want_plan()

    # ------------------------------------------------------------------ what machines set off
    def want_schedule(self) -> None:
        """Schedule once this instant's changes are made."""
        self.clock.wake(self.clock.now, Kind.SCHEDULE)

    def evict(self, machine: SimMachine) -> None:
        self.scheduler.evict(machine)
        self.want_schedule()

    def _schedule(self, _: None) -> None:
        if self.scheduler.schedule():
            self.want_plan()

    def _schedule_health_checks(self) -> None:
        """Each Group's health check, as its CronJob runs it: a first check of every machine
        at the start (the operator checks a machine it never checked within a minute), then
        at each time of the Group's schedule."""
        clock = self.clock
        groups: dict[str, list[SimMachine]] = {}
        for machine in self.machines.values():
            if machine.health_schedule is not None:
                groups.setdefault(machine.template.group, []).append(machine)
        for group, members in groups.items():
            schedule = members[0].health_schedule or ""
            times = cron.schedule_times(schedule, self.start, clock.time(self.end))
            for n, moment in enumerate([self.start, *times]):
                clock.push(
                    clock.seconds(moment), Kind.HEALTH_CHECK, (f"{group}-check-{n}", members)
                )

    def _health_check(self, check: tuple[str, list[SimMachine]]) -> None:
        job, members = check
        for machine in members:
            machine.health_check(job)

    def _reconcile(self, machine: SimMachine) -> None:
        now = self.clock.time()
        decision = pass_decision(machine.state, machine.observations(now), machine.readings(), now)
        self.result.decisions += 1
        carried = carry_out(machine, machine.state, decision, now)
        if carried.requeue_after is not None:
            machine.reconcile_soon(carried.requeue_after)

    def beside(self, machine: SimMachine) -> float:
        """What the other machines of `machine`'s Group draw now, each at its true draw in its
        phase (what a solar surplus is shared with: `tariff.paid_watts`)."""
        group = machine.template.group_key
        return sum(
            m.draw.watts(is_powered(m.state.phase), m.utilisation())
            for m in self.machines.values()
            if m is not machine and m.template.group_key == group
        )

    # ------------------------------------------------------------------ the UPS
    def _load(self) -> float:
        """What the fed machines draw now, each at its true draw in its phase."""
        return sum(m.draw.watts(is_powered(m.state.phase), m.utilisation()) for m in self.fed)

    def count_battery(self) -> None:
        """Count the UPS's battery up to now at the load so far (before a machine changes)."""
        ups = self.result.ups
        if ups is None:
            return
        if ups.advance(self.clock.now, self._load()) and ups.outages:
            # The battery is empty under running machines: the UPS cuts them.
            powered = [m for m in self.fed if is_powered(m.state.phase)]
            ups.outages[-1].cut = sorted(m.name for m in powered)

    def _mains(self, on: bool) -> None:
        ups = self.result.ups
        assert ups is not None
        self.count_battery()
        ups.mains_change(self.clock.now, on, self._load())
        self.clock.wake(self.clock.now, Kind.UPS_READ)

    def _read_ups(self, _: None) -> None:
        """The operator's read of the UPS (`execution.ups`): the reading through
        `mains.observe` into each fed Group's status, written when `worth_writing`."""
        ups, clock = self.result.ups, self.clock
        assert ups is not None
        self.count_battery()
        self._outage_figures(ups)
        reading = ups.reading(self._load())
        now = clock.time()
        changed = False
        for key, group in list(self.scale.groups.items()):
            if group.battery is None:
                continue
            new = mains.observe(group.battery_status, SOURCE, reading, now)
            if mains.worth_writing(group.battery_status, new):
                self.scale.groups[key] = replace(group, battery_status=new)
                changed = True
        if changed:
            self.want_plan()
        if not ups.settles() or self._outage_recorded():
            clock.wake(clock.now + self.poll, Kind.UPS_READ)

    def _outage_figures(self, ups: SimUps) -> None:
        if not ups.outages:
            return
        outage = ups.outages[-1]
        powered = [m for m in self.fed if is_powered(m.state.phase)]
        if outage.ended is None and outage.all_off_at is None and not powered:
            outage.all_off_at = self.clock.now
            outage.left_share = ups.stored_wh / outage.stored_wh if outage.stored_wh else 0.0
        if outage.ended is not None and outage.restored_at is None and not self._outage_recorded():
            outage.restored_at = self.clock.now

    def _outage_recorded(self) -> bool:
        """Some Group's machines are still off for an outage (its record not cleared)."""
        return any(g.battery_status and g.battery_status.outage for g in self.scale.groups.values())

    # ------------------------------------------------------------------ the planner
    def want_plan(self) -> None:
        self.changed = True
        if self.options.policy is Policy.LIGHTSOUT:
            # The reactive baseline scans on its own clock; always-on never plans.
            self.clock.wake(self.round.change_planned_at(self.clock.now), Kind.PLAN)

    def _plan(self, why: str | None) -> None:
        """Plan now: at a reactive scan (`why` SCAN), or woken (a change, a deadline)."""
        clock = self.clock
        if why == SCAN:
            clock.push(clock.now + CA_SCAN_SECONDS, Kind.PLAN, SCAN)
            if not self.changed and (self.deadline is None or clock.now < self.deadline):
                return  # the plan is a pure function of the snapshot and these deadlines
        snapshot = self.snapshot()
        now = clock.time()
        result = plan(snapshot, now)
        self.result.plans += 1
        self.changed = False
        self._apply(result, now)
        wake = next_wake(snapshot, result, now)
        self.deadline = None if wake is None else clock.seconds(wake)
        if why != SCAN:
            again = self.round.planned(clock.now, 0.0, self.deadline)
            if again is not None:
                clock.wake(again, Kind.PLAN)

    def snapshot(self) -> Snapshot:
        """The planner's view of the simulated cluster now (what `snapshot_from` would build
        from the same objects)."""
        pods = [p.pod for p in self.scheduler.pending.values()]
        for machine in self.machines.values():
            pods.extend(p.pod for p in machine.pods.values())
        machines = self.machines.values()
        return Snapshot(
            pods=tuple(pods),
            nodes=tuple(m.as_core_node() for m in machines if m.node_exists),
            machines=tuple(m.as_machine() for m in machines),
            groups=tuple(self.scale.groups.values()),
            expected=self._expected(),
            deferred=self.held.deferred(),
            complete=True,
            unneeded_since=dict(self.unneeded),
        )

    def _expected(self) -> tuple[ExpectedPod, ...]:
        """Each CronJob's next run, by the code `snapshot_from` uses for a live cluster's."""
        if not self.options.prewarm or self.options.policy is not Policy.LIGHTSOUT:
            return ()
        return cron.expected_pods(
            list(self.cron_spec.values()), self.clock.time(), self._next_fire, self._cron_ends
        )

    def _next_fire(self, spec: cron.CronSpec, now: datetime) -> datetime | None:
        """`cron.next_run`, looked up in the trace's expansion (`cron.fire_times`)."""
        times = self.cron_times[spec.key]
        i = bisect.bisect_right(times, self.clock.seconds(now))
        return self.clock.time(times[i]) if i < len(times) else None

    def _cron_ends(self, spec: cron.CronSpec) -> list[datetime | None]:
        """When its active runs will end: a pending one runs its whole length from now; a
        held one, unknown (None: as live, where `status.active` lists it)."""
        now = self.clock.now
        ends: list[datetime | None] = [
            self.clock.time((now if p.started is None else p.started) + p.run_seconds)
            for p in self._cron_running(spec)
        ]
        return ends + [None] * len(self.held.waiting(spec.key))

    def _apply(self, result: Plan, now: datetime) -> None:
        pending = self.scheduler.pending
        for key, coming in result.explanations.coming.items():
            waiting = pending.get(key)
            if waiting is not None and waiting.wait is None:
                waiting.counted_on = coming
        for action in result.actions:
            if isinstance(action, PowerOn) and not action.dry_run:
                for key in action.pods:
                    waiting = pending.get(key)
                    if waiting is not None and waiting.powered_for is None:
                        waiting.powered_for = action.machine.name
        self.applier.apply(self.scale, self.snapshot(), result, now)
        self.unneeded = dict(result.unneeded_since)
        for key, machine in self.machines.items():
            machine.held(result.holds.get(key))


def replay(trace: Trace, options: Options | None = None) -> Result:
    """Replay `trace` under `options` and return what happened."""
    return Simulator(trace, options or Options()).run()


__all__ = ["Options", "Policy", "Result", "Scoring", "replay"]
