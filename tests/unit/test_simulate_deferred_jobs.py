"""Bare deferrable Jobs in the replay (`simulate.replay.deferred`): a trace pod whose line gives
its Job's annotations (`jobAnnotations`) comes with its Job, admitted as the webhook admits it
(`state.admission`), held and released at the cheap hour; Kueue's Jobs run at once; old lines
replay as before; `lightsout trace record` writes such lines and validation reads them. And
a held CronJob run is an active Job to its controller (Forbid waits, Replace deletes it)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout.simulate.analysis.optimum.windows import windows
from lightsout.simulate.analysis.report import summarise
from lightsout.simulate.analysis.sweep import has_deferrable
from lightsout.simulate.replay.engine import Options, Result, replay
from lightsout.simulate.traces.record import (
    Observed,
    Seen,
    build,
    cronjob_manifest,
    deferrable_job,
)
from lightsout.simulate.traces.trace import PODS_FILE, Trace, TracePod, load, write
from lightsout.simulate.traces.validate import validate
from lightsout.state.types import EXPECTED_DURATION, FINISH_BY, KUEUE_QUEUE, MAX_DELAY
from tests.unit.test_optimum_windows import group
from tests.unit.test_simulate import START, TRUTH, cronjob, node, pod_spec
from tests.unit.test_trace_record import END, _at, _machines, live_pod
from tests.unit.test_trace_record import START as RECORDED

pytestmark = pytest.mark.unit

#: 0.40 EUR/kWh, but 0.05 from 03:00 to 04:00 (UTC), then 0.40 again.
SERIES = "\n".join(
    f"{(START + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{0.05 if h == 3 else 0.40}"
    for h in range(8)
)
HELD = {MAX_DELAY: "6h", EXPECTED_DURATION: "30m"}
PRICES = {"configMapKeyRef": {"name": "prices", "key": "prices.csv"}}


def priced(
    pods: list[TracePod], cronjobs: tuple[dict[str, Any], ...] = (), hours: float = 8
) -> Trace:
    prices = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "prices", "labels": {"lightsout.dev/series": ""}},
        "data": {"prices.csv": SERIES},
    }
    return Trace(
        name="t",
        start=START,
        duration_seconds=hours * 3600,
        machines=(group(pricePerKWh=0.40, series=PRICES), node("m1")),
        cronjobs=cronjobs,
        configmaps=(prices,),
        pods=tuple(pods),
        durations={"m1": TRUTH},
        cron_run_seconds={"ops/backup": 600.0} if cronjobs else {},
    )


def job_pod(
    annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> TracePod:
    return TracePod(
        600,
        1800,
        "batch",
        "train-x7k2p",
        pod_spec(),
        "Job",
        "train",
        job_annotations=annotations or {},
        job_labels=labels or {},
    )


def started(result: Result) -> float:
    (pod,) = [p for p in result.pods if p.key.name == "train-x7k2p"]
    assert pod.started is not None
    return pod.started


def test_a_bare_deferrable_job_is_held_then_released_at_the_cheap_hour() -> None:
    result = replay(priced([job_pod(HELD)]))
    (run,) = result.deferred
    assert (run.key.namespace, run.key.name, run.cronjob) == ("batch", "train", None)
    assert run.created == 600
    assert run.released == 3 * 3600  # at the cheap hour, not at its arrival
    assert 3 * 3600 < started(result) < 3 * 3600 + 300  # once m1 has booted
    assert run.finished is not None and not run.missed
    held = summarise(result)
    assert held["deferred"] == {
        "runs": 1,
        "released": 1,
        "meanDelayHours": pytest.approx((run.released - 600) / 3600, abs=0.01),
        "maxDelayHours": pytest.approx((run.released - 600) / 3600, abs=0.01),
        "deadlinesMissed": 0,
    }
    at_once = replay(priced([job_pod(HELD)]), Options(defer=False))
    assert at_once.deferred == [] and started(at_once) < 600 + 120
    assert held["electricity"]["cost"] < summarise(at_once)["electricity"]["cost"]


def test_a_kueue_job_and_a_line_without_annotations_run_at_once() -> None:
    kueue = replay(priced([job_pod(HELD, {KUEUE_QUEUE: "team-a"})]))
    assert kueue.deferred == [] and started(kueue) < 600 + 120
    old = replay(priced([job_pod()]))  # an old trace's line: no jobAnnotations
    assert old.deferred == [] and started(old) == started(kueue)


def test_a_finish_by_deadline_is_absolute() -> None:
    deadline = (START + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = replay(priced([job_pod({FINISH_BY: deadline, EXPECTED_DURATION: "30m"})]))
    (run,) = result.deferred
    assert run.deadline == START + timedelta(hours=2)
    # No cheaper hour before the deadline: it must not wait past it less its run.
    assert run.released is not None and run.released <= 2 * 3600 - 1800
    assert not run.missed


def test_old_lines_are_written_as_before_and_new_ones_read_back(tmp_path: Path) -> None:
    root = write(priced([job_pod(), job_pod(HELD, {KUEUE_QUEUE: "q"})]), tmp_path / "t")
    lines = [json.loads(line) for line in (root / PODS_FILE).read_text().splitlines()]
    assert "jobAnnotations" not in lines[0] and "jobLabels" not in lines[0]
    assert lines[1]["jobAnnotations"] == HELD and lines[1]["jobLabels"] == {KUEUE_QUEUE: "q"}
    assert validate(root) == []
    back = load(root)
    assert [dict(p.job_annotations) for p in back.pods] == [{}, HELD]


def test_a_recorded_deferrable_job_arrives_when_its_job_was_created(tmp_path: Path) -> None:
    job = {
        "metadata": {
            "name": "train",
            "namespace": "shop",
            "creationTimestamp": _at(20),
            "annotations": {MAX_DELAY: "8h", "lightsout.dev/deferred": "true", "note": "x"},
            "labels": {"team": "ml"},
        },
        "spec": {"suspend": False},
    }
    # Released at 200 s: its pod was created then, and ran from 210 s to 300 s.
    pod = live_pod("train-abcde", created=200, started=210, finished=300, owner=("Job", "train"))
    web = live_pod("web")
    found = deferrable_job(job)
    assert found is not None and dict(found.annotations) == {MAX_DELAY: "8h"}
    assert deferrable_job(live_pod("plain")) is None
    observed = Observed(
        start=RECORDED,
        end=END,
        machines=_machines(),
        cronjobs=(),
        pods=(Seen(pod), Seen(web)),
        cronjobs_of_jobs={("shop", "train"): None},
        deferrable_jobs={("shop", "train"): found},
    )
    trace = build("mine", observed)
    line = next(p for p in trace.pods if p.name == "train-abcde")
    assert (line.at, line.run_seconds, dict(line.job_annotations)) == (20, 90, {MAX_DELAY: "8h"})
    assert dict(line.job_labels) == {}
    assert not next(p for p in trace.pods if p.name == "web").job_annotations
    write(trace, tmp_path / "mine")
    assert validate(tmp_path / "mine") == []
    assert load(tmp_path / "mine").pods == tuple(sorted(trace.pods, key=lambda p: p.at))
    (run,) = replay(load(tmp_path / "mine")).deferred  # no prices: released at once
    assert (run.key.name, run.created) == ("train", 20)


def test_a_recorded_cronjob_keeps_its_template_s_deferral() -> None:
    live = cronjob("0 18 * * *")
    template = live["spec"]["jobTemplate"]
    template["metadata"] = {
        "annotations": {MAX_DELAY: "22h", "kubectl.kubernetes.io/last-applied": "{}"},
        "labels": {KUEUE_QUEUE: "q", "app": "backup"},
    }
    cleaned = cronjob_manifest(live)["spec"]["jobTemplate"]
    assert cleaned["metadata"] == {
        "annotations": {MAX_DELAY: "22h"},
        "labels": {KUEUE_QUEUE: "q"},
    }
    assert "metadata" not in cronjob_manifest(cronjob("0 18 * * *"))["spec"]["jobTemplate"]


def _line(**fields: Any) -> str:
    base: dict[str, Any] = {
        "at": 0,
        "runSeconds": 60,
        "namespace": "batch",
        "name": "p",
        "owner": {"kind": "Job", "name": "train"},
        "spec": pod_spec(),
    }
    return json.dumps(base | fields)


def test_a_pod_lines_job_annotations_are_checked_each_with_its_field(tmp_path: Path) -> None:
    root = write(priced([]), tmp_path / "t")
    lines = [
        _line(jobAnnotations={MAX_DELAY: "later"}),
        _line(jobAnnotations={FINISH_BY: "tomorrow"}),
        _line(owner={"kind": "ReplicaSet", "name": "web"}, jobAnnotations={MAX_DELAY: "1h"}),
        _line(jobLabels=["q"]),
        _line(jobAnnotations={MAX_DELAY: "2h"}, jobLabels={KUEUE_QUEUE: "q"}),
    ]
    (root / PODS_FILE).write_text("\n".join(lines) + "\n")
    said = [(p.obj.split(":")[0], p.field, p.message) for p in validate(root)]
    path = str(root / PODS_FILE)
    assert [(p.file.removeprefix(path), p.field) for p in validate(root)] == [
        (":1", f"jobAnnotations.{MAX_DELAY}"),
        (":2", f"jobAnnotations.{FINISH_BY}"),
        (":3", "jobAnnotations"),
        (":4", "jobLabels"),
    ], said
    messages = [m for _, _, m in said]
    assert "'later' is not a duration" in messages[0]
    assert messages[1] == "'tomorrow' is not an RFC 3339 time"
    assert messages[2] == "only for a Job's pod (owner.kind Job): its Job's"
    assert messages[3] == "must be an object of strings, as metadata.labels"


# --- a held CronJob run is an active Job to its controller --------------------------------


def held_cronjob(policy: str, **spec: Any) -> dict[str, Any]:
    """Runs at 00:00 and 00:20 that may each wait 6 h: the first is held for 03:00."""
    body = cronjob("0,20 0 * * *", policy, **spec)
    body["spec"]["jobTemplate"]["metadata"] = {"annotations": HELD}
    return body


def test_forbid_skips_a_run_due_while_the_previous_one_is_held() -> None:
    result = replay(priced([], (held_cronjob("Forbid", startingDeadlineSeconds=300),)))
    assert [r.key.name for r in result.deferred] == ["backup-29892960"]
    assert result.skipped_cron_runs == 1  # 00:20: the 00:00 Job was active, suspended
    assert summarise(result)["deferred"]["deadlinesMissed"] == 0


def test_forbid_starts_the_missed_run_late_when_the_held_one_ends() -> None:
    result = replay(priced([], (held_cronjob("Forbid"),)))
    first, late = result.deferred
    assert first.finished is not None and late.created == first.finished
    assert result.late_cron_runs == 1 and result.skipped_cron_runs == 0


def test_allow_holds_both_runs_and_replace_deletes_the_held_one() -> None:
    allowed = replay(priced([], (held_cronjob("Allow"),)))
    assert len(allowed.deferred) == 2 and allowed.skipped_cron_runs == 0
    replaced = replay(priced([], (held_cronjob("Replace"),)))
    first, second = replaced.deferred
    assert (first.deleted, first.released, replaced.replaced_cron_runs) == (1200, None, 1)
    assert second.finished is not None
    assert summarise(replaced)["deferred"]["deadlinesMissed"] == 0


def test_the_optimum_and_the_sweep_know_a_bare_deferrable_job() -> None:
    held, kueue = job_pod(HELD), job_pod(HELD, {KUEUE_QUEUE: "q"})
    (window,) = windows(priced([held]), 60.0)
    # Its deadline (600 s + 6 h) less its 1800 s run, as a held CronJob run's.
    assert (window.deferred, window.earliest, window.latest) == (True, 600, 600 + 6 * 3600 - 1800)
    (at_once,) = windows(priced([held]), 60.0, defer=False)
    (queued,) = windows(priced([kueue]), 60.0)
    assert not at_once.deferred and not queued.deferred and queued.latest == 660
    assert has_deferrable(priced([held])) and not has_deferrable(priced([kueue, job_pod()]))


# --- a held CronJob run is not pre-warmed ------------------------------------------------


def test_a_deferrable_cronjob_run_is_not_pre_warmed_only_powered_on_for_its_cheap_hour() -> None:
    """The 01:00 run is held for 03:00: its machine stays off until then and is powered on
    once, not also a boot before 01:00 (to idle for a pod the webhook holds, then power off)."""
    body = cronjob("0 1 * * *")
    body["spec"]["jobTemplate"]["metadata"] = {"annotations": HELD}
    result = replay(priced([], (body,)))
    (run,) = result.deferred
    assert run.released == 3 * 3600
    (m1,) = result.machines
    assert m1.power_ons == 1 and m1.power_on_times[0] >= run.released
    # Without its deferral annotations the same run is pre-warmed: powered on before 01:00.
    (plain,) = replay(priced([], (cronjob("0 1 * * *"),))).machines
    assert plain.power_on_times[0] < 3600
