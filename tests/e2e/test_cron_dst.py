"""The lab's real kube-controller-manager on daylight-saving nights creates exactly the Jobs
Lights-Out announces for them (`lightsout.state.cron`, the replay's and the pre-warming's code).

The lab cannot move its clock, so the nights are brought to it: made-up time zones, compiled
with `zic` into the lab's `zoneinfo/` directory (Go's `ZONEINFO`: kube-apiserver and
kube-controller-manager look there before the system's zones, so no other zone changes), whose
offsets are chosen so that the transitions come a few minutes after the test starts, at 02:00
local time as on a real night:

- `spring`: at T1 (the next whole minute at least 90 s away) 01:59:59 is followed by 03:00;
- `fall`: at T2 = T1 + 2 min 01:59:59 is followed by 01:00 again (the 01:00 before it came
  an hour before the test);
- `short`: at T2 01:59:59 is followed by 01:58, so the repeated minutes fit in the test.

CronJobs in those zones, with the runs the controller was seen to create before T2 + 1 min:
`spring` `0 2 * * *` none (croniter, which Lights-Out used before, ran it at T1) and
`0 3 * * *` at T1; `fall` `0 1 * * *` at T2 (its second 01:00) and `59 1 * * *` at T2 - 1 min
(its first 01:59); `short` `58 1 * * *` twice, at T1 and T2; `spring` `* * * * *` every minute.

Once `* * * * *` has its Job for T2 + 1 min (every earlier run is due before it), each
CronJob's Jobs up to T2 must be exactly those `cron.fire_times` gives, the zones read from the
same files, and named as `cron.job_name` names them. The Jobs have `parallelism: 0`, so no pod
is created. The test takes four to five minutes.

(A transition not at a whole hour behaves differently: robfig/cron's `Next` re-checks the hour
only when the minute wraps to 0, so a run at a wall-clock minute skipped by a jump at hh:36
still happens, an hour late. The controller did that in a first version of this test, and
`cron.fire_times` agreed with it.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout.state import cron
from lightsout_lab import Cluster
from tests.harness.wait import get_json, wait_for

#: Seconds the controller may take to create a due Job, at most.
PATIENCE = 120


def _minute_after(moment: datetime, at_least: timedelta) -> datetime:
    later = moment + at_least
    return later.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _offset(minutes: int) -> str:
    """A UTC offset as zic writes it, e.g. `-9:24`."""
    sign = "-" if minutes < 0 else ""
    return f"{sign}{abs(minutes) // 60}:{abs(minutes) % 60:02d}"


def _before(transition: datetime) -> int:
    """The offset (minutes, within +-12 h) that shows `transition` as 02:00 local time."""
    minutes = (120 - transition.hour * 60 - transition.minute) % 1440
    return minutes - 1440 if minutes > 720 else minutes


@dataclass(frozen=True)
class Night:
    """The made-up zones' names (by kind of night) and their transition times."""

    zones: dict[str, str]
    spring: datetime
    fall: datetime


@pytest.fixture
def night(cluster: Cluster, tmp_path: Path) -> Iterator[Night]:
    """The zones, compiled into the lab's zone directory and put on Python's zone path."""
    if not cluster.zoneinfo.is_dir():
        pytest.fail(f"{cluster.directory} was started without a zoneinfo directory: restart it")
    zic = shutil.which("zic") or pytest.fail("zic is needed (Debian: libc-bin)")
    # The test's CronJobs must exist before the first transition: one `kubectl apply` of six
    # takes seconds on an idle machine and tens of them on a loaded one.
    spring = _minute_after(datetime.now(UTC), timedelta(seconds=90))
    fall = spring + timedelta(minutes=2)
    tag = uuid.uuid4().hex[:8]
    zones = {kind: f"LightsOut/{kind}{tag}" for kind in ("spring", "fall", "short")}
    lines = []
    for kind, at, change in (("spring", spring, 60), ("fall", fall, -60), ("short", fall, -2)):
        before = _before(at)
        lines += [
            f"Zone {zones[kind]} {_offset(before)} - LOA {at:%Y %b %d %H:%M}u",
            f"\t{_offset(before + change)} - LOB",
        ]
    source = tmp_path / "zones.txt"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run([zic, "-d", str(cluster.zoneinfo), str(source)], check=True)
    path = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=(str(cluster.zoneinfo), *path))
    try:
        yield Night(zones, spring, fall)
    finally:
        # The zone files stay: the controller reads them until the namespace's CronJobs go.
        zoneinfo.reset_tzpath(to=path)


def cronjob(name: str, schedule: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "timeZone": zone,
            "jobTemplate": {
                "spec": {
                    "parallelism": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "run", "image": "busybox"}],
                        }
                    },
                }
            },
        },
    }


def jobs_of(cluster: Cluster, namespace: str) -> dict[str, set[int]]:
    """Each CronJob's Jobs, as the minutes since the epoch in their names."""
    found: dict[str, set[int]] = {}
    for job in (get_json(cluster, "jobs", "-n", namespace) or {"items": []})["items"]:
        for owner in job["metadata"].get("ownerReferences", []):
            found.setdefault(owner["name"], set()).add(int(job["metadata"]["name"].rsplit("-")[-1]))
    return found


def minutes(moment: datetime) -> int:
    return int(moment.timestamp() // 60)


def test_the_controller_creates_the_runs_lights_out_announces(
    cluster: Cluster, namespace: str, night: Night
) -> None:
    spring, fall = night.spring, night.fall
    manifests = [
        cronjob("spring-0200", "0 2 * * *", night.zones["spring"]),
        cronjob("spring-0300", "0 3 * * *", night.zones["spring"]),
        cronjob("spring-every", "* * * * *", night.zones["spring"]),
        cronjob("fall-0100", "0 1 * * *", night.zones["fall"]),
        cronjob("fall-0159", "59 1 * * *", night.zones["fall"]),
        cronjob("short-0158", "58 1 * * *", night.zones["short"]),
    ]
    listed = {"apiVersion": "v1", "kind": "List", "items": manifests}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(listed))
    assert datetime.now(UTC) < spring, "the CronJobs came after the first transition"
    end = fall

    def past_the_night() -> dict[str, set[int]] | None:
        jobs = jobs_of(cluster, namespace)
        return jobs if minutes(end) + 1 in jobs.get("spring-every", set()) else None

    seen = wait_for(
        past_the_night,
        timeout=(end - datetime.now(UTC)).total_seconds() + 60 + PATIENCE,
        what=f"the controller's run of `spring-every` at {end + timedelta(minutes=1)}",
    )

    created: dict[str, list[str]] = {}
    announced: dict[str, list[str]] = {}
    for manifest in manifests:
        name = manifest["metadata"]["name"]
        live = get_json(cluster, "cronjob", "-n", namespace, name)
        spec = cron.read(live)
        since = datetime.fromisoformat(live["metadata"]["creationTimestamp"])
        runs = cron.fire_times(spec, since + timedelta(microseconds=1), end + timedelta(seconds=1))
        announced[name] = sorted(cron.job_name(spec, t) for t in runs)
        created[name] = sorted(f"{name}-{m}" for m in seen.get(name, set()) if m <= minutes(end))
    assert created == announced
    at = {
        "spring-0200": [],
        "spring-0300": [spring],
        "fall-0100": [fall],
        "fall-0159": [fall - timedelta(minutes=1)],
        "short-0158": [spring, fall],
    }
    assert {name: created[name] for name in at} == {
        name: [f"{name}-{minutes(t)}" for t in times] for name, times in at.items()
    }
