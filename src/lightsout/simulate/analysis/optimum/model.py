"""The offline optimum's models, stated here and built in HiGHS' row-wise form (`Problem`).

`solver.solve(trace, time_limit)` has a mixed-integer program built over the trace's event
times (`zero_wait_problem`) and solves it with HiGHS (`highspy`, the `sim` extra);
`lightsout simulate --optimum` and the benchmark call it. The model (docs/simulator.md states
it with its assumptions):

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
  That is exactly how the replay counts energy (`planning.energy.account`), so the figures compare.

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
Beside it `solve` now solves the time-indexed MIP of `windows` (whole-slot machine states,
each pod's start slot an integer choice) for the rest of the time limit; the larger proven
bound of the two counts.

Identical machines (same Group, draw, durations, room and pods allowed) make the MIP branch
over every permutation of them, and its dual bound hardly moved in the time limit. So the
zero-wait bound is solved with each set of identical machines pooled (`_pooled`: one integer
x counting how many are up, a valid relaxation, its docstring says why) for half the time
limit; a schedule is made from its solution machine by machine (`realise.realise`) and handed
to the one-per-machine MIP as a start for the other half, which improves on it. Both dual bounds
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

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lightsout.planning.autoscaler.scheduling import (
    NodeView,
    placement_reasons,
    shortfalls,
    view_of_machine,
)
from lightsout.planning.energy.account import Draw
from lightsout.simulate.traces.trace import Trace
from lightsout.state import cron
from lightsout.state.parse import scheduling_requirements
from lightsout.state.resources import CPU
from lightsout.state.types import Group, Machine, SchedulingRequirements

HOUR = 3600.0


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


def allowed_on(req: SchedulingRequirements, view: NodeView) -> bool:
    """Whether a pod asking `req` may run on the node `view` (placement, and room when empty)."""
    return not placement_reasons(req, view) and not shortfalls(req.requests, view.free.as_dict())


@dataclass
class Problem:
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


def cluster(trace: Trace) -> tuple[tuple[Group, ...], list[Machine]]:
    """The trace's Groups (with their price and carbon series) read as the replay reads them,
    and the machines of known capacity (spec.resources): the only ones a model can place pods
    on."""
    snapshot = trace.snapshot()
    return snapshot.groups, [m for m in snapshot.machines if m.resources is not None]


def node_views(machines: Sequence[Machine]) -> list[NodeView]:
    """Each machine as the node it becomes, before any workload (capacity is known: the
    caller kept only machines with spec.resources)."""
    views = [view_of_machine(m, ()) for m in machines]
    return [v for v in views if v is not None]


def zero_wait_problem(trace: Trace, runs: list[Run], *, pooled: bool = False) -> Problem:
    """The zero-wait MIP, one x per machine; `pooled`, one integer x per set of identical
    machines (`_pooled`)."""
    groups, machines = cluster(trace)
    members = [[i] for i in range(len(machines))]
    if pooled:
        members = _pooled(trace, runs, machines)
        machines = [machines[m[0]] for m in members]
    cuts = sorted({0.0, trace.duration_seconds, *(r.start for r in runs), *(r.end for r in runs)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    counts = [len(m) for m in members]
    problem = Problem(machines, len(lengths), lengths, counts=counts, members=members, cuts=cuts)
    _costs(problem, trace, runs)
    _rows(problem, runs, {t: k for k, t in enumerate(cuts)})
    _group_rows(problem, groups)
    return problem


def _group_rows(problem: Problem, groups: Iterable[Group]) -> None:
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
    views = node_views(machines)
    sets: dict[tuple[Any, ...], list[int]] = {}
    for i, (m, view) in enumerate(zip(machines, views, strict=True)):
        signature = (
            m.group_key,
            Draw.declared(m.watts_on, m.watts_idle, m.watts_off),
            trace.durations_of(m.key.name),
            tuple(sorted(view.free.as_dict().items())),
            tuple(sorted(view.allocatable.as_dict().items())),
            tuple(allowed_on(r.requests, view) for r in runs),
        )
        sets.setdefault(signature, []).append(i)
    return list(sets.values())


def _machine_costs(problem: Problem, trace: Trace) -> list[Draw]:
    """The machines' columns' costs in Wh, in column order (x: idle above standby while up, s:
    a power cycle per start-up, e: the shutdown a machine up at the end never pays), and what
    each pays whatever it does (its standby); returns their draws."""
    draws = [Draw.declared(m.watts_on, m.watts_idle, m.watts_off) for m in problem.machines]
    truths = [trace.durations_of(m.key.name) for m in problem.machines]
    for d in draws:
        problem.costs.extend(length / HOUR * (d.idle - d.off) for length in problem.lengths)
    for truth, d in zip(truths, draws, strict=True):
        cycle = truth.power_on_seconds + truth.boot_seconds + truth.shutdown_seconds
        problem.costs.extend([cycle / HOUR * (d.idle - d.off)] * problem.segments)
    # A machine up in the last segment never pays its shutdown: e[i] <= x[i,last] earns it back.
    for truth, d in zip(truths, draws, strict=True):
        problem.costs.append(-truth.shutdown_seconds / HOUR * (d.idle - d.off))
    problem.standby = [
        n * d.off * trace.duration_seconds / HOUR
        for n, d in zip(problem.counts, draws, strict=True)
    ]
    return draws


def _costs(problem: Problem, trace: Trace, runs: list[Run]) -> None:
    """Objective coefficients in Wh, in column order; pairs (pod, machine) as allowed."""
    draws = _machine_costs(problem, trace)
    views = node_views(problem.machines)
    for p, run in enumerate(runs):
        allowed = [i for i, view in enumerate(views) if allowed_on(run.requests, view)]
        problem.dropped += not allowed
        for i in allowed:
            problem.pairs.append((p, i))
            problem.owners.append(i)
            problem.costs.append(
                load_watts(views[i], draws[i], run.requests) * (run.end - run.start) / HOUR
            )


def load_watts(view: NodeView, draw: Draw, req: SchedulingRequirements) -> float:
    """What the pod adds to the machine's draw while it runs there (its cpu share of on - idle),
    as `planning.energy.account.Draw.watts` counts it."""
    cpu = view.allocatable.get(CPU)
    share = min(1.0, req.requests.get(CPU) / cpu) if cpu else 0.0
    return draw.watts(True, share) - draw.watts(True)


def _rows(problem: Problem, runs: list[Run], index: dict[float, int]) -> None:
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
    views = node_views(problem.machines)
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


def _rise_rows(problem: Problem, i: int) -> None:
    """s[i,k] >= x[i,k] - x[i,k-1]: a start-up wherever machine i goes from off to up (x before
    the trace is 0)."""
    for k in range(problem.segments):
        entries = [(problem.s(i, k), 1.0), (problem.x(i, k), -1.0)]
        if k:
            entries.append((problem.x(i, k - 1), 1.0))
        problem.row(entries, 0.0, math.inf)


def _cover_rows(
    problem: Problem,
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


def waits_problem(trace: Trace, runs: list[Run], max_wait: float) -> tuple[Problem, list[float]]:
    """The with-waits LP (module docstring): columns u[i,k] (at `problem.x`), s[i,k] (at
    `problem.s`), e[i] (from `problem.y_base`), then z[p,i,k]."""
    groups, machines = cluster(trace)
    end = trace.duration_seconds
    windows = [
        (r.start, min(r.start + max_wait + max(r.length, r.end - r.start), end)) for r in runs
    ]
    cuts = sorted({0.0, end, *(a for a, _ in windows), *(b for _, b in windows)})
    lengths = [cuts[k + 1] - cuts[k] for k in range(len(cuts) - 1)]
    n, m = len(lengths), len(machines)
    problem = Problem(machines, n, lengths, counts=[1] * m)
    draws = _machine_costs(problem, trace)
    views = node_views(machines)
    upper = [1.0] * (n * m) + [math.inf] * (n * m) + [1.0] * m  # u, s and e
    z: dict[tuple[int, int, int], int] = {}  # (pod, machine, segment) -> column
    for p, (run, (start, stop)) in enumerate(zip(runs, windows, strict=True)):
        allowed = [i for i, view in enumerate(views) if allowed_on(run.requests, view)]
        problem.dropped += not allowed
        inside = [k for k in range(n) if cuts[k] >= start and cuts[k + 1] <= stop]
        for i in allowed:
            watts = load_watts(views[i], draws[i], run.requests)
            for k in inside:
                z[p, i, k] = problem.pod_base + len(z)
                problem.owners.append(i)
                problem.costs.append(watts / HOUR)
                upper.append(lengths[k])
        least = 0.0 if run.exclusive else max(0.0, min(run.length, end - start - max_wait))
        columns = [z[p, i, k] for i in allowed for k in inside]
        if columns and least > 0:
            problem.row([(c, 1.0) for c in columns], least, math.inf)  # it runs long enough
    _waits_rows(problem, runs, z, views)
    _group_rows(problem, groups)
    return problem, upper


def _waits_rows(
    problem: Problem, runs: list[Run], z: dict[tuple[int, int, int], int], views: list[NodeView]
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


def upper_bounds(problem: Problem) -> list[float]:
    """The zero-wait model's column upper bounds: x and e count machines, s is free, y is 0/1."""
    counts = [float(n) for n in problem.counts]
    upper = [n for n in counts for _ in range(problem.segments)]
    return upper + [math.inf] * (problem.y_base - len(upper)) + counts + [1.0] * len(problem.pairs)


def violations(
    problem: Problem, values: Sequence[float], upper: Sequence[float], tolerance: float = 1e-6
) -> list[str]:
    """The column bounds (0 to `upper`) and rows that `values` break (empty: a solution of the
    model)."""
    found = [
        f"column {c}: {v} outside [0, {u}]"
        for c, (v, u) in enumerate(zip(values, upper, strict=True))
        if v < -tolerance or v > u + tolerance
    ]
    ends = [*problem.starts[1:], len(problem.idx)]
    for r, (start, stop) in enumerate(zip(problem.starts, ends, strict=True)):
        activity = sum(problem.vals[j] * values[problem.idx[j]] for j in range(start, stop))
        lo, hi = problem.rows_lo[r], problem.rows_hi[r]
        if not lo - tolerance <= activity <= hi + tolerance:
            found.append(f"row {r}: {activity} outside [{lo}, {hi}]")
    return found
