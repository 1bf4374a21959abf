"""Deferrable Jobs (`planning.autoscaler.deferral`, `state.jobs`, the plan applier): a suspended
Job that may wait is released at the start its machines' tariff prices lowest, never so late
that it misses its deadline, and at once whenever waiting cannot be priced.

Same style as `test_autoscale_prewarm`: raw API objects through `snapshot_from` and `plan`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from lightsout.actuation.memory import MemoryScale
from lightsout.actuation.plans import PlanApplier
from lightsout.models.group import Electricity
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan
from lightsout.planning.autoscaler.deferral import MARGIN
from lightsout.planning.autoscaler.report import as_json, render_text
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.state.types import ObjectKey
from tests.unit.test_autoscale_objects import (
    APPS,
    at,
    group,
    machine,
    ons,
    ready_machine,
    snap,
    ts,
)

pytestmark = pytest.mark.unit

#: 0.30 a kWh, but 0.10 from 14:00 to 16:00 (UTC) every day; T0 is 12:00.
AFTERNOON = {
    "pricePerKWh": 0.30,
    "rates": [{"from": "14:00", "to": "16:00", "pricePerKWh": 0.10}],
}
CHEAP_AT = at(2 * 3600)
KEY = ObjectKey(APPS, "backup")

Obj = dict[str, Any]


def job(
    name: str = "backup",
    *,
    annotations: dict[str, str] | None = None,
    suspend: bool = True,
    labels: dict[str, str] | None = None,
    cronjob: str | None = None,
    ran: tuple[float, float] | None = None,
    cpu: str = "1",
) -> Obj:
    """A Job created at T0 (or `ran`: started and completed at those seconds after T0)."""
    meta: Obj = {
        "name": name,
        "namespace": APPS,
        "uid": f"uid-{name}",
        "creationTimestamp": ts(at(0)),
        "annotations": annotations
        if annotations is not None
        else {
            "lightsout.dev/finish-by": ts(at(6 * 3600)),
            "lightsout.dev/expected-duration": "30m",
        },
    }
    if labels:
        meta["labels"] = labels
    if cronjob:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "CronJob", "name": cronjob, "controller": True}
        ]
    status: Obj = {}
    if ran is not None:
        status = {
            "startTime": ts(at(ran[0])),
            "completionTime": ts(at(ran[1])),
            "conditions": [{"type": "Complete", "status": "True"}],
        }
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"suspend": suspend, "template": {"spec": {"containers": [container]}}},
        "status": status,
    }


def fleet(electricity: Obj | None = None) -> list[Any]:
    """One NUC (50 W busy, boots in 120 s), off, in a Group with `electricity`."""
    return [
        group(electricity=electricity if electricity is not None else AFTERNOON),
        machine("nuc", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]


def planned(*objects: Any, now: float = 0) -> Plan:
    return plan(snap(*objects), at(now))


def released(result: Plan) -> dict[str, str]:
    return {r.job.name: r.reason for r in result.releases}


def test_a_job_waits_for_the_cheap_hours_and_its_machine_stays_off() -> None:
    result = planned(*fleet(), job())
    wait = result.waits[KEY]
    assert wait.start == CHEAP_AT
    assert "starts at 2026-03-01T14:00:00Z" in wait.reason
    assert "runs 30 min (lightsout.dev/expected-duration)" in wait.reason
    assert not result.releases and ons(result) == []
    # The planner wakes for it without any change in the cluster.
    snapshot = snap(*fleet(), job())
    assert next_wake(snapshot, result, at(0)) == CHEAP_AT
    assert "1 held for cheaper hours" in result.summary


def test_at_the_cheap_hour_it_is_released() -> None:
    result = planned(*fleet(), job(), now=2 * 3600)
    assert "now is its cheapest start" in released(result)["backup"]
    assert not result.waits


def test_a_deadline_without_slack_runs_at_once() -> None:
    # 30 min of run and 2 of boot, 10 of margin: a deadline 40 min away leaves none.
    tight = {"lightsout.dev/finish-by": ts(at(40 * 60)), "lightsout.dev/expected-duration": "30m"}
    result = planned(*fleet(), job(annotations=tight))
    assert "must start now" in released(result)["backup"]
    # The latest start is honoured to the second: deadline - margin - boot - run.
    roomy = {"lightsout.dev/max-delay": "3h", "lightsout.dev/expected-duration": "90m"}
    wait = planned(*fleet(), job(annotations=roomy)).waits[KEY]
    latest = at(3 * 3600) - MARGIN - timedelta(seconds=120 + 90 * 60)
    assert wait.start == latest  # ends as close to the cheap hours as it may


@pytest.mark.parametrize("margin", [0, 600, 1800, None])
def test_the_margin_is_the_groups_setting_and_a_larger_one_releases_earlier(
    margin: int | None,
) -> None:
    # The cheap hours (14:00) are past the latest start of a 90-min run due in 3 h: it starts
    # as late as it may, which is earlier the larger the Group's margin (10 min when unset).
    electricity = dict(AFTERNOON)
    if margin is not None:
        electricity["deferralMarginSeconds"] = margin
    roomy = {"lightsout.dev/max-delay": "3h", "lightsout.dev/expected-duration": "90m"}
    wait = planned(*fleet(electricity), job(annotations=roomy)).waits[KEY]
    kept = MARGIN if margin is None else timedelta(seconds=margin)
    assert wait.start == at(3 * 3600) - kept - timedelta(seconds=120 + 90 * 60)


def test_a_job_whose_slack_is_below_the_margin_runs_at_once() -> None:
    # 30 min of run and 2 of boot, due at 14:52: with the default 10 min it can wait for the
    # cheap hours at 14:00 (latest start 14:10); with a 3-hour margin it must start now.
    due = {
        "lightsout.dev/finish-by": ts(at(2 * 3600 + 52 * 60)),
        "lightsout.dev/expected-duration": "30m",
    }
    assert planned(*fleet(), job(annotations=due)).waits[KEY].start == CHEAP_AT
    wide = {**AFTERNOON, "deferralMarginSeconds": 3 * 3600}
    reason = released(planned(*fleet(wide), job(annotations=due)))["backup"]
    assert reason == (
        "released at once: to finish by 2026-03-01T14:52:00Z with 180 min to spare it must "
        "start now"
    )


def test_machines_of_several_groups_take_the_largest_margin() -> None:
    roomy = {"lightsout.dev/max-delay": "3h", "lightsout.dev/expected-duration": "90m"}
    objects = [
        group(electricity={**AFTERNOON, "deferralMarginSeconds": 0}),
        machine("nuc", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        group("attic", electricity={**AFTERNOON, "deferralMarginSeconds": 1800}),
        machine("nuc-2", group="attic", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    wait = planned(*objects, job(annotations=roomy)).waits[KEY]
    assert wait.start == at(3 * 3600) - timedelta(seconds=1800 + 120 + 90 * 60)


def test_a_margin_beyond_a_day_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as refused:
        Electricity.model_validate({"pricePerKWh": 0.3, "deferralMarginSeconds": 86_401})
    (error,) = refused.value.errors()
    assert error["loc"] == ("deferralMarginSeconds",)
    assert "less than or equal to 86400" in error["msg"]
    assert Electricity.model_validate({"pricePerKWh": 0.3}).deferral_margin_seconds == 600


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({"lightsout.dev/finish-by": "tomorrow"}, "lightsout.dev/finish-by: 'tomorrow' is not"),
        ({"lightsout.dev/max-delay": "soon"}, "lightsout.dev/max-delay: 'soon' is not a duration"),
        (
            {"lightsout.dev/max-delay": "8h", "lightsout.dev/expected-duration": "-1"},
            "lightsout.dev/expected-duration:",
        ),
        ({"lightsout.dev/max-delay": "8h"}, "its run time is unknown"),
    ],
)
def test_what_cannot_be_read_runs_at_once_and_says_why(
    annotations: dict[str, str], says: str
) -> None:
    result = planned(*fleet(), job(annotations=annotations))
    assert says in released(result)["backup"]


def test_one_price_at_every_hour_leaves_nothing_to_wait_for() -> None:
    result = planned(*fleet({"pricePerKWh": 0.3}), job())
    assert "one price at every hour" in released(result)["backup"]


def test_no_machine_that_fits_releases_it_so_kubernetes_says_why() -> None:
    result = planned(*fleet(), job(cpu="64"))
    assert "no machine could run it" in released(result)["backup"]


def test_a_cronjobs_earlier_runs_teach_its_duration() -> None:
    nightly = {"lightsout.dev/max-delay": "6h"}
    earlier = [
        job(f"nightly-{i}", annotations=nightly, suspend=False, cronjob="nightly", ran=run)
        for i, run in enumerate(((-90000, -88800), (-3600, -1200), (-7200, -5400)))
    ]
    result = planned(*fleet(), *earlier, job(annotations=nightly, cronjob="nightly"))
    wait = result.waits[KEY]
    assert wait.start == CHEAP_AT
    assert "runs 30 min (learned from 3 earlier run(s) of CronJob apps/nightly)" in wait.reason


def test_only_suspended_unfinished_jobs_of_ours_are_held() -> None:
    kueue = job("kueued", labels={"kueue.x-k8s.io/queue-name": "batch"})
    running = job("running", suspend=False)
    plain = job("plain", annotations={})
    snapshot = snap(*fleet(), kueue, running, plain)
    assert snapshot.deferred == ()


def test_a_machine_already_on_does_not_change_the_cheapest_hour() -> None:
    # The cost counts the machine's draw for the run wherever it runs: a Ready machine is
    # no reason to run in the dear hours.
    objects = [group(electricity=AFTERNOON), *ready_machine("nuc", watts=(50, 10, 2))]
    assert planned(*objects, job()).waits[KEY].start == CHEAP_AT


def test_the_applier_releases_marks_and_says_it_once() -> None:
    snapshot = snap(*fleet(), job())
    port = MemoryScale(machines={}, jobs={KEY: "uid-backup"})
    applier = PlanApplier()
    held = plan(snapshot, at(0))
    applier.apply(port, snapshot, held, at(0))
    applier.apply(port, snapshot, plan(snapshot, at(60)), at(60))
    assert port.job_starts == {KEY: "2026-03-01T14:00:00Z"}
    deferred = [e for kind, key, e in port.events if (kind, key) == ("Job", KEY)]
    assert [e.reason for e in deferred] == ["Deferred"]  # a repeated plan posts nothing new
    applier.apply(port, snapshot, plan(snapshot, CHEAP_AT), CHEAP_AT)
    assert port.released == [KEY] and port.job_starts == {}
    assert [e.reason for _, _, e in port.events][-1] == "Released"
    # In dry run nothing is released; the event says what would be.
    dry = MemoryScale(machines={}, jobs={KEY: "uid-backup"})
    PlanApplier(dry_run=True).apply(dry, snapshot, plan(snapshot, CHEAP_AT), CHEAP_AT)
    assert dry.released == [] and [e.reason for _, _, e in dry.events] == ["DryRunRelease"]


def test_lightsout_plan_shows_each_held_job_and_when_it_starts() -> None:
    snapshot = snap(*fleet(), job())
    result = plan(snapshot, at(0))
    text = render_text(snapshot, result, at(0))
    assert "Deferrable Jobs:" in text and "apps/backup: held for cheaper electricity" in text
    (entry,) = as_json(snapshot, result, at(0))["jobs"]
    assert entry["start"] == CHEAP_AT.isoformat() and entry["release"] is False


def test_the_backup_of_docs_cheap_hours_starts_at_the_night_rate() -> None:
    """docs/cheap-hours.md's example, figure for figure."""
    berlin = ZoneInfo("Europe/Berlin")
    created = datetime(2026, 12, 1, 18, 0, tzinfo=berlin).astimezone(UTC)  # a Tuesday
    tariff = {
        "pricePerKWh": 0.32,
        "timeZone": "Europe/Berlin",
        "rates": [
            {"days": ["sat", "sun"], "pricePerKWh": 0.27},
            {"from": "22:00", "to": "06:00", "pricePerKWh": 0.21},
        ],
    }
    backup = job(
        annotations={"lightsout.dev/max-delay": "8h", "lightsout.dev/expected-duration": "45m"}
    )
    backup["metadata"]["creationTimestamp"] = ts(created)
    nuc = machine("nuc", watts=(60, 10, 2), learned={"bootSeconds": 120})
    wait = plan(snap(group(electricity=tariff), nuc, backup), created).waits[KEY]
    assert wait.reason == (
        "held for cheaper electricity: starts at 2026-12-01T21:00:00Z (0.0099 EUR on machine "
        "nuc); runs 45 min (lightsout.dev/expected-duration), done by 2026-12-02T01:00:00Z at "
        "the latest"
    )
