"""A UPS read through Home Assistant (`spec.battery.source.homeAssistant`): the one-of with
`nut`, the reader against the lab's Home Assistant (`lightsout_lab.plug_apis.HomeAssistant`, on
127.0.0.1 in this process) giving the Reading a NUT server gives, each error in words that say
what to fix, and the token in no error, status patch, event or log line.

The planner's rules are NUT's (tests/unit/test_battery.py): only the read differs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from lightsout.execution.homeassistant import REFUSED_SECONDS, EntityState, ReadError
from lightsout.execution.ups import NutReader, PowerSources
from lightsout.execution.ups_homeassistant import HomeAssistantUps, variables
from lightsout.models.battery import BatteryPolicy, HomeAssistantSource, PowerSource
from lightsout.models.crd import crd_objects
from lightsout.models.enums import Mains
from lightsout.models.schema import walk
from lightsout.planning.autoscaler.battery import source_name
from lightsout.planning.energy import mains
from lightsout_lab.nut import NutServer
from lightsout_lab.plug_apis import HomeAssistant

pytestmark = pytest.mark.unit

#: Long and unique, so finding it anywhere is a leak and not a coincidence.
TOKEN = "eyJhbGciOiJIUzI1NiJ9.lab-ups-token-4f1c9e.c2lnbmF0dXJl"
NAMESPACE = "lab"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def source_block(url: str = "http://127.0.0.1:8123", **entities: str) -> dict[str, Any]:
    return {
        "url": url,
        "tokenSecretRef": {"name": "ha-ups"},
        "statusEntity": "sensor.rack_status_data",
        **entities,
    }


ALL_FIGURES = {
    "chargeEntity": "sensor.rack_battery_charge",
    "runtimeEntity": "sensor.rack_battery_runtime",
    "loadEntity": "sensor.rack_load",
}


# ------------------------------------------------------------------------------------ the API
def test_a_source_is_nut_or_home_assistant_never_both_nor_neither() -> None:
    nut = {"host": "nut.home.arpa", "ups": "rack"}
    named = PowerSource.model_validate({"nut": nut}).name
    assert named == "rack@nut.home.arpa:3493"
    home = PowerSource.model_validate({"homeAssistant": source_block("http://ha.home.arpa:8123/")})
    assert home.name == "sensor.rack_status_data@ha.home.arpa:8123"
    assert home.home_assistant is not None
    assert home.home_assistant.token_secret_ref.key == "token"  # as the plug driver's
    https = PowerSource.model_validate({"homeAssistant": source_block("https://ha.home.arpa")})
    assert https.name == "sensor.rack_status_data@ha.home.arpa:443"

    for bad in ({}, {"nut": nut, "homeAssistant": source_block()}):
        with pytest.raises(ValidationError, match="exactly one of nut or homeAssistant"):
            PowerSource.model_validate(bad)
    with pytest.raises(ValidationError, match="statusEntity"):
        PowerSource.model_validate({"homeAssistant": {**source_block(), "statusEntity": None}})
    with pytest.raises(ValidationError, match="sensor"):
        PowerSource.model_validate(
            {"homeAssistant": source_block(chargeEntity="switch.rack_battery_charge")}
        )


def test_the_crd_refuses_both_and_neither_with_the_same_words() -> None:
    (group,) = [c for c in crd_objects() if c["spec"]["names"]["kind"] == "Group"]
    schema = group["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    source = dict(walk(schema))["spec.battery.source"]
    (rule,) = source["x-kubernetes-validations"]
    assert rule == {
        "rule": "has(self.nut) != has(self.homeAssistant)",
        "message": "exactly one of nut or homeAssistant must be set",
    }
    assert "required" not in source
    assert source["properties"]["homeAssistant"]["required"] == [
        "url",
        "tokenSecretRef",
        "statusEntity",
    ]


def test_groups_naming_one_entity_share_the_ups_as_nut_groups_do() -> None:
    policy = BatteryPolicy.model_validate({"source": {"homeAssistant": source_block()}})
    assert source_name(policy) == "sensor.rack_status_data@127.0.0.1:8123"


# ------------------------------------------------------------------------- states → variables
@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (
            {"status": ("OL CHRG", None), "charge": ("100", "%"), "runtime": ("1800", "s")},
            {"ups.status": "OL CHRG", "battery.charge": "100", "battery.runtime": "1800"},
        ),
        # A user may show the runtime in minutes; a unit not known leaves it unknown.
        ({"runtime": ("15", "min")}, {"battery.runtime": "900"}),
        ({"runtime": ("0.25", "h")}, {"battery.runtime": "900"}),
        ({"runtime": ("15", "fortnights")}, {}),
        # Not a number: that figure unknown, the rest read.
        ({"charge": ("n/a", "%"), "load": ("23.5", "%")}, {"ups.load": "23.5"}),
        ({"charge": ("nan", "%")}, {}),
        ({"charge": ("80", "V")}, {}),
    ],
)
def test_states_become_nuts_variables(
    states: dict[str, tuple[str, str | None]], expected: dict[str, str]
) -> None:
    source = HomeAssistantSource.model_validate(source_block(**ALL_FIGURES))
    entity = {
        "status": source.status_entity,
        "charge": source.charge_entity,
        "runtime": source.runtime_entity,
        "load": source.load_entity,
    }
    given = {"status": ("OB DISCHRG", None), **states}
    read = variables(
        source, {str(entity[k]): EntityState(state, unit) for k, (state, unit) in given.items()}
    )
    assert read == {"ups.status": given["status"][0], **expected}


@pytest.mark.parametrize(
    ("status", "charge", "said"),
    [
        ("unavailable", "90", "sensor.rack_status_data is unavailable in Home Assistant"),
        ("unknown", "90", "sensor.rack_status_data is unknown in Home Assistant"),
        ("OB DISCHRG", "unavailable", "sensor.rack_battery_charge is unavailable"),
        ("On Battery", "90", "not NUT status flags"),
    ],
)
def test_a_state_that_tells_nothing_is_an_error_naming_the_entity(
    status: str, charge: str, said: str
) -> None:
    source = HomeAssistantSource.model_validate(
        source_block(chargeEntity="sensor.rack_battery_charge")
    )
    states = {
        "sensor.rack_status_data": EntityState(status),
        "sensor.rack_battery_charge": EntityState(charge, "%"),
    }
    with pytest.raises(ReadError, match=said):
        variables(source, states)


# ------------------------------------------------------------------ the reader and the lab's HA
class SecretsApi:
    """The one call the reader makes of `k8s.api.Api`, and the writes of `PowerSources`."""

    def __init__(self, secrets: dict[tuple[str, str], dict[str, str]]) -> None:
        self.secrets = secrets
        self.forbidden = False
        self.reads = 0
        self.patches: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        self.reads += 1
        if self.forbidden:
            raise PermissionError(f'403 secrets "{name}" is forbidden')
        data = self.secrets.get((namespace, name))
        if data is None:
            return None
        return data[key].strip()  # KeyError when missing, as Api's

    def patch_status(self, _namespace: str, _plural: str, _name: str, status: Any) -> None:
        self.patches.append(dict(status))

    def post_event(self, _on: Any, kind: str, reason: str, message: str, _by: str) -> None:
        self.events.append((kind, reason, message))


@pytest.fixture
def ha() -> Iterator[HomeAssistant]:
    with HomeAssistant(token=TOKEN, ups="rack") as api:
        api.set_ups(status="OL CHRG", charge=100, runtime=1800, load=23)
        yield api


@pytest.fixture
def secrets() -> SecretsApi:
    return SecretsApi({(NAMESPACE, "ha-ups"): {"token": TOKEN + "\n"}})


def reader(ha: HomeAssistant, api: SecretsApi, **entities: str) -> HomeAssistantUps:
    source = HomeAssistantSource.model_validate(source_block(ha.endpoint, **entities))
    return HomeAssistantUps(api, NAMESPACE, source, timeout=2.0)  # type: ignore[arg-type]


def read(ups: HomeAssistantUps) -> mains.Reading:
    return asyncio.run(ups.read())


def test_the_reader_reads_what_home_assistant_shows_as_a_nut_reading(
    ha: HomeAssistant, secrets: SecretsApi
) -> None:
    ups = reader(ha, secrets, **ALL_FIGURES)
    first = read(ups)
    assert first == mains.Reading(
        {
            "ups.status": "OL CHRG",
            "battery.charge": "100",
            "battery.runtime": "1800",
            "ups.load": "23",
        }
    )

    ha.set_ups(status="OB DISCHRG", charge=80.5, runtime=15, runtime_unit="min")
    on_battery = read(ups)
    status = mains.observe(None, "sensor.rack_status_data@x", on_battery, NOW)
    assert (status.mains, status.ups_status, status.error) == (Mains.ON_BATTERY, "DISCHRG OB", None)
    assert (status.charge_percent, status.runtime_seconds, status.load_percent) == (80.5, 900, 23)

    ha.set_ups(status="OB DISCHRG LB", charge="unknown-ish")
    low = mains.observe(status, "sensor.rack_status_data@x", read(ups), NOW)
    assert (low.mains, low.charge_percent, low.error) == (Mains.LOW_BATTERY, None, None)
    assert secrets.reads == 1, "the token is kept, not read again each poll"
    assert all(path.startswith("/api/states/sensor.rack_") for _, path in ha.requests())


def test_only_the_status_is_needed(ha: HomeAssistant, secrets: SecretsApi) -> None:
    assert read(reader(ha, secrets)) == mains.Reading({"ups.status": "OL CHRG"})
    assert [path for _, path in ha.requests()] == ["/api/states/sensor.rack_status_data"]


def test_a_refused_token_names_its_secret_and_is_not_sent_again_until_it_changes(
    ha: HomeAssistant, secrets: SecretsApi
) -> None:
    clock = [0.0]
    ups = reader(ha, secrets)
    ups.clock = lambda: clock[0]
    assert read(ups).error is None
    ha.token = "a-new-token-made-in-home-assistant"  # the old one revoked

    refused = read(ups)
    assert refused.variables == {}
    assert refused.error == (
        f"Home Assistant at 127.0.0.1:{ha.port} refused the token in Secret lab/ha-ups key "
        "token (HTTP 401): put a valid long-lived access token there"
    )
    asked = len(ha.requests())
    clock[0] += 5
    assert read(ups).error == refused.error, "the same words: one event, not one per poll"
    assert len(ha.requests()) == asked, "a refused token is not sent again"
    assert secrets.reads == 2, "the Secret is read again after a refusal"

    clock[0] += REFUSED_SECONDS
    assert read(ups).error == refused.error
    assert len(ha.requests()) == asked + 1, "tried again after REFUSED_SECONDS"

    secrets.secrets[(NAMESPACE, "ha-ups")]["token"] = "a-new-token-made-in-home-assistant"
    clock[0] += 5
    assert read(ups) == mains.Reading({"ups.status": "OL CHRG"}), "the new token, at once"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("no-secret", "Secret lab/ha-ups not found"),
        ("no-key", "Secret lab/ha-ups has no key token"),
        ("forbidden", "may not read Secret lab/ha-ups"),
        ("blank", "Secret lab/ha-ups key token holds no token"),
        ("not-a-header", "Secret lab/ha-ups key token holds no token"),
        ("missing-entity", "has no entity sensor.rack_battery_runtime (HTTP 404)"),
        ("unavailable", "sensor.rack_status_data is unavailable in Home Assistant"),
        ("down", "cannot reach Home Assistant at 127.0.0.1:"),
    ],
)
def test_each_error_says_what_to_fix(
    ha: HomeAssistant, secrets: SecretsApi, change: str, said: str
) -> None:
    entities = {}
    ha.set_ups(status="OB DISCHRG")
    if change == "no-secret":
        secrets.secrets.clear()
    elif change == "no-key":
        secrets.secrets[(NAMESPACE, "ha-ups")] = {"ha-token": TOKEN}
    elif change == "forbidden":
        secrets.forbidden = True
    elif change == "blank":
        secrets.secrets[(NAMESPACE, "ha-ups")] = {"token": "  \n"}
    elif change == "not-a-header":
        secrets.secrets[(NAMESPACE, "ha-ups")] = {"token": TOKEN + "\nX-Evil: 1"}
    elif change == "missing-entity":
        entities = {"runtimeEntity": "sensor.rack_battery_runtime_disabled"}
        said = said.replace("runtime", "runtime_disabled")
    elif change == "unavailable":
        ha.ups_unavailable()
    elif change == "down":
        ha.unreachable = True

    reading = read(reader(ha, secrets, **entities))
    assert reading.variables == {}
    assert reading.error is not None and said in reading.error, reading.error
    if change == "forbidden":
        assert "upsTokenSecrets" in reading.error
    assert TOKEN not in reading.error


def test_the_token_is_in_no_status_event_or_log_line(
    ha: HomeAssistant, secrets: SecretsApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    group = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "shed", "namespace": NAMESPACE, "uid": "u1"},
        "spec": {"battery": {"source": {"homeAssistant": source_block(ha.endpoint)}}},
    }
    sources = PowerSources(secrets, groups=lambda: [group], leading=lambda: True)  # type: ignore[arg-type]
    policy = BatteryPolicy.model_validate(group["spec"]["battery"])
    name = source_name(policy)

    async def polls() -> None:
        await sources._poll(name, [(group, policy)])  # online
        ha.set_ups(status="OB DISCHRG")
        await sources._poll(name, [(group, policy)])  # on battery
        ha.token = "revoked-and-replaced-in-home-assistant"
        await sources._poll(name, [(group, policy)])  # refused
        sources.close()

    asyncio.run(polls())
    reasons = [reason for _, reason, _ in secrets.events]
    assert reasons == ["MainsLost", "PowerSourceUnreachable"]
    unreachable = secrets.events[-1][2]
    assert "refused the token in Secret lab/ha-ups key token" in unreachable
    last = secrets.patches[-1]
    assert last["battery"]["mains"] == "Unknown"
    (reachable,) = [c for c in last["conditions"] if c["type"] == "PowerSourceReachable"]
    assert (reachable["status"], reachable["reason"]) == ("False", "Unreachable")
    seen = repr(secrets.patches) + repr(secrets.events) + caplog.text
    assert "refused the token" in seen and TOKEN not in seen


def fed_group(name: str, namespace: str, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"battery": {"source": source}},
    }


def test_one_reader_per_nut_ups_and_per_namespace_through_home_assistant(
    ha: HomeAssistant,
) -> None:
    """A NUT UPS is read once for every Group naming it; Home Assistant once per namespace, each
    with its own namespace's token (a Group never reads through another namespace's)."""
    with NutServer(status="OB DISCHRG", charge=70, runtime=600) as nut:
        nut_source = {"nut": {"host": nut.host, "port": nut.port, "ups": nut.ups}}
        ha_source = {"homeAssistant": source_block(ha.endpoint)}
        groups = [
            fed_group("a", "lab", nut_source),
            fed_group("b", "media", nut_source),
            fed_group("c", "lab", ha_source),
            fed_group("d", "media", ha_source),
        ]
        api = SecretsApi(
            {("lab", "ha-ups"): {"token": TOKEN}, ("media", "ha-ups"): {"token": "wrong-token"}}
        )
        sources = PowerSources(api, groups=lambda: groups, leading=lambda: True)  # type: ignore[arg-type]
        fed = sources._fed()
        assert sorted(fed) == [nut.address, f"sensor.rack_status_data@127.0.0.1:{ha.port}"]

        readers: list[Any] = []

        async def poll_all() -> None:
            for source, fed_groups in fed.items():
                await sources._poll(source, fed_groups)
            readers.extend(sources.readers.values())
            sources.close()  # in the loop, as the operator's clean-up does

        asyncio.run(poll_all())
        assert [type(r).__name__ for r in readers] == [
            NutReader.__name__,
            HomeAssistantUps.__name__,
            HomeAssistantUps.__name__,
        ]
        assert api.reads == 2, "each namespace's Secret read once"
        written = [p["battery"] for p in api.patches]
        assert [(b["mains"], b["chargePercent"]) for b in written[:2]] == [("OnBattery", 70)] * 2
        assert (written[2]["mains"], written[2]["upsStatus"]) == ("Online", "CHRG OL")
        assert written[3]["mains"] == "Unknown"
        assert "refused the token in Secret media/ha-ups key token" in written[3]["error"]
        assert sources.readers == {}
