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
first boots may start before the trace does.

If the MIP does not close within the time limit, the proven lower bound is the larger of the
solver's dual bound and the LP relaxation (solved first); the report says which and the gap
to the best schedule found.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
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


@dataclass(frozen=True)
class Bound:
    #: "optimum" (the MIP closed), or "lower bound" (the time limit was hit).
    kind: str
    #: The proven lower bound, kWh.
    kwh: float
    #: The best schedule the solver found, kWh (None if none within the limit).
    incumbent_kwh: float | None
    #: (incumbent - bound) / incumbent; 0 when closed.
    gap: float
    #: What the bound is: "MIP optimum", "MIP dual bound" or "LP relaxation".
    source: str
    status: str
    lp_kwh: float
    runs: int
    segments: int
    variables: int
    constraints: int
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "kWh": round(self.kwh, 3),
            "incumbentKWh": None if self.incumbent_kwh is None else round(self.incumbent_kwh, 3),
            "gap": round(self.gap, 5),
            "source": self.source,
            "status": self.status,
            "lpKWh": round(self.lp_kwh, 3),
            "runs": self.runs,
            "segments": self.segments,
            "variables": self.variables,
            "constraints": self.constraints,
            "seconds": round(self.seconds, 1),
        }


def zero_wait_runs(trace: Trace) -> list[Run]:
    """Every pod run if nothing ever waited: trace pods, and CronJob runs at their schedule."""
    runs = [
        Run(
            p.at, min(p.at + p.run_seconds, trace.duration_seconds), scheduling_requirements(p.spec)
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
        runs.extend(Run(s, e, req) for s, e in active if e > s)
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
    """The MIP in HiGHS' row-wise form: columns x[i,k], s[i,k], then y[p,i]."""

    machines: list[Machine]
    segments: int
    lengths: list[float]
    costs: list[float] = field(default_factory=list)
    #: Wh every schedule pays whatever it does: the machines' standby.
    constant: float = 0.0
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
        return 2 * len(self.machines) * self.segments

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
    # A machine up in the last segment never pays its shutdown: x[i,last] earns it back.
    for i, (m, d) in enumerate(zip(machines, draws, strict=True)):
        shutdown = trace.durations_of(m.key.name).shutdown_seconds
        problem.costs[problem.x(i, problem.segments - 1)] -= shutdown / _HOUR * (d.idle - d.off)
    for p, run in enumerate(runs):
        allowed = [i for i, view in enumerate(views) if _allowed(run.requests, view)]
        problem.dropped += not allowed
        for i in allowed:
            problem.pairs.append((p, i))
            cpu = views[i].allocatable.get(CPU)
            share = min(1.0, run.requests.requests.get(CPU) / cpu) if cpu else 0.0
            watts = draws[i].on - draws[i].idle
            problem.costs.append(watts * share * (run.end - run.start) / _HOUR)
    problem.constant = sum(d.off for d in draws) * trace.duration_seconds / _HOUR


def _rows(problem: _Problem, runs: list[Run], index: dict[float, int]) -> None:
    inf = math.inf
    base = problem.y_base
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
    for i in range(len(problem.machines)):
        for k in range(problem.segments):
            entries = [(problem.s(i, k), 1.0), (problem.x(i, k), -1.0)]
            if k:
                entries.append((problem.x(i, k - 1), 1.0))
            problem.row(entries, 0.0, inf)  # a start-up wherever it goes from off to up


def solve(trace: Trace, time_limit: float = 60.0) -> Bound:
    """Solve the trace's offline problem; raises `SolverMissingError` without highspy."""
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
    n_cols = problem.y_base + len(problem.pairs)
    with _quiet_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]  # prints a banner on file descriptor 1, which -o json owns
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    upper = np.ones(n_cols)
    upper[len(problem.machines) * problem.segments : problem.y_base] = highspy.kHighsInf
    h.addVars(n_cols, np.zeros(n_cols), upper)
    h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), np.array(problem.costs))
    finite = [highspy.kHighsInf if v == math.inf else v for v in problem.rows_hi]
    lows = [-highspy.kHighsInf if v == -math.inf else v for v in problem.rows_lo]
    h.addRows(
        len(lows),
        np.array(lows),
        np.array(finite),
        len(problem.idx),
        np.array(problem.starts, dtype=np.int32),
        np.array(problem.idx, dtype=np.int32),
        np.array(problem.vals),
    )
    # The LP relaxation first: a proven lower bound whatever the MIP does next.
    h.setOptionValue("time_limit", max(1.0, time_limit))
    h.run()
    lp = h.getInfo().objective_function_value + problem.constant
    segments = len(problem.machines) * problem.segments
    integer = np.concatenate([np.arange(0, segments), np.arange(problem.y_base, n_cols)])
    h.changeColsIntegrality(
        len(integer),
        integer.astype(np.int32),
        np.full(len(integer), highspy.HighsVarType.kInteger),
    )
    h.setOptionValue("mip_rel_gap", 1e-4)
    h.run()
    info = h.getInfo()
    closed = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    dual = info.mip_dual_bound + problem.constant if math.isfinite(info.mip_dual_bound) else -1.0
    incumbent = (
        info.objective_function_value + problem.constant
        if info.primal_solution_status == 2  # a feasible schedule was found
        else None
    )
    best = max(dual, lp)
    source = "MIP optimum" if closed else ("MIP dual bound" if dual >= lp else "LP relaxation")
    if problem.dropped:
        source += f" ({problem.dropped} pod run(s) fit no machine, left out)"
    if incumbent is None:
        gap = math.inf
    else:
        gap = 0.0 if closed else max(0.0, (incumbent - best) / incumbent)
    return Bound(
        kind="optimum" if closed else "lower bound",
        kwh=best / 1000,
        incumbent_kwh=None if incumbent is None else incumbent / 1000,
        gap=gap,
        source=source,
        status=h.modelStatusToString(h.getModelStatus()),
        lp_kwh=lp / 1000,
        runs=len(runs),
        segments=problem.segments,
        variables=n_cols,
        constraints=len(lows),
        seconds=time.monotonic() - started,
    )
