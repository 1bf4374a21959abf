"""`lightsout trace record`'s pure part (`simulate.traces.record`): durations as typed on the
command line, a live pod turned into a trace line (arrival, run time, scheduling spec, origin),
CronJob runs told apart, machines and CronJobs cleaned, and the whole trace written in the one
format the simulator reads back. The watching itself is proven end to end
(tests/e2e/test_trace_record.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout.execution import jobs
from lightsout.simulate.replay.engine import Options, replay
from lightsout.simulate.traces.record import (
    OPERATOR,
    OPERATOR_LABEL,
    Observed,
    Origin,
    Seen,
    build,
    cronjob_manifest,
    learned_durations,
    origin,
    recorded_truth,
    run_window,
    scheduling_spec,
    trace_pod,
)
from lightsout.simulate.traces.trace import Durations, load, write
from lightsout.simulate.traces.validate import validate
from lightsout.state.parse import parse_duration

pytestmark = pytest.mark.unit

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
            ]
        }
    }
}
START = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
END = START + timedelta(minutes=10)


def _at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def live_pod(
    name: str,
    *,
    created: float = 30,
    started: float | None = 40,
    finished: float | None = 100,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the API returns it, with what a real one carries that no trace should."""
    state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
    if started is not None:
        state = {"running": {"startedAt": _at(started)}}
        if finished is not None:
            state = {
                "terminated": {"startedAt": _at(started), "finishedAt": _at(finished)},
            }
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "shop",
        "uid": f"uid-{name}",
        "creationTimestamp": _at(created),
        "labels": labels or {},
    }
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/shop:1",
                    "command": ["serve"],
                    "env": [{"name": "DB_PASSWORD", "value": "hunter2"}],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "1Gi", "example.com/gpu": "1"}
                    },
                }
            ],
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "affinity": AFFINITY,
            "volumes": [{"name": "creds", "secret": {"secretName": "db"}}],
            "serviceAccountName": "shop",
        },
        "status": {"phase": "Running", "containerStatuses": [{"name": "main", "state": state}]},
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("2h", 7200), ("7d", 604800), ("1h30m", 5400), ("45", 45)],
)
def test_durations_read_as_typed(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "5x", "m5", "0s", "-3", "1h 30m"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_a_pod_becomes_a_line_with_its_arrival_run_time_and_only_its_scheduling_fields() -> None:
    line = trace_pod(Seen(live_pod("web")), Origin(), START, END)
    assert line is not None
    assert (line.at, line.run_seconds, line.namespace, line.name) == (30, 60, "shop", "web")
    assert line.spec == {
        "containers": [
            {
                "name": "main",
                "resources": {"requests": {"cpu": "2", "memory": "1Gi", "example.com/gpu": "1"}},
            }
        ],
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "affinity": AFFINITY,
    }
    # No image, command, env value, volume or service account of the cluster's.
    assert "hunter2" not in repr(line) and "registry" not in repr(line)
    assert (line.owner_kind, line.owner_name) == (None, None)


def test_the_run_ends_where_it_was_seen_to_and_what_is_unfinished_is_told_so() -> None:
    # Deleted while running: the run ends when the recorder saw it going.
    deleted = Seen(live_pod("web", finished=None), gone=START + timedelta(seconds=250))
    assert run_window(deleted, START, END) == (30, 210)
    # Still running at the end: what it ran until then.
    assert run_window(Seen(live_pod("web", finished=None)), START, END) == (30, 560)
    # Never started: it asked for capacity from its arrival to the end.
    assert run_window(Seen(live_pod("web", started=None)), START, END) == (30, 570)
    # Deleted before it ran: a zero-length run.
    gone = START + timedelta(seconds=50)
    assert run_window(Seen(live_pod("web", started=None), gone=gone), START, END) == (30, 0)
    # There before the recording: it arrives at 0 and runs for what was left of its run.
    assert run_window(Seen(live_pod("old", created=-300, started=-290)), START, END) == (0, 100)
    # Over before the recording started: not part of it.
    over = live_pod("done", created=-300, started=-290, finished=-10)
    assert run_window(Seen(over), START, END) is None


def test_origin_comes_from_owner_references_and_a_cronjobs_job_makes_a_run() -> None:
    jobs_seen = {("shop", "nightly-29012345"): "nightly", ("shop", "migrate"): None}
    replica = live_pod(
        "api-7d9f-x2", owner=("ReplicaSet", "api-7d9f"), labels={"pod-template-hash": "7d9f"}
    )
    assert origin(replica, jobs_seen) == Origin("ReplicaSet", "api")  # the Deployment's name
    plain_rs = live_pod("rs-x", owner=("ReplicaSet", "legacy"))
    assert origin(plain_rs, jobs_seen) == Origin("ReplicaSet", "legacy")
    job = live_pod("migrate-abc", owner=("Job", "migrate"))
    assert origin(job, jobs_seen) == Origin("Job", "migrate")
    run = live_pod("nightly-29012345-q", owner=("Job", "nightly-29012345"))
    assert origin(run, jobs_seen) == Origin("Job", "nightly-29012345", cronjob="nightly")
    assert origin(live_pod("bare"), jobs_seen) == Origin()


def test_the_operator_label_is_the_one_the_operator_puts_on_its_jobs() -> None:
    assert (OPERATOR_LABEL, OPERATOR) == (jobs.LABEL_MANAGED_BY, jobs.MANAGED_BY)


def test_learned_durations_when_there_and_the_defaults_otherwise() -> None:
    node = {"kind": "Node", "status": {"learned": {"bootSeconds": 42, "shutdownSeconds": 9}}}
    assert learned_durations(node) == Durations(0.0, 42.0, 9.0)
    half = {"kind": "Node", "status": {"learned": {"bootSeconds": 42}}}
    assert learned_durations(half) == Durations(0.0, 42.0, Durations().shutdown_seconds)
    assert learned_durations({"kind": "Node", "status": {}}) is None


def test_a_cronjob_keeps_its_schedule_and_loses_its_template_s_secrets() -> None:
    template = live_pod("x")["spec"]
    live = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "nightly",
            "namespace": "shop",
            "uid": "u",
            "resourceVersion": "9",
            "managedFields": [{}],
            "annotations": {"last-applied": "{...}"},
        },
        "spec": {
            "schedule": "*/5 * * * *",
            "timeZone": "Europe/Berlin",
            "concurrencyPolicy": "Forbid",
            "suspend": False,
            "jobTemplate": {"spec": {"template": {"spec": template}}},
        },
        "status": {"lastScheduleTime": _at(0)},
    }
    cleaned = cronjob_manifest(live)
    assert cleaned["metadata"] == {"name": "nightly", "namespace": "shop"}
    assert "status" not in cleaned and "hunter2" not in repr(cleaned)
    spec = cleaned["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["concurrencyPolicy"]) == (
        "*/5 * * * *",
        "Europe/Berlin",
        "Forbid",
    )
    assert spec["jobTemplate"]["spec"]["template"]["spec"] == scheduling_spec(template)


def _machines() -> tuple[dict[str, Any], ...]:
    group = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "lab", "namespace": "shop", "uid": "g"},
        "spec": {"minNodes": 0, "maxNodes": 2, "autoscaler": "builtin"},
        "status": {"lastScaleUp": {}},
    }
    node = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": "box", "namespace": "shop", "uid": "n"},
        "spec": {
            "desiredPowerState": "Off",
            "group": "lab",
            "kubernetesNodeName": "box",
            "driver": {
                "wol": {
                    "macAddress": "02:00:00:2a:04:05",
                    "ssh": {"host": "box", "user": "u", "privateKeySecretRef": {"name": "ssh"}},
                }
            },
            "resources": {"cpu": 8, "memory": "32Gi", "extended": {"example.com/gpu": 1}},
            "power": {"onWatts": 90, "idleWatts": 30, "offWatts": 2},
            "labels": {"disk": "ssd"},
        },
        "status": {"phase": "Off", "learned": {"bootSeconds": 40, "shutdownSeconds": 12}},
    }
    return group, node


def test_what_was_recorded_is_written_and_replayed_by_the_simulator(tmp_path: Path) -> None:
    cronjob = {
        "metadata": {"name": "nightly", "namespace": "shop"},
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    }
                }
            },
        },
    }
    health = {
        "metadata": {
            "name": "lo-health",
            "namespace": "shop",
            "labels": {OPERATOR_LABEL: OPERATOR},
        },
        "spec": {},
    }
    action = live_pod(
        "lo-box-startup", owner=("Job", "lo-box-startup"), labels={OPERATOR_LABEL: OPERATOR}
    )
    daemon = live_pod("agent-x", owner=("DaemonSet", "agent"))
    run = live_pod("nightly-1-q", owner=("Job", "nightly-1"), started=300, finished=345)
    observed = Observed(
        start=START,
        end=END,
        machines=_machines(),
        cronjobs=(cronjob, health),
        pods=(Seen(live_pod("web")), Seen(action), Seen(daemon), Seen(run)),
        cronjobs_of_jobs={("shop", "nightly-1"): "nightly"},
    )
    trace = build("mine", observed, "recorded in a test")
    assert [p.name for p in trace.pods] == ["web"]  # not the operator's, DaemonSet's or a run
    assert [c["metadata"]["name"] for c in trace.cronjobs] == ["nightly"]
    assert trace.cron_run_seconds == {"shop/nightly": 45}
    assert trace.durations == {"box": Durations(0.0, 40.0, 12.0)}
    assert all("status" not in m for m in trace.machines)
    write(trace, tmp_path / "mine")
    assert validate(tmp_path / "mine") == []  # what `lightsout simulate` checks first
    back = load(tmp_path / "mine")
    assert (back.duration_seconds, back.start, len(back.pods)) == (600, START, 1)
    result = replay(back, Options())
    # The pod and the CronJob's two runs (at 12:00 and 12:05) all ran, on the one machine.
    assert sorted(p.key.name for p in result.pods if p.started is not None)[-1] == "web"
    assert sum(1 for p in result.pods if p.started is not None) == 3
    assert result.machines[0].power_ons == 1


def test_the_recorder_resumes_its_watch_and_lists_again_when_the_version_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch loop against a scripted API (the real watch is the e2e test's): a watch that
    ends is resumed from the last resourceVersion seen; an expired one (410) is listed again,
    and a pod missing from the new list is taken as gone then."""
    from lightsout.commands import record as recorder_module
    from lightsout.k8s import people

    def versioned(pod: dict[str, Any], version: str) -> dict[str, Any]:
        return {**pod, "metadata": {**pod["metadata"], "resourceVersion": version}}

    web, db = live_pod("web", finished=None), live_pod("db", finished=None)
    lists = iter([([versioned(web, "1")], "5"), ([versioned(db, "9")], "9")])
    watched_from: list[str] = []
    clock = iter(START + timedelta(seconds=s) for s in range(100))
    api = object()  # the client `people` is handed (its calls are scripted here)
    recorder = recorder_module.Recorder(
        api, ["shop"], warn=lambda _: None, clock=lambda: next(clock)
    )

    def list_objects(
        client: Any, kind: str, namespace: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        assert client is api
        return next(lists)

    def watch_objects(
        client: Any, kind: str, namespace: str | None, version: str, seconds: int
    ) -> Any:
        assert client is api
        watched_from.append(version)
        if len(watched_from) == 1:  # one event, then the server ends the watch
            yield "ADDED", versioned(db, "7")
        elif len(watched_from) == 2:
            raise people.ExpiredError("too old resource version")
        else:
            recorder.stopped.set()
            yield "BOOKMARK", {"metadata": {"resourceVersion": "10"}}

    monkeypatch.setattr(people, "list_objects", list_objects)
    monkeypatch.setattr(people, "watch_objects", watch_objects)
    recorder._follow("pods", "shop", recorder._pod)
    assert watched_from == ["5", "7", "9"]
    assert recorder.restarts == 1
    gone = {s.pod["metadata"]["name"]: s.gone for s in recorder.pods.values()}
    # web was in the first list, not in the one after the 410: gone by then; db still there.
    assert gone["db"] is None and gone["web"] is not None


def test_a_cluster_gone_at_the_stop_still_gets_its_trace_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The machines and CronJobs listed at the start are kept when the last listing fails (the
    demo's cluster torn down before the recording ended), and the failure is said once."""
    from lightsout.commands import record as recorder_module
    from lightsout.k8s import people

    group, node = _machines()
    calls = {"n": 0}

    class Api:  # a stand-in for `lightsout.k8s.api.Api`: the machines' listing only
        def list_all_resources(
            self, plural: str, namespace: str | None = None
        ) -> list[dict[str, Any]]:
            assert namespace == "shop"
            calls["n"] += 1
            if calls["n"] > 2:
                raise ConnectionRefusedError("connection refused")
            return [dict(group if plural == "groups" else node)]

    monkeypatch.setattr(people, "list_objects", lambda *_: ([], "1"))
    said: list[str] = []
    recorder = recorder_module.Recorder(Api(), ["shop"], warn=said.append)
    recorder.inventory = recorder._inventory()
    observed = recorder.finish()
    assert [m["kind"] for m in observed.machines] == ["Group", "Node"]
    assert len(said) == 1 and "connection refused" in said[0], said


def test_a_meter_and_an_inspection_are_recorded_as_the_machines_truth() -> None:
    node = {
        "kind": "Node",
        "spec": {"power": {"onWatts": 120, "idleWatts": 40, "offWatts": 5}},
        "status": {
            "learned": {"bootSeconds": 42, "idleWatts": 55.5},
            "inspected": {"cpu": 16, "memory": "64Gi", "observedAt": "x", "source": "redfish"},
        },
    }
    truth = recorded_truth(node)
    assert truth is not None
    # The learned idle draw replaces the declared one; the rest is what the Node declares.
    assert truth.watts == (120.0, 55.5, 5.0)
    assert truth.inspected == {"cpu": 16, "memory": "64Gi"}
    assert truth.boot_seconds == 42.0
    # Nothing measured: no truth beyond the format's defaults.
    declared = {"kind": "Node", "spec": node["spec"], "status": {}}
    assert recorded_truth(declared) is None
