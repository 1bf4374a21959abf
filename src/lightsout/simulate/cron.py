"""CronJob runs: when a `batch/v1` CronJob creates a Job, as kube-controller-manager decides it.

`fire_times` expands `spec.schedule` in `spec.timeZone` (the controller's default is its own
zone: UTC here) with croniter, and returns nothing for a suspended CronJob. What happens at a
fire time depends on the runs still active then, which only the replay knows, so
`concurrency_policy` is read here and honoured by `lightsout.simulate.engine`: `Allow` starts
the run, `Forbid` skips it while the previous run is active, `Replace` deletes the active run
and starts the new one. Not modelled: `startingDeadlineSeconds` (the simulated controller is
never down, so no schedule is ever missed) and the Job's retries (simulated pods succeed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from lightsout.state.parse import as_str, dig

ALLOW, FORBID, REPLACE = "Allow", "Forbid", "Replace"
# kube-controller-manager accepts these macros on top of five-field expressions.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


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
    )


def fire_times(cron: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """Every scheduled time in [start, end), as aware datetimes; none when suspended."""
    if cron.suspend:
        return []
    expression = _MACROS.get(cron.schedule.strip(), cron.schedule)
    if not croniter.is_valid(expression):
        raise CronError(f"{cron.key}: schedule {cron.schedule!r} is not a cron expression")
    try:
        zone = ZoneInfo(cron.time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise CronError(f"{cron.key}: unknown timeZone {cron.time_zone!r}") from error
    # croniter walks wall-clock time in the zone (DST included); start just before `start`
    # so a run due exactly at `start` is kept.
    walker = croniter(expression, (start - timedelta(microseconds=1)).astimezone(zone))
    times: list[datetime] = []
    while True:
        moment: datetime = walker.get_next(datetime)
        if moment >= end:
            return times
        times.append(moment)


def job_name(cron: CronSpec, scheduled: datetime) -> str:
    """The controller's Job name: `<cronjob>-<scheduled time in minutes since the epoch>`."""
    return f"{cron.name}-{int(scheduled.timestamp() // 60)}"
