"""Deferrable CronJob runs in the replay: their Jobs as the API would hold them.

A CronJob whose Job template carries `lightsout.dev/finish-by` or `lightsout.dev/max-delay`
creates, at each run, a Job the admission webhook leaves suspended (`cron.job_of`). `HeldJobs`
keeps those Jobs as raw objects, held ones and the last finished ones of each CronJob (its
`successfulJobsHistoryLimit`, 3), so that the planner's snapshot reads them through
`state.jobs.deferred_jobs`, the live code: deadline and duration (learned from the finished
ones) mean the same in the replay. The plan's releases (`planning.autoscaler.deferral`) come
back through the port (`SimScale.release_job`); the engine then creates the run's pod.
`DeferredRun` records, per run, when it was created, released and done, and its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.state import cron
from lightsout.state.jobs import deferred_jobs
from lightsout.state.parse import format_time
from lightsout.state.types import DeferredJob, ObjectKey

#: Finished Jobs a CronJob keeps (Kubernetes' default `successfulJobsHistoryLimit`).
HISTORY = 3

Obj = dict[str, object]


@dataclass
class DeferredRun:
    """One deferrable run: seconds since the trace's start."""

    key: ObjectKey
    cronjob: str
    created: float
    deadline: datetime | None
    released: float | None = None
    finished: float | None = None
    finished_at: datetime | None = None

    @property
    def missed(self) -> bool:
        """It finished after its deadline."""
        return (
            self.deadline is not None
            and self.finished_at is not None
            and self.finished_at > self.deadline
        )


@dataclass
class HeldJobs:
    """The replay's deferrable Jobs, held and finished, as raw API objects."""

    jobs: dict[ObjectKey, Obj] = field(default_factory=dict)
    #: The held ones: their CronJob and how long their run really takes.
    held: dict[ObjectKey, tuple[cron.CronSpec, float]] = field(default_factory=dict)
    runs: dict[ObjectKey, DeferredRun] = field(default_factory=dict)
    finished: dict[str, list[ObjectKey]] = field(default_factory=dict)

    def hold(
        self, spec: cron.CronSpec, scheduled: datetime, now: datetime, at: float, run: float
    ) -> None:
        """The run's Job is created suspended at `now` (`at` seconds since the start)."""
        job = cron.job_of(spec, scheduled, now, suspend=True)
        meta = job["metadata"]
        assert isinstance(meta, dict)
        key = ObjectKey(spec.namespace, str(meta["name"]))
        self.jobs[key] = job
        self.held[key] = (spec, run)
        (seen,) = deferred_jobs([job]) or (None,)
        deadline = seen.deadline if seen is not None else None
        self.runs[key] = DeferredRun(key, spec.key, at, deadline)

    def deferred(self) -> tuple[DeferredJob, ...]:
        """What the planner's snapshot holds of them (`Snapshot.deferred`)."""
        return deferred_jobs(list(self.jobs.values()))

    def release(self, key: ObjectKey, at: float) -> tuple[cron.CronSpec, float] | None:
        """Unsuspend a held Job; its CronJob and run length (None: not held)."""
        found = self.held.pop(key, None)
        if found is None:
            return None
        spec = self.jobs[key]["spec"]
        assert isinstance(spec, dict)
        spec["suspend"] = False
        self.runs[key].released = at
        return found

    def done(self, key: ObjectKey, now: datetime, at: float) -> None:
        """Its pod finished at `now` (`at` seconds since the start): the Job is Complete, its
        start the release (as the Job controller records it: a boot waited for counts), so
        the next run of its CronJob learns its length; the oldest beyond `HISTORY` go."""
        job, record = self.jobs.get(key), self.runs.get(key)
        if job is None or record is None or record.finished is not None:
            return
        released = record.released if record.released is not None else at
        job["status"] = {
            "startTime": format_time(now - timedelta(seconds=at - released)),
            "completionTime": format_time(now),
            "conditions": [{"type": "Complete", "status": "True"}],
        }
        record.finished, record.finished_at = at, now
        kept = self.finished.setdefault(record.cronjob, [])
        kept.append(key)
        while len(kept) > HISTORY:
            self.jobs.pop(kept.pop(0), None)


__all__ = ["DeferredRun", "HeldJobs"]
