"""CronJob runs: when a `batch/v1` CronJob creates a Job, as kube-controller-manager decides it.

One code path for announced work, live and simulated: `expected_pods(crons, now)` turns
CronJobs into the `Snapshot.expected` pods the planner pre-warms for
(`planning.autoscaler.prewarm`). `state.build.snapshot_from` calls it with the CronJobs the
autoscaler handler watches, and the replay simulator (`lightsout.simulate.replay.engine`) with the
trace's CronJobs, looking their next run up in its own expansion of the same `fire_times`.

`fire_times` expands `spec.schedule` in `spec.timeZone` (the controller's default is its own
zone: UTC here) with `lightsout.models.schedule`, the controller's own schedule arithmetic
(robfig/cron's `Next`), so daylight-saving nights come out as the controller has them: a run
at a local time that does not exist that night is skipped, one in the repeated hour happens
twice. `expression` and `zone` read the two fields and say what is wrong (the trace check
`lightsout.simulate.traces.validate` calls them too); a suspended CronJob has no runs.

Which run the controller will create next depends on its active Jobs, and `next_created` is
the one place that decides it, from what is known of them: live, the CronJob's
`status.active` (the Jobs are running, their end unknown); in the replay, its running runs
and when they will end. kube-controller-manager (pkg/controller/cronjob,
`cronjob_controllerv2.go` `syncCronJob`, `utils.go` `mostRecentScheduleTime`) creates a Job
for the most recent scheduled time not yet started, when it syncs (at each scheduled time,
and whenever one of its Jobs changes):
- `suspend`: nothing.
- `startingDeadlineSeconds`: a scheduled time more than that long ago is never started
  ("MissSchedule"); without it, a missed time is started however late.
- `Forbid` with a Job still active: nothing now ("JobAlreadyActive"), and the scheduled time
  stays unmet, so when the active Job finishes (its update re-queues the CronJob) the most
  recent time missed meanwhile is started then, late, if within the deadline; earlier missed
  times are lost. Live, the end is unknown: nothing is announced until `status.active` empties.
- `Replace`: the active Jobs are deleted and the run is started on time; `Allow`: started.
The simulated controller is never down, so the deadline only bites on a Forbid run started
late. Not modelled: the Job's retries (simulated pods succeed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lightsout.models import schedule as cron_schedule
from lightsout.state.parse import as_int, as_str, dig, format_time, scheduling_requirements, str_map
from lightsout.state.types import ExpectedPod, ObjectKey, SchedulingRequirements, deferrable

Obj = dict[str, Any]

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
    #: `spec.startingDeadlineSeconds`: how late a scheduled time may still be started.
    starting_deadline: timedelta | None
    #: How many Jobs `status.active` lists (live; a trace's CronJobs have no status).
    active: int
    #: The Job template's pod spec.
    pod_spec: Mapping[str, Any]
    #: Its pods' scheduling requirements, read as the planner reads a pod's.
    scheduling: SchedulingRequirements
    #: The Job template's annotations, which every Job it creates carries (a deferrable
    #: one's `lightsout.dev/max-delay`).
    job_annotations: Mapping[str, str] = field(default_factory=dict)
    #: The Job template's labels (Kueue's queue label makes a run Kueue's, never held).
    job_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def read(cronjob: Mapping[str, Any]) -> CronSpec:
    spec = cronjob.get("spec")
    policy = as_str(dig(spec, "concurrencyPolicy"), ALLOW) or ALLOW
    if policy not in (ALLOW, FORBID, REPLACE):
        raise CronError(f"concurrencyPolicy {policy!r} is not Allow, Forbid or Replace")
    template = dig(spec, "jobTemplate", "spec", "template", "spec")
    deadline = as_int(dig(spec, "startingDeadlineSeconds"))
    active = dig(cronjob, "status", "active")
    return CronSpec(
        namespace=as_str(dig(cronjob, "metadata", "namespace"), "default") or "default",
        name=as_str(dig(cronjob, "metadata", "name")),
        schedule=as_str(dig(spec, "schedule")),
        time_zone=as_str(dig(spec, "timeZone")) or None,
        suspend=dig(spec, "suspend") is True,
        concurrency_policy=policy,
        starting_deadline=None if deadline is None else timedelta(seconds=deadline),
        active=len(active) if isinstance(active, list) else 0,
        pod_spec=template if isinstance(template, Mapping) else {},
        scheduling=scheduling_requirements(template),
        job_annotations=str_map(dig(spec, "jobTemplate", "metadata", "annotations")),
        job_labels=str_map(dig(spec, "jobTemplate", "metadata", "labels")),
    )


def expression(cron: CronSpec) -> str:
    """The schedule, once the controller's parser accepts it; raises `CronError`."""
    _utc(cron.schedule)
    return cron.schedule


def _utc(expression: str) -> cron_schedule.Schedule:
    """The expression read in UTC; raises `CronError`."""
    try:
        return cron_schedule.parse(expression, ZoneInfo("UTC"))
    except cron_schedule.ScheduleError as error:
        raise CronError(f"schedule {expression!r} is not a cron expression: {error}") from error


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
    return _times(schedule(cron), start, end)


def schedule_times(expression: str, start: datetime, end: datetime) -> list[datetime]:
    """Every time a schedule with no time zone (UTC, as the health check's CronJob has) fires
    in [start, end); raises `CronError`."""
    return _times(_utc(expression), start, end)


def _times(runs: cron_schedule.Schedule, start: datetime, end: datetime) -> list[datetime]:
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


def job_of(cron: CronSpec, scheduled: datetime, created: datetime, *, suspend: bool) -> Obj:
    """The Job the controller creates for the run scheduled at `scheduled` (at `created`), as
    the API holds it: named by `job_name`, owned by the CronJob, with the template's
    annotations and labels; `suspend` as the admission webhook leaves a deferrable one
    (`state.admission`)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": cron.namespace,
            "name": job_name(cron, scheduled),
            "creationTimestamp": format_time(created),
            "annotations": dict(cron.job_annotations),
            "labels": dict(cron.job_labels),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "CronJob", "name": cron.name, "controller": True}
            ],
        },
        "spec": {"suspend": suspend, "template": {"spec": dict(cron.pod_spec)}},
        "status": {},
    }


def next_run(cron: CronSpec, now: datetime) -> datetime | None:
    """The first scheduled time strictly after `now`; None when suspended or never."""
    if cron.suspend:
        return None
    return schedule(cron).next(now)


@dataclass(frozen=True, slots=True)
class Run:
    """A Job the controller will create: for `scheduled` (its name), at `created`."""

    scheduled: datetime
    created: datetime


def live_active(cron: CronSpec) -> tuple[datetime | None, ...]:
    """Live, what is known of the active Jobs: that `status.active` lists them, not when they
    will end."""
    return (None,) * cron.active


def next_created(
    cron: CronSpec,
    now: datetime,
    active: Sequence[datetime | None] = (),
    next_of: Callable[[CronSpec, datetime], datetime | None] = next_run,
) -> Run | None:
    """The next Job the controller will create after `now`, given its active Jobs' ends
    (None: active, end unknown); None when it creates none that can be told now.

    Only Forbid looks at the active Jobs: a scheduled time while one still runs is not
    started then; the last such time before it ends is started when it ends, if the deadline
    allows, else the first scheduled time after it ends is next."""
    if cron.suspend:
        return None
    at = next_of(cron, now)
    if at is None:
        return None
    if cron.concurrency_policy != FORBID or not active:
        return Run(at, at)
    ends = [end for end in active if end is not None]
    if len(ends) < len(active):
        return None  # running, for how long nobody knows: announce once it has finished
    finish = max(ends)
    if at >= finish:
        return Run(at, at)
    missed = at
    after = next_of(cron, at)
    while after is not None and after < finish:
        missed, after = after, next_of(cron, after)
    if cron.starting_deadline is None or finish <= missed + cron.starting_deadline:
        return Run(missed, finish)
    return None if after is None else Run(after, after)


def expected_pods(
    crons: Iterable[CronSpec],
    now: datetime,
    next_of: Callable[[CronSpec, datetime], datetime | None] = next_run,
    active_of: Callable[[CronSpec], Sequence[datetime | None]] = live_active,
) -> tuple[ExpectedPod, ...]:
    """Each CronJob's next created run (`next_created`) as the pod it will create, soonest
    first (the planner's `Snapshot.expected`). `next_of` finds the next scheduled time and
    `active_of` the active Jobs' ends: live, `next_run` and `status.active`; the simulator
    passes a lookup in its precomputed `fire_times` and its running runs' ends.

    A CronJob whose Jobs are deferrable (`types.deferrable`: its Job template says
    `lightsout.dev/finish-by` or `max-delay`) announces nothing: the admission webhook holds its
    run, so no pod comes at the scheduled time for a pre-warmed machine to take (it would idle
    in the evening's dear hours, then power off), and the planner powers its machines on when
    it releases the run (`planning.autoscaler.deferral`). Without the webhook the run's pod
    waits a boot, which its author allowed."""
    out: list[ExpectedPod] = []
    for cron in crons:
        if deferrable(cron.job_annotations, cron.job_labels):
            continue
        run = next_created(cron, now, active_of(cron), next_of)
        if run is not None:
            key = ObjectKey(cron.namespace, job_name(cron, run.scheduled))
            out.append(ExpectedPod(key, run.created, cron.scheduling))
    return tuple(sorted(out, key=lambda e: (e.at, e.key)))
