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

If the MIP does not close within the time limit, the proven lower bound is the larger of the
solver's dual bound and the LP relaxation (solved first), but only once the solver has a
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
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lightsout.planning.energy import Draw
from lightsout.planning.scheduling import NodeView, placement_reasons, shortfalls, view_of_machine
from lightsout.simulate.trace import Trace
from lightsout.state import (
    GROUPS_KEY,
    MACHINES_KEY,
    Machine,
    SchedulingRequirements,
    cron,
    snapshot_from,
)
from lightsout.state.parse import scheduling_requirements
from lightsout.state.resources import CPU

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
        """One of `breakdown.GROUPS`' names: standby, load, up or cycles."""
        return {"standby": self.standby, "load": self.load, "up": self.up, "cycles": self.cycles}[
            group
        ]

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
    #: The proven lower bound, kWh; None when there is none.
    kwh: float | None
    #: The best schedule the solver found, kWh (None if none within the limit).
    incumbent_kwh: float | None
    #: (incumbent - bound) / incumbent; 0 when closed; None without a schedule to compare.
    gap: float | None
    #: What the bound is: "MIP optimum", "MIP dual bound" or "LP relaxation"; "" without one.
    source: str
    status: str
    lp_kwh: float | None
    runs: int
    segments: int
    variables: int
    constraints: int
    seconds: float
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
        for column, value in entries:
            self.idx.append(column)
            self.vals.append(value)
        self.rows_lo.append(lo)
        self.rows_hi.append(hi)


def _views(machines: Sequence[Machine]) -> list[NodeView]:
    """Each machine as the node it becomes, before any workload (capacity is known: the
    caller kept only machines with spec.resources)."""
    views = [view_of_machine(m, ()) for m in machines]
    return [v for v in views if v is not None]


def _problem(trace: Trace, runs: list[Run]) -> _Problem:
    snapshot = snapshot_from(
        {
            GROUPS_KEY: [m for m in trace.machines if m.get("kind") == "Group"],
            MACHINES_KEY: [m for m in trace.machines if m.get("kind") == "Node"],
        }
    )
    machines = [m for m in snapshot.machines if m.resources is not None]
    cuts = sorted({0.0, trace.duration_seconds, *(r.start for r in runs), *(r.end for r in runs)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    problem = _Problem(machines, len(lengths), lengths)
    _costs(problem, trace, runs)
    _rows(problem, runs, {t: k for k, t in enumerate(cuts)})
    for group in snapshot.groups:
        members = [i for i, m in enumerate(machines) if m.group_key == group.key]
        lo, hi = float(min(group.min_nodes, len(members))), float(group.max_nodes)
        if members and (lo > 0 or hi < len(members)):
            for k in range(problem.segments):
                problem.row([(problem.x(i, k), 1.0) for i in members], lo, hi)
    return problem


def _costs(problem: _Problem, trace: Trace, runs: list[Run]) -> None:
    """Objective coefficients in Wh, in column order; pairs (pod, machine) as allowed."""
    machines = problem.machines
    draws = [Draw.declared(m.watts_on, m.watts_idle, m.watts_off) for m in machines]
    views = _views(machines)
    for d in draws:
        problem.costs.extend(length / _HOUR * (d.idle - d.off) for length in problem.lengths)
    for m, d in zip(machines, draws, strict=True):
        truth = trace.durations_of(m.key.name)
        cycle = truth.power_on_seconds + truth.boot_seconds + truth.shutdown_seconds
        problem.costs.extend([cycle / _HOUR * (d.idle - d.off)] * problem.segments)
    # A machine up in the last segment never pays its shutdown: e[i] <= x[i,last] earns it back.
    _end_credits(problem, trace, draws)
    for p, run in enumerate(runs):
        allowed = [i for i, view in enumerate(views) if _allowed(run.requests, view)]
        problem.dropped += not allowed
        for i in allowed:
            problem.pairs.append((p, i))
            problem.owners.append(i)
            problem.costs.append(
                _load_watts(views[i], draws[i], run) * (run.end - run.start) / _HOUR
            )
    problem.standby = [d.off * trace.duration_seconds / _HOUR for d in draws]


def _end_credits(problem: _Problem, trace: Trace, draws: Sequence[Draw]) -> None:
    """The e[i] columns' costs: the shutdown a machine up at the end never pays."""
    for m, d in zip(problem.machines, draws, strict=True):
        shutdown = trace.durations_of(m.key.name).shutdown_seconds
        problem.costs.append(-shutdown / _HOUR * (d.idle - d.off))


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
            for name in names if columns else ():
                entries = [
                    (base + c, float(amount))
                    for c in columns
                    if (amount := runs[problem.pairs[c][0]].requests.requests.get(name))
                ]
                if entries:  # what runs fits, and only while the machine is up
                    problem.row([*entries, (problem.x(i, k), -float(free.get(name, 0)))], -inf, 0)
    for col, (p, i) in enumerate(problem.pairs):
        # The machine is up when the pod starts (tightens the LP relaxation).
        problem.row([(problem.x(i, index[runs[p].start]), 1.0), (base + col, -1.0)], 0, inf)
    last = problem.segments - 1
    for i in range(len(problem.machines)):
        for k in range(problem.segments):
            entries = [(problem.s(i, k), 1.0), (problem.x(i, k), -1.0)]
            if k:
                entries.append((problem.x(i, k - 1), 1.0))
            problem.row(entries, 0.0, inf)  # a start-up wherever it goes from off to up
        problem.row([(problem.x(i, last), 1.0), (problem.y_base + i, -1.0)], 0.0, inf)


def _waits_problem(trace: Trace, runs: list[Run], max_wait: float) -> tuple[_Problem, list[float]]:
    """The with-waits LP (module docstring): columns u[i,k] (at `problem.x`), s[i,k] (at
    `problem.s`), e[i] (from `problem.y_base`), then z[p,i,k]."""
    snapshot = snapshot_from(
        {
            GROUPS_KEY: [m for m in trace.machines if m.get("kind") == "Group"],
            MACHINES_KEY: [m for m in trace.machines if m.get("kind") == "Node"],
        }
    )
    machines = [m for m in snapshot.machines if m.resources is not None]
    end = trace.duration_seconds
    windows = [
        (r.start, min(r.start + max_wait + max(r.length, r.end - r.start), end)) for r in runs
    ]
    cuts = sorted({0.0, end, *(a for a, _ in windows), *(b for _, b in windows)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    n, m = len(lengths), len(machines)
    problem = _Problem(machines, n, lengths)
    draws = [Draw.declared(x.watts_on, x.watts_idle, x.watts_off) for x in machines]
    views = _views(machines)
    upper: list[float] = []
    for d in draws:
        problem.costs.extend(length / _HOUR * (d.idle - d.off) for length in lengths)
        upper.extend([1.0] * n)
    for x, d in zip(machines, draws, strict=True):
        truth = trace.durations_of(x.key.name)
        cycle = truth.power_on_seconds + truth.boot_seconds + truth.shutdown_seconds
        problem.costs.extend([cycle / _HOUR * (d.idle - d.off)] * n)
        upper.extend([math.inf] * n)
    _end_credits(problem, trace, draws)
    upper.extend([1.0] * m)
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
    for group in snapshot.groups:
        members = [i for i, x in enumerate(machines) if x.group_key == group.key]
        lo, hi = float(min(group.min_nodes, len(members))), float(group.max_nodes)
        if members and (lo > 0 or hi < len(members)):
            for k in range(n):
                problem.row([(problem.x(i, k), 1.0) for i in members], lo, hi)
    problem.standby = [d.off * end / _HOUR for d in draws]
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
        for k in range(n):
            rise = [(problem.s(i, k), 1.0), (u(i, k), -1.0)]
            if k:
                rise.append((u(i, k - 1), 1.0))
            problem.row(rise, 0.0, inf)


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
    h.addVars(
        n_cols,
        np.zeros(n_cols),
        np.array([highspy.kHighsInf if v == math.inf else v for v in upper]),
    )
    h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), np.array(problem.costs))
    h.addRows(
        len(problem.rows_lo),
        np.array([-highspy.kHighsInf if v == -math.inf else v for v in problem.rows_lo]),
        np.array([highspy.kHighsInf if v == math.inf else v for v in problem.rows_hi]),
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
    lp: float
    #: The MIP's proven dual bound, Wh (-inf without one).
    dual: float
    #: The best schedule's energy, Wh (None without one).
    incumbent: float | None
    closed: bool
    #: The solver proved no zero-wait schedule exists.
    infeasible: bool
    #: The best schedule per machine (empty without one).
    schedule: tuple[ScheduleEnergy, ...] = ()


def _zero_wait(highspy: Any, np: Any, problem: _Problem, time_limit: float) -> _Outcome:
    n_cols = problem.pod_base + len(problem.pairs)
    starts = len(problem.machines) * problem.segments
    upper = (
        [1.0] * starts + [math.inf] * (problem.y_base - starts) + [1.0] * (n_cols - problem.y_base)
    )
    h = _highs(highspy, np, problem, upper, time_limit)
    infeasible = highspy.HighsModelStatus.kInfeasible
    optimal = highspy.HighsModelStatus.kOptimal
    # The LP relaxation first: a proven lower bound whatever the MIP does next, provided a
    # zero-wait schedule exists (an infeasible LP proves none does).
    h.run()
    lp_status = h.getModelStatus()
    status = h.modelStatusToString(lp_status)
    if lp_status == infeasible:
        return _Outcome(n_cols, status, -math.inf, -math.inf, None, False, infeasible=True)
    lp = h.getInfo().objective_function_value + problem.constant
    lp = lp if lp_status == optimal else -math.inf
    integer = np.concatenate([np.arange(0, starts), np.arange(problem.pod_base, n_cols)])
    h.changeColsIntegrality(
        len(integer),
        integer.astype(np.int32),
        np.full(len(integer), highspy.HighsVarType.kInteger),
    )
    h.setOptionValue("mip_rel_gap", 1e-4)
    h.run()
    info = h.getInfo()
    dual = (
        info.mip_dual_bound + problem.constant if math.isfinite(info.mip_dual_bound) else -math.inf
    )
    found = info.primal_solution_status == 2  # a feasible schedule was found
    return _Outcome(
        columns=n_cols,
        status=h.modelStatusToString(h.getModelStatus()),
        lp=lp,
        dual=dual,
        incumbent=info.objective_function_value + problem.constant if found else None,
        closed=h.getModelStatus() == optimal,
        infeasible=h.getModelStatus() == infeasible,
        schedule=_schedule(problem, list(h.getSolution().col_value)) if found else (),
    )


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
    problem = _problem(trace, runs)
    mip = _zero_wait(highspy, np, problem, time_limit)
    n_cols, status, lp, dual, incumbent = mip.columns, mip.status, mip.lp, mip.dual, mip.incumbent
    closed = mip.closed
    runs_count, segments = len(runs), problem.segments
    dropped = f"; {problem.dropped} pod run(s) fit no machine, left out" if problem.dropped else ""
    best = max(dual, lp)  # proven, never the incumbent (the MIP closes at a 1e-4 gap)
    if incumbent is not None and math.isfinite(best):  # zero-wait schedules exist: it bounds them
        source = "MIP optimum" if closed else ("MIP dual bound" if dual >= lp else "LP relaxation")
        gap = 0.0 if closed else max(0.0, (incumbent - best) / incumbent)
        note = (
            "every pod started on arrival"
            + ("" if closed else f"; the MIP did not close in {time_limit:.0f} s")
            + dropped
        )
        return Bound(
            schedule=mip.schedule,
            schedule_source=f"the MIP's {'optimum' if closed else 'best schedule'}, "
            f"{incumbent / 1000:.3f} kWh",
            kind=ZERO_WAIT,
            kwh=best / 1000,
            incumbent_kwh=incumbent / 1000,
            gap=gap,
            source=source,
            status=status,
            lp_kwh=lp / 1000,
            variables=n_cols,
            constraints=len(problem.rows_lo),
            seconds=time.monotonic() - started,
            note=note,
            runs=runs_count,
            segments=segments,
        )
    if mip.infeasible:
        why = "no zero-wait schedule: the pods contend for more than the machines hold"
    elif incumbent is None:
        why = f"the zero-wait MIP found no schedule in {time_limit:.0f} s ({status})"
    else:
        why = f"the zero-wait MIP proved no bound in {time_limit:.0f} s ({status})"
    if max_wait is None:
        return Bound(
            kind=NO_BOUND,
            kwh=None,
            incumbent_kwh=None,
            gap=None,
            source="",
            status=status,
            lp_kwh=None,
            variables=n_cols,
            constraints=len(problem.rows_lo),
            seconds=time.monotonic() - started,
            note=f"{why}, and no wait limit was given to relax it with",
            runs=runs_count,
            segments=segments,
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
        incumbent_kwh=None,
        gap=None,
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
