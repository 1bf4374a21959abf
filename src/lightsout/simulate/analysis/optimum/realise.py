"""The offline optimum's schedules: per-machine energy of a solution, and a pooled solution
made into a schedule of real machines.

`schedule_energy` splits a solution's objective by machine and term (`ScheduleEnergy`, what
`analysis.breakdown` sets Lights-Out's energy against). `realise` turns the pooled MIP's
solution (`model._pooled`: one count per set of identical machines) into one-per-machine column
values, placing each pod and keeping each machine up the cheapest way (`_bridge`), and hands
them back only if they pass every row (`model.violations`): the start the one-per-machine MIP
improves on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lightsout.simulate.analysis.optimum.model import (
    HOUR,
    Problem,
    Run,
    node_views,
    upper_bounds,
    violations,
)


@dataclass(frozen=True, slots=True)
class ScheduleEnergy:
    """One machine in the solver's schedule (the MIP's best one, or the with-waits LP's
    solution), by the objective's own terms, kWh: what `analysis.breakdown` sets Lights-Out's
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


def schedule_energy(problem: Problem, values: Sequence[float]) -> tuple[ScheduleEnergy, ...]:
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
            up_hours=sum(problem.lengths[k] * values[problem.x(i, k)] for k in range(n)) / HOUR,
            starts=sum(values[problem.s(i, k)] for k in range(n)),
        )
        for i, m in enumerate(problem.machines)
    )


def realise(
    pooled: Problem, values: Sequence[float], single: Problem, runs: Sequence[Run]
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
    free = [v.free.as_dict() for v in node_views(single.machines)]
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
    return None if violations(single, made, upper_bounds(single)) else made


def _extra(problem: Problem, i: int, segments: range, used: Sequence[dict[str, float]]) -> float:
    """What machine i costs more to be up over `segments` as well: the idle of those it is not
    up for already, and a start-up if it is down just before."""
    cost = sum(problem.costs[problem.x(i, k)] for k in segments if not used[k])
    first = segments.start
    if not used[first] and (first == 0 or not used[first - 1]):
        cost += problem.costs[problem.s(i, first)]
    return cost


def _bridge(problem: Problem, i: int, up: list[bool]) -> None:
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
