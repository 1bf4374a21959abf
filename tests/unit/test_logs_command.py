"""`lightsout logs` (`commands.logs`): which Job and pod it reads, and how a runner line reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lightsout.commands.logs import header, last_job, last_pod, render
from lightsout.execution.jobs import job_labels

pytestmark = pytest.mark.unit


def job(action: str, generation: int, attempt: int, created: str, **status: Any) -> dict[str, Any]:
    name = f"lo-box-{action}-g{generation}-a{attempt}"
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": job_labels("box", action, generation, attempt),
        },
        "status": status,
    }


def test_the_last_job_is_the_newest_and_action_picks_the_newest_of_that_kind() -> None:
    startup = job("startup", 2, 1, "2026-11-24T10:00:00Z")
    retry = job("startup", 2, 2, "2026-11-24T10:00:00Z")  # same second: the later attempt
    shutdown = job("shutdown", 3, 1, "2026-11-24T11:00:00Z")
    unlabelled = {"metadata": {"name": "x", "creationTimestamp": "2026-11-24T12:00:00Z"}}
    jobs = [startup, shutdown, retry, unlabelled]

    assert last_job(jobs, None) is shutdown
    assert last_job(jobs, "startup") is retry
    assert last_job(jobs, "provision") is None
    assert last_job([], None) is None


def test_the_last_pod_is_the_jobs_newest() -> None:
    first = {"metadata": {"name": "a", "creationTimestamp": "2026-11-24T10:00:00Z"}}
    second = {"metadata": {"name": "b", "creationTimestamp": "2026-11-24T10:01:00Z"}}
    assert last_pod([second, first]) is second
    assert last_pod([]) is None


def test_header_names_the_action_its_result_the_job_and_the_pod() -> None:
    failed = job("shutdown", 3, 1, "T", conditions=[{"type": "Failed", "status": "True"}])
    pod = {"metadata": {"name": "lo-box-shutdown-g3-a1-xyz", "creationTimestamp": "T"}}
    assert header(failed, pod) == (
        "# shutdown Failed: job lo-box-shutdown-g3-a1, pod lo-box-shutdown-g3-a1-xyz (created T)"
    )
    assert header(job("startup", 2, 1, "T"), pod).startswith("# startup Running:")


def test_runner_lines_read_as_play_task_and_recap_other_lines_unchanged() -> None:
    lines = [
        {"ts": "2026-11-24T19:01:56.101+00:00", "level": "info", "event": "play", "play": "P"},
        {
            "ts": "2026-11-24T19:01:57.5+00:00",
            "level": "info",
            "event": "task",
            "task": "T",
            "status": "ok",
        },
        {
            "ts": "2026-11-24T19:02:24.630+00:00",
            "level": "error",
            "event": "task",
            "task": "Fail with the BMC's answer",
            "status": "failed",
            "role": "redfish_power",
            "msg": "HTTP 400: refused",
            "ignored": False,
        },
        {"ts": "2026-11-24T19:02:25.0+00:00", "level": "info", "event": "stats", "failures": 1},
    ]
    raw = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n"
    assert render(raw.encode()).splitlines() == [
        "19:01:56  PLAY      P",
        "19:01:57  ok        T",
        "19:02:24  FAILED    redfish_power : Fail with the BMC's answer: HTTP 400: refused",
        "19:02:25  RECAP     failures=1",
        "not json",
    ]
