"""Which run a CronJob's controller will create next (`state.cron.next_created`), and so which
run the planner is told of (`Snapshot.expected`) and pre-warms for.

kube-controller-manager (pkg/controller/cronjob, `syncCronJob`): suspended, nothing; Forbid
with a Job active, nothing now, and the time missed is started when that Job ends unless
`startingDeadlineSeconds` has passed; Replace and Allow start the run on time whatever runs.
Live, `status.active` says a Job runs but not until when, so a Forbid CronJob with one
announces nothing; the replay knows when its runs end.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from lightsout.handlers import autoscale as autoscale_handlers
from lightsout.models.enums import Phase
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan
from lightsout.state import cron
from lightsout.state.build import CRONJOBS_KEY, GROUPS_KEY, MACHINES_KEY, snapshot_from
from lightsout.state.types import FINISH_BY, KUEUE_QUEUE, MAX_DELAY, Snapshot

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 2, 0, 50, tzinfo=UTC)
HOUR = timedelta(hours=1)
TOP = datetime(2026, 11, 2, 1, tzinfo=UTC)  # the next run of "0 * * * *" after NOW


def cronjob(policy: str = "Allow", active: int = 0, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "backup", "namespace": "ops"},
        "spec": {
            "schedule": "0 * * * *",
            "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}},
            **spec,
        },
        "status": {"active": [{"name": f"backup-{i}"} for i in range(active)]},
    }


def minutes(m: float) -> datetime:
    return NOW + timedelta(minutes=m)


@pytest.mark.parametrize(
    ("policy", "spec", "active", "expected"),
    [
        # Nothing active: the next scheduled time, on time, whatever the policy.
        ("Forbid", {}, (), (TOP, TOP)),
        ("Allow", {}, (), (TOP, TOP)),
        # Active, end unknown (live `status.active`): Forbid starts nothing that can be told.
        ("Forbid", {}, (None,), None),
        ("Forbid", {"startingDeadlineSeconds": 3600}, (None, None), None),
        # Allow runs alongside; Replace deletes the active Job and starts on time.
        ("Allow", {}, (None,), (TOP, TOP)),
        ("Replace", {}, (None,), (TOP, TOP)),
        ("Replace", {}, (minutes(40),), (TOP, TOP)),
        # The active run ends before the next time: that run, on time.
        ("Forbid", {}, (minutes(5),), (TOP, TOP)),
        # Ends at 01:20: 01:00 is not started then but at 01:20, under its own name...
        ("Forbid", {}, (minutes(30),), (TOP, minutes(30))),
        ("Forbid", {"startingDeadlineSeconds": 1200}, (minutes(30),), (TOP, minutes(30))),
        # ...unless its starting deadline has passed by then: 02:00 is next.
        ("Forbid", {"startingDeadlineSeconds": 60}, (minutes(30),), (TOP + HOUR, TOP + HOUR)),
        # Ends at 02:40, two times missed: only the last one, 02:00, is started (at 02:40).
        ("Forbid", {}, (minutes(110), minutes(20)), (TOP + HOUR, minutes(110))),
        # Suspended: nothing, active or not.
        ("Allow", {"suspend": True}, (), None),
        ("Forbid", {"suspend": True}, (minutes(5),), None),
    ],
)
def test_the_next_run_is_the_one_the_controller_will_create(
    policy: str,
    spec: dict[str, Any],
    active: tuple[datetime | None, ...],
    expected: tuple[datetime, datetime] | None,
) -> None:
    run = cron.next_created(cron.read(cronjob(policy, **spec)), NOW, active)
    assert (None if run is None else (run.scheduled, run.created)) == expected


def test_the_live_snapshot_announces_no_run_for_a_forbid_cronjob_whose_job_still_runs() -> None:
    running = snapshot_from({CRONJOBS_KEY: [cronjob("Forbid", active=1)]}, now=NOW)
    assert running.expected == ()
    # Replace and Allow create the run anyway; once the Job is gone, Forbid's is announced.
    for body in (cronjob("Replace", active=1), cronjob("Allow", active=1), cronjob("Forbid")):
        (announced,) = snapshot_from({CRONJOBS_KEY: [body]}, now=NOW).expected
        assert (announced.key.name, announced.at) == (f"backup-{int(TOP.timestamp() // 60)}", TOP)


def machine_off() -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": "m1"},
        "spec": {
            "desiredPowerState": "Off",
            "group": "lab",
            "kubernetesNodeName": "m1",
            "driver": {
                "wol": {
                    "macAddress": "02:00:00:00:00:01",
                    "ssh": {"host": "m1", "user": "lo", "privateKeySecretRef": {"name": "ssh"}},
                }
            },
            "resources": {"cpu": 4, "memory": "16Gi"},
        },
    }


@pytest.mark.parametrize(("policy", "power_ons"), [("Forbid", 0), ("Replace", 1)])
def test_the_planner_pre_warms_only_for_a_run_the_controller_will_create(
    policy: str, power_ons: int
) -> None:
    _, result = _plan_one_minute_before(cronjob(policy, active=1))
    assert len(result.power_on) == power_ons, result.actions


def _plan_one_minute_before(cron: dict[str, Any]) -> tuple[Snapshot, Plan]:
    """The snapshot and the plan, one minute before the CronJob's run (inside the lead time of
    an unlearned boot), of a Group whose one machine is Off."""
    objects = {
        GROUPS_KEY: [
            {
                "apiVersion": "lightsout.dev/v1alpha1",
                "kind": "Group",
                "metadata": {"name": "lab"},
                "spec": {"maxNodes": 5},
            }
        ],
        MACHINES_KEY: [machine_off()],
        CRONJOBS_KEY: [cron],
    }
    now = TOP - timedelta(minutes=1)
    snapshot = snapshot_from(objects, complete=True, now=now)
    machine = dataclasses.replace(snapshot.machines[0], phase=Phase.OFF)
    return snapshot, plan(dataclasses.replace(snapshot, machines=(machine,)), now)


def _as_indexed(body: dict[str, Any]) -> dict[str, Any]:
    """The CronJob as the operator's index keeps it (`handlers.autoscale.autoscaler_cronjobs`)."""
    kept = asyncio.run(autoscale_handlers.autoscaler_cronjobs(body=kopf.Body(body)))
    return dict(kept[None])


@pytest.mark.parametrize(
    ("annotations", "labels", "power_ons"),
    [
        # Its Jobs may wait 22 h: the webhook holds the run, nothing is pre-warmed for it.
        ({MAX_DELAY: "22h", "team": "ops"}, {"app": "backup"}, 0),
        ({FINISH_BY: "2026-11-03T06:00:00Z"}, {}, 0),
        # Kueue's Jobs are not held, nor a template without the annotations: pre-warmed.
        ({MAX_DELAY: "22h"}, {KUEUE_QUEUE: "batch"}, 1),
        ({"team": "ops"}, {}, 1),
    ],
)
def test_the_planner_pre_warms_no_run_the_webhook_will_hold(
    annotations: dict[str, str], labels: dict[str, str], power_ons: int
) -> None:
    body = cronjob()
    body["spec"]["jobTemplate"]["metadata"] = {"annotations": annotations, "labels": labels}
    indexed = _as_indexed(body)
    template = indexed["spec"]["jobTemplate"]["metadata"]
    assert "team" not in template["annotations"] and "app" not in template["labels"]
    snapshot, result = _plan_one_minute_before(indexed)
    assert len(snapshot.expected) == power_ons
    assert len(result.power_on) == power_ons, result.actions
