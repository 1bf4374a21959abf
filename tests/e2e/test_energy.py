"""Energy accounting on the real stack: a short power cycle (with a pod's cpu request and a
SIGKILL of the operator on the way) shows the same energy in the Node's and the Group's status,
in `/metrics` and in `lightsout status` as a hand computation from the declared watts.

The machine declares 120 W busy, 40 W idle and 5 W off; its core Node has 8 cpus. So it draws
5 W while Off (saving 40 - 5 = 35 W against idling), 40 W while powered with nothing on it and
40 + 80 x 2/8 = 60 W while a pod requests 2 cpus. The times the rate changed are the ones the
operator recorded (`status.energy.countedTo` at each change), each checked to lie between the
test's own action and its observation of the change. The Group's price is a time-of-use tariff
whose rate in force throughout the test (0.30, from an hour before it starts to three hours
after) is not its base price (0.40): every figure must be priced at the rate.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import SushyEmulator
from tests.e2e.autoscaling import pod
from tests.e2e.conftest import PATIENCE, patch_desired, status, wait_phase
from tests.e2e.test_cli_power import lightsout
from tests.e2e.test_metrics import scrape, value
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

PRICE = 0.30
#: The tariff's base price, which never applies during the test.
BASE_PRICE = 0.40
OFF_W, IDLE_W, ON_W = 5.0, 40.0, 120.0
SAVING_W = IDLE_W - OFF_W
WITH_POD_W = IDLE_W + (ON_W - IDLE_W) * 2 / 8


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Segment:
    """From `start` on, the machine drew `watts` and saved `saving` (as computed by hand)."""

    start: dt.datetime
    watts: float
    saving: float = 0.0


def hand(segments: list[Segment], until: dt.datetime) -> tuple[float, float]:
    """Energy used and saved (Wh) from the first segment's start to `until`."""
    used = saved = 0.0
    for segment, end in zip(segments, [*(s.start for s in segments[1:]), until], strict=True):
        hours = (end - segment.start).total_seconds() / 3600
        used += segment.watts * hours
        saved += segment.saving * hours
    return used, saved


def rate_change(
    crds: Cluster, namespace: str, name: str, watts: float, action: Callable[[], object]
) -> dt.datetime:
    """Run `action`, wait for the checkpoint of the new rate, return the time it records."""
    before = now().replace(microsecond=0)
    action()
    energy = wait_for(
        lambda: (
            (e := status(crds, namespace, name).get("energy") or {}).get("watts") == watts and e
        ),
        PATIENCE,
        f"{name}'s energy rate to become {watts} W",
    )
    changed = utc(energy["countedTo"])
    assert before <= changed <= now(), (before, energy)
    return changed


def later(moment: dt.datetime, what: str) -> None:
    """Wait until the clock is a second past `moment`."""
    wait_for(lambda: now() >= moment + dt.timedelta(seconds=1), 5, what, interval=0.1)


def bound_pod(name: str, node: str, cpu: str) -> dict[str, Any]:
    """A pod placed on `node` directly (no scheduler, no kubelet: it stays Pending there, and
    its request counts as the scheduler would count it)."""
    body = pod(name, cpu)
    body["spec"]["nodeName"] = node
    return body


def test_a_power_cycle_is_counted_the_same_in_status_metrics_and_the_cli(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    name = machine.name
    power = {"onWatts": ON_W, "idleWatts": IDLE_W, "offWatts": OFF_W, "bootTimeoutSeconds": 180}
    begun = dt.datetime.now(dt.UTC)
    around_now = {
        "from": (begun - dt.timedelta(hours=1)).strftime("%H:%M"),
        "to": (begun + dt.timedelta(hours=3)).strftime("%H:%M"),
        "pricePerKWh": PRICE,
    }
    group = fleet.group(
        electricity={"pricePerKWh": BASE_PRICE, "currency": "EUR", "rates": [around_now]}
    )
    fleet.apply(
        crds,
        namespace,
        [*fleet.bmc_secrets(bmc), group, fleet.redfish_node(machine, bmc, power=power)],
    )
    opened = wait_phase(crds, namespace, name, "Off")
    opened = wait_for(
        lambda: status(crds, namespace, name).get("energy"), PATIENCE, "accounting to start"
    )
    assert (opened["watts"], opened["savingWatts"], opened["pricePerKWh"]) == (
        OFF_W,
        SAVING_W,
        PRICE,
    )
    segments = [Segment(utc(opened["since"]), OFF_W, SAVING_W)]
    # Powered on within the second accounting opened, the Off stretch would count 0 s and the
    # saving (35 W from it) could not be told from a saving the operator never counted.
    later(segments[0].start, "the Off rate to be counted a whole second")

    on = rate_change(
        crds, namespace, name, IDLE_W, lambda: patch_desired(crds, namespace, name, "On")
    )
    segments.append(Segment(on, IDLE_W))
    wait_phase(crds, namespace, name, "Ready")
    assert (get_json(crds, "node", name) or {})["status"]["allocatable"]["cpu"] == "8"

    # A pod asking for 2 of the 8 cpus: the machine draws a quarter of the way to its busy watts.
    busy = rate_change(
        crds,
        namespace,
        name,
        WITH_POD_W,
        lambda: fleet.apply(crds, namespace, [bound_pod("load", name, "2")]),
    )
    segments.append(Segment(busy, WITH_POD_W))
    # The pod goes once the busy rate has been counted a whole second (the operator counts in
    # whole seconds): counted at the wrong rate, it would be 20 W x 1 s = 0.0056 Wh off, far
    # past the 1e-4 Wh the totals are checked to.
    later(busy, "the busy rate to be counted a whole second")
    idle = rate_change(
        crds,
        namespace,
        name,
        IDLE_W,
        lambda: crds.kubectl(
            "delete", "pod", "load", "-n", namespace, "--grace-period=0", "--force"
        ),
    )
    segments.append(Segment(idle, IDLE_W))

    # The operator is killed while the machine runs and is away a while: its successor
    # counts the gap at the rate status recorded (no write needed: nothing changed).
    operator.kill()
    # Away a second at least: a gap its successor failed to count (or counted at another
    # rate) would be 40 W x 1 s = 0.011 Wh off.
    later(now(), "the operator to be away a second")
    operator.start()

    off = rate_change(
        crds, namespace, name, OFF_W, lambda: patch_desired(crds, namespace, name, "Off")
    )
    segments.append(Segment(off, OFF_W, SAVING_W))
    final = wait_phase(crds, namespace, name, "Off")
    energy = final["energy"]
    assert utc(energy["countedTo"]) == off
    used, saved = hand(segments, off)
    print(f"counted to {off}: used {used:.4f} Wh, saved {saved:.4f} Wh", segments)
    assert energy["usedWattHours"] == pytest.approx(used, abs=1e-4)
    assert energy["savedWattHours"] == pytest.approx(saved, abs=1e-4)
    assert energy["usedCost"] == pytest.approx(used / 1000 * PRICE, abs=1e-6)
    assert energy["savedCost"] == pytest.approx(saved / 1000 * PRICE, abs=1e-6)
    assert energy["currency"] == "EUR"
    assert used > 0 and saved > 0

    # The Group holds the sum of its one machine, counted on at the same rate.
    group_energy = wait_for(
        lambda: (
            (e := (get_json(crds, "lsg", "homelab", "-n", namespace) or {}).get("status", {}))
            and (g := e.get("energy"))
            and g["watts"] == OFF_W
            and g
        ),
        PATIENCE,
        "the Group's energy to follow its machine",
    )
    at_group = utc(group_energy["countedTo"])
    used_then, saved_then = hand(segments, at_group)
    assert group_energy["usedWattHours"] == pytest.approx(used_then, abs=1e-3)
    assert group_energy["savedWattHours"] == pytest.approx(saved_then, abs=1e-3)
    assert group_energy["currency"] == "EUR"

    # /metrics counts on to the scrape: between what the hand computes before and after it.
    before = now()
    samples = scrape(operator)
    after = now()
    labels = {"namespace": namespace, "group": "homelab", "node": name}
    low, high = hand(segments, before), hand(segments, after)
    used_j = value(samples, "lightsout_energy_used_joules_total", **labels)
    saved_j = value(samples, "lightsout_energy_saved_joules_total", **labels)
    assert used_j is not None and saved_j is not None
    assert low[0] * 3600 - 0.5 <= used_j <= high[0] * 3600 + 0.5
    assert low[1] * 3600 - 0.5 <= saved_j <= high[1] * 3600 + 0.5
    cost = value(samples, "lightsout_energy_used_cost_total", currency="EUR", **labels)
    assert cost is not None and cost == pytest.approx(used_j / 3.6e6 * PRICE, rel=1e-3)
    assert value(samples, "lightsout_machine_power_watts", **labels) == OFF_W
    assert value(samples, "lightsout_machine_power_state", **labels) == 0.0

    # `lightsout status` shows the same figures, counted on to when it ran.
    before = now()
    shown = lightsout(crds, "status", "-n", namespace, "-o", "json")
    after = now()
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    (row,) = table["machines"]
    low, high = hand(segments, before), hand(segments, after)
    assert low[0] - 1e-3 <= row["energy"]["total"]["usedWattHours"] <= high[0] + 1e-3
    assert low[1] - 1e-3 <= row["energy"]["total"]["savedWattHours"] <= high[1] + 1e-3
    assert row["energy"]["month"]["usedWattHours"] <= row["energy"]["total"]["usedWattHours"]
    (group_row,) = table["groups"]
    assert low[0] - 1e-3 <= group_row["energy"]["total"]["usedWattHours"] <= high[0] + 1e-3
    # The tariff's rate and when it ends, as the Group's row says them.
    assert group_row["price"] == f"{PRICE:g} EUR/kWh until {around_now['to']} UTC"
    text = lightsout(crds, "status", "-n", namespace).stdout
    print(text)
    assert "USED TODAY" in text and "SAVED MONTH" in text and " Wh" in text
