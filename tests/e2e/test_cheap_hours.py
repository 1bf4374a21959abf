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

A second test prices the Group by the lab's Home Assistant price sensor instead
(`lightsout_lab.plug_apis.HomeAssistant.set_prices`, the Nord Pool integration's shape, in
EUR/MWh): the operator writes the sensor's prices per kWh into `lightsout-prices-house`, owned
by the Group, and a deferrable Job is held for the sensor's cheap hour; once Home Assistant no
longer takes the token, a `PriceSensorUnreadable` event names the Secret, the ConfigMap and the
hold stay, and neither token is in any log, event or ConfigMap. The same Group reads a solar surplus
sensor (`set_surplus`): one in Wh is refused by name (`SolarSurplusUnreadable`) and the Job
still waits; once the Secret holds the new token and the roof makes 2 kW spare, the Group's status
carries the reading (`SolarSurplusReady`) and the Job is released before the cheap hour, its
machine's power being free now.

The release rules in every combination are in tests/unit/test_deferral.py; the sensor's read,
error by error, in tests/unit/test_prices_homeassistant.py; the surplus's read and pricing in
tests/unit/test_solar_surplus.py.
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
from lightsout_lab.plug_apis import PRICE_SENSOR, SURPLUS_SENSOR, HomeAssistant
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
#: A long-lived access token (a JWT in life): long and unique, so finding it anywhere is a leak.
HA_TOKEN = "eyJhbGciOiJIUzI1NiJ9.e2e-price-token-5a90c3.c2lnbmF0dXJl"
#: What the Secret is given once Home Assistant stops taking the first token.
NEW_TOKEN = "eyJhbGciOiJIUzI1NiJ9.e2e-price-token-7c41d8.bmV3c2lnbmF0dXJl"


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def cheap_hour_ahead() -> tuple[dt.datetime, dt.datetime, list[tuple[dt.datetime, int]]]:
    """Now, the start of the cheap hour two minutes ahead, and the prices of four hours (EUR
    per MWh): dear, cheap, dear, dear."""
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cheap_at, hour = started + dt.timedelta(minutes=2), dt.timedelta(hours=1)
    prices = [(cheap_at - hour, DEAR), (cheap_at, CHEAP), (cheap_at + hour, DEAR)]
    return started, cheap_at, [*prices, (cheap_at + 2 * hour, DEAR)]


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


def start_at(crds: Cluster, namespace: str, name: str) -> dt.datetime:
    """When the planner says the held Job starts (`lightsout.dev/start-at`)."""
    said: str = wait_for(
        lambda: job_json(crds, namespace, name)["metadata"]["annotations"].get(
            "lightsout.dev/start-at"
        ),
        PATIENCE,
        f"the planner to say when the {name} Job starts",
    )
    return utc(said)


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
    started, cheap_at, lines = cheap_hour_ahead()
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
    assert start_at(crds, namespace, "nightly") == cheap_at
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
    gone = series_ready(crds, namespace, "False", "once the ConfigMap is gone")
    missing = f"spec.electricity.series: ConfigMap {namespace}/day-ahead not found"
    assert gone["message"].startswith(missing)
    # Posted right after the condition it explains.
    said = wait_for(
        lambda: event(crds, namespace, "house", "PriceSeriesUnreadable"),
        30,
        "the PriceSeriesUnreadable event",
    )
    assert said.startswith(missing), said
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


def series_ready(crds: Cluster, namespace: str, status: str, why: str) -> dict[str, Any]:
    """The Group house's `PriceSeriesReady` condition, once it has `status`."""
    found: dict[str, Any] = wait_for(
        lambda: (
            (c := condition(crds, namespace, "house", "PriceSeriesReady"))
            and c["status"] == status
            and c
        ),
        PATIENCE,
        f"PriceSeriesReady {status} {why}",
    )
    return found


def condition(crds: Cluster, namespace: str, group: str, kind: str) -> dict[str, Any] | None:
    found = get_json(crds, "lsg", group, "-n", namespace) or {}
    for cond in (found.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def test_a_home_assistant_price_sensor_holds_a_job_for_its_cheap_hour_and_names_a_bad_token(
    crds: Cluster,
    namespace: str,
    webhook_operator: OperatorProcess,
    machines: Fleet,
    bmc: SushyEmulator,
) -> None:
    started, cheap_at, prices = cheap_hour_ahead()
    hour = dt.timedelta(hours=1)
    with HomeAssistant(token=HA_TOKEN) as ha:
        ha.set_prices(today=prices[:3], tomorrow=prices[3:], unit="EUR/MWh")
        ha.set_surplus(0)  # night: the roof makes nothing spare
        sensor = {
            "url": ha.endpoint,
            "tokenSecretRef": {"name": "ha-prices"},
            "entity": PRICE_SENSOR,
            "pollSeconds": 10,
        }
        surplus = {**sensor, "entity": SURPLUS_SENSOR}
        electricity = {
            "pricePerKWh": 0.30,
            "series": {"homeAssistant": sensor},
            "solarSurplus": {"homeAssistant": surplus},
        }
        group = fleet.group("house", autoscaler="builtin", electricity=electricity)
        nodes = machines.nodes(bmc, group="house")
        for short, node in zip(SIZES, nodes, strict=True):
            node["spec"]["labels"] = {"runs-on": short}
        token = fleet.secret("ha-prices", {"token": HA_TOKEN})
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), token, group, *nodes])
        with diagnosed(crds, namespace):
            written = wait_for(
                lambda: get_json(crds, "configmap", "lightsout-prices-house", "-n", namespace),
                PATIENCE,
                "the operator to write the sensor's prices into lightsout-prices-house",
            )
            (owner,) = written["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"]) == ("Group", "house")
            assert f"{stamp(cheap_at)},0.05\n" in written["data"]["prices.csv"], "per kWh"
            annotations = {
                "lightsout.dev/finish-by": stamp(started + 2 * hour),
                "lightsout.dev/expected-duration": "2m",
            }
            fleet.apply(crds, namespace, [job("nightly", "nightly", annotations)])
            assert start_at(crds, namespace, "nightly") == cheap_at, "the sensor's cheap hour"
            ready = series_ready(crds, namespace, "True", "from the sensor's prices")
            covered = f"prices from {stamp(cheap_at - hour)} to {stamp(cheap_at + 3 * hour)}"
            assert ready["message"] == covered

            # A surplus sensor in energy, not power, is refused by name; the Job still waits.
            ha.set_surplus("850", unit="Wh")
            wrong = wait_for(
                lambda: (
                    (said := event(crds, namespace, "house", "SolarSurplusUnreadable"))
                    and "'Wh'" in said
                    and said
                ),
                PATIENCE,
                "a SolarSurplusUnreadable event on the Group",
            )
            assert f"{SURPLUS_SENSOR} is in 'Wh'" in wrong
            assert job_json(crds, namespace, "nightly")["spec"].get("suspend") is True

            # Home Assistant no longer takes the token: said, naming the Secret; the prices
            # already read stay.
            ha.token = NEW_TOKEN
            refused = wait_for(
                lambda: event(crds, namespace, "house", "PriceSensorUnreadable"),
                PATIENCE,
                "a PriceSensorUnreadable event on the Group",
            )
            assert f"refused the token in Secret {namespace}/ha-prices key token" in refused
            kept = get_json(crds, "configmap", "lightsout-prices-house", "-n", namespace)
            assert kept["data"] == written["data"]
            assert job_json(crds, namespace, "nightly")["spec"].get("suspend") is True

            # The Secret gets the new token and the roof makes 2 kW more than the house uses:
            # the machine's power is free now, so the Job waits no longer for the cheap hour.
            ha.set_surplus(2000)
            fleet.apply(crds, namespace, [fleet.secret("ha-prices", {"token": NEW_TOKEN})])
            read = wait_for(
                lambda: (
                    ((get_json(crds, "lsg", "house", "-n", namespace) or {}).get("status") or {})
                    .get("solarSurplus", {})
                    .get("watts")
                    == 2000
                ),
                PATIENCE,
                "the Group's status to carry the 2000 W read",
            )
            assert read
            ready = condition(crds, namespace, "house", "SolarSurplusReady") or {}
            assert ready.get("status") == "True", ready
            wait_for(
                lambda: job_json(crds, namespace, "nightly")["spec"].get("suspend") is False,
                PATIENCE,
                "the held Job to be released while the surplus covers its machine",
            )
            assert dt.datetime.now(dt.UTC) < cheap_at, "released before the cheap hour"
            # Posted right after the Job is unsuspended.
            released = wait_for(
                lambda: event(crds, namespace, "nightly", "Released"), 30, "the Released event"
            )
            assert "W of solar surplus spare now" in released, released
        seen = [
            webhook_operator.log_path.read_text(errors="replace"),
            crds.kubectl("get", "events,configmaps", "-n", namespace, "-o", "json").stdout,
        ]
        assert not [text for text in seen if HA_TOKEN in text or NEW_TOKEN in text], "leaked"
