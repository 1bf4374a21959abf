"""The offline optimum's solve: the models given to HiGHS, and what their outcomes prove.

`solve(trace, time_limit, max_wait)` (behind `lightsout simulate --optimum` and the benchmark)
runs the zero-wait MIP (`model`), pooled first and then one machine per column from the
schedule `realise` makes, and, when that model has no schedule and `max_wait` is given, the
with-waits LP and the time-indexed MIP with start windows (`windows`), the larger bound counting
(the MIP alone when deferrable runs are held for cheap hours). `solve_windows` solves that MIP for
energy, cost or carbon (`WindowsBound`). It reads back the proven bound (the larger of the
MIP's dual bound and the LP relaxation), the best schedule and the gap between them, and
returns them as a `Bound`. Why each figure bounds what it claims is in `model`'s and
`windows`' docstrings.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from lightsout.simulate.analysis.optimum.model import (
    Problem,
    Run,
    upper_bounds,
    waits_problem,
    zero_wait_problem,
    zero_wait_runs,
)
from lightsout.simulate.analysis.optimum.realise import ScheduleEnergy, realise, schedule_energy
from lightsout.simulate.analysis.optimum.windows import (
    CARBON,
    COST,
    ENERGY,
    OBJECTIVES,
    SlotProblem,
    mapped,
    slot_schedule,
    windows,
    windows_problem,
)
from lightsout.simulate.traces.trace import Trace

if TYPE_CHECKING:
    from lightsout.simulate.replay.engine import Result


class SolverMissingError(RuntimeError):
    """highspy is not installed (it is the `sim` extra)."""


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


def _left(time_limit: float, started: float) -> float:
    """What is left of `time_limit` seconds since `started` (`time.monotonic`), a second at
    least: what each later solve of one `solve` is given."""
    return max(1.0, time_limit - (time.monotonic() - started))


def _finite(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


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


def highs(highspy: Any, np: Any, problem: Problem, upper: list[float], time_limit: float) -> Any:
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


def _run_mip(
    highspy: Any, np: Any, h: Any, integer: Sequence[int], start: Sequence[float] | None
) -> tuple[float, list[float] | None]:
    """Solve `h` again with the `integer` columns integer (at a 1e-4 gap), from the `start`
    schedule when given: its proven dual bound (-inf without one) and the best schedule's
    column values (None when it found none)."""
    h.changeColsIntegrality(
        len(integer),
        np.asarray(integer, dtype=np.int32),
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
    dual = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else -math.inf
    found = info.primal_solution_status == 2  # a feasible schedule was found
    return dual, list(h.getSolution().col_value) if found else None


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
    #: The MIP pooled identical machines (`model._pooled`); its schedule was made per machine.
    pooled: bool = False


def _zero_wait(
    highspy: Any,
    np: Any,
    problem: Problem,
    time_limit: float,
    start: Sequence[float] | None = None,
) -> _Outcome:
    """The zero-wait MIP, its LP relaxation solved first; or, given a `start` schedule, the
    MIP alone from that schedule (to improve on it: its LP is a pooled one's, no stronger)."""
    n_cols = problem.pod_base + len(problem.pairs)
    starts = len(problem.machines) * problem.segments
    h = highs(highspy, np, problem, upper_bounds(problem), time_limit)
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
    dual, values = _run_mip(highspy, np, h, integer, start)
    found = values is not None
    return _Outcome(
        columns=n_cols,
        status=h.modelStatusToString(h.getModelStatus()),
        lp=lp,
        dual=dual + problem.constant,
        incumbent=h.getInfo().objective_function_value + problem.constant if found else None,
        closed=h.getModelStatus() == optimal,
        infeasible=h.getModelStatus() == infeasible,
        schedule=schedule_energy(problem, values) if values is not None else (),
        values=values,
        rows=len(problem.rows_lo),
        segments=problem.segments,
        dropped=problem.dropped,
    )


def _zero_wait_pooled(
    highspy: Any, np: Any, trace: Trace, runs: list[Run], time_limit: float
) -> _Outcome:
    """The zero-wait bound: the MIP with identical machines pooled (`model._pooled`) for half
    the time, a schedule made from its solution machine by machine (`realise`), and the
    one-per-machine MIP from that schedule for the other half, to improve on it (its dual bound
    counts too). Without anything to pool, the one MIP for the whole time; without a schedule
    made that way, the one-per-machine MIP from nothing."""
    started = time.monotonic()
    pooled = zero_wait_problem(trace, runs, pooled=True)
    if all(n == 1 for n in pooled.counts):
        return _zero_wait(highspy, np, pooled, time_limit)  # its schedule is one already
    outcome = _zero_wait(highspy, np, pooled, time_limit / 2)
    if outcome.infeasible:  # the pooled model is a relaxation: no schedule exists
        return replace(outcome, pooled=True)
    single = zero_wait_problem(trace, runs)
    made = None if outcome.values is None else realise(pooled, outcome.values, single, runs)
    alone = _zero_wait(highspy, np, single, _left(time_limit, started), made)
    if made is not None and alone.incumbent is None:  # kept the one it was given
        energy = sum(c * v for c, v in zip(single.costs, made, strict=True)) + single.constant
        alone = replace(
            alone, incumbent=energy, schedule=schedule_energy(single, made), values=made
        )
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


def solve(
    trace: Trace,
    time_limit: float = 60.0,
    max_wait: float | None = None,
    *,
    slot: float | None = None,
    defer: bool = True,
    replayed: Sequence[Result] = (),
) -> Bound:
    """Solve the trace's offline problem; raises `SolverMissingError` without highspy.

    The zero-wait MIP first; if it has no schedule (infeasible, or none found within the time
    limit) and `max_wait` is given, the time-indexed MIP with start windows (`windows`: slots of
    `slot` seconds, started from the first of `replayed` that fits) for the rest of the time
    and the with-waits LP, the larger proven bound counting; else no bound (`kwh` None,
    `note`). When deferrable runs (CronJob runs, bare Jobs) are held for cheap hours (`defer`,
    as the replay's option), no zero-wait schedule is one the replay runs: the time-indexed MIP
    alone (each pod within `max_wait`, 0 if not given)."""
    highspy, np = _highspy()
    started = time.monotonic()
    runs = zero_wait_runs(trace)
    if has_deferred(trace, defer):
        timed = solve_windows(
            trace, time_limit, max_wait or 0.0, slot=slot, defer=defer, replayed=replayed
        )
        return _timed_bound(timed, None, len(runs), max_wait or 0.0, started=started, why="")
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
    waits, upper = waits_problem(trace, runs, max_wait)
    h = highs(highspy, np, waits, upper, _left(time_limit, started))
    h.run()
    solved = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    relaxed = h.getInfo().objective_function_value + waits.constant if solved else None
    timed = solve_windows(
        trace, _left(time_limit, started), max_wait, slot=slot, defer=defer, replayed=replayed
    )
    if timed.value is not None and (relaxed is None or timed.value >= relaxed):
        return _timed_bound(timed, relaxed, len(runs), max_wait, started=started, why=why)
    status = h.modelStatusToString(h.getModelStatus())
    if waits.dropped:
        dropped = f"; {waits.dropped} pod run(s) fit no machine, left out"
    note = (
        f"{why}; each pod may wait up to {max_wait:.0f} s; loose: the LP may split pods across "
        "machines and time and keep machines partly up" + dropped
        if solved
        else f"{why}; the with-waits LP did not solve ({status})"
    )
    if solved and timed.value is not None:
        note += f"; the time-indexed MIP's bound was lower ({timed.value / 1000:.3f} kWh)"
    elif solved:
        note += f"; {timed.note}"
    return Bound(
        schedule=schedule_energy(waits, list(h.getSolution().col_value)) if solved else (),
        schedule_source="the with-waits LP's solution (the bound itself: pods split, machines "
        "partly up)"
        if solved
        else "",
        kind=WITH_WAITS if solved else NO_BOUND,
        kwh=None if relaxed is None else relaxed / 1000,
        source="LP relaxation" if solved else "",
        status=status,
        lp_kwh=None if relaxed is None else relaxed / 1000,
        runs=len(runs),
        segments=waits.segments,
        variables=len(upper),
        constraints=len(waits.rows_lo),
        seconds=time.monotonic() - started,
        note=note,
        max_wait=max_wait,
    )


def _timed_bound(
    timed: WindowsBound,
    relaxed: float | None,
    runs: int,
    max_wait: float,
    *,
    started: float,
    why: str,
) -> Bound:
    """The time-indexed MIP's energy bound as a `Bound` (kind "with waits"), beside the
    with-waits LP's value (`relaxed`, Wh) if that was solved."""
    kwh = None if timed.value is None else timed.value / 1000
    lp = [v for v in (timed.lp, relaxed) if v is not None]
    return Bound(
        kind=WITH_WAITS if kwh is not None else NO_BOUND,
        status=timed.status,
        runs=runs,
        segments=timed.segments,
        variables=timed.variables,
        constraints=timed.constraints,
        seconds=time.monotonic() - started,
        kwh=kwh,
        incumbent_kwh=None if timed.incumbent is None else timed.incumbent / 1000,
        gap=timed.gap,
        source=timed.source,
        lp_kwh=max(lp) / 1000 if lp else None,
        note="; ".join(n for n in (why, timed.note, timed.start) if n),
        max_wait=max_wait,
        schedule=timed.schedule,
        schedule_source=""
        if timed.incumbent is None
        else f"the time-indexed MIP's best schedule, {timed.incumbent / 1000:.3f} kWh",
    )


#: The unit of each objective's figures (cost: the Groups' currency).
UNITS = {ENERGY: "Wh", COST: "currency", CARBON: "g CO2"}


@dataclass(frozen=True)
class WindowsBound:
    """The time-indexed MIP's outcome for one objective (`windows`): a proven lower bound on
    every schedule whose pods start within their windows, in the objective's unit (Wh, the
    Groups' currency, g CO2)."""

    objective: str
    status: str
    seconds: float
    slot: float
    #: The model's slots.
    segments: int
    variables: int
    constraints: int
    #: The proven lower bound; None when there is none (`note` says why).
    value: float | None = None
    #: The best schedule HiGHS found (None without one).
    incumbent: float | None = None
    #: (incumbent - value) / incumbent; 0 when closed; None without both.
    gap: float | None = None
    #: "time-indexed MIP optimum", "... dual bound" or "LP relaxation"; "" without a bound.
    source: str = ""
    lp: float | None = None
    note: str = ""
    #: The best schedule per machine (energy objective only), and the start HiGHS was given.
    schedule: tuple[ScheduleEnergy, ...] = ()
    start: str = ""

    @property
    def unit(self) -> str:
        return UNITS[self.objective]


def solve_windows(
    trace: Trace,
    time_limit: float = 60.0,
    max_wait: float = 0.0,
    *,
    objective: str = ENERGY,
    slot: float | None = None,
    defer: bool = True,
    replayed: Sequence[Result] = (),
) -> WindowsBound:
    """The time-indexed MIP (`windows`) for `objective`, its LP relaxation solved first, then
    the MIP from the first of `replayed` that maps onto its columns (`windows.mapped`) for the
    rest of `time_limit`. Raises `SolverMissingError` without highspy."""
    highspy, np = _highspy()
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    started = time.monotonic()
    problem = windows_problem(trace, max_wait, objective=objective, slot=slot, defer=defer)
    size = partial(
        WindowsBound,
        objective=objective,
        slot=problem.slot,
        segments=problem.segments,
        variables=len(problem.costs),
        constraints=len(problem.rows_lo),
    )
    if problem.refused:
        return size(
            status="not solved",
            seconds=time.monotonic() - started,
            note=f"no {objective} bound: {problem.refused}"
            + (
                ", where keeping a machine on can earn, so counting less of its up time no "
                "longer bounds from below"
                if "negative" in problem.refused
                else ""
            ),
        )
    h = highs(highspy, np, problem, problem.upper, time_limit)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        return size(
            status=status,
            seconds=time.monotonic() - started,
            note="no schedule starts every required run within its window",
        )
    optimal = highspy.HighsModelStatus.kOptimal
    lp = h.getInfo().objective_function_value if h.getModelStatus() == optimal else -math.inf
    start, said = _start(problem, replayed)
    h.setOptionValue("time_limit", _left(time_limit, started))
    dual, values = _run_mip(highspy, np, h, problem.integer, start)
    status = h.modelStatusToString(h.getModelStatus())
    closed = h.getModelStatus() == optimal
    best = max(dual, lp)
    seconds = time.monotonic() - started
    dropped = f"; {problem.unplaced} pod run(s) fit no machine, left out" * bool(problem.unplaced)
    if not math.isfinite(best):
        return size(
            status=status,
            seconds=seconds,
            start=said,
            note=f"the time-indexed model proved no bound in {time_limit:.0f} s ({status})",
        )
    value = problem.figure(best)
    incumbent = None if values is None else problem.value(values)
    gap = None
    if incumbent is not None and incumbent > 0:
        gap = 0.0 if closed else max(0.0, (incumbent - value) / incumbent)
    source = "time-indexed MIP " + (
        "optimum" if closed else ("dual bound" if dual >= lp else "LP relaxation")
    )
    return size(
        status=status,
        seconds=seconds,
        value=value,
        incumbent=incumbent,
        gap=gap,
        source=source,
        lp=problem.figure(lp) if math.isfinite(lp) else None,
        note=f"pods start within their windows (each within {max_wait:.0f} s, deferrable runs "
        f"by their deadlines), machines counted up by whole {problem.slot:.0f} s slots"
        + ("" if closed else f"; the MIP did not close in {time_limit:.0f} s")
        + dropped,
        schedule=slot_schedule(problem, values)
        if values is not None and objective == ENERGY
        else (),
        start=said,
    )


def _start(problem: SlotProblem, replayed: Sequence[Result]) -> tuple[list[float] | None, str]:
    """The first replayed schedule that maps onto the model's columns, and what became of
    each (for the report)."""
    said = []
    for result in replayed:
        values, problems = mapped(problem, result)
        if not problems:
            return values, f"started from a replayed schedule, {problem.value(values):.4g}"
        said.append(f"{len(problems)} run(s) of a replay outside their windows ({problems[0]})")
    return None, "; ".join(said)


def has_deferred(trace: Trace, defer: bool = True) -> bool:
    """Whether some deferrable run of the trace (a CronJob run or a bare Job) is held for cheap
    hours (then no zero-wait schedule is one the replay could run)."""
    return defer and any(w.deferred for w in windows(trace, 0.0))


def _highspy() -> tuple[Any, Any]:
    try:
        import highspy
        import numpy as np
    except ImportError as error:
        raise SolverMissingError(
            "the offline optimum needs HiGHS: pip install 'kube-lightsout[sim]'"
        ) from error
    return highspy, np
