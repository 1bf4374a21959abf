"""Deferrable Jobs in the replay: CronJob runs and a trace's bare Jobs, as the API would hold them.

A Job carrying `lightsout.dev/finish-by` or `lightsout.dev/max-delay` (and no Kueue queue label)
is created suspended by the admission webhook. The replay creates its Jobs as the API would (a
CronJob's run by `cron.job_of`; a trace pod whose line gives its owner Job's annotations, by
`job_of_pod`) and admits each through the webhook's own decision (`state.admission.admitted`).
`HeldJobs` keeps the held ones as raw objects, with the last finished ones of each CronJob (its
`successfulJobsHistoryLimit`, 3), so that the planner's snapshot reads them through
`state.jobs.deferred_jobs`, the live code: deadline and duration (learned from a CronJob's
finished runs) mean the same in the replay. The plan's releases (`planning.autoscaler.deferral`)
come back through the port (`SimScale.release_job`); the engine then creates the Job's pods.
`DeferredRun` records, per held Job, when it was created, released and done, and its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.simulate.traces.trace import TracePod
from lightsout.state.admission import admitted
from lightsout.state.jobs import deferred_jobs
from lightsout.state.parse import format_time
from lightsout.state.types import DeferredJob, ObjectKey

#: Finished Jobs a CronJob keeps (Kubernetes' default `successfulJobsHistoryLimit`).
HISTORY = 3

Obj = dict[str, object]


@dataclass
class DeferredRun:
    """One held Job: seconds since the trace's start."""

    key: ObjectKey
    #: Its CronJob (`namespace/name`); None for a bare Job of the trace's pods.
    cronjob: str | None
    created: float
    deadline: datetime | None
    released: float | None = None
    finished: float | None = None
    finished_at: datetime | None = None
    #: Deleted before it finished (its CronJob's Replace): no deadline of its to meet.
    deleted: float | None = None

    @property
    def missed(self) -> bool:
        """It finished after its deadline."""
        return (
            self.deadline is not None
            and self.finished_at is not None
            and self.finished_at > self.deadline
        )


def job_of_pod(pod: TracePod, created: datetime) -> Obj:
    """The Job a trace pod's line says owns it, created at `created` (its arrival), as its
    author wrote it: the line's `jobAnnotations` and `jobLabels`, the pod's spec as template."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": pod.namespace,
            "name": pod.owner_name or pod.name,
            "creationTimestamp": format_time(created),
            "annotations": dict(pod.job_annotations),
            "labels": dict(pod.job_labels),
        },
        "spec": {"template": {"spec": dict(pod.spec)}},
        "status": {},
    }


@dataclass
class HeldJobs:
    """The replay's deferrable Jobs, held and finished, as raw API objects."""

    jobs: dict[ObjectKey, Obj] = field(default_factory=dict)
    #: The held ones: the pods each creates when released (a CronJob run's one).
    held: dict[ObjectKey, list[TracePod]] = field(default_factory=dict)
    runs: dict[ObjectKey, DeferredRun] = field(default_factory=dict)
    #: Per released Job, its pods not done yet; per pod, its Job.
    running: dict[ObjectKey, set[ObjectKey]] = field(default_factory=dict)
    job_of: dict[ObjectKey, ObjectKey] = field(default_factory=dict)
    finished: dict[str, list[ObjectKey]] = field(default_factory=dict)

    def admit(self, job: Obj, pod: TracePod, at: float, cronjob: str | None = None) -> bool:
        """`job` is created now (`at` seconds since the start) for `pod`: True when it is (or
        its Job already was) held, so `pod` waits for the release; False when it runs now."""
        meta = job["metadata"]
        assert isinstance(meta, dict)
        key = ObjectKey(str(meta["namespace"]), str(meta["name"]))
        pod_key = ObjectKey(pod.namespace, pod.name)
        if key in self.held:  # another pod of a Job still held
            self.held[key].append(pod)
            return True
        if key in self.running:  # another pod of a Job already released
            self.running[key].add(pod_key)
            self.job_of[pod_key] = key
            return False
        stored = admitted(job)
        spec = stored.get("spec")
        if not isinstance(spec, dict) or spec.get("suspend") is not True:
            return False
        self.jobs[key] = stored
        self.held[key] = [pod]
        (seen,) = deferred_jobs([stored]) or (None,)
        deadline = seen.deadline if seen is not None else None
        self.runs[key] = DeferredRun(key, cronjob, at, deadline)
        return True

    def waiting(self, cronjob: str) -> list[ObjectKey]:
        """The CronJob's runs held now (active Jobs to its controller, with no pod yet)."""
        return [k for k in self.held if self.runs[k].cronjob == cronjob]

    def deferred(self) -> tuple[DeferredJob, ...]:
        """What the planner's snapshot holds of them (`Snapshot.deferred`)."""
        return deferred_jobs(list(self.jobs.values()))

    def release(self, key: ObjectKey, at: float) -> tuple[list[TracePod], str | None] | None:
        """Unsuspend a held Job: the pods to create and its CronJob (None: not held)."""
        pods = self.held.pop(key, None)
        if pods is None:
            return None
        spec = self.jobs[key]["spec"]
        assert isinstance(spec, dict)
        spec["suspend"] = False
        record = self.runs[key]
        record.released = at
        self.running[key] = {ObjectKey(p.namespace, p.name) for p in pods}
        self.job_of.update((ObjectKey(p.namespace, p.name), key) for p in pods)
        return pods, record.cronjob

    def delete(self, key: ObjectKey, at: float) -> None:
        """The Job is deleted unfinished (its CronJob's Replace), held or running."""
        record = self.runs.get(key)
        if record is None or record.finished is not None:
            return
        record.deleted = at
        self.held.pop(key, None)
        self.jobs.pop(key, None)
        for pod in self.running.pop(key, set()):
            self.job_of.pop(pod, None)

    def pod_done(self, pod: ObjectKey, now: datetime, at: float) -> None:
        """A pod finished at `now` (`at` seconds since the start); its Job is done with its
        last pod."""
        key = self.job_of.pop(pod, None)
        if key is None:
            return
        left = self.running.get(key, set())
        left.discard(pod)
        if not left:
            self.running.pop(key, None)
            self._done(key, now, at)

    def _done(self, key: ObjectKey, now: datetime, at: float) -> None:
        """The Job is Complete, its start the release (as the Job controller records it: a boot
        waited for counts), so the next run of its CronJob learns its length; the oldest beyond
        `HISTORY` go. A bare Job teaches nothing: it goes at once."""
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
        if record.cronjob is None:
            self.jobs.pop(key, None)
            return
        kept = self.finished.setdefault(record.cronjob, [])
        kept.append(key)
        while len(kept) > HISTORY:
            self.jobs.pop(kept.pop(0), None)


__all__ = ["DeferredRun", "HeldJobs", "job_of_pod"]
