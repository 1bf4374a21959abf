"""Deferrable Jobs: when to release each suspended Job that may wait for cheap hours.

A Job with `lightsout.dev/finish-by` or `lightsout.dev/max-delay` is admitted suspended
(`handlers.admission`); `defer(snapshot, now)` decides, each plan, whether to release it now
(`spec.suspend: false`, then its pods are pending like any) or when it will.

The cost of starting at `s` is the electricity the cheapest machine that could run it draws
(`watts_on`) from `s` for its boot and then the longer of the Job's duration and the machine's
minimum on-time, each stretch at the price its Group's tariff sets then
(`planning.energy.tariff.cost`). The start chosen is the cheapest among `now`, the latest start
that still finishes `MARGIN` before the deadline, and every moment a price changes in between
(or that many seconds before one, so the run ends as a dearer rate begins): with prices
constant between changes, one of them is the cheapest. Ties go to the earliest, so a Job with
nothing to gain runs at once.

A Job is released at once when waiting cannot be priced or could miss its deadline: its
annotations do not read, its duration is unknown (no `lightsout.dev/expected-duration` and no
earlier run of its CronJob), no machine could run it, its machines' Groups have one price at
every hour, or the latest start has come. It never waits for lack of a forecast.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.planning.autoscaler.decisions import Release, Wait
from lightsout.planning.autoscaler.scheduling import fits, view_of_machine
from lightsout.planning.energy import tariff
from lightsout.state.parse import format_time
from lightsout.state.types import DeferredJob, Group, Machine, ObjectKey, Snapshot

#: Finished this long before its deadline at the latest: the planner's debounce, the
#: scheduler, a run a little slower than the last.
MARGIN = timedelta(minutes=10)
#: A latest start within this is taken as now: a plan rarely runs on the exact second, and a
#: Job must not wait for a start it would miss.
SLACK = timedelta(seconds=1)


@dataclass(frozen=True)
class Deferral:
    releases: tuple[Release, ...] = ()
    waits: Mapping[ObjectKey, Wait] = field(default_factory=dict)

    @property
    def next_release(self) -> datetime | None:
        return min((w.start for w in self.waits.values()), default=None)


@dataclass(frozen=True)
class _Option:
    """One machine that could run the Job, and what a run on it takes."""

    machine: Machine
    group: Group
    #: From the release to the end of the machine's on-time: boot, then the run or the
    #: minimum on-time.
    span: timedelta
    #: From the release to the run's end.
    to_finish: timedelta

    def cost(self, start: datetime) -> float:
        assert self.group.electricity is not None
        watts = self.machine.watts_on or 0.0
        return tariff.cost(self.group.electricity, watts, start, start + self.span)


def defer(snapshot: Snapshot, now: datetime) -> Deferral:
    """What to do with each suspended deferrable Job of `snapshot` at `now`."""
    releases: list[Release] = []
    waits: dict[ObjectKey, Wait] = {}
    for job in snapshot.deferred:
        decided = _decide(job, snapshot, now)
        if isinstance(decided, Release):
            releases.append(decided)
        else:
            waits[job.key] = decided
    return Deferral(tuple(releases), waits)


def _decide(job: DeferredJob, snapshot: Snapshot, now: datetime) -> Release | Wait:
    if job.problem is not None:
        return Release(job.key, f"released at once: {job.problem}")
    if job.deadline is None or job.duration is None:
        return Release(
            job.key,
            "released at once: its run time is unknown (no lightsout.dev/expected-duration "
            "and no finished run of its CronJob to learn it from)",
        )
    options = list(_options(job, snapshot))
    if not options:
        return Release(job.key, "released at once: no machine could run it")
    if not any(o.group.electricity and o.group.electricity.rates for o in options):
        return Release(
            job.key, "released at once: its machines' Groups have one price at every hour"
        )
    latest = job.deadline - MARGIN - max(o.to_finish for o in options)
    if latest <= now + SLACK:
        return Release(
            job.key,
            f"released at once: to finish by {format_time(job.deadline)} with "
            f"{_minutes(MARGIN)} to spare it must start now",
        )
    _, best_start, best = min(
        ((o.cost(s), s, o) for o in options for s in _starts(o, now, latest)),
        key=lambda found: (found[0], found[1]),
    )
    if best_start <= now:
        return Release(job.key, f"released: now is its cheapest start ({_priced(best, now)})")
    return Wait(
        job.key,
        best_start,
        f"held for cheaper electricity: starts at {format_time(best_start)} "
        f"({_priced(best, best_start)}); "
        f"runs {_minutes(job.duration)} ({job.duration_source}), "
        f"done by {format_time(job.deadline)} at the latest",
    )


def _options(job: DeferredJob, snapshot: Snapshot) -> Iterator[_Option]:
    groups = {group.key: group for group in snapshot.groups}
    nodes = {node.name: node for node in snapshot.nodes}
    assert job.duration is not None
    for machine in snapshot.machines:
        group = groups.get(machine.group_key)
        if group is None or group.electricity is None:
            continue
        view = view_of_machine(
            machine, snapshot.daemonsets, nodes.get(machine.kubernetes_node_name)
        )
        if view is None or not fits(job.scheduling, view):
            continue
        boot = timedelta(seconds=machine.boot_estimate)
        on_time = timedelta(seconds=machine.minimum_on_seconds or 0)
        yield _Option(machine, group, boot + max(job.duration, on_time), boot + job.duration)


def _starts(option: _Option, now: datetime, latest: datetime) -> Sequence[datetime]:
    """Now, the latest start, and each moment in between that a price change begins or ends
    the machine's span at."""
    assert option.group.electricity is not None
    found = {now, latest}
    at: datetime | None = now
    while at is not None and at < latest + option.span:
        at = tariff.next_change(option.group.electricity, at)
        if at is None:
            break
        for start in (at, at - option.span):
            if now <= start <= latest:
                found.add(start)
    return sorted(found)


def _priced(option: _Option, start: datetime) -> str:
    electricity = option.group.electricity
    assert electricity is not None
    return f"{option.cost(start):.4f} {electricity.currency} on machine {option.machine.key.name}"


def _minutes(span: timedelta) -> str:
    seconds = span.total_seconds()
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f}s"


__all__ = ["MARGIN", "Deferral", "defer"]
