"""On battery, end to end: a real `upsd` with Debian's `dummy-ups` driver feeds three Groups
(Shed, Hold, Last), one emulated Redfish machine each, and the test plays the UPS through
OL → OB → OB (runtime below Hold's limit) → OB LB → OL (charge low) → OL (charged), then
flaps the mains every 5 s for 80 s, then makes upsd unreachable. The machines run from the
start (their core Nodes Ready before their Lights-Out Nodes exist, desired On): the operator
takes them as running, with no startup Job; every power order the test counts is the outage's.

What a user would notice, in order:
- each Group's `status.battery` and conditions follow the UPS, with an event on each change;
- on battery the Shed machine is drained and powered off (after `onBatterySeconds`), a pod
  that only the Shed machine could run stays Pending with an event naming the outage, and the
  outage is recorded before the power-off; Hold goes off once the runtime falls below its
  `holdUntil`, Last only at low battery once the others are off: one power-off order each;
  with less battery left than Last's shutdown needs, its drain deletes the pod a
  PodDisruptionBudget protects instead of waiting (`DrainDeadline`);
- back on mains, nothing is powered on before `restore.stableSeconds` and the charge threshold;
  then Last, Hold and Shed come back in that order and the outage record is cleared;
- mains flapping every 5 s for 80 s: not one power order;
- upsd gone: `PowerSourceReachable` False and a Warning event, and no machine changes.

A second test reads the UPS from Home Assistant's entities instead (the lab's Home Assistant,
`lightsout_lab.plug_apis.HomeAssistant`): on battery its Shed machine goes off with the outage
recorded; the token revoked, `PowerSourceReachable` False with an event naming the Secret, and
nothing restored on a guess though the entities say the mains are back; the token in no log,
event or status.

The planner's rules in every combination are in tests/unit/test_battery.py; the Home Assistant
read's, error by error, in tests/unit/test_ups_homeassistant.py.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.nut import NutServer
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.plug_apis import HomeAssistant
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.autoscaling import Fleet, diagnosed, pod, running
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.cycle import wait_found_running
from tests.harness.phases import PhaseWatch
from tests.harness.wait import events_for, get_json, holds, reasons_until, wait_for, warned
from tests.harness.workload import web_pdb

TIERS = ("shed", "hold", "last")
SIZES = {tier: {"cpu": "2", "memory": "4Gi", "watts": 30} for tier in TIERS}
#: The mains' hysteresis before a restore. Mains flapping every 5 s are never back that long,
#: nor on battery as long as the default `onBatterySeconds` (10 s) before a Shed power-off.
STABLE_SECONDS = 10
#: How late a wrong power order would be seen: a UPS poll (2 s), a status write, the planner's
#: pass and its patch, on a busy host.
SLACK_SECONDS = 6
POLL_SECONDS = 2
#: Mains flips, one every 5 s: 80 s of flapping, eight times on battery for 5 s each (40 s
#: in all, past both `onBatterySeconds` and `STABLE_SECONDS` were they ever added up).
FLIPS = 16


@pytest.fixture
def tiers(namespace: str) -> Fleet:
    return Fleet(namespace, SIZES)


@pytest.fixture
def tier_bmc(kube_api: client.ApiClient, cluster: Cluster, tiers: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, tiers, power_state="On") as (bmc, _):
        yield bmc


@pytest.fixture
def ups() -> Iterator[NutServer]:
    with NutServer(status="OL CHRG", charge=100, runtime=3000) as server:
        yield server


def battery_group(tier: str, ups: NutServer, **policy: Any) -> dict[str, Any]:
    source = {"nut": {"host": ups.host, "port": ups.port, "ups": ups.ups}}
    return fleet.group(
        tier,
        autoscaler="builtin",
        minNodes=1,
        labels={"tier": tier},
        battery={
            "source": source,
            "tier": tier.capitalize(),
            "shutdownMarginSeconds": 0,
            "pollSeconds": POLL_SECONDS,
            "restore": {"stableSeconds": STABLE_SECONDS, "chargePercent": 50},
            **policy,
        },
    )


def battery(crds: Cluster, namespace: str, group: str) -> dict[str, Any]:
    found = get_json(crds, "lsg", group, "-n", namespace) or {}
    return dict((found.get("status") or {}).get("battery") or {})


def condition(crds: Cluster, namespace: str, group: str, kind: str) -> str | None:
    found = get_json(crds, "lsg", group, "-n", namespace) or {}
    for cond in (found.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def group_reasons(crds: Cluster, namespace: str, group: str) -> list[str]:
    return [e.get("reason", "") for e in events_for(crds, namespace, group)]


def mains_everywhere(crds: Cluster, namespace: str, mains: str) -> bool:
    return all(battery(crds, namespace, tier).get("mains") == mains for tier in TIERS)


def test_on_battery_tiers_shutdown_restore_flapping_and_an_unreachable_ups(
    crds: Cluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    tiers: Fleet,
    tier_bmc: SushyEmulator,
    ups: NutServer,
) -> None:
    groups = [
        battery_group("shed", ups),
        battery_group("hold", ups, holdUntil={"runtimeSeconds": 900}),
        battery_group("last", ups),
    ]
    # Each machine in its own Group (minNodes 1), running already: Ready without a Job.
    wait_found_running(crds, list(tiers.names().values()))
    nodes = tiers.nodes(tier_bmc, desired="On")
    for tier, node in zip(TIERS, nodes, strict=True):
        node["spec"]["group"] = tier
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(tier_bmc), *groups, *nodes])
    names = {tier: tiers.name(tier) for tier in TIERS}
    watched = PhaseWatch(kube_api, namespace, dt.datetime.now(dt.UTC))
    watched.start()
    try:
        with diagnosed(crds, namespace):
            run_outage(crds, namespace, tiers, tier_bmc, ups, names, watched)
    finally:
        watched.stop()


def offs_and_ons(watched: PhaseWatch) -> list[tuple[str, str]]:
    with watched.lock:
        return [(name, what) for _, name, what in sorted(watched.moments)]


def seen_going(watched: PhaseWatch, start: int, what: str, count: int) -> list[str]:
    """The machines `watched` saw go `what` since moment `start`, in order, once there are
    `count`: its watch may trail the test's own reads of the phase."""
    found: list[str] = wait_for(
        lambda: (
            names
            if len(names := [n for n, w in offs_and_ons(watched)[start:] if w == what]) >= count
            else None
        ),
        30,
        f"the watch to see {count} machines go {what}",
    )
    return found


def power_orders(bmc: SushyEmulator, tiers: Fleet) -> dict[str, tuple[int, int]]:
    """Per machine: (power-on orders, power-off orders) the BMC accepted."""
    return {
        tier: (
            bmc.count_power_requests(tiers.uuids[tier], reset_types=POWER_ON, accepted_only=True),
            bmc.count_power_requests(tiers.uuids[tier], reset_types=POWER_OFF, accepted_only=True),
        )
        for tier in tiers.sizes
    }


def run_outage(
    crds: Cluster,
    namespace: str,
    tiers: Fleet,
    bmc: SushyEmulator,
    ups: NutServer,
    names: dict[str, str],
    watched: PhaseWatch,
) -> None:
    # Every machine Ready, every Group reading the UPS online.
    for name in names.values():
        wait_phase(crds, namespace, name, "Ready")
    wait_for(lambda: mains_everywhere(crds, namespace, "Online"), PATIENCE, "the UPS read online")
    assert condition(crds, namespace, "shed", "PowerSourceReachable") == "True"
    assert condition(crds, namespace, "shed", "OnBattery") == "False"
    before = power_orders(bmc, tiers)
    start = len(offs_and_ons(watched))

    # (1) The mains fail: Shed goes off, the others stay; a pod for Shed waits for the mains.
    ups.set(status="OB DISCHRG", charge=90, runtime=2400)
    wait_phase(crds, namespace, names["shed"], "Off")
    outage = battery(crds, namespace, "shed").get("outage") or {}
    assert outage.get("restore") == [names["shed"]], outage
    assert "MainsLost" in group_reasons(crds, namespace, "shed")
    assert "OutageRecorded" in group_reasons(crds, namespace, "shed")
    assert condition(crds, namespace, "shed", "OnBattery") == "True"
    for tier in ("hold", "last"):
        assert get_json(crds, "lsn", names[tier], "-n", namespace)["status"]["phase"] == "Ready"
    waiting = pod("needs-shed", "500m")
    waiting["spec"]["nodeSelector"] = {"tier": "shed"}
    fleet.apply(crds, namespace, [waiting])
    held = wait_for(
        lambda: [
            e["message"]
            for e in events_for(crds, namespace, "needs-shed")
            if e.get("reason") == "PowerOnHeld"
        ],
        PATIENCE,
        "the pending pod told why it waits",
    )
    assert "the mains failed" in held[0] and ups.address in held[0], held
    assert (
        get_json(crds, "lsn", names["shed"], "-n", namespace)["spec"]["desiredPowerState"] == "Off"
    )

    # (2) The runtime falls below Hold's limit: Hold goes off, Last stays.
    ups.set(runtime=800)
    wait_phase(crds, namespace, names["hold"], "Off")
    assert get_json(crds, "lsn", names["last"], "-n", namespace)["status"]["phase"] == "Ready"

    # A pod on Last that a PodDisruptionBudget forbids to evict.
    kept = pod("db", "200m")
    kept["metadata"]["labels"] = {"app": "web"}
    kept["spec"]["nodeSelector"] = {"tier": "last"}
    fleet.apply(crds, namespace, [kept, web_pdb(1)])
    wait_for(
        lambda: (
            ((get_json(crds, "pdb", "web", "-n", namespace) or {}).get("status") or {}).get(
                "currentHealthy"
            )
            == 1
        ),
        PATIENCE,
        "the budget to count the pod on Last",
    )

    # (3) Low battery with 100 s left, less than Last's shutdown needs: Last goes off too, its
    # drain not waiting for the budget (the pod is deleted, with its grace period).
    ups.set(status="OB DISCHRG LB", charge=20, runtime=100)
    wait_phase(crds, namespace, names["last"], "Off")
    assert "LowBattery" in group_reasons(crds, namespace, "last")
    assert get_json(crds, "pod", "db", "-n", namespace) is None
    said = [e.get("reason") for e in events_for(crds, namespace, names["last"])]
    assert "DrainDeadline" in said, said
    order = seen_going(watched, start, "off", 3)
    assert order == [names["shed"], names["hold"], names["last"]], order
    after = power_orders(bmc, tiers)
    assert {t: after[t][1] - before[t][1] for t in TIERS} == dict.fromkeys(TIERS, 1), after

    # (4) The mains are back but the battery is low: nothing comes back.
    ups.set(status="OL CHRG", charge=40, runtime=600)
    wait_for(lambda: mains_everywhere(crds, namespace, "Online"), PATIENCE, "the mains back")
    back_since = dt.datetime.fromisoformat(battery(crds, namespace, "shed")["mainsSince"])

    def all_off() -> bool:
        return all(
            get_json(crds, "lsn", n, "-n", namespace)["spec"]["desiredPowerState"] == "Off"
            for n in names.values()
        )

    holds(all_off, time.monotonic() + STABLE_SECONDS + SLACK_SECONDS, "nothing restored at 40%")
    # Charged enough: Last, Hold and Shed come back in that order, the pod runs on Shed.
    ups.set(charge=60)
    for name in names.values():
        wait_phase(crds, namespace, name, "Ready")
    ons = seen_going(watched, start, "on", 3)
    assert ons == [names["last"], names["hold"], names["shed"]], ons
    restored = [
        dt.datetime.fromisoformat(e["lastTimestamp"])
        for e in events_for(crds, namespace, names["last"])
        if e.get("reason") == "ScaleUp"
    ]
    # Event times have whole seconds.
    earliest = (back_since + dt.timedelta(seconds=STABLE_SECONDS)).replace(microsecond=0)
    assert restored and restored[-1] >= earliest, (restored, back_since)
    wait_for(
        lambda: all("outage" not in battery(crds, namespace, t) for t in TIERS),
        PATIENCE,
        "the outage records cleared",
    )
    wait_for(
        lambda: (
            (get_json(crds, "pod", "needs-shed", "-n", namespace) or {})
            .get("spec", {})
            .get("nodeName")
            == names["shed"]
        ),
        PATIENCE,
        "the waiting pod on the Shed machine",
    )

    # (5) The battery recharged, the mains flap every 5 s for 80 s: not one power order.
    ups.set(charge=100, runtime=3000)
    settled = power_orders(bmc, tiers)
    seen = len(offs_and_ons(watched))
    for flip in range(FLIPS):
        # The UPS's script paces this, a state every five seconds, watched for power orders.
        flipped = time.monotonic()
        ups.set(status="OB DISCHRG" if flip % 2 == 0 else "OL CHRG")
        holds(
            lambda: power_orders(bmc, tiers) == settled,
            flipped + 5,
            "no power order while the mains flap",
        )
    ups.set(status="OL CHRG")
    holds(
        lambda: power_orders(bmc, tiers) == settled,
        time.monotonic() + SLACK_SECONDS,
        "no power order after the last flip",
    )
    assert power_orders(bmc, tiers) == settled
    assert offs_and_ons(watched)[seen:] == []
    flips = group_reasons(crds, namespace, "shed").count("MainsLost")
    # The outage's and the flapping's (each of the 8 times on battery lasts some 5 s, 2 polls):
    # most of them seen.
    assert flips >= FLIPS // 2 - 2, flips  # the flapping was seen, and ignored

    # (6) upsd unreachable: a condition and a Warning, and no machine changes.
    ups.pause()
    try:
        wait_for(
            lambda: condition(crds, namespace, "shed", "PowerSourceReachable") == "False",
            PATIENCE,
            "PowerSourceReachable False",
        )
        reasons_until(crds, namespace, "shed", "PowerSourceUnreachable")
        holds(
            lambda: power_orders(bmc, tiers) == settled,
            time.monotonic() + SLACK_SECONDS,
            "no power order on a guess",
        )
    finally:
        ups.resume()
    wait_for(
        lambda: condition(crds, namespace, "shed", "PowerSourceReachable") == "True",
        PATIENCE,
        "PowerSourceReachable True again",
    )


#: A long-lived access token (a JWT in life): long and unique, so finding it anywhere is a leak.
HA_TOKEN = "eyJhbGciOiJIUzI1NiJ9.e2e-ups-token-7d2b41.c2lnbmF0dXJl"


@pytest.fixture
def shed_only(namespace: str) -> Fleet:
    return Fleet(namespace, {"shed": SIZES["shed"]})


@pytest.fixture
def shed_bmc(
    kube_api: client.ApiClient, cluster: Cluster, shed_only: Fleet
) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, shed_only, power_state="On") as (bmc, _):
        yield bmc


def test_a_ups_read_through_home_assistant_sheds_and_a_refused_token_changes_nothing(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    shed_only: Fleet,
    shed_bmc: SushyEmulator,
) -> None:
    with HomeAssistant(token=HA_TOKEN, ups="rack") as ha:
        ha.set_ups(status="OL CHRG", charge=100, runtime=3000)
        source = {
            "url": ha.endpoint,
            "tokenSecretRef": {"name": "ha-ups"},
            "statusEntity": ha.ups_entity("status"),
            "chargeEntity": ha.ups_entity("charge"),
            "runtimeEntity": ha.ups_entity("runtime"),
        }
        group = fleet.group(
            "shed",
            autoscaler="builtin",
            minNodes=1,
            battery={
                "source": {"homeAssistant": source},
                "tier": "Shed",
                "pollSeconds": POLL_SECONDS,
                "restore": {"stableSeconds": STABLE_SECONDS, "chargePercent": 50},
            },
        )
        # Running already: Ready without a Job.
        wait_found_running(crds, list(shed_only.names().values()))
        (node,) = shed_only.nodes(shed_bmc, group="shed", desired="On")
        token = fleet.secret("ha-ups", {"token": HA_TOKEN})
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(shed_bmc), token, group, node])
        name = shed_only.name("shed")
        with diagnosed(crds, namespace):
            wait_phase(crds, namespace, name, "Ready")
            wait_for(
                lambda: battery(crds, namespace, "shed").get("mains") == "Online",
                PATIENCE,
                "the UPS read online through Home Assistant",
            )
            assert battery(crds, namespace, "shed")["source"] == (
                f"sensor.rack_status_data@127.0.0.1:{ha.port}"
            )

            # The mains fail: the Shed machine goes off, the outage recorded first.
            ha.set_ups(status="OB DISCHRG", charge=90, runtime=2400)
            wait_phase(crds, namespace, name, "Off")
            read = battery(crds, namespace, "shed")
            assert (read["mains"], read["chargePercent"], read["runtimeSeconds"]) == (
                "OnBattery",
                90,
                2400,
            )
            assert (read.get("outage") or {}).get("restore") == [name], read
            said = group_reasons(crds, namespace, "shed")
            assert "MainsLost" in said and "OutageRecorded" in said, said

            # The token revoked in Home Assistant: unreadable, said with the Secret to fix.
            orders = power_orders(shed_bmc, shed_only)
            ha.token = "a-new-token-the-secret-does-not-hold-yet"
            wait_for(
                lambda: condition(crds, namespace, "shed", "PowerSourceReachable") == "False",
                PATIENCE,
                "PowerSourceReachable False",
            )
            refused = f"refused the token in Secret {namespace}/ha-ups key token"
            warned(crds, namespace, "shed", refused, "PowerSourceUnreachable")
            # The entities say the mains are back, but nothing is restored on a guess.
            ha.set_ups(status="OL CHRG", charge=100)
            holds(
                lambda: (
                    power_orders(shed_bmc, shed_only) == orders
                    and get_json(crds, "lsn", name, "-n", namespace)["spec"]["desiredPowerState"]
                    == "Off"
                ),
                time.monotonic() + STABLE_SECONDS + SLACK_SECONDS,
                "no power order while Home Assistant refuses the token",
            )
            assert battery(crds, namespace, "shed")["mains"] == "Unknown"

        seen = [
            operator.log_path.read_text(errors="replace"),
            crds.kubectl("get", "events", "-n", namespace, "-o", "json").stdout,
            json.dumps(get_json(crds, "lsg", "shed", "-n", namespace)),
        ]
        assert not [text for text in seen if HA_TOKEN in text], "the token leaked"
