"""CronJob runs: when a `batch/v1` CronJob creates a Job, as kube-controller-manager decides it.

One code path for announced work, live and simulated: `expected_pods(crons, now)` turns
CronJobs into the `Snapshot.expected` pods the planner pre-warms for (`planning.prewarm`).
`state.build.snapshot_from` calls it with the CronJobs the autoscaler handler watches, and the
replay simulator (`lightsout.simulate.engine`) with the trace's CronJobs, looking their next
run up in its own expansion of the same `fire_times`.

`fire_times` expands `spec.schedule` in `spec.timeZone` (the controller's default is its own
zone: UTC here) with `lightsout.state.schedule`, the controller's own schedule arithmetic
(robfig/cron's `Next`), so daylight-saving nights come out as the controller has them: a run
at a local time that does not exist that night is skipped, one in the repeated hour happens
twice. `expression` and `zone` read the two fields and say what is wrong (the trace check
`lightsout.simulate.validate` calls them too); a suspended CronJob has no runs. What happens
at a fire time depends on the runs still active then, which only the replay knows, so
`concurrency_policy` is read here and honoured by `lightsout.simulate.engine`:
`Allow` starts the run, `Forbid` skips it while the previous run is active, `Replace` deletes
the active run and starts the new one. Not modelled: `startingDeadlineSeconds` (the simulated
controller is never down, so no schedule is ever missed) and the Job's retries (simulated pods
succeed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lightsout.state import schedule as cron_schedule
from lightsout.state.parse import as_str, dig, scheduling_requirements
from lightsout.state.types import ExpectedPod, ObjectKey, SchedulingRequirements

ALLOW, FORBID, REPLACE = "Allow", "Forbid", "Replace"


class CronError(ValueError):
    """The CronJob's schedule or time zone is unreadable (the API server would refuse it)."""


@dataclass(frozen=True, slots=True)
class CronSpec:
    namespace: str
    name: str
    schedule: str
    time_zone: str | None
    suspend: bool
    concurrency_policy: str
    #: The Job template's pod spec.
    pod_spec: Mapping[str, Any]
    #: Its pods' scheduling requirements, read as the planner reads a pod's.
    scheduling: SchedulingRequirements

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def read(cronjob: Mapping[str, Any]) -> CronSpec:
    spec = cronjob.get("spec")
    policy = as_str(dig(spec, "concurrencyPolicy"), ALLOW) or ALLOW
    if policy not in (ALLOW, FORBID, REPLACE):
        raise CronError(f"concurrencyPolicy {policy!r} is not Allow, Forbid or Replace")
    template = dig(spec, "jobTemplate", "spec", "template", "spec")
    return CronSpec(
        namespace=as_str(dig(cronjob, "metadata", "namespace"), "default") or "default",
        name=as_str(dig(cronjob, "metadata", "name")),
        schedule=as_str(dig(spec, "schedule")),
        time_zone=as_str(dig(spec, "timeZone")) or None,
        suspend=dig(spec, "suspend") is True,
        concurrency_policy=policy,
        pod_spec=template if isinstance(template, Mapping) else {},
        scheduling=scheduling_requirements(template),
    )


def expression(cron: CronSpec) -> str:
    """The schedule, once the controller's parser accepts it; raises `CronError`."""
    try:
        cron_schedule.parse(cron.schedule, ZoneInfo("UTC"))
    except cron_schedule.ScheduleError as error:
        raise CronError(f"schedule {cron.schedule!r} is not a cron expression: {error}") from error
    return cron.schedule


def zone(cron: CronSpec) -> ZoneInfo:
    """The time zone the schedule is read in (UTC when unset); raises `CronError`."""
    try:
        return ZoneInfo(cron.time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise CronError(f"unknown timeZone {cron.time_zone!r}") from error


def schedule(cron: CronSpec) -> cron_schedule.Schedule:
    """The schedule read in its zone; raises `CronError` naming the CronJob."""
    try:
        return cron_schedule.parse(expression(cron), zone(cron))
    except CronError as error:
        raise CronError(f"{cron.key}: {error}") from error


def fire_times(cron: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """Every scheduled time in [start, end), as aware datetimes; none when suspended."""
    if cron.suspend:
        return []
    runs = schedule(cron)
    times: list[datetime] = []
    # Start just before `start` so a run due exactly at `start` is kept.
    moment = runs.next(start - timedelta(microseconds=1))
    while moment is not None and moment < end:
        times.append(moment)
        moment = runs.next(moment)
    return times


def job_name(cron: CronSpec, scheduled: datetime) -> str:
    """The controller's Job name: `<cronjob>-<scheduled time in minutes since the epoch>`."""
    return f"{cron.name}-{int(scheduled.timestamp() // 60)}"


def next_run(cron: CronSpec, now: datetime) -> datetime | None:
    """The first scheduled time strictly after `now`; None when suspended or never."""
    if cron.suspend:
        return None
    return schedule(cron).next(now)


def expected_pods(
    crons: Iterable[CronSpec],
    now: datetime,
    next_of: Callable[[CronSpec, datetime], datetime | None] = next_run,
) -> tuple[ExpectedPod, ...]:
    """Each CronJob's next run as the pod it will create, soonest first (the planner's
    `Snapshot.expected`). `next_of` finds the next run; the simulator passes a lookup in its
    precomputed `fire_times` instead of walking the schedule again on every plan."""
    out: list[ExpectedPod] = []
    for cron in crons:
        at = next_of(cron, now)
        if at is not None:
            key = ObjectKey(cron.namespace, job_name(cron, at))
            out.append(ExpectedPod(key, at, cron.scheduling))
    return tuple(sorted(out, key=lambda e: (e.at, e.key)))
