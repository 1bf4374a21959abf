"""Deferrable Jobs as the snapshot holds them: which suspended Jobs wait for cheap hours, by
when each must be done and how long it runs.

A Job counts when it carries `lightsout.dev/finish-by` or `lightsout.dev/max-delay` (and no
Kueue queue label: `types.deferrable`) and is suspended and unfinished. Its deadline is the
finish-by time, else its creation plus the max delay. Its width is how many of its pods run
at once (`spec.parallelism`, at most `spec.completions`). Its duration is its
`lightsout.dev/expected-duration`, else the median run (start to completion) of the finished
Jobs of the same CronJob in the same list: a CronJob's runs teach the next one. An annotation
that does not read never holds a Job back: it becomes the Job's `problem`, and the planner
releases it at once, saying why.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from lightsout.state.parse import (
    as_int,
    as_str,
    condition,
    controller_kind,
    controller_name,
    dig,
    parse_duration,
    parse_time,
    scheduling_requirements,
    str_map,
)
from lightsout.state.types import (
    EXPECTED_DURATION,
    FINISH_BY,
    MAX_DELAY,
    START_AT,
    DeferredJob,
    ObjectKey,
    deferrable,
)


def deferred_jobs(jobs: Sequence[Mapping[str, Any]]) -> tuple[DeferredJob, ...]:
    """The suspended, unfinished deferrable Jobs of `jobs` (raw batch/v1 Jobs), by key."""
    learned = _learned_runs(jobs)
    out = [
        _deferred(job, learned)
        for job in jobs
        if _governed(job) and dig(job, "spec", "suspend") is True and not _finished(job)
    ]
    return tuple(sorted((j for j in out if j is not None), key=lambda j: j.key))


def _governed(job: Mapping[str, Any]) -> bool:
    meta = job.get("metadata")
    return deferrable(str_map(dig(meta, "annotations")), str_map(dig(meta, "labels")))


def _finished(job: Mapping[str, Any]) -> bool:
    status = job.get("status")
    return any((condition(status, kind) or {}).get("status") == "True" for kind in _ENDS)


_ENDS = ("Complete", "Failed")


def _cronjob(job: Mapping[str, Any]) -> str | None:
    meta = job.get("metadata")
    if controller_kind(meta) != "CronJob":
        return None
    return f"{as_str(dig(meta, 'namespace'))}/{controller_name(meta)}"


def _learned_runs(jobs: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Seconds from start to completion of each finished Job, by its CronJob."""
    runs: dict[str, list[float]] = defaultdict(list)
    for job in jobs:
        cron = _cronjob(job)
        if cron is None or (condition(job.get("status"), "Complete") or {}).get("status") != "True":
            continue
        started = parse_time(dig(job, "status", "startTime"))
        done = parse_time(dig(job, "status", "completionTime"))
        if started is not None and done is not None and done > started:
            runs[cron].append((done - started).total_seconds())
    return runs


def _deferred(job: Mapping[str, Any], learned: Mapping[str, list[float]]) -> DeferredJob | None:
    meta = job.get("metadata")
    namespace, name = as_str(dig(meta, "namespace")), as_str(dig(meta, "name"))
    if not name:
        return None
    annotations = str_map(dig(meta, "annotations"))
    deadline, problem = _deadline(annotations, parse_time(dig(meta, "creationTimestamp")))
    duration, source = None, ""
    if EXPECTED_DURATION in annotations:
        try:
            duration = timedelta(seconds=parse_duration(annotations[EXPECTED_DURATION]))
            source = EXPECTED_DURATION
        except ValueError as error:
            problem = problem or f"{EXPECTED_DURATION}: {error}"
    else:
        cron = _cronjob(job)
        runs = learned.get(cron or "", [])
        if runs:
            duration = timedelta(seconds=statistics.median(runs))
            source = f"learned from {len(runs)} earlier run(s) of CronJob {cron}"
    return DeferredJob(
        key=ObjectKey(namespace, name),
        scheduling=scheduling_requirements(dig(job, "spec", "template", "spec")),
        deadline=deadline,
        duration=duration,
        duration_source=source,
        start_mark=annotations.get(START_AT),
        problem=problem,
        width=_width(dig(job, "spec", "parallelism"), dig(job, "spec", "completions")),
    )


def _width(parallelism: object, completions: object) -> int:
    """How many pods the Job runs at once, as the Job controller counts them: `parallelism`
    (1 when unset), and no more than `completions` when set (unset: a work queue, whose pods
    all run at once). At least 1: a Job paused by `parallelism: 0` is priced as one pod."""
    width, limit = as_int(parallelism), as_int(completions)
    width = 1 if width is None else width
    return max(width if limit is None else min(width, limit), 1)


def _deadline(
    annotations: Mapping[str, str], created: datetime | None
) -> tuple[datetime | None, str | None]:
    """The Job's deadline and, when its annotations do not give one, why."""
    if FINISH_BY in annotations:
        text = annotations[FINISH_BY]
        at = parse_time(text)
        if at is None:
            return None, f"{FINISH_BY}: {text!r} is not an RFC 3339 time"
        return at, None
    text = annotations[MAX_DELAY]
    try:
        delay = parse_duration(text)
    except ValueError as error:
        return None, f"{MAX_DELAY}: {error}"
    if created is None:
        return None, f"{MAX_DELAY}: the Job has no creationTimestamp to count from"
    return created + timedelta(seconds=delay), None


__all__ = ["deferred_jobs"]
