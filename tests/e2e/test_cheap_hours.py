"""Deferrable Jobs on the real stack: a Job that may wait is admitted suspended and runs when the
electricity is cheap; one that may not wait, or says its deadline badly, runs at once.

One Group priced by a day-ahead series in a ConfigMap labelled `lightsout.dev/series` (400 EUR
a MWh, but 50 for an hour from two minutes after the test starts) holds two emulated Redfish
machines, labelled so that each Job can run on one of them only. The operator serves its
admission webhooks, as installed (it writes their configuration itself,
`LIGHTSOUT_WEBHOOK_URL`); the real Job controller creates the pods, the real scheduler binds
them and the lab's kubelets finish them.

What a user would notice:
- the nightly Job (`lightsout.dev/finish-by` two hours away, `expected-duration` 2m) is created
  suspended by the webhook, marked `lightsout.dev/deferred`, gets `lightsout.dev/start-at` at
  the cheap hour and a `Deferred` event saying so; its machine stays Off, with its desired
  state Off, until then;
- at the cheap hour it is released (`Released`), its machine powers on for its pod, and the Job
  completes;
- meanwhile a Job whose deadline leaves no slack, and one whose `finish-by` does not parse,
  are released at once with the reason in their event, and complete on the other machine;
- the Group's `PriceSeriesReady` is True and says what the series covers; once the ConfigMap
  is deleted it turns False naming it (with a `PriceSeriesUnreadable` event), and a deferrable
  Job created then runs at once, its `Released` event naming the missing series.

The release rules in every combination are in tests/unit/test_deferral.py.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kubelet import KubeletAgent
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import SushyEmulator
from tests.e2e.autoscaling import Fleet, diagnosed, running
from tests.e2e.conftest import PATIENCE, webhook_operator_process
from tests.harness import fleet
from tests.harness.phases import PhaseWatch
from tests.harness.wait import events_for, get_json, holds, wait_for

pytestmark = pytest.mark.e2e

SIZES = {
    "nightly": {"cpu": "2", "memory": "4Gi", "watts": 60},
    "urgent": {"cpu": "2", "memory": "4Gi", "watts": 60},
}
#: EUR per MWh, as day-ahead markets publish prices.
DEAR, CHEAP = 400, 50


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def machines(namespace: str) -> Fleet:
    return Fleet(namespace, SIZES)


@pytest.fixture
def bmc(kube_api: client.ApiClient, cluster: Cluster, machines: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, machines) as (emulator, _):
        yield emulator


@pytest.fixture
def webhook_operator(
    crds: Cluster, namespace: str, tmp_path: Path, runner: KubeletAgent
) -> Iterator[OperatorProcess]:
    """The operator with its admission webhooks on the host (`webhook_operator_process`), once
    the API server calls the deferrable-Jobs one."""
    with webhook_operator_process(crds, namespace, tmp_path) as proc:
        # The API server reads new webhook configurations a moment after they are written:
        # a dry run shows when it calls this one (a dry run is answered as a create would be).
        probe = json.dumps(job("probe", "nightly", {"lightsout.dev/max-delay": "1h"}))
        wait_for(
            lambda: (
                json.loads(
                    crds.kubectl(
                        "create",
                        "--dry-run=server",
                        "-n",
                        namespace,
                        "-o",
                        "json",
                        "-f",
                        "-",
                        input=probe,
                    ).stdout
                )["spec"].get("suspend")
                is True
            ),
            60,
            "the API server to call the deferrable-Jobs webhook",
        )
        yield proc


def job(name: str, runs_on: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A one-pod Job for the machine labelled `runs-on: <runs_on>`."""
    resources = {"requests": {"cpu": "1", "memory": "100Mi"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"runs-on": runs_on},
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                    "containers": [{"name": "main", "image": "busybox", "resources": resources}],
                }
            },
        },
    }


def job_json(crds: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_json(crds, "job", name, "-n", namespace) or {})


def complete(crds: Cluster, namespace: str, name: str) -> bool:
    conditions = (job_json(crds, namespace, name).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def event(crds: Cluster, namespace: str, name: str, reason: str) -> str | None:
    found = [e["message"] for e in events_for(crds, namespace, name) if e["reason"] == reason]
    return found[-1] if found else None


def test_a_deferrable_job_waits_for_the_cheap_hour_and_urgent_ones_run_at_once(
    crds: Cluster,
    kube_api: client.ApiClient,
    namespace: str,
    webhook_operator: OperatorProcess,
    machines: Fleet,
    bmc: SushyEmulator,
) -> None:
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cheap_at = started + dt.timedelta(minutes=2)
    hour = dt.timedelta(hours=1)
    lines = [
        (cheap_at - hour, DEAR),
        (cheap_at, CHEAP),
        (cheap_at + hour, DEAR),
        (cheap_at + 2 * hour, DEAR),
    ]
    series = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "day-ahead", "labels": {"lightsout.dev/series": ""}},
        "data": {"prices.csv": "".join(f"{stamp(at)},{price}\n" for at, price in lines)},
    }
    electricity = {
        "pricePerKWh": 0.30,
        "series": {"configMapKeyRef": {"name": "day-ahead", "key": "prices.csv"}, "unit": "PerMWh"},
    }
    group = fleet.group("house", autoscaler="builtin", electricity=electricity)
    nodes = machines.nodes(bmc, group="house")
    for short, node in zip(SIZES, nodes, strict=True):
        node["spec"]["labels"] = {"runs-on": short}
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), series, group, *nodes])
    names = {short: machines.name(short) for short in SIZES}
    watched = PhaseWatch(kube_api, namespace, started)
    watched.start()
    try:
        with diagnosed(crds, namespace):
            run(crds, namespace, names, watched, started, cheap_at)
    finally:
        watched.stop()


def run(
    crds: Cluster,
    namespace: str,
    names: dict[str, str],
    watched: PhaseWatch,
    started: dt.datetime,
    cheap_at: dt.datetime,
) -> None:
    deadline = stamp(started + dt.timedelta(hours=2))
    nightly = job(
        "nightly",
        "nightly",
        {"lightsout.dev/finish-by": deadline, "lightsout.dev/expected-duration": "2m"},
    )
    fleet.apply(crds, namespace, [nightly])
    admitted = job_json(crds, namespace, "nightly")
    assert admitted["spec"].get("suspend") is True, "the webhook admits it suspended"
    assert admitted["metadata"]["annotations"].get("lightsout.dev/deferred") == "true"
    start_at = wait_for(
        lambda: job_json(crds, namespace, "nightly")["metadata"]["annotations"].get(
            "lightsout.dev/start-at"
        ),
        PATIENCE,
        "the planner to say when the nightly Job starts",
    )
    assert utc(start_at) == cheap_at
    deferred = wait_for(
        lambda: event(crds, namespace, "nightly", "Deferred"), PATIENCE, "a Deferred event"
    )
    assert f"starts at {stamp(cheap_at)}" in deferred and "held for cheaper electricity" in deferred

    # Meanwhile: no slack (done within 10 min, the margin alone), and a deadline that does
    # not parse. Both run at once, on the other machine.
    soon = stamp(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10))
    urgent = job(
        "urgent",
        "urgent",
        {"lightsout.dev/finish-by": soon, "lightsout.dev/expected-duration": "1m"},
    )
    garbled = job("garbled", "urgent", {"lightsout.dev/finish-by": "after dinner"})
    fleet.apply(crds, namespace, [urgent, garbled])
    for name, says in (("urgent", "must start now"), ("garbled", "'after dinner' is not")):
        released = wait_for(
            lambda name=name: event(crds, namespace, name, "Released"),
            PATIENCE,
            f"the {name} Job released at once",
        )
        assert says in released
    for name in ("urgent", "garbled"):
        wait_for(lambda name=name: complete(crds, namespace, name), PATIENCE, f"{name} complete")

    # The nightly Job's machine stays Off, and the Job suspended, until the cheap hour.
    until = time.monotonic() + (cheap_at - dt.datetime.now(dt.UTC)).total_seconds() - 1
    holds(
        lambda: (
            job_json(crds, namespace, "nightly")["spec"].get("suspend") is True
            and watched.phases.get(names["nightly"], "Off") == "Off"
        ),
        until,
        "the nightly Job held and its machine Off before the cheap hour",
    )
    released = wait_for(
        lambda: event(crds, namespace, "nightly", "Released"),
        (cheap_at - dt.datetime.now(dt.UTC)).total_seconds() + PATIENCE,
        "the nightly Job released at the cheap hour",
    )
    assert "now is its cheapest start" in released
    wait_for(lambda: complete(crds, namespace, "nightly"), PATIENCE, "the nightly Job complete")
    with watched.lock:
        powered_on = [
            at for at, name, how in watched.moments if name == names["nightly"] and how == "on"
        ]
    assert powered_on, "its machine powered on for it"
    on_at = started + dt.timedelta(seconds=powered_on[0])
    assert on_at >= cheap_at, f"its machine powered on at {on_at}, before {cheap_at}"
    hour = dt.timedelta(hours=1)
    series_gone(crds, namespace, cheap_at - hour, cheap_at + 3 * hour)


def series_gone(crds: Cluster, namespace: str, first: dt.datetime, end: dt.datetime) -> None:
    """The Group says what its series covers; without the ConfigMap it says that, and a
    deferrable Job runs at once."""
    ready = condition(crds, namespace, "house", "PriceSeriesReady")
    assert ready is not None and ready["status"] == "True"
    assert ready["message"] == f"prices from {stamp(first)} to {stamp(end)}"
    crds.kubectl("delete", "configmap", "day-ahead", "-n", namespace)
    gone = wait_for(
        lambda: (
            (c := condition(crds, namespace, "house", "PriceSeriesReady"))
            and c["status"] == "False"
            and c
        ),
        PATIENCE,
        "PriceSeriesReady False once the ConfigMap is gone",
    )
    missing = f"spec.electricity.series: ConfigMap {namespace}/day-ahead not found"
    assert gone["message"].startswith(missing)
    said = event(crds, namespace, "house", "PriceSeriesUnreadable")
    assert said is not None and said.startswith(missing)
    later = stamp(dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    fleet.apply(
        crds,
        namespace,
        [
            job(
                "later",
                "urgent",
                {"lightsout.dev/finish-by": later, "lightsout.dev/expected-duration": "1m"},
            )
        ],
    )
    released = wait_for(
        lambda: event(crds, namespace, "later", "Released"), PATIENCE, "the later Job released"
    )
    assert released.startswith(f"released at once: {missing}")


def condition(crds: Cluster, namespace: str, group: str, kind: str) -> dict[str, Any] | None:
    found = get_json(crds, "lsg", group, "-n", namespace) or {}
    for cond in (found.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None
