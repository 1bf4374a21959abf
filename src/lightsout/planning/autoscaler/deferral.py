"""Deferrable Jobs: when to release each suspended Job that may wait for cheap hours.

A Job with `lightsout.dev/finish-by` or `lightsout.dev/max-delay` is admitted suspended
(`handlers.admission`); `defer(snapshot, now)` decides, each plan, whether to release it now
(`spec.suspend: false`, then its pods are pending like any) or when it will.

The Job runs on the machines the scale-up would power on for its pods (`_crew`): its
`width` pods (`spec.parallelism`, at most `spec.completions`), as many side by side on a
machine as its room holds, on the machine the Groups' selectionPolicy picks (`policy.select`,
the very function `scaleup.choose` calls), then again for the rest among the machines left, no
Group beyond its maxNodes, the machines already on or coming counted in (`scaleup.room_of`).
So the machine a Job is held for is the one powered on when it is released and its pods are
pending, the cluster then being as it is now (a machine already on takes them instead, as
many as its free room holds beside the pods it runs now, at no boot: priced as if powered on
for them). When those machines cannot hold all its pods at once, the run takes
`ceil(width / at once)` waves of its duration.

The cost of starting at `s` is the electricity those machines draw (`watts_on`) from `s` for
their boot and then the longer of the run and the machine's minimum on-time, each stretch at
the price its Group sets then: its price series where it has one, else its tariff
(`planning.energy.tariff.cost`); or, with `objective: Carbon`, the grams of CO2 by its carbon
series. A Job of one pod may also start with a run planned before it on its machine, if it
fits there beside it: it then pays no boot, only its draw above idle (`_Planned`). The start
chosen is the cheapest among `now`, the latest start that still finishes the margin before the
deadline, and every moment a price changes in between (or that long before one, so the run ends
as a dearer rate begins): with prices constant between changes, one of them is the cheapest.
Only starts a forecast covers count (a series ends somewhere). Ties go to the earliest, so a
Job with nothing to gain runs at once.

With a solar surplus (`spec.electricity.solarSurplus`) a start is weighed by what the run adds
to the draw the Group pays for, the surplus read now held to the end of the current price
interval and no further (`tariff.persisting`: it has no forecast): while it covers the
machine, now costs nothing. The Group's draw beside the run is what its machines draw now
(idle while powered, standby while off) less the run's own machines (their busy draw
replaces it), with the runs this plan chose before it that are on at its start: two Jobs are
not both told that the same watts make them free.

A Job is released at once when waiting cannot be priced or could miss its deadline: its
annotations do not read, its duration is unknown (no `lightsout.dev/expected-duration` and no
earlier run of its CronJob), no machine could run it (or none has room for it now: those
that could are full, their Groups at maxNodes), a series its machines' Groups name is
missing or unreadable, the Groups of the machines it would run on have one price at every
hour, no forecast covers a start in time, or the latest start has come. It never waits for
lack of a forecast.

The margin is the Group's `spec.electricity.deferralMarginSeconds` (`MARGIN`, 10 min, when
unset), read from the Groups of the machines that could run the Job: when those are in several
Groups, the largest of their margins, so no Group's room against a slow boot or a long run is
given up for another's cheaper hours. The latest start is the slowest of them all (boot and
run, waves included), whichever the scale-up would pick.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from lightsout.models.enums import DeferralObjective
from lightsout.models.group import DEFAULT_DEFERRAL_MARGIN_SECONDS, Electricity
from lightsout.planning.autoscaler.cluster import Availability, build_cluster, count_fit
from lightsout.planning.autoscaler.decisions import Release, Wait
from lightsout.planning.autoscaler.scheduling import NodeView, fits
from lightsout.planning.energy import tariff
from lightsout.planning.energy.account import Draw, is_powered
from lightsout.planning.energy.weight import Weight
from lightsout.planning.policy import EnergyModel, Fill, fill_of, select
from lightsout.state.parse import format_time
from lightsout.state.resources import Resources
from lightsout.state.series import Series
from lightsout.state.types import DeferredJob, Group, Machine, ObjectKey, Snapshot

#: Finished this long before its deadline at the latest when its Groups set no
#: `electricity.deferralMarginSeconds`: the planner's debounce, the scheduler, a run a little
#: slower than the last.
MARGIN = timedelta(seconds=DEFAULT_DEFERRAL_MARGIN_SECONDS)
#: A latest start within this is taken as now: a plan rarely runs on the exact second, and a
#: Job must not wait for a start it would miss.
SLACK = timedelta(seconds=1)


@dataclass(frozen=True)
class Deferral:
    releases: tuple[Release, ...] = ()
    waits: Mapping[ObjectKey, Wait] = field(default_factory=dict)


@dataclass(frozen=True)
class _Planned:
    """A start this plan chose for a Job: the machine it wakes, until when, what it asks."""

    job: ObjectKey
    machine: ObjectKey
    start: datetime
    #: When the machine's on-time for it ends (boot, then run or minimum on-time).
    end: datetime
    requests: Resources
    #: The machine's Group, its busy and idle draw, and what it draws now: a run is weighed
    #: beside the ones planned before it on its Group's surplus.
    group: ObjectKey
    on: float
    idle: float
    current: float

    def on_at(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass(frozen=True)
class _Candidate:
    """A machine a Job could run on, as every Job of one `defer` pass sees it."""

    machine: Machine
    group: Group
    #: The node it would be empty (allocatable less its DaemonSets' pods): what the Job's
    #: placement is checked against.
    view: NodeView
    #: Its free room now: the empty view's while it is off; on or coming up, what the pods
    #: bound to it leave (as the scale-up's `absorb` sees it).
    room: Resources
    #: On or coming: its Group's maxNodes already counts it (`scaleup.room_of`).
    active: bool
    #: What it draws now (idle while powered, standby while off).
    current: float


@dataclass(frozen=True)
class _Fleet:
    """What a `defer` pass reads of the snapshot for every Job, gathered once."""

    candidates: tuple[_Candidate, ...]
    objective: DeferralObjective
    #: Machines on or coming per Group (`cluster.Cluster.active`).
    active: Mapping[ObjectKey, int]
    #: Per Group with a surplus (objective Cost only: `_Option._weigh` ignores it otherwise):
    #: the surplus held to the end of the current price interval, and what its machines draw
    #: now.
    sunny: Mapping[ObjectKey, tuple[Series, float]]


@dataclass(frozen=True)
class _Option:
    """One machine that could run the Job, what a run on it takes, and what it weighs."""

    machine: Machine
    group: Group
    #: How long the run takes once the machine is up: the Job's duration, times its waves
    #: when its pods cannot all run at once (`_Crew.waves`).
    run: timedelta
    objective: DeferralObjective
    #: Its free room now (`_Candidate.room`), and its allocatable.
    room: Resources
    allocatable: Resources
    #: Its Group's solar surplus read now, held to the end of the current price interval
    #: (`tariff.persisting`: no forecast), and what the Group's other machines draw now (its
    #: own draw now left out: the run's replaces it), with the busy draw of the machines taken
    #: before it for the same Job: a run is weighed by what it adds to the draw the Group pays
    #: for (`tariff.added_watts`).
    surplus: Series | None = None
    drawn: float = 0.0
    #: The runs planned before it on its Group's machines (only with a surplus): those on at
    #: a start are drawn beside it (`_planned_at`).
    planned: tuple[_Planned, ...] = ()
    #: What it draws now, and whether its Group's maxNodes already counts it (on or coming).
    current: float = 0.0
    active: bool = False

    @property
    def span(self) -> timedelta:
        """From the release to the end of the machine's on-time: boot, then the run or the
        minimum on-time."""
        return self.boot + max(self.run, timedelta(seconds=self.machine.minimum_on_seconds or 0))

    @property
    def to_finish(self) -> timedelta:
        """From the release to the run's end."""
        return self.boot + self.run

    def holds(self, requests: Resources) -> int:
        """How many of the Job's pods fit on it side by side."""
        demand = ((name, amount) for name, amount in requests if amount > 0)
        return count_fit(demand, self.room.as_dict())

    def filled(self, count: int, requests: Resources, energy: EnergyModel) -> Fill:
        """The machine with `count` of the Job's pods on it, as the scale-up's selection
        policies compare it (a pod's weight is one: the Job's pods are one class, and its
        weight scales every machine's figures alike)."""
        free = {name: amount - count * requests.get(name) for name, amount in self.room}
        return fill_of(
            machine=self.machine,
            group=self.group,
            energy=energy,
            allocatable=self.allocatable.as_dict(),
            free_after=free,
            value=float(count),
        )

    @property
    def _electricity(self) -> Electricity:
        assert self.group.electricity is not None
        return self.group.electricity

    @property
    def _weight(self) -> Weight:
        """What the objective weighs a kWh by over time (`planning.energy.weight`)."""
        return Weight(self._electricity, self.group.prices, self.group.carbon, self.objective)

    def weight(self, start: datetime, beside: _Planned | None = None) -> float:
        """The run's cost (or its grams of CO2) if released at `start`: the machine's busy
        draw over its boot and on-time; or, `beside` a run already planned on it at the same
        start, what it adds: its busy draw above idle while it runs, and idle for any time it
        keeps the machine on past the other's."""
        on = self.machine.watts_on or 0.0
        if beside is None:
            return self._weigh(on, start, start + self.span)
        idle = self.machine.watts_idle if self.machine.watts_idle is not None else on
        run_end = start + self.to_finish
        added = self._weigh(max(on - idle, 0.0), start + self.boot, run_end)
        if run_end > beside.end:
            added += self._weigh(idle, beside.end, run_end)
        return added

    def _weigh(self, watts: float, start: datetime, end: datetime) -> float:
        if self.surplus is not None and self.objective is DeferralObjective.COST:
            return tariff.cost(
                self._electricity,
                watts,
                start,
                end,
                self.group.prices,
                surplus=self.surplus,
                beside=self.drawn + self._planned_at(start),
                marginal=True,
            )
        return self._weight.integral(watts, start, end)

    def _planned_at(self, moment: datetime) -> float:
        """What the runs planned before it that are on at `moment` add to the Group's draw
        now: a machine's busy draw in place of its draw now (of nothing on this one, whose
        draw now `drawn` leaves out), and a run beside another on one machine its busy draw
        above idle (as `weight` prices it)."""
        added, seen = 0.0, set[ObjectKey]()
        for run in self.planned:
            if not run.on_at(moment):
                continue
            if run.machine in seen:
                added += max(run.on - run.idle, 0.0)
                continue
            seen.add(run.machine)
            added += run.on - (0.0 if run.machine == self.machine.key else run.current)
        return added

    @property
    def margin(self) -> timedelta:
        """How long before the deadline its Group wants the run finished."""
        return timedelta(seconds=self._electricity.deferral_margin_seconds)

    @property
    def boot(self) -> timedelta:
        return timedelta(seconds=self.machine.boot_estimate)

    def shares(self, planned: _Planned, requests: Resources) -> bool:
        """Whether the Job fits on this machine beside `planned`'s run."""
        if planned.machine != self.machine.key:
            return False
        together = planned.requests + requests
        return all(amount <= self.room.get(name) for name, amount in together)

    def next_change(self, moment: datetime) -> datetime | None:
        return self._weight.next_change(moment)

    def known(self, start: datetime) -> bool:
        """Whether a forecast covers the whole run released at `start` (a tariff always
        does; a series only up to its last interval)."""
        return self._weight.covers(start, start + self.span)

    @property
    def forecast(self) -> bool:
        """Whether its Group's price (or carbon) differs from hour to hour at all."""
        return self._weight.varies

    @property
    def unit(self) -> str:
        return self._weight.unit


@dataclass(frozen=True)
class _Crew:
    """The machines the scale-up would power on for the Job's pods were they pending now
    (`_crew`), how many of them each runs, and how many pods the Job runs at once."""

    members: tuple[tuple[_Option, int], ...]
    width: int

    @property
    def at_once(self) -> int:
        return sum(count for _, count in self.members)

    @property
    def waves(self) -> int:
        """How many times over its pods run when the machines cannot hold them all at once."""
        return -(-self.width // self.at_once)

    @property
    def alone(self) -> _Option | None:
        """Its machine when the Job runs one pod: only such a run is packed beside another."""
        return self.members[0][0] if self.width == 1 else None

    def lasting(self, run: timedelta) -> _Crew:
        return replace(self, members=tuple((replace(o, run=run), n) for o, n in self.members))

    def weight(self, start: datetime, beside: _Planned | None = None) -> float:
        """What the run costs (or its grams of CO2) if released at `start`: its machines'
        together, or beside a run planned on its one machine what it adds there."""
        if beside is not None:
            assert self.alone is not None
            return self.alone.weight(start, beside)
        return sum(option.weight(start) for option, _ in self.members)

    def known(self, start: datetime) -> bool:
        return all(option.known(start) for option, _ in self.members)

    @property
    def forecast(self) -> bool:
        return any(option.forecast for option, _ in self.members)

    def starts(self, now: datetime, latest: datetime) -> Sequence[datetime]:
        found = {start for option, _ in self.members for start in _starts(option, now, latest)}
        return sorted(found)

    def describe(self, start: datetime, beside: _Planned | None = None) -> str:
        first = self.members[0][0]
        unit = first.unit
        weight = self.weight(start, beside)
        figure = f"{weight:.0f}" if unit == "gCO2" else f"{weight:.4f}"
        shared = "" if beside is None else f", beside Job {beside.job.name}"
        spare = tariff.surplus_at(first.surplus, start) if unit != "gCO2" else None
        sun = f", {spare:.0f} W of solar surplus spare now" if spare else ""
        if self.width == 1:
            return f"{figure} {unit} on machine {first.machine.key.name}{shared}{sun}"
        count = len(self.members)
        machines = f"{count} machine{'s' if count != 1 else ''}"
        each = ", ".join(f"{n} on {option.machine.key.name}" for option, n in self.members)
        if self.waves == 1:
            return f"{figure} {unit} for {self.width} pods at once on {machines} ({each}){sun}"
        return (
            f"{figure} {unit} for {self.width} pods, {self.at_once} at once on {machines} "
            f"({each}) in {self.waves} waves: the machines that could run them, each Group "
            f"to its maxNodes, hold no more{sun}"
        )


def defer(snapshot: Snapshot, now: datetime) -> Deferral:
    """What to do with each suspended deferrable Job of `snapshot` at `now`: soonest deadline
    first, each knowing the starts chosen before it (a run beside one of them pays no boot)."""
    releases: list[Release] = []
    waits: dict[ObjectKey, Wait] = {}
    planned: list[_Planned] = []
    if not snapshot.deferred:
        return Deferral()
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)
    fleet = _fleet(snapshot, now)
    far = now + timedelta(days=3650)
    for job in sorted(snapshot.deferred, key=lambda j: (j.deadline or far, j.key)):
        decided, chosen = _decide(job, fleet, now, planned, energy)
        if chosen is not None:
            crew, start = chosen
            for option, count in crew.members:
                requests = Resources.of({k: v * count for k, v in job.scheduling.requests})
                machine = option.machine
                on = machine.watts_on or 0.0
                planned.append(
                    _Planned(
                        job.key,
                        machine.key,
                        start,
                        start + option.span,
                        requests,
                        group=option.group.key,
                        on=on,
                        idle=machine.watts_idle if machine.watts_idle is not None else on,
                        current=option.current,
                    )
                )
        if isinstance(decided, Release):
            releases.append(decided)
        else:
            waits[job.key] = decided
    return Deferral(tuple(releases), waits)


def _decide(
    job: DeferredJob,
    fleet: _Fleet,
    now: datetime,
    planned: Sequence[_Planned],
    energy: EnergyModel,
) -> tuple[Release | Wait, tuple[_Crew, datetime] | None]:
    """The Job's release or wait and, when a start was priced, its machines and start."""
    decided = _unread(job)
    if decided is not None:
        return decided, None
    assert job.deadline is not None and job.duration is not None
    options = list(_options(job, fleet, planned))
    crew = _crew(job, options, energy, fleet.active)
    if crew is None:
        if options:
            message = (
                "released at once: no machine could run it now (those that could are full, "
                "or their Groups at maxNodes)"
            )
            return Release(job.key, message), None
        return Release(job.key, "released at once: no machine could run it"), None
    run = job.duration * crew.waves
    options, crew = [replace(o, run=run) for o in options], crew.lasting(run)
    decided = _unpriced(job, options, crew, now)
    if decided is not None:
        return decided, None
    latest = _latest(job.deadline, options)
    priced: list[tuple[float, datetime, _Planned | None]] = [
        (crew.weight(s), s, None) for s in crew.starts(now, latest)
    ]
    alone = crew.alone
    if alone is not None:
        requests = job.scheduling.requests
        priced += [
            (crew.weight(p.start, p), p.start, p)
            for p in planned
            if now <= p.start <= latest and alone.shares(p, requests)
        ]
    priced = [found for found in priced if crew.known(found[1])]
    if not priced:
        message = "released at once: no forecast covers a start before its deadline"
        return Release(job.key, message), None
    _, best_start, beside = min(priced, key=lambda found: (found[0], found[1]))
    carbon = crew.members[0][0].objective is DeferralObjective.CARBON
    better, best_word = ("cleaner", "cleanest") if carbon else ("cheaper", "cheapest")
    where = crew.describe(best_start, beside)
    if best_start <= now:
        release = Release(job.key, f"released: now is its {best_word} start ({where})")
        return release, (crew, now)
    runs = _minutes(run)
    if crew.waves > 1:
        runs = f"{runs} in {crew.waves} waves of {_minutes(job.duration)}"
    wait = Wait(
        job.key,
        best_start,
        f"held for {better} electricity: starts at {format_time(best_start)} ({where}); "
        f"runs {runs} ({job.duration_source}), "
        f"done by {format_time(job.deadline)} at the latest",
    )
    return wait, (crew, best_start)


def _unread(job: DeferredJob) -> Release | None:
    """The Job's release at once when its annotations do not say its deadline and run time."""
    if job.problem is not None:
        return Release(job.key, f"released at once: {job.problem}")
    if job.deadline is None or job.duration is None:
        return Release(
            job.key,
            "released at once: its run time is unknown (no lightsout.dev/expected-duration "
            "and no finished run of its CronJob to learn it from)",
        )
    return None


def _unpriced(
    job: DeferredJob, options: Sequence[_Option], crew: _Crew, now: datetime
) -> Release | None:
    """The Job's release at once when no start can be priced for it, or it must start now."""
    assert job.deadline is not None
    problem = next((o.group.series_problem for o in options if o.group.series_problem), None)
    if problem is not None:
        return Release(job.key, f"released at once: {problem}")
    if not crew.forecast:
        return Release(
            job.key, "released at once: its machines' Groups have one price at every hour"
        )
    if _latest(job.deadline, options) <= now + SLACK:
        return Release(
            job.key,
            f"released at once: to finish by {format_time(job.deadline)} with "
            f"{_minutes(_margin(options))} to spare it must start now",
        )
    return None


def _margin(options: Sequence[_Option]) -> timedelta:
    """The Job's margin: the largest its machines' Groups set."""
    return max(o.margin for o in options)


def _latest(deadline: datetime, options: Sequence[_Option]) -> datetime:
    """The latest start that finishes, on the slowest of its machines, the margin before
    `deadline`."""
    return deadline - _margin(options) - max(o.to_finish for o in options)


def _fleet(snapshot: Snapshot, now: datetime) -> _Fleet:
    """The machines any Job could run on, with their room and draw now, and each Group's
    surplus: read once a pass, not for every Job and machine."""
    cluster = build_cluster(snapshot, now)
    objectives = {g.electricity.objective for g in snapshot.groups if g.electricity is not None}
    agreed = objectives.pop() if len(objectives) == 1 else DeferralObjective.COST
    # On or coming up, a machine has the room its bound pods leave (as `absorb` sees it).
    busy: dict[ObjectKey, Resources] = {}
    for target in (*cluster.ready_bins, *cluster.coming_bins):
        if target.info is not None:
            busy[target.info.key] = Resources.of(target.free)
    drawn: dict[ObjectKey, float] = {}
    candidates: list[_Candidate] = []
    infos = {info.key: info for info in cluster.infos}
    for machine in snapshot.machines:  # in the snapshot's order: ties fall as they did
        info = infos[machine.key]
        current = Draw.declared(machine.watts_on, machine.watts_idle, machine.watts_off).watts(
            is_powered(machine.phase)
        )
        drawn[machine.group_key] = drawn.get(machine.group_key, 0.0) + current
        group, view = info.group, info.view
        if group is None or group.electricity is None or view is None:
            continue
        if info.availability in (Availability.READY, Availability.COMING):
            room = busy.get(info.key, Resources())
        else:
            room = view.free
        candidates.append(_Candidate(machine, group, view, room, info.active, current))
    sunny: dict[ObjectKey, tuple[Series, float]] = {}
    if agreed is DeferralObjective.COST:
        for group in snapshot.groups:
            if group.surplus is None or group.electricity is None:
                continue
            held = tariff.persisting(group.surplus, now, group.electricity, group.prices)
            if held is not None:
                sunny[group.key] = (held, drawn.get(group.key, 0.0))
    return _Fleet(tuple(candidates), agreed, cluster.active, sunny)


def _options(
    job: DeferredJob, fleet: _Fleet, planned: Sequence[_Planned] = ()
) -> Iterator[_Option]:
    """The machines that could run the Job; each weighs a start by its Group's objective,
    unless the Groups disagree: cost and grams do not compare, so then cost for all."""
    assert job.duration is not None
    runs: dict[ObjectKey, tuple[_Planned, ...]] = {}
    for key in fleet.sunny:
        runs[key] = tuple(p for p in planned if p.group == key)
    for found in fleet.candidates:
        if not fits(job.scheduling, found.view):
            continue
        machine, group = found.machine, found.group
        option = _Option(
            machine,
            group,
            job.duration,
            fleet.objective,
            found.room,
            found.view.allocatable,
            current=found.current,
            active=found.active,
        )
        sun = fleet.sunny.get(group.key)
        if sun is not None:
            surplus, drawn = sun
            option = replace(
                option,
                surplus=surplus,
                drawn=drawn - found.current,
                planned=runs[group.key],
            )
        yield option


def _crew(
    job: DeferredJob,
    options: Sequence[_Option],
    energy: EnergyModel,
    active: Mapping[ObjectKey, int],
) -> _Crew | None:
    """The machines the scale-up would power on for the Job's `width` pods were they pending
    now: the one its selection (`policy.select`, as `scaleup.choose` calls it) takes, filled
    with as many of them as fit side by side (on one already on, beside the pods it runs),
    then so again for the rest among the machines left, no Group beyond its maxNodes counting
    its machines already on or coming (`active`, as `scaleup.room_of`). None when no machine
    could take a pod. A machine taken after another of its Group counts that one's busy draw,
    in place of its draw now, as drawn beside it (a surplus covers the two together, not each
    alone)."""
    requests = job.scheduling.requests
    members: list[tuple[_Option, int]] = []
    spare = [o for o in options if o.holds(requests) > 0]
    taken: Counter[ObjectKey] = Counter(active)
    left = job.width
    while left > 0:
        fills = [
            (o, o.filled(min(left, o.holds(requests)), requests, energy), o.machine.key)
            for o in spare
            if o.active or taken[o.group.key] < o.group.max_nodes
        ]
        if not fills:
            break
        chosen = select(fills)
        count = min(left, chosen.holds(requests))
        if chosen.surplus is not None:
            beside = (
                (o.machine.watts_on or 0.0) - o.current
                for o, _ in members
                if o.group.key == chosen.group.key
            )
            chosen = replace(chosen, drawn=chosen.drawn + sum(beside))
        members.append((chosen, count))
        spare = [o for o in spare if o.machine.key != chosen.machine.key]
        if not chosen.active:
            taken[chosen.group.key] += 1
        left -= count
    return _Crew(tuple(members), job.width) if members else None


def _starts(option: _Option, now: datetime, latest: datetime) -> Sequence[datetime]:
    """Now, the latest start, and each moment in between that a price change begins or ends
    the machine's span at."""
    found = {now, latest}
    at: datetime | None = now
    while at is not None and at < latest + option.span:
        at = option.next_change(at)
        if at is None:
            break
        for start in (at, at - option.span):
            if now <= start <= latest:
                found.add(start)
    return sorted(found)


def _minutes(span: timedelta) -> str:
    seconds = span.total_seconds()
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f}s"


__all__ = ["MARGIN", "Deferral", "defer"]
