"""The offline optimum of a trace: the least energy any schedule could use, by a real solver.

`solve(trace, time_limit)` builds a mixed-integer program over the trace's event times and
solves it with HiGHS (`highspy`, the `sim` extra); `lightsout simulate --optimum` and the
benchmark call it. The model (docs/simulator.md states it with its assumptions):

- every pod starts the moment it arrives (a CronJob run at its schedule time, `Forbid` and
  `Replace` applied to those zero-wait runs) and runs for its true run time;
- the time axis is cut at every start and end into segments k of length L_k;
- `x[i,k]` (binary): machine i is up in segment k; `y[p,i]` (binary): pod p runs on machine i,
  allowed only where the production fit check says the pod could ever run there (selector,
  affinity, taints, capacity); `s[i,k]` (continuous, ≥ 0): machine i starts in segment k;
- each pod on exactly one machine; in every segment and for every resource (cpu, memory, pods
  and extended resources) the pods running on a machine fit its capacity, and only while it is
  up; `s[i,k] ≥ x[i,k] - x[i,k-1]` with every machine off before the trace;
- Groups' minNodes/maxNodes hold in every segment;
- energy (Wh) = standby of every machine all the time + (idle - standby) while up + each pod's
  share (on - idle) x cpu request / allocatable while it runs + per start-up (power-on Job +
  boot + shutdown Job) x (idle - standby), less one shutdown for a machine still up at the end.
  That is exactly how the replay counts energy (`planning.energy`), so the figures compare.

What it leaves out makes the bound lower, never higher, so it stays a lower bound on what any
zero-wait schedule pays: no minimum off time between a shutdown and the next boot, and the
first boots may start before the trace does. Its kind is "zero-wait".

When the pods contend for a scarce resource (more overlapping GPU jobs than GPUs), no
zero-wait schedule exists and that model is infeasible: its figures (the standby alone, or an LP
value of an empty problem) bound nothing. Then, given `max_wait` (the longest any pod waited in
the schedules being compared), `solve` builds the "with waits" relaxation instead, an LP:

- every pod may start anywhere in [arrival, arrival + max_wait], so it runs within the window
  [arrival, min(arrival + max_wait + run, T)] (T the trace's end) for at least
  min(run, T - arrival - max_wait) seconds (0 for CronJob runs under Forbid/Replace, whose
  later runs a wait can skip or cut short);
- the axis is cut at every arrival and window end; `z[p,i,k]` in [0, L_k] is how long pod p
  runs on machine i in segment k (only inside its window, only where it fits), `u[i,k]` in
  [0, 1] the share of segment k machine i is up, `s[i,k] >= u[i,k] - u[i,k-1]` (u before the
  trace is 0) the start-ups, `e[i] <= min(1, sum_k s[i,k])` whether it is up at the end;
- sum_{i,k} z[p,i,k] >= that least run; sum_i z[p,i,k] <= L_k (one machine at a time);
  per machine, segment and resource sum_p req_p z[p,i,k] <= cap_i L_k u[i,k] (the capacity
  integrated over the segment), and the pods needing more than half a machine's resource,
  which can never run there side by side, sum to at most L_k u[i,k]; z <= L_k u;
  minNodes_G <= sum_{i in G} u[i,k] <= maxNodes_G;
- energy: standby + L_k (idle - standby) u + (on - idle) x cpu share x z + a cycle per start-up
  less one shutdown for e, the same terms as above.

Why it is a lower bound on every schedule whose pods each start (last, if evicted) within
max_wait of arriving: take such a schedule and set z to the seconds each pod ran in each
segment on each machine, u to the share of each segment each machine was up, s to the rises of
u and e to min(1, sum s). Every row holds (at every instant what runs fits and runs on an up
machine, so it holds integrated over a segment; a run lies inside its window and lasts at least
the least run; a pod's earlier, evicted runs only add energy). The rises of u sum to no more
than the machine's real start-ups N (each up interval alone rises by at most 1), and with
cycle >= shutdown, cycle x N - shutdown x [up at the end] >= cycle x sum s - shutdown x e. So
every such schedule is a solution of the LP costing no more than it really did, and the LP's
optimum is at most the cheapest of them. It is loose because pods may be split across machines
and time and machines may be partly up (what an LP can do and a schedule cannot).

Identical machines (same Group, draw, durations, room and pods allowed) make the MIP branch
over every permutation of them, and its dual bound hardly moved in the time limit. So the
zero-wait bound is solved with each set of identical machines pooled (`_pooled`: one integer
x counting how many are up, a valid relaxation, its docstring says why) for half the time
limit; a schedule is made from its solution machine by machine (`_realise`) and handed to the
one-per-machine MIP as a start for the other half, which improves on it. Both dual bounds
are proven; the larger counts, and the gap is measured against that best real schedule.
Three kinds of valid rows tighten the LP relaxation: the capacity rows in shares of the
machine (bytes of memory beside a 0/1 x made the matrix span 1 to 1e11), pods needing more
than half a machine each need one of their own, and per segment the room up covers the
demand as a constant (`_cover_rows`).

If the MIP does not close within the time limit, the proven lower bound is the larger of the
solvers' dual bounds and the LP relaxation (solved first), but only once there is a
schedule (else the zero-wait problem may be empty and the with-waits bound is used); the
report says which and the gap to the best schedule found. No figure from an infeasible or
unsolved model is ever returned: without a proven bound `Bound.kwh` is None and `note` says why.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any

from lightsout.planning.energy import Draw
from lightsout.planning.scheduling import NodeView, placement_reasons, shortfalls, view_of_machine
from lightsout.simulate.trace import Trace
from lightsout.state import cron
from lightsout.state.build import GROUPS_KEY, MACHINES_KEY, snapshot_from
from lightsout.state.parse import scheduling_requirements
from lightsout.state.resources import CPU
from lightsout.state.types import Group, Machine, SchedulingRequirements, Snapshot

_HOUR = 3600.0


class SolverMissingError(RuntimeError):
    """highspy is not installed (it is the `sim` extra)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One pod run of the zero-wait schedule."""

    start: float
    end: float
    requests: SchedulingRequirements
    #: The run time, not cut at the trace's end.
    length: float = 0.0
    #: A CronJob run under Forbid or Replace: a wait before it can skip or cut the next one.
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class ScheduleEnergy:
    """One machine in the solver's schedule (the MIP's best one, or the with-waits LP's
    solution), by the objective's own terms, kWh: what `simulate.breakdown` sets Lights-Out's
    energy against. A schedule, not the bound: only a closed MIP's or the LP's adds up to it."""

    name: str
    standby: float
    load: float
    #: Idle above standby while up.
    up: float
    #: Power-on, boot and shutdown above standby (less the last shutdown of one up at the end).
    cycles: float
    up_hours: float
    starts: float

    @property
    def kwh(self) -> float:
        return self.standby + self.load + self.up + self.cycles

    def kwh_of(self, group: str) -> float:
        """One of `breakdown.GROUPS`' names: standby, load, up or cycles (its field's name)."""
        return float(getattr(self, group))

    def as_json(self) -> dict[str, Any]:
        return {
            "kWh": round(self.kwh, 6),
            "standby": round(self.standby, 6),
            "load": round(self.load, 6),
            "up": round(self.up, 6),
            "cycles": round(self.cycles, 6),
            "upHours": round(self.up_hours, 2),
            "starts": round(self.starts, 2),
        }


ZERO_WAIT = "zero-wait"
WITH_WAITS = "with waits"
NO_BOUND = "none"


@dataclass(frozen=True)
class Bound:
    #: ZERO_WAIT (every pod starts on arrival), WITH_WAITS (each within max_wait) or NO_BOUND.
    kind: str
    status: str
    runs: int
    segments: int
    variables: int
    constraints: int
    seconds: float
    #: The proven lower bound, kWh; None when there is none.
    kwh: float | None = None
    #: The best schedule the solver found, kWh (None if none within the limit).
    incumbent_kwh: float | None = None
    #: (incumbent - bound) / incumbent; 0 when closed; None without a schedule to compare.
    gap: float | None = None
    #: What the bound is: "MIP optimum", "MIP dual bound" or "LP relaxation"; "" without one.
    source: str = ""
    lp_kwh: float | None = None
    #: Why the bound may be loose, or why there is none (one line).
    note: str = ""
    #: The wait the with-waits model allowed every pod, seconds (None for the others).
    max_wait: float | None = None
    #: The solver's schedule per machine (empty without one), and which schedule it is.
    schedule: tuple[ScheduleEnergy, ...] = ()
    schedule_source: str = ""

    def as_json(self) -> dict[str, Any]:
        """Strict JSON: every figure finite or null."""
        return {
            "kind": self.kind,
            "kWh": _finite(self.kwh, 3),
            "incumbentKWh": _finite(self.incumbent_kwh, 3),
            "gap": _finite(self.gap, 5),
            "source": self.source,
            "note": self.note,
            "maxWaitSeconds": _finite(self.max_wait, 1),
            "status": self.status,
            "lpKWh": _finite(self.lp_kwh, 3),
            "runs": self.runs,
            "segments": self.segments,
            "variables": self.variables,
            "constraints": self.constraints,
            "seconds": round(self.seconds, 1),
            "scheduleSource": self.schedule_source,
            "schedule": {s.name: s.as_json() for s in self.schedule},
        }


def _finite(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


def zero_wait_runs(trace: Trace) -> list[Run]:
    """Every pod run if nothing ever waited: trace pods, and CronJob runs at their schedule."""
    runs = [
        Run(
            p.at,
            min(p.at + p.run_seconds, trace.duration_seconds),
            scheduling_requirements(p.spec),
            p.run_seconds,
        )
        for p in trace.pods
        if p.at < trace.duration_seconds
    ]
    end = trace.start + timedelta(seconds=trace.duration_seconds)
    for cronjob in trace.cronjobs:
        spec = cron.read(cronjob)
        req = scheduling_requirements(spec.pod_spec)
        length = trace.cron_run_seconds.get(spec.key, 60.0)
        active: list[list[float]] = []
        for moment in cron.fire_times(spec, trace.start, end):
            at = (moment - trace.start).total_seconds()
            live = [r for r in active if r[1] > at]
            if live and spec.concurrency_policy == cron.FORBID:
                continue
            if live and spec.concurrency_policy == cron.REPLACE:
                for r in live:
                    r[1] = at
            active.append([at, min(at + length, trace.duration_seconds)])
        exclusive = spec.concurrency_policy in (cron.FORBID, cron.REPLACE)
        runs.extend(Run(s, e, req, length, exclusive) for s, e in active if e > s)
    return sorted((r for r in runs if r.end > r.start), key=lambda r: (r.start, r.end))


def _allowed(req: SchedulingRequirements, view: NodeView) -> bool:
    return not placement_reasons(req, view) and not shortfalls(req.requests, view.free.as_dict())


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass
class _Problem:
    """Either model in HiGHS' row-wise form: columns x[i,k] (u[i,k]), s[i,k], e[i] (up at the
    end), then the pods' columns, y[p,i] (z[p,i,k])."""

    machines: list[Machine]
    segments: int
    lengths: list[float]
    costs: list[float] = field(default_factory=list)
    #: Wh each machine pays whatever it does: its standby all the time.
    standby: list[float] = field(default_factory=list)
    #: The machine of each pod column, in column order.
    owners: list[int] = field(default_factory=list)
    #: How many identical machines each one stands for (`_pooled`): x[i,k] counts those up.
    counts: list[int] = field(default_factory=list)
    #: The machines each one stands for, as indices into the one-per-machine problem's.
    members: list[list[int]] = field(default_factory=list)
    #: The segments' bounds (the zero-wait model's: every run's start and end is one).
    cuts: list[float] = field(default_factory=list)
    rows_lo: list[float] = field(default_factory=list)
    rows_hi: list[float] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    idx: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)
    dropped: int = 0

    def x(self, i: int, k: int) -> int:
        return i * self.segments + k

    def s(self, i: int, k: int) -> int:
        return (len(self.machines) + i) * self.segments + k

    @property
    def y_base(self) -> int:
        """The first e[i] column; the pods' columns follow the machines' e."""
        return 2 * len(self.machines) * self.segments

    @property
    def pod_base(self) -> int:
        return self.y_base + len(self.machines)

    @property
    def constant(self) -> float:
        """Wh every schedule pays whatever it does: the machines' standby."""
        return sum(self.standby)

    def row(self, entries: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        self.starts.append(len(self.idx))
        self.idx.extend(column for column, _ in entries)
        self.vals.extend(value for _, value in entries)
        self.rows_lo.append(lo)
        self.rows_hi.append(hi)


def _machines(trace: Trace) -> tuple[Snapshot, list[Machine]]:
    """The trace's Groups and Nodes read as the planner reads them, and the machines of known
    capacity (spec.resources): the only ones a model can place pods on."""
    snapshot = snapshot_from(
        {
            GROUPS_KEY: [m for m in trace.machines if m.get("kind") == "Group"],
            MACHINES_KEY: [m for m in trace.machines if m.get("kind") == "Node"],
        }
    )
    return snapshot, [m for m in snapshot.machines if m.resources is not None]


def _views(machines: Sequence[Machine]) -> list[NodeView]:
    """Each machine as the node it becomes, before any workload (capacity is known: the
    caller kept only machines with spec.resources)."""
    views = [view_of_machine(m, ()) for m in machines]
    return [v for v in views if v is not None]


def _problem(trace: Trace, runs: list[Run], *, pooled: bool = False) -> _Problem:
    """The zero-wait MIP, one x per machine; `pooled`, one integer x per set of identical
    machines (`_pooled`)."""
    snapshot, machines = _machines(trace)
    members = [[i] for i in range(len(machines))]
    if pooled:
        members = _pooled(trace, runs, machines)
        machines = [machines[m[0]] for m in members]
    cuts = sorted({0.0, trace.duration_seconds, *(r.start for r in runs), *(r.end for r in runs)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    counts = [len(m) for m in members]
    problem = _Problem(machines, len(lengths), lengths, counts=counts, members=members, cuts=cuts)
    _costs(problem, trace, runs)
    _rows(problem, runs, {t: k for k, t in enumerate(cuts)})
    _group_rows(problem, snapshot.groups)
    return problem


def _group_rows(problem: _Problem, groups: Iterable[Group]) -> None:
    """Each Group's minNodes and maxNodes in every segment (the machines it has up)."""
    for group in groups:
        in_group = [i for i, m in enumerate(problem.machines) if m.group_key == group.key]
        size = sum(problem.counts[i] for i in in_group)
        lo, hi = float(min(group.min_nodes, size)), float(group.max_nodes)
        if in_group and (lo > 0 or hi < size):
            for k in range(problem.segments):
                problem.row([(problem.x(i, k), 1.0) for i in in_group], lo, hi)


def _pooled(trace: Trace, runs: Sequence[Run], machines: Sequence[Machine]) -> list[list[int]]:
    """The sets of identical machines (same Group, draw, durations, room, and the same pods
    allowed), each as its machines' indices.

    Why a valid bound: give any schedule's x[i,k] summed over a set, its pods' y summed over the
    set, and the rises of those sums as start-ups. The set's pods fit in its pooled room while
    that many are up, a pod starts while one is, the rises are no more than the machines'
    start-ups, and each term costs what it did: so the pooled optimum is at most any schedule's
    energy. It drops which machine of the set runs what (a bin-packing detail: pods that each
    need more than half a machine are kept apart, `_rows`), and with it the symmetry that makes
    the one-per-machine MIP branch over every permutation of identical machines.
    """
    views = _views(machines)
    sets: dict[tuple[Any, ...], list[int]] = {}
    for i, (m, view) in enumerate(zip(machines, views, strict=True)):
        signature = (
            m.group_key,
            Draw.declared(m.watts_on, m.watts_idle, m.watts_off),
            trace.durations_of(m.key.name),
            tuple(sorted(view.free.as_dict().items())),
            tuple(sorted(view.allocatable.as_dict().items())),
            tuple(_allowed(r.requests, view) for r in runs),
        )
        sets.setdefault(signature, []).append(i)
    return list(sets.values())


def _machine_costs(problem: _Problem, trace: Trace) -> list[Draw]:
    """The machines' columns' costs in Wh, in column order (x: idle above standby while up, s:
    a power cycle per start-up, e: the shutdown a machine up at the end never pays), and what
    each pays whatever it does (its standby); returns their draws."""
    draws = [Draw.declared(m.watts_on, m.watts_idle, m.watts_off) for m in problem.machines]
    truths = [trace.durations_of(m.key.name) for m in problem.machines]
    for d in draws:
        problem.costs.extend(length / _HOUR * (d.idle - d.off) for length in problem.lengths)
    for truth, d in zip(truths, draws, strict=True):
        cycle = truth.power_on_seconds + truth.boot_seconds + truth.shutdown_seconds
        problem.costs.extend([cycle / _HOUR * (d.idle - d.off)] * problem.segments)
    # A machine up in the last segment never pays its shutdown: e[i] <= x[i,last] earns it back.
    for truth, d in zip(truths, draws, strict=True):
        problem.costs.append(-truth.shutdown_seconds / _HOUR * (d.idle - d.off))
    problem.standby = [
        n * d.off * trace.duration_seconds / _HOUR
        for n, d in zip(problem.counts, draws, strict=True)
    ]
    return draws


def _costs(problem: _Problem, trace: Trace, runs: list[Run]) -> None:
    """Objective coefficients in Wh, in column order; pairs (pod, machine) as allowed."""
    draws = _machine_costs(problem, trace)
    views = _views(problem.machines)
    for p, run in enumerate(runs):
        allowed = [i for i, view in enumerate(views) if _allowed(run.requests, view)]
        problem.dropped += not allowed
        for i in allowed:
            problem.pairs.append((p, i))
            problem.owners.append(i)
            problem.costs.append(
                _load_watts(views[i], draws[i], run) * (run.end - run.start) / _HOUR
            )


def _load_watts(view: NodeView, draw: Draw, run: Run) -> float:
    """What the pod adds to the machine's draw while it runs there (its cpu share of on - idle),
    as `planning.energy.Draw.watts` counts it."""
    cpu = view.allocatable.get(CPU)
    share = min(1.0, run.requests.requests.get(CPU) / cpu) if cpu else 0.0
    return draw.watts(True, share) - draw.watts(True)


def _rows(problem: _Problem, runs: list[Run], index: dict[float, int]) -> None:
    inf = math.inf
    base = problem.pod_base
    by_pod: dict[int, list[int]] = {}
    active: list[list[int]] = [[] for _ in range(problem.segments)]
    for col, (p, _i) in enumerate(problem.pairs):
        by_pod.setdefault(p, []).append(base + col)
        for k in range(index[runs[p].start], index[runs[p].end]):
            active[k].append(col)
    for columns in by_pod.values():
        problem.row([(c, 1.0) for c in columns], 1.0, 1.0)  # every pod runs somewhere
    views = _views(problem.machines)
    names = sorted({name for v in views for name, _ in v.allocatable})
    for i, view in enumerate(views):
        free = view.free.as_dict()
        for k in range(problem.segments):
            columns = [c for c in active[k] if problem.pairs[c][1] == i]
            big: set[int] = set()
            for name in names if columns else ():
                cap = float(free.get(name, 0))
                entries = [
                    (base + c, float(amount))
                    for c in columns
                    if (amount := runs[problem.pairs[c][0]].requests.requests.get(name))
                ]
                if entries:  # what runs fits, and only while the machine is up
                    # In shares of the machine: bytes of memory next to a 0/1 x made a matrix
                    # of coefficients 1 to 1e11, which slowed every LP the solver made.
                    scaled = [(c, amount / cap) for c, amount in entries] if cap > 0 else entries
                    problem.row([*scaled, (problem.x(i, k), -1.0 if cap > 0 else 0.0)], -inf, 0)
                big.update(c for c, amount in entries if 2 * amount > cap)
            if len(big) > 1:  # pods needing more than half a machine each need one of their own
                problem.row([*((c, 1.0) for c in sorted(big)), (problem.x(i, k), -1.0)], -inf, 0)
    _cover_rows(problem, runs, index, views, names)
    for col, (p, i) in enumerate(problem.pairs):
        # The machine is up when the pod starts (tightens the LP relaxation).
        problem.row([(problem.x(i, index[runs[p].start]), 1.0), (base + col, -1.0)], 0, inf)
    last = problem.segments - 1
    for i in range(len(problem.machines)):
        _rise_rows(problem, i)
        problem.row([(problem.x(i, last), 1.0), (problem.y_base + i, -1.0)], 0.0, inf)


def _rise_rows(problem: _Problem, i: int) -> None:
    """s[i,k] >= x[i,k] - x[i,k-1]: a start-up wherever machine i goes from off to up (x before
    the trace is 0)."""
    for k in range(problem.segments):
        entries = [(problem.s(i, k), 1.0), (problem.x(i, k), -1.0)]
        if k:
            entries.append((problem.x(i, k - 1), 1.0))
        problem.row(entries, 0.0, math.inf)


def _cover_rows(
    problem: _Problem,
    runs: list[Run],
    index: dict[float, int],
    views: list[NodeView],
    names: list[str],
) -> None:
    """Valid inequalities with the demand as a constant: for every set A of machines that some
    pods are confined to, the room up in A covers what those pods request in each segment,
    and so many machines of A are up that the largest could hold it. The capacity rows imply
    the first in sum; written out with a constant right-hand side they give the solver
    knapsacks to round (its MIR cuts), and the second is such a rounding already.
    """
    allowed: dict[int, set[int]] = {}
    for p, i in problem.pairs:
        allowed.setdefault(p, set()).add(i)
    sets = {frozenset(a) for a in allowed.values()}
    for machines in sets:
        pods = [p for p, a in allowed.items() if a <= machines]
        for name in names:
            caps = {i: float(views[i].free.as_dict().get(name, 0)) for i in machines}
            largest = max(caps.values())
            demand = [0.0] * problem.segments
            for p in pods:
                amount = runs[p].requests.requests.get(name)
                for k in range(index[runs[p].start], index[runs[p].end]) if amount else ():
                    demand[k] += amount
            for k, need in enumerate(demand):
                if need <= 0 or largest <= 0:
                    continue
                room = [(problem.x(i, k), caps[i] / largest) for i in sorted(machines)]
                problem.row(room, need / largest, math.inf)
                least = math.ceil(need / largest - 1e-9)
                if least > 1:
                    problem.row([(c, 1.0) for c, _ in room], float(least), math.inf)


def _waits_problem(trace: Trace, runs: list[Run], max_wait: float) -> tuple[_Problem, list[float]]:
    """The with-waits LP (module docstring): columns u[i,k] (at `problem.x`), s[i,k] (at
    `problem.s`), e[i] (from `problem.y_base`), then z[p,i,k]."""
    snapshot, machines = _machines(trace)
    end = trace.duration_seconds
    windows = [
        (r.start, min(r.start + max_wait + max(r.length, r.end - r.start), end)) for r in runs
    ]
    cuts = sorted({0.0, end, *(a for a, _ in windows), *(b for _, b in windows)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    n, m = len(lengths), len(machines)
    problem = _Problem(machines, n, lengths, counts=[1] * m)
    draws = _machine_costs(problem, trace)
    views = _views(machines)
    upper = [1.0] * (n * m) + [math.inf] * (n * m) + [1.0] * m  # u, s and e
    z: dict[tuple[int, int, int], int] = {}  # (pod, machine, segment) -> column
    for p, (run, (start, stop)) in enumerate(zip(runs, windows, strict=True)):
        allowed = [i for i, view in enumerate(views) if _allowed(run.requests, view)]
        problem.dropped += not allowed
        inside = [k for k in range(n) if cuts[k] >= start and cuts[k + 1] <= stop]
        for i in allowed:
            watts = _load_watts(views[i], draws[i], run)
            for k in inside:
                z[p, i, k] = problem.pod_base + len(z)
                problem.owners.append(i)
                problem.costs.append(watts / _HOUR)
                upper.append(lengths[k])
        least = 0.0 if run.exclusive else max(0.0, min(run.length, end - start - max_wait))
        columns = [z[p, i, k] for i in allowed for k in inside]
        if columns and least > 0:
            problem.row([(c, 1.0) for c in columns], least, math.inf)  # it runs long enough
    _waits_rows(problem, runs, z, views)
    _group_rows(problem, snapshot.groups)
    return problem, upper


def _waits_rows(
    problem: _Problem, runs: list[Run], z: dict[tuple[int, int, int], int], views: list[NodeView]
) -> None:
    inf, lengths, u = math.inf, problem.lengths, problem.x
    by_pod_segment: dict[tuple[int, int], list[int]] = {}
    by_machine_segment: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (p, i, k), c in z.items():
        by_pod_segment.setdefault((p, k), []).append(c)
        by_machine_segment.setdefault((i, k), []).append((p, c))
        problem.row([(c, 1.0), (u(i, k), -lengths[k])], -inf, 0.0)  # only while i is up
    for (_p, k), columns in by_pod_segment.items():
        if len(columns) > 1:  # on one machine at a time
            problem.row([(c, 1.0) for c in columns], -inf, lengths[k])
    names = sorted({name for v in views for name, _ in v.allocatable})
    for (i, k), entries in by_machine_segment.items():
        free = views[i].free.as_dict()
        big: list[int] = []
        for name in names:
            cap = float(free.get(name, 0))
            used = [
                (c, float(amount))
                for p, c in entries
                if (amount := runs[p].requests.requests.get(name))
            ]
            if used:  # the capacity, integrated over the segment
                problem.row([*used, (u(i, k), -cap * lengths[k])], -inf, 0.0)
            big.extend(c for c, amount in used if 2 * amount > cap)
        if len(set(big)) > 1:  # never two of these side by side on i
            problem.row([*((c, 1.0) for c in sorted(set(big))), (u(i, k), -lengths[k])], -inf, 0)
    n = problem.segments
    for i in range(len(problem.machines)):
        ups = [(problem.s(i, k), -1.0) for k in range(n)]
        problem.row([(problem.y_base + i, 1.0), *ups], -inf, 0.0)  # up at the end: started
        _rise_rows(problem, i)


def _schedule(problem: _Problem, values: Sequence[float]) -> tuple[ScheduleEnergy, ...]:
    """Each machine's share of a solution's objective, by term (the columns' own costs)."""

    def wh(columns: Iterable[int]) -> float:
        return sum(problem.costs[c] * values[c] for c in columns)

    n = problem.segments
    load = [0.0] * len(problem.machines)
    for offset, i in enumerate(problem.owners):
        c = problem.pod_base + offset
        load[i] += problem.costs[c] * values[c]
    return tuple(
        ScheduleEnergy(
            name=m.key.name,
            standby=problem.standby[i] / 1000,
            load=load[i] / 1000,
            up=wh(problem.x(i, k) for k in range(n)) / 1000,
            cycles=(wh(problem.s(i, k) for k in range(n)) + wh([problem.y_base + i])) / 1000,
            up_hours=sum(problem.lengths[k] * values[problem.x(i, k)] for k in range(n)) / _HOUR,
            starts=sum(values[problem.s(i, k)] for k in range(n)),
        )
        for i, m in enumerate(problem.machines)
    )


def _highs(highspy: Any, np: Any, problem: _Problem, upper: list[float], time_limit: float) -> Any:
    """A quiet, single-threaded HiGHS loaded with the problem (all columns continuous)."""
    with _quiet_stdout():
        h = highspy.Highs()  # prints a banner on file descriptor 1, which -o json owns
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", max(1.0, time_limit))
    n_cols = len(upper)
    # The bounds' math.inf is HiGHS' own infinity (`highspy.kHighsInf`).
    h.addVars(n_cols, np.zeros(n_cols), np.array(upper))
    h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), np.array(problem.costs))
    h.addRows(
        len(problem.rows_lo),
        np.array(problem.rows_lo),
        np.array(problem.rows_hi),
        len(problem.idx),
        np.array(problem.starts, dtype=np.int32),
        np.array(problem.idx, dtype=np.int32),
        np.array(problem.vals),
    )
    return h


@dataclass(frozen=True, slots=True)
class _Outcome:
    columns: int
    status: str
    #: The LP relaxation's value, Wh (-inf unless solved to optimality).
    lp: float = -math.inf
    #: The MIP's proven dual bound, Wh (-inf without one).
    dual: float = -math.inf
    #: The best schedule's energy, Wh (None without one).
    incumbent: float | None = None
    closed: bool = False
    #: The solver proved no zero-wait schedule exists.
    infeasible: bool = False
    #: The best schedule per machine (empty without one).
    schedule: tuple[ScheduleEnergy, ...] = ()
    #: The best solution's column values (None without one).
    values: list[float] | None = None
    rows: int = 0
    segments: int = 0
    #: Pod runs that fit no machine, left out.
    dropped: int = 0
    #: The MIP pooled identical machines (`_pooled`); its schedule was made per machine.
    pooled: bool = False


def _upper(problem: _Problem) -> list[float]:
    """The zero-wait model's column upper bounds: x and e count machines, s is free, y is 0/1."""
    counts = [float(n) for n in problem.counts]
    upper = [n for n in counts for _ in range(problem.segments)]
    return upper + [math.inf] * (problem.y_base - len(upper)) + counts + [1.0] * len(problem.pairs)


def _zero_wait(
    highspy: Any,
    np: Any,
    problem: _Problem,
    time_limit: float,
    start: Sequence[float] | None = None,
) -> _Outcome:
    """The zero-wait MIP, its LP relaxation solved first; or, given a `start` schedule, the
    MIP alone from that schedule (to improve on it: its LP is a pooled one's, no stronger)."""
    n_cols = problem.pod_base + len(problem.pairs)
    starts = len(problem.machines) * problem.segments
    h = _highs(highspy, np, problem, _upper(problem), time_limit)
    infeasible = highspy.HighsModelStatus.kInfeasible
    optimal = highspy.HighsModelStatus.kOptimal
    # The LP relaxation first: a proven lower bound whatever the MIP does next, provided a
    # zero-wait schedule exists (an infeasible LP proves none does).
    lp_status = optimal
    if start is None:
        h.run()
        lp_status = h.getModelStatus()
    status = h.modelStatusToString(lp_status)
    if lp_status == infeasible:
        return _Outcome(
            n_cols,
            status,
            infeasible=True,
            rows=len(problem.rows_lo),
            segments=problem.segments,
            dropped=problem.dropped,
        )
    lp = h.getInfo().objective_function_value + problem.constant if start is None else -math.inf
    lp = lp if lp_status == optimal else -math.inf
    integer = np.concatenate([np.arange(0, starts), np.arange(problem.pod_base, n_cols)])
    h.changeColsIntegrality(
        len(integer),
        integer.astype(np.int32),
        np.full(len(integer), highspy.HighsVarType.kInteger),
    )
    h.setOptionValue("mip_rel_gap", 1e-4)
    # Without this the MIP takes the LP's fractional solution for a start and spends up to the
    # whole time limit in a sub-MIP trying to complete it, before its own search begins.
    h.clearSolver()
    if start is not None:
        given = highspy.HighsSolution()
        given.col_value = list(start)
        given.value_valid = True
        h.setSolution(given)
    h.run()
    info = h.getInfo()
    dual = (
        info.mip_dual_bound + problem.constant if math.isfinite(info.mip_dual_bound) else -math.inf
    )
    found = info.primal_solution_status == 2  # a feasible schedule was found
    values = list(h.getSolution().col_value) if found else None
    return _Outcome(
        columns=n_cols,
        status=h.modelStatusToString(h.getModelStatus()),
        lp=lp,
        dual=dual,
        incumbent=info.objective_function_value + problem.constant if found else None,
        closed=h.getModelStatus() == optimal,
        infeasible=h.getModelStatus() == infeasible,
        schedule=_schedule(problem, values) if values is not None else (),
        values=values,
        rows=len(problem.rows_lo),
        segments=problem.segments,
        dropped=problem.dropped,
    )


def _zero_wait_pooled(
    highspy: Any, np: Any, trace: Trace, runs: list[Run], time_limit: float
) -> _Outcome:
    """The zero-wait bound: the MIP with identical machines pooled (`_pooled`) for half the
    time, a schedule made from its solution machine by machine (`_realise`), and the
    one-per-machine MIP from that schedule for the other half, to improve on it (its dual bound
    counts too). Without anything to pool, the one MIP for the whole time; without a schedule
    made that way, the one-per-machine MIP from nothing."""
    started = time.monotonic()
    pooled = _problem(trace, runs, pooled=True)
    if all(n == 1 for n in pooled.counts):
        return _zero_wait(highspy, np, pooled, time_limit)  # its schedule is one already
    outcome = _zero_wait(highspy, np, pooled, time_limit / 2)
    if outcome.infeasible:  # the pooled model is a relaxation: no schedule exists
        return replace(outcome, pooled=True)
    single = _problem(trace, runs)
    made = None if outcome.values is None else _realise(pooled, outcome.values, single, runs)
    alone = _zero_wait(
        highspy, np, single, max(1.0, time_limit - (time.monotonic() - started)), made
    )
    if made is not None and alone.incumbent is None:  # kept the one it was given
        energy = sum(c * v for c, v in zip(single.costs, made, strict=True)) + single.constant
        alone = replace(alone, incumbent=energy, schedule=_schedule(single, made), values=made)
    best = max(alone.dual, outcome.dual)
    return replace(
        alone,
        lp=max(alone.lp, outcome.lp),
        dual=best,
        # Closed when the best schedule costs no more than the bound (at the MIP's 1e-4 gap).
        closed=alone.closed
        or (alone.incumbent is not None and alone.incumbent <= best + 1e-4 * abs(best)),
        rows=outcome.rows,
        columns=outcome.columns,
        pooled=outcome.dual >= alone.dual,
    )


def _realise(
    pooled: _Problem, values: Sequence[float], single: _Problem, runs: Sequence[Run]
) -> list[float] | None:
    """A schedule of the one-per-machine problem (its column values) from a pooled solution, or
    None when this way finds none that passes every row.

    Each pod, in order of start, goes to the machine of the set the pooled solution chose for it
    (any other it may run on if none has room for its whole run) that it adds the least energy
    to; a machine is up while it runs pods, and stays up over a gap that costs less idling than
    a power cycle (or than its shutdown, at the end): given the placement, the cheapest way to
    run each machine."""
    n = single.segments
    index = {t: k for k, t in enumerate(single.cuts)}
    chosen = {
        p: i for (p, i), v in zip(pooled.pairs, values[pooled.pod_base :], strict=True) if v > 0.5
    }
    column = {pair: single.pod_base + c for c, pair in enumerate(single.pairs)}
    allowed: dict[int, list[int]] = {}
    for p, i in single.pairs:
        allowed.setdefault(p, []).append(i)
    free = [v.free.as_dict() for v in _views(single.machines)]
    used = [[dict[str, float]() for _ in range(n)] for _ in single.machines]
    host: dict[int, int] = {}
    for p in sorted(allowed, key=lambda p: (runs[p].start, -runs[p].end)):
        segments = range(index[runs[p].start], index[runs[p].end])
        wants = list(runs[p].requests.requests)
        fits = [
            i
            for i in allowed[p]
            if all(
                used[i][k].get(name, 0.0) + amount <= free[i].get(name, 0) + 1e-9
                for k in segments
                for name, amount in wants
            )
        ]
        preferred = [i for i in fits if p in chosen and i in pooled.members[chosen[p]]]
        if not fits:
            return None
        extra = {i: _extra(single, i, segments, used[i]) + single.costs[column[p, i]] for i in fits}
        host[p] = i = min(preferred or fits, key=lambda i: (extra[i], i))
        for k in segments:
            for name, amount in wants:
                used[i][k][name] = used[i][k].get(name, 0.0) + amount
    made = [0.0] * len(single.costs)
    for i in range(len(single.machines)):
        up = [bool(used[i][k]) for k in range(n)]
        _bridge(single, i, up)
        for k in range(n):
            made[single.x(i, k)] = float(up[k])
            made[single.s(i, k)] = float(up[k] and (k == 0 or not up[k - 1]))
        made[single.y_base + i] = float(up[-1])
    for c, pair in enumerate(single.pairs):
        made[single.pod_base + c] = float(host.get(pair[0]) == pair[1])
    return made if _feasible(single, made) else None


def _extra(problem: _Problem, i: int, segments: range, used: Sequence[dict[str, float]]) -> float:
    """What machine i costs more to be up over `segments` as well: the idle of those it is not
    up for already, and a start-up if it is down just before."""
    cost = sum(problem.costs[problem.x(i, k)] for k in segments if not used[k])
    first = segments.start
    if not used[first] and (first == 0 or not used[first - 1]):
        cost += problem.costs[problem.s(i, first)]
    return cost


def _bridge(problem: _Problem, i: int, up: list[bool]) -> None:
    """Keep machine i up over each gap that costs less idling than the cycle it saves (and
    after its last pod, while idling costs less than its shutdown), by the objective's costs."""
    n = len(up)
    k = next((k for k in range(n) if up[k]), n)  # from its first segment up
    while k < n:
        if up[k]:
            k += 1
            continue
        gap = k
        while gap < n and not up[gap]:
            gap += 1
        idle = sum(problem.costs[problem.x(i, j)] for j in range(k, gap))
        saved = problem.costs[problem.s(i, gap)] if gap < n else -problem.costs[problem.y_base + i]
        if idle < saved:
            up[k:gap] = [True] * (gap - k)
        k = gap


def _feasible(problem: _Problem, values: Sequence[float], tolerance: float = 1e-6) -> bool:
    """Whether the values pass every row and column bound of the zero-wait model."""
    upper = _upper(problem)
    if any(v < -tolerance or v > u + tolerance for v, u in zip(values, upper, strict=True)):
        return False
    ends = [*problem.starts[1:], len(problem.idx)]
    for start, end, lo, hi in zip(
        problem.starts, ends, problem.rows_lo, problem.rows_hi, strict=True
    ):
        activity = sum(problem.vals[j] * values[problem.idx[j]] for j in range(start, end))
        if activity < lo - tolerance or activity > hi + tolerance:
            return False
    return True


def solve(trace: Trace, time_limit: float = 60.0, max_wait: float | None = None) -> Bound:
    """Solve the trace's offline problem; raises `SolverMissingError` without highspy.

    The zero-wait MIP first; if it has no schedule (infeasible, or none found within the time
    limit) and `max_wait` is given, the with-waits LP; else no bound (`kwh` None, `note`)."""
    try:
        import highspy
        import numpy as np
    except ImportError as error:
        raise SolverMissingError(
            "the offline optimum needs HiGHS: pip install 'kube-lightsout[sim]'"
        ) from error
    started = time.monotonic()
    runs = zero_wait_runs(trace)
    mip = _zero_wait_pooled(highspy, np, trace, runs, time_limit)
    status, lp, dual, incumbent, closed = mip.status, mip.lp, mip.dual, mip.incumbent, mip.closed
    # A bound of the zero-wait model, with its size (the with-waits LP gives its own).
    zero_wait = partial(
        Bound, status=status, runs=len(runs), segments=mip.segments, variables=mip.columns
    )
    dropped = f"; {mip.dropped} pod run(s) fit no machine, left out" if mip.dropped else ""
    best = max(dual, lp)  # proven, never the incumbent (the MIP closes at a 1e-4 gap)
    if incumbent is not None and math.isfinite(best):  # zero-wait schedules exist: it bounds them
        source = "MIP optimum" if closed else ("MIP dual bound" if dual >= lp else "LP relaxation")
        if mip.pooled:
            source += ", identical machines pooled"
        gap = 0.0 if closed else max(0.0, (incumbent - best) / incumbent)
        note = (
            "every pod started on arrival"
            + ("" if closed else f"; the MIP did not close in {time_limit:.0f} s")
            + dropped
        )
        made = ", made machine by machine from the pooled MIP's solution" if mip.pooled else ""
        return zero_wait(
            schedule=mip.schedule,
            schedule_source=f"the MIP's {'optimum' if closed else 'best schedule'}{made}, "
            f"{incumbent / 1000:.3f} kWh",
            kind=ZERO_WAIT,
            kwh=best / 1000,
            incumbent_kwh=incumbent / 1000,
            gap=gap,
            source=source,
            lp_kwh=lp / 1000,
            constraints=mip.rows,
            seconds=time.monotonic() - started,
            note=note,
        )
    if mip.infeasible:
        why = "no zero-wait schedule: the pods contend for more than the machines hold"
    elif incumbent is None:
        why = f"the zero-wait MIP found no schedule in {time_limit:.0f} s ({status})"
    else:
        why = f"the zero-wait MIP proved no bound in {time_limit:.0f} s ({status})"
    if max_wait is None:
        return zero_wait(
            kind=NO_BOUND,
            constraints=mip.rows,
            seconds=time.monotonic() - started,
            note=f"{why}, and no wait limit was given to relax it with",
        )
    waits, upper = _waits_problem(trace, runs, max_wait)
    h = _highs(highspy, np, waits, upper, max(1.0, time_limit - (time.monotonic() - started)))
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    solved = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    value = h.getInfo().objective_function_value + waits.constant if solved else None
    if waits.dropped:
        dropped = f"; {waits.dropped} pod run(s) fit no machine, left out"
    note = (
        f"{why}; each pod may wait up to {max_wait:.0f} s; loose: the LP may split pods across "
        "machines and time and keep machines partly up" + dropped
        if solved
        else f"{why}; the with-waits LP did not solve ({status})"
    )
    return Bound(
        schedule=_schedule(waits, list(h.getSolution().col_value)) if solved else (),
        schedule_source="the with-waits LP's solution (the bound itself: pods split, machines "
        "partly up)"
        if solved
        else "",
        kind=WITH_WAITS if solved else NO_BOUND,
        kwh=None if value is None else value / 1000,
        source="LP relaxation" if solved else "",
        status=status,
        lp_kwh=None if value is None else value / 1000,
        runs=len(runs),
        segments=waits.segments,
        variables=len(upper),
        constraints=len(waits.rows_lo),
        seconds=time.monotonic() - started,
        note=note,
        max_wait=max_wait,
    )
