"""The time-indexed model: pods start anywhere in their windows, machines up by whole slots.

`solver.solve` builds it (`windows_problem`) where pods contend (no zero-wait schedule) or
deferrable Jobs may be held, and `solver.solve_priced` for a cost or carbon objective; HiGHS
solves it as a mixed-integer program under a time limit and reports its own gap. Stated here
with the proof that its optimum is a lower bound (docs/simulator.md repeats it):

The trace [0, T] is cut into K = floor(T / D) slots of D seconds (D divides an hour; the
stretch [K D, T], if any, is counted as nothing). Each pod run p has a window: it arrives at
`earliest` and starts (last, if evicted) by `latest` = arrival + W for an ordinary pod (W the
longest wait of the schedules compared), and for a deferrable Job's run, a CronJob's or a bare
Job's (`lightsout.dev/max-delay` or `finish-by`, held by the admission webhook) max(deadline -
run, arrival + W):
the bound covers the schedules in which every ordinary pod starts within W and every deferrable
run either meets its deadline or starts within W. A run is required (it runs) when `latest` < T
and, for a CronJob under Forbid or Replace, no earlier run can still be active at its schedule
time and it cannot be cut by the next one (F_n >= latest_{n-1} + run, F_{n+1} >= latest_n +
run); else optional (a wait may skip or cut it, or it may start after the trace): it runs at
most once, and not running costs nothing, less than any real run.

Columns (per machine i and slot k; per allowed pod, machine and slot t):

- `x[i,k]` binary: machine i is usable (Ready, or draining: from Ready until its shutdown Job
  starts) for the whole of slot k;
- `u[i,k]` in [0, 1]: the share of slot k it is usable; `x <= u`;
- `s[i,k] >= u[i,k] - u[i,k-1]`, `f[i,k] >= u[i,k-1] - u[i,k]` (u before the trace 0): rises
  and falls of u;
- `b[p,i,t]` binary: pod p runs on machine i from a start a in ((t-1) D, t D] (t D is its first
  whole slot), for t from ceil(earliest / D) to ceil(latest / D); only where the production fit
  check allows p on an empty i. Sum over i, t of b = 1 (required) or <= 1 (optional).

A pod of run r started at a covers the d = max(0, floor(r / D) - 1) whole slots t .. t+d-1
(cut at K), and r - d D more seconds in slots t-1, t+d, t+d+1. So: per machine, whole slot and
resource (cpu, memory, pods, extended) the shares of the machine's room that the covering b
request sum to at most x[i,k]; pods needing more than half a resource of i never share a
slot there (sum b <= x); and D (u[i,t-1] + u[i,t+d] + u[i,t+d+1]) >= (r - d D) b[p,i,t]
(only when those slots lie inside the K). A Group's maxNodes holds over x in every slot when it
binds and the Group has no `spec.windows` (x counts machines usable the whole slot, never more
than are up). minNodes is left out: a machine booting mid-slot is up but not counted by x.

Objective (weights w(t) >= 0 per Wh: 1 for energy, the Group's price per kWh / 1000 for cost,
its gCO2/kWh / 1000 for carbon; `Weight`, piecewise constant, exactly as the replay prices a
stretch): the standby off_i x integral of w over [0, T] (a constant), then
- u[i,k]: (idle - off) x D x min of w over slot k; x[i,k]: (idle - off) x (integral of w over
  slot k - D x that minimum) (so a usable whole slot costs its exact integral);
- s[i,k]: (powerOn + boot) x (idle - off) x min of w over [(k-1) D - powerOn - boot, (k+1) D];
- f[i,k] (k >= 1): min(shutdown, T - (k+1) D)^+ x (idle - off) x min of w over
  [(k-1) D, (k+1) D + shutdown];
- b[p,i,t]: (on - idle) x cpu share x the least integral of w over [a, min(a + r, T)] for a in
  [max(earliest, (t-1) D), min(latest, t D)] (piecewise linear in a with breaks where a or a +
  r crosses a change of w, so its least is at a break or an end: all are tried).

Why it is a lower bound on every schedule of that class, machines starting off (the replay's
start). Take such a schedule: usable intervals U_j = [c_j, d_j] per machine, each preceded by
powerOn + boot powered seconds and followed by shutdown powered seconds (within the trace),
the machine off otherwise (all at w >= 0). Set u to the share of each slot in the U_j, x to 1
for slots inside one U_j, s and f to the rises and falls of u, and b[p,i,t] = 1 for the machine
and slot of each pod's last start (an optional run skipped, cut or started after T: 0). Every
row holds: what runs in a whole slot fits and runs on a usable machine; the pod's pieces in
slots t-1, t+d, t+d+1 are usable time; u before powerOn + boot is 0 (columns bounded so).
Costs: the standby is exact. Usable time costs at least its least price per slot and a whole
slot exactly. u of one U_j rises by at most 1 in all (split over the slots holding c_j and
the next, so c_j lies in [(k-1) D, (k+1) D) for each of its rises at k, which puts its boot in
s[i,k]'s price window), and the rises of the sum are at most the sums of the rises: so
sum_k s_k coef_k <= sum_j boot cost_j; likewise falls and shutdowns (the in-trace part of a
shutdown from d_j < (k+1) D lasts at least min(shutdown, T - (k+1) D)). A pod's load is
(on - idle) x share x its run priced, at least b's coefficient (a lies in b's range). Boots,
usable time and shutdowns of one machine are disjoint stretches of its powered time, and every
weight is >= 0. So that schedule is a solution costing no more than it did, and the MIP's
optimum, and any dual bound HiGHS proves on it, is at most the cheapest such schedule. With a
negative price anywhere (w < 0) leaving a machine on can earn money: the undercounts above are
no longer lower, and no cost bound is given.

Assumed of the replay, as the zero-wait model assumes: a machine is powered for at least its
true powerOn + boot before Ready and its true shutdown after its shutdown Job starts, draws
idle + (on - idle) x its pods' cpu share while powered, off otherwise. `mapped` makes a
replayed schedule into column values by exactly the construction above: a unit test checks
it passes every row and costs no more than the replay counted, the proof's check.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lightsout.models.enums import DeferralObjective
from lightsout.planning.autoscaler.scheduling import NodeView
from lightsout.planning.energy.account import Draw
from lightsout.planning.energy.weight import Weight as KWhWeight
from lightsout.simulate.analysis.optimum.model import (
    HOUR,
    Problem,
    allowed_on,
    cluster,
    load_watts,
    node_views,
)
from lightsout.simulate.analysis.optimum.realise import ScheduleEnergy
from lightsout.simulate.replay.deferred import job_of_pod
from lightsout.simulate.replay.machines import draw_of
from lightsout.simulate.traces.trace import Trace, TracePod
from lightsout.state import cron
from lightsout.state.admission import admitted
from lightsout.state.jobs import deferred_jobs
from lightsout.state.parse import dig, scheduling_requirements
from lightsout.state.types import Group, SchedulingRequirements, deferrable

if TYPE_CHECKING:
    from lightsout.simulate.replay.engine import Result

_EPS = 1e-9

ENERGY = "energy"
COST = "cost"
CARBON = "carbon"
OBJECTIVES = (ENERGY, COST, CARBON)
#: Slot lengths tried by `default_slot`, seconds: each divides an hour.
SLOTS = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
#: `default_slot` picks the shortest slot with at most this many machine-slots.
MACHINE_SLOTS = 10_000


@dataclass(frozen=True, slots=True)
class Window:
    """One pod run and the starts allowed it, seconds since the trace's start."""

    #: (namespace, name): the trace pod's, or the CronJob run's Job name.
    key: tuple[str, str]
    earliest: float
    #: The latest start (may be past the trace's end: then it may not run in the trace).
    latest: float
    run: float
    requests: SchedulingRequirements
    #: It runs in every schedule of the class (else at most once).
    required: bool
    #: A deferrable Job held for cheap hours (a CronJob run, or a bare Job of the trace's pods).
    deferred: bool = False


def windows(trace: Trace, max_wait: float, *, defer: bool = True) -> list[Window]:
    """Every pod run of the trace with its window (module docstring); `defer`: deferrable
    Jobs, CronJob runs and bare ones, are held (the replay's `Options.defer`), else released
    at once."""
    end = trace.duration_seconds
    found = [_pod_window(trace, p, max_wait, defer) for p in trace.pods if p.at < end]
    stop = trace.start + timedelta(seconds=end)
    for cronjob in trace.cronjobs:
        spec = cron.read(cronjob)
        req = scheduling_requirements(spec.pod_spec)
        run = trace.cron_run_seconds.get(spec.key, 60.0)
        held = defer and deferrable(spec.job_annotations, spec.job_labels)
        fires = cron.fire_times(spec, trace.start, stop)
        at = [(m - trace.start).total_seconds() for m in fires]
        latest = [a + max_wait for a in at]
        if held:
            for n, moment in enumerate(fires):
                job = cron.job_of(spec, moment, moment, suspend=True)
                latest[n] = _held_latest(trace, job, latest[n], run)
        exclusive = spec.concurrency_policy in (cron.FORBID, cron.REPLACE)
        for n, moment in enumerate(fires):
            required = latest[n] < end
            if exclusive:
                alone = n == 0 or at[n] >= latest[n - 1] + run
                whole = n + 1 == len(at) or at[n + 1] >= latest[n] + run
                required = required and alone and whole
            key = (spec.namespace, cron.job_name(spec, moment))
            found.append(Window(key, at[n], latest[n], run, req, required, held))
    return sorted(found, key=lambda w: (w.earliest, w.key))


def _pod_window(trace: Trace, p: TracePod, max_wait: float, defer: bool) -> Window:
    """A trace pod's window: within `max_wait` of its arrival, or, the pod of a Job the
    replay holds (`replay.deferred.job_of_pod`, admitted as the webhook would), as a held
    CronJob run's: up to its deadline less its run."""
    latest, held = p.at + max_wait, False
    if defer and p.owner_kind == "Job" and p.job_annotations:
        job = admitted(job_of_pod(p, trace.start + timedelta(seconds=p.at)))
        held = dig(job, "spec", "suspend") is True
        if held:
            latest = _held_latest(trace, job, latest, p.run_seconds)
    required = latest < trace.duration_seconds
    requests = scheduling_requirements(p.spec)
    return Window((p.namespace, p.name), p.at, latest, p.run_seconds, requests, required, held)


def _held_latest(trace: Trace, job: Mapping[str, Any], latest: float, run: float) -> float:
    """The latest start of a held Job's run of `run` seconds: up to the deadline the replay
    gives it (`replay.deferred.HeldJobs.admit`) less its run, and no earlier than `latest`;
    unbounded when its annotations give no deadline (it is then released at once)."""
    (seen,) = deferred_jobs([job]) or (None,)
    if seen is None or seen.problem is not None or seen.deadline is None:
        return math.inf
    return max(latest, (seen.deadline - trace.start).total_seconds() - run)


@dataclass(frozen=True)
class Weight:
    """A weight per Wh over the trace, piecewise constant: `values[j]` from `starts[j]` (seconds
    since the trace's start) to the next start (the last to the end)."""

    starts: tuple[float, ...]
    values: tuple[float, ...]
    cum: tuple[float, ...]

    @classmethod
    def of(cls, starts: Sequence[float], values: Sequence[float]) -> Weight:
        cum = [0.0]
        for j in range(1, len(starts)):
            cum.append(cum[-1] + values[j - 1] * (starts[j] - starts[j - 1]))
        return cls(tuple(starts), tuple(values), tuple(cum))

    def _upto(self, t: float) -> float:
        j = max(0, bisect.bisect_right(self.starts, t) - 1)
        return self.cum[j] + self.values[j] * (t - self.starts[j])

    def integral(self, u: float, v: float) -> float:
        """The integral of w over [u, v], weight x seconds."""
        return self._upto(v) - self._upto(u) if v > u else 0.0

    def least(self, u: float, v: float) -> float:
        """The least value w takes on [u, v]."""
        first = max(0, bisect.bisect_right(self.starts, u) - 1)
        last = max(first, bisect.bisect_left(self.starts, v) - 1)
        return min(self.values[first : last + 1])

    def breaks(self, u: float, v: float) -> list[float]:
        """Where w changes within (u, v)."""
        return [t for t in self.starts if u < t < v]

    @property
    def negative(self) -> bool:
        return any(v < 0 for v in self.values)


def weight_of(trace: Trace, group: Group | None, objective: str) -> Weight:
    """What a Wh weighs at each moment for `objective`, as the replay counts it for a machine of
    `group` (`SimMachine._price`): energy 1; cost the price per kWh (the series with its markup,
    else the tariff) / 1000; carbon the series' gCO2/kWh / 1000 (0 outside it), each read as
    the planner weighs a kWh (`planning.energy.weight`). Without a price or a carbon series: 0."""
    if objective == ENERGY:
        return Weight.of([0.0], [1.0])
    chosen = {COST: DeferralObjective.COST, CARBON: DeferralObjective.CARBON}.get(objective)
    weight = None if group is None or chosen is None else KWhWeight.of(group, chosen)
    if weight is None:
        return Weight.of([0.0], [0.0])
    starts: list[float] = []
    values: list[float] = []
    at, end = trace.start, trace.start + timedelta(seconds=trace.duration_seconds)
    while at < end:
        starts.append((at - trace.start).total_seconds())
        values.append((weight.at(at) or 0.0) / 1000.0)
        later = weight.next_change(at)
        if later is None or later <= at:
            break
        at = later
    return Weight.of(starts, values)


def default_slot(trace: Trace, machines: int) -> float:
    """The shortest of `SLOTS` giving at most `MACHINE_SLOTS` machine-slots."""
    for slot in SLOTS:
        if machines * math.floor(trace.duration_seconds / slot) <= MACHINE_SLOTS:
            return slot
    return SLOTS[-1]


@dataclass
class SlotProblem(Problem):
    """The time-indexed MIP in HiGHS' row-wise form. Columns: x[i,k], u[i,k], s[i,k], f[i,k]
    (machine-major), then b (`pairs`: window, machine, first whole slot)."""

    slot: float = 0.0
    #: The trace's end, seconds (the slots end at or before it).
    end: float = 0.0
    objective: str = ENERGY
    windows: list[Window] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    #: (window, machine, first whole slot) of each b column, in column order.
    triples: list[tuple[int, int, int]] = field(default_factory=list)
    #: Pod runs no machine fits (left out: they never run anywhere).
    unplaced: int = 0
    #: The objective's unit per column cost unit (costs are kept near Wh in size: HiGHS'
    #: tolerances are absolute); a figure is `scale` x the solver's.
    scale: float = 1.0
    #: Why no bound can be given for this objective (a negative price), else "".
    refused: str = ""

    def u(self, i: int, k: int) -> int:
        return (len(self.machines) + i) * self.segments + k

    def s(self, i: int, k: int) -> int:
        return (2 * len(self.machines) + i) * self.segments + k

    def f(self, i: int, k: int) -> int:
        return (3 * len(self.machines) + i) * self.segments + k

    @property
    def pod_base(self) -> int:
        return 4 * len(self.machines) * self.segments

    @property
    def integer(self) -> list[int]:
        """The binary columns: x and b."""
        xs = range(len(self.machines) * self.segments)
        return [*xs, *range(self.pod_base, self.pod_base + len(self.triples))]

    def value(self, values: Sequence[float]) -> float:
        """The objective of column values, in the objective's unit (Wh, currency, g)."""
        return self.figure(sum(c * v for c, v in zip(self.costs, values, strict=True)))

    def figure(self, solver_value: float) -> float:
        """A value of the solver's objective (a bound, a schedule) in the objective's unit,
        the standby added."""
        return self.scale * solver_value + self.constant


def windows_problem(
    trace: Trace,
    max_wait: float,
    *,
    objective: str = ENERGY,
    slot: float | None = None,
    defer: bool = True,
) -> SlotProblem:
    """The time-indexed MIP of the trace (module docstring)."""
    groups, machines = cluster(trace)
    by_key = {g.key: g for g in groups}
    slot = slot or default_slot(trace, len(machines))
    end = trace.duration_seconds
    n = math.floor(end / slot + _EPS)
    problem = SlotProblem(machines, n, [slot] * n, counts=[1] * len(machines), slot=slot)
    problem.objective, problem.end = objective, end
    problem.windows = windows(trace, max_wait, defer=defer)
    weights = [weight_of(trace, by_key.get(m.group_key), objective) for m in machines]
    if any(w.negative for w in weights):
        problem.refused = f"a negative {'price' if objective == COST else 'weight'} in the trace"
    elif objective == COST and any(g.surplus is not None for g in groups):
        # The replay gives a Group's solar surplus free to what its machines draw together:
        # not a price per Wh, so the weights above do not bound that cost.
        problem.refused = "a Group with a solar surplus (its cost is not a price per Wh)"
    draws = [draw_of(trace, m) for m in machines]
    total = sum(w.integral(0.0, end) for w in weights)
    # Keep the costs near Wh in size: the mean weight maps to 1.
    mean = total / (len(machines) * end) if machines and end > 0 else 0.0
    problem.scale = mean if mean > 0 else 1.0
    per = 1.0 / (HOUR * problem.scale)
    problem.standby = [
        d.off * w.integral(0.0, end) / HOUR for d, w in zip(draws, weights, strict=True)
    ]
    _machine_columns(problem, trace, draws, weights, per)
    views = node_views(machines)
    _pod_columns(problem, views, draws, weights, per)
    _slot_rows(problem, views)
    _max_rows(problem, groups)
    return problem


def _machine_columns(
    problem: SlotProblem, trace: Trace, draws: list[Draw], weights: list[Weight], per: float
) -> None:
    """The costs and bounds of x, u, s and f, in column order."""
    n, slot, end = problem.segments, problem.slot, trace.duration_seconds
    m = len(problem.machines)
    costs = [0.0] * (4 * m * n)
    upper = [1.0] * (2 * m * n) + [math.inf] * (2 * m * n)
    for i, (machine, d, w) in enumerate(zip(problem.machines, draws, weights, strict=True)):
        truth = trace.durations_of(machine.key.name)
        boot = truth.power_on_seconds + truth.boot_seconds
        shut = truth.shutdown_seconds
        above = max(0.0, d.idle - d.off)
        for k in range(n):
            lo, hi = k * slot, (k + 1) * slot
            least = w.least(lo, hi)
            costs[problem.u(i, k)] = above * least * slot * per
            costs[problem.x(i, k)] = above * (w.integral(lo, hi) - least * slot) * per
            # Usable only from powerOn + boot on: the machine starts off.
            upper[problem.u(i, k)] = min(1.0, max(0.0, (hi - boot) / slot))
            upper[problem.x(i, k)] = 1.0 if lo >= boot else 0.0
            window = w.least(max(0.0, lo - slot - boot), min(end, hi))
            costs[problem.s(i, k)] = boot * above * window * per
            if k:
                inside = min(shut, max(0.0, end - hi))
                costs[problem.f(i, k)] = (
                    inside * above * w.least(lo - slot, min(end, hi + shut)) * per
                )
            else:
                upper[problem.f(i, k)] = 0.0
    problem.costs.extend(costs)
    problem.upper.extend(upper)


def least_run(w: Weight, lo: float, hi: float, run: float, end: float) -> float:
    """The least integral of w over [a, min(a + run, end)] for a in [lo, hi]: piecewise linear
    in a, breaking where a, a + run or the end cross a change of w, so least at a break or an
    end of [lo, hi]."""
    candidates = {lo, hi, *w.breaks(lo, hi)}
    candidates.update(t - run for t in (*w.breaks(lo + run, hi + run), end) if lo < t - run < hi)
    return min(w.integral(a, min(a + run, end)) for a in candidates if a < end) if lo < end else 0.0


def _pod_columns(
    problem: SlotProblem,
    views: list[NodeView],
    draws: list[Draw],
    weights: list[Weight],
    per: float,
) -> None:
    slot = problem.slot
    for p, win in enumerate(problem.windows):
        allowed = [i for i, view in enumerate(views) if allowed_on(win.requests, view)]
        problem.unplaced += not allowed
        first = math.ceil(win.earliest / slot - _EPS)
        last = math.ceil(min(win.latest, problem.end) / slot - _EPS)
        for i in allowed:
            watts = load_watts(views[i], draws[i], win.requests)
            for t in range(first, last + 1):
                lo, hi = max(win.earliest, (t - 1) * slot), min(win.latest, t * slot)
                if lo > hi + _EPS:
                    continue
                energy = least_run(weights[i], lo, hi, win.run, problem.end)
                problem.triples.append((p, i, t))
                problem.owners.append(i)
                problem.costs.append(watts * energy * per)
                problem.upper.append(1.0)


def covered(problem: SlotProblem, window: Window, t: int) -> tuple[range, list[int]]:
    """The whole slots a run of `window` first covering slot t covers (cut at K), and the slots
    holding its remaining r - d D seconds (empty when they do not all lie inside the K)."""
    d = max(0, math.floor(window.run / problem.slot + _EPS) - 1)
    whole = range(t, min(t + d, problem.segments))
    if t + d + 1 >= problem.segments or t + d + 1 < 0:
        return whole, []
    return whole, [k for k in (t - 1, t + d, t + d + 1) if k >= 0]


def _slot_rows(problem: SlotProblem, views: list[NodeView]) -> None:
    inf, base, slot = math.inf, problem.pod_base, problem.slot
    by_window: dict[int, list[int]] = {}
    cover: dict[tuple[int, int], list[int]] = {}
    for c, (p, i, t) in enumerate(problem.triples):
        by_window.setdefault(p, []).append(base + c)
        whole, parts = covered(problem, problem.windows[p], t)
        for k in whole:
            cover.setdefault((i, k), []).append(c)
        if parts:  # its pieces outside whole slots are usable time too
            run = problem.windows[p].run
            rest = (run - len(whole) * slot) / slot
            entries = [(problem.u(i, k), 1.0) for k in parts]
            problem.row([*entries, (base + c, -rest)], 0.0, inf)
    for p, columns in by_window.items():
        problem.row([(c, 1.0) for c in columns], 1.0 if problem.windows[p].required else 0.0, 1.0)
    names = sorted({name for v in views for name, _ in v.allocatable})
    free = [v.free.as_dict() for v in views]
    for (i, k), columns in sorted(cover.items()):
        big: set[int] = set()
        shared = False
        for name in names:
            cap = float(free[i].get(name, 0))
            entries = [
                (base + c, float(amount) / cap)
                for c in columns
                if cap > 0
                and (amount := problem.windows[problem.triples[c][0]].requests.requests.get(name))
            ]
            if entries:
                shared = True
                problem.row([*entries, (problem.x(i, k), -1.0)], -inf, 0.0)
                big.update(col for col, share in entries if share > 0.5)
        if len(big) > 1:  # never two of these side by side on i
            problem.row([*((c, 1.0) for c in sorted(big)), (problem.x(i, k), -1.0)], -inf, 0.0)
        if not shared:  # pods requesting nothing still run on a usable machine
            for c in columns:
                problem.row([(problem.x(i, k), 1.0), (base + c, -1.0)], 0.0, inf)
    for i in range(len(problem.machines)):
        for k in range(problem.segments):
            problem.row([(problem.x(i, k), 1.0), (problem.u(i, k), -1.0)], -inf, 0.0)
            rise = [(problem.s(i, k), 1.0), (problem.u(i, k), -1.0)]
            if k:
                rise.append((problem.u(i, k - 1), 1.0))
                fall = [(problem.f(i, k), 1.0), (problem.u(i, k - 1), -1.0), (problem.u(i, k), 1.0)]
                problem.row(fall, 0.0, inf)
            problem.row(rise, 0.0, inf)


def _max_rows(problem: SlotProblem, groups: Sequence[Group]) -> None:
    """maxNodes over x, where it binds and no `spec.windows` may lift it."""
    for group in groups:
        members = [i for i, m in enumerate(problem.machines) if m.group_key == group.key]
        if group.windows or len(members) <= group.max_nodes:
            continue
        for k in range(problem.segments):
            problem.row([(problem.x(i, k), 1.0) for i in members], 0.0, float(group.max_nodes))


def mapped(problem: SlotProblem, result: Result) -> tuple[list[float], list[str]]:
    """A replayed schedule as column values, by the proof's construction (module docstring),
    and what could not be mapped (empty: every required run found its column)."""
    n, slot = problem.segments, problem.slot
    values = [0.0] * len(problem.costs)
    problems: list[str] = []
    index = {m.kubernetes_node_name: i for i, m in enumerate(problem.machines)}
    for sim in result.machines:
        i = index.get(sim.name)
        if i is None:
            continue
        usable: list[tuple[float, float]] = []
        since: float | None = None
        for at, phase in [*sim.timeline, (result.trace.duration_seconds, "")]:
            if since is None and phase == "Ready":
                since = at
            elif since is not None and phase not in {"Ready", "Draining"}:
                usable.append((since, at))
                since = None
        for k in range(n):
            lo, hi = k * slot, (k + 1) * slot
            share = sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in usable) / slot
            values[problem.u(i, k)] = share
            values[problem.x(i, k)] = float(
                share >= 1.0 - _EPS and any(a <= lo + _EPS and hi <= b + _EPS for a, b in usable)
            )
        for k in range(n):
            before = values[problem.u(i, k - 1)] if k else 0.0
            values[problem.s(i, k)] = max(0.0, values[problem.u(i, k)] - before)
            if k:
                values[problem.f(i, k)] = max(0.0, before - values[problem.u(i, k)])
    column = {triple: problem.pod_base + c for c, triple in enumerate(problem.triples)}
    pods = {(p.key.namespace, p.key.name): p for p in result.pods}
    for w, win in enumerate(problem.windows):
        pod = pods.get(win.key)
        if pod is None or pod.started is None or pod.host is None:
            if win.required:
                problems.append(f"{win.key}: required, never started")
            continue
        t = math.ceil(pod.started / slot - _EPS)
        c = column.get((w, index.get(pod.host, -1), t))
        if c is None:
            if win.required or pod.started < win.latest:
                problems.append(f"{win.key}: started {pod.started:.0f} on {pod.host}, no column")
            continue
        values[c] = 1.0
    return values, problems


def slot_schedule(problem: SlotProblem, values: Sequence[float]) -> tuple[ScheduleEnergy, ...]:
    """Each machine's share of a solution of the energy model, by term, kWh."""
    n, m = problem.segments, len(problem.machines)
    load = [0.0] * m
    for c, (_p, i, _t) in enumerate(problem.triples):
        load[i] += problem.costs[problem.pod_base + c] * values[problem.pod_base + c]

    def wh(columns: Sequence[int]) -> float:
        return problem.scale * sum(problem.costs[c] * values[c] for c in columns)

    return tuple(
        ScheduleEnergy(
            name=machine.key.name,
            standby=problem.standby[i] / 1000,
            load=problem.scale * load[i] / 1000,
            up=wh([c for k in range(n) for c in (problem.x(i, k), problem.u(i, k))]) / 1000,
            cycles=wh([c for k in range(n) for c in (problem.s(i, k), problem.f(i, k))]) / 1000,
            up_hours=sum(values[problem.u(i, k)] for k in range(n)) * problem.slot / HOUR,
            starts=sum(values[problem.s(i, k)] for k in range(n)),
        )
        for i, machine in enumerate(problem.machines)
    )
