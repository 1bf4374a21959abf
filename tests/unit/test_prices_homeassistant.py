"""A Group's day-ahead prices from a Home Assistant sensor
(`spec.electricity.series.homeAssistant`): the one-of with `configMapKeyRef`; the sensor's
attributes read strictly (both days, a day the clocks change, quarter-hours, no tomorrow yet,
Tibber's names, and every way they can be garbled, named); the reader against the lab's Home
Assistant (`lightsout_lab.plug_apis`, on 127.0.0.1 in this process); the operator's ConfigMap
written once per change, owned by the Group, never over someone else's; the events; the token
in no event, ConfigMap or log line; and the Group's series resolved from that ConfigMap like
any other.

The token's handling (kept, a refused one not sent again) is shared with the UPS reader and
tested there (tests/unit/test_ups_homeassistant.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from lightsout.execution.homeassistant import EntityState, ReadError, fetch_states
from lightsout.execution.prices import PriceSensors
from lightsout.execution.prices_homeassistant import HomeAssistantPriceReader, sensor_prices
from lightsout.models.crd import crd_objects
from lightsout.models.group import (
    Electricity,
    HomeAssistantPrices,
    PriceSeries,
    prices_config_map,
)
from lightsout.models.schema import walk
from lightsout.state.series import config_maps, parse, resolve
from lightsout_lab.plug_apis import PRICE_SENSOR, HomeAssistant

pytestmark = pytest.mark.unit

#: Long and unique, so finding it anywhere is a leak and not a coincidence.
TOKEN = "eyJhbGciOiJIUzI1NiJ9.lab-price-token-8c2e51.c2lnbmF0dXJl"
NAMESPACE = "lab"
ENTITY = "sensor.nordpool_kwh_de_lu_eur_3_10_0"
HOUR = timedelta(hours=1)
MIDNIGHT = datetime(2026, 3, 10, 23, tzinfo=UTC)  # 00:00 in Berlin


def sensor_block(url: str = "http://127.0.0.1:8123", **extra: Any) -> dict[str, Any]:
    return {"url": url, "tokenSecretRef": {"name": "ha-prices"}, "entity": ENTITY, **extra}


# ------------------------------------------------------------------------------------ the API
def test_a_series_is_a_configmap_or_a_sensor_never_both_nor_neither() -> None:
    sensor = PriceSeries.model_validate({"homeAssistant": sensor_block(), "markupPerKWh": 0.18})
    assert sensor.home_assistant is not None and sensor.config_map_key_ref is None
    assert sensor.home_assistant.poll_seconds == 900, "every quarter of an hour by default"
    assert sensor.home_assistant.token_secret_ref.key == "token"
    ref = {"name": "day-ahead", "key": "prices.csv"}
    assert PriceSeries.model_validate({"configMapKeyRef": ref}).home_assistant is None

    for bad in ({}, {"configMapKeyRef": ref, "homeAssistant": sensor_block()}):
        with pytest.raises(
            ValidationError, match="exactly one of configMapKeyRef or homeAssistant"
        ):
            PriceSeries.model_validate(bad)
    with pytest.raises(ValidationError, match="unit applies to configMapKeyRef only"):
        PriceSeries.model_validate({"homeAssistant": sensor_block(), "unit": "PerMWh"})
    with pytest.raises(ValidationError, match="entity"):
        PriceSeries.model_validate({"homeAssistant": {**sensor_block(), "entity": "switch.x"}})
    with pytest.raises(ValidationError, match="pollSeconds"):
        PriceSeries.model_validate({"homeAssistant": sensor_block(pollSeconds=1)})


def test_the_crd_refuses_both_and_neither_with_the_same_words() -> None:
    (group,) = [c for c in crd_objects() if c["spec"]["names"]["kind"] == "Group"]
    schema = group["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    series = dict(walk(schema))["spec.electricity.series"]
    one_of, unit = series["x-kubernetes-validations"]
    assert one_of == {
        "rule": "has(self.configMapKeyRef) != has(self.homeAssistant)",
        "message": "exactly one of configMapKeyRef or homeAssistant must be set",
    }
    assert unit["fieldPath"] == ".unit"
    assert "required" not in series
    assert series["properties"]["homeAssistant"]["required"] == ["url", "tokenSecretRef", "entity"]


def test_the_configmap_is_named_after_the_group_within_the_name_limit() -> None:
    assert prices_config_map("house") == "lightsout-prices-house"
    long_a, long_b = "a" * 240 + ".b", "a" * 240 + ".c"
    for name in (long_a, long_b):
        cut = prices_config_map(name)
        assert len(cut) <= 253 and cut.startswith("lightsout-prices-aaaa")
    assert prices_config_map(long_a) != prices_config_map(long_b)


# ------------------------------------------------------------------- attributes → prices per kWh
def entry(start: str, end: str | None, value: object) -> dict[str, object]:
    found: dict[str, object] = {"start": start, "value": value}
    if end is not None:
        found["end"] = end
    return found


def hours(day: str, values: list[float], offset: str = "+01:00") -> list[dict[str, object]]:
    """Hourly Nord Pool entries of one day from its local midnight (no DST change in it)."""
    out = []
    for hour, value in enumerate(values):
        end = f"{day}T{hour + 1:02d}:00:00{offset}" if hour < 23 else None
        out.append(entry(f"{day}T{hour:02d}:00:00{offset}", end, value))
    return out


def state(unit: str | None = "EUR/kWh", text: str = "0.25", **attributes: Any) -> EntityState:
    return EntityState(text, unit, {"unit_of_measurement": unit, **attributes})


def test_today_and_tomorrow_become_one_series_per_kwh() -> None:
    today = hours("2026-03-11", [61.9, 58.0, *[70.0] * 22])
    tomorrow = hours("2026-03-12", [40.0, *[80.0] * 22, 120.5])
    read = sensor_prices(
        ENTITY,
        state("EUR/MWh", raw_today=today, raw_tomorrow=tomorrow, tomorrow_valid=True),
        "EUR",
    )
    series = read.series
    assert len(series.starts) == 48
    assert series.starts[:2] == (MIDNIGHT, MIDNIGHT + HOUR)
    assert series.starts[24] == MIDNIGHT + 24 * HOUR, "tomorrow follows today"
    assert series.end == MIDNIGHT + 48 * HOUR
    assert series.at(MIDNIGHT) == pytest.approx(0.0619)
    assert series.at(MIDNIGHT + 24 * HOUR) == pytest.approx(0.04)
    assert series.at(MIDNIGHT + 47 * HOUR) == pytest.approx(0.1205)
    # What the ConfigMap holds reads back as the same series.
    assert parse(read.csv()) == series
    assert read.csv().splitlines()[1:3] == ["start,price_per_kwh", "2026-03-10T23:00:00Z,0.0619"]


def test_a_day_the_clocks_change_is_read_by_its_offsets() -> None:
    # 2026-03-29 in Berlin: 02:00 does not exist, the hour after 01:00+01:00 is 03:00+02:00.
    spring = [
        entry("2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", 10),
        entry("2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00", 20),
        entry("2026-03-29T04:00:00+02:00", "2026-03-29T05:00:00+02:00", 30),
    ]
    series = sensor_prices(ENTITY, state(raw_today=spring, raw_tomorrow=[]), "EUR").series
    assert [s.hour for s in series.starts] == [0, 1, 2]  # UTC: one hour apart
    # 2026-10-25: 02:00 comes twice, once with each offset.
    autumn = [
        entry("2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", 10),
        entry("2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00", 20),
    ]
    series = sensor_prices(ENTITY, state(raw_today=autumn, raw_tomorrow=[]), "EUR").series
    assert [s.hour for s in series.starts] == [0, 1] and series.values == (10, 20)


def test_quarter_hours_last_a_quarter_of_an_hour() -> None:
    quarters = [
        entry(f"2026-03-11T00:{m:02d}:00+01:00", f"2026-03-11T00:{m + 15:02d}:00+01:00", m)
        for m in (0, 15, 30)
    ]
    series = sensor_prices(ENTITY, state(raw_today=quarters, raw_tomorrow=[]), "EUR").series
    assert series.last == timedelta(minutes=15)
    assert series.end == datetime(2026, 3, 10, 23, 45, tzinfo=UTC)


@pytest.mark.parametrize(
    "tomorrow",
    [
        {"raw_tomorrow": [], "tomorrow_valid": False},  # before the auction publishes
        {},  # no attribute at all
        {"raw_tomorrow": None},
        # Incomplete: the integration says so, and it is left out whatever it holds.
        {"raw_tomorrow": hours("2026-03-12", [1.0]), "tomorrow_valid": False},
    ],
)
def test_without_tomorrow_today_is_the_series(tomorrow: dict[str, Any]) -> None:
    read = sensor_prices(ENTITY, state(raw_today=hours("2026-03-11", [1, 2, 3]), **tomorrow), "EUR")
    assert read.series.values == (1, 2, 3)


def test_tibbers_shape_is_read_too() -> None:
    today = [
        {"startsAt": "2026-03-11T00:00:00.000+01:00", "total": 0.31, "level": "NORMAL"},
        {"startsAt": "2026-03-11T01:00:00.000+01:00", "total": 0.29, "level": "CHEAP"},
    ]
    read = sensor_prices(ENTITY, state("NOK/kWh", today=today, tomorrow=[]), "NOK")
    assert read.series.values == (0.31, 0.29) and read.unit == "NOK/kWh"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (state(), "has no attribute raw_today (the Nord Pool integration's) nor today"),
        # Nord Pool's own `today` is bare numbers: not a list of entries.
        (state(today=[0.1, 0.2]), "has no attribute raw_today"),
        (state(text="unavailable"), f"{ENTITY} is unavailable in Home Assistant"),
        (state(raw_today="0.1,0.2"), "attribute raw_today is not a list of prices"),
        (state(raw_today=[1.5, 2.5]), "raw_today[0] is not an entry with a start and a value"),
        (state(raw_today=[{"value": 1}]), "raw_today[0] has no start nor startsAt"),
        (state(raw_today=[{"start": "2026-03-11T00:00:00+01:00"}]), "has no value nor total"),
        (
            state(raw_today=[entry("2026-03-11T00:00:00", None, 1)]),
            "raw_today[0].start '2026-03-11T00:00:00' is not an ISO 8601 time with offset",
        ),
        (
            state(raw_today=[entry("2026-03-11T00:00:00Z", "tomorrow", 1)]),
            "raw_today[0].end 'tomorrow' is not an ISO 8601 time",
        ),
        (
            state(raw_today=[*hours("2026-03-11", [1]), entry("2026-03-11T01:00Z", None, "2")]),
            "raw_today[1].value '2' is not a finite number",
        ),
        (
            state(raw_today=[*hours("2026-03-11", [1]), entry("2026-03-11T01:00Z", None, None)]),
            "raw_today[1] has no value nor total",
        ),
        (
            state(raw_today=[*hours("2026-03-11", [1]), entry("2026-03-11T01:00Z", None, True)]),
            "raw_today[1].value True is not a finite number",
        ),
        (
            state(raw_today=hours("2026-03-11", [1, 2])[::-1]),
            "raw_today[1] starts at 2026-03-10T23:00:00Z, not after raw_today[0]",
        ),
        (
            state(raw_today=[hours("2026-03-11", [1])[0], hours("2026-03-11", [1, 2, 3])[2]]),
            "raw_today[0] ends at 2026-03-11T00:00:00Z but raw_today[1] starts at "
            "2026-03-11T01:00:00Z: the series cannot hold a gap",
        ),
        (
            state(raw_today=hours("2026-03-11", [1]), raw_tomorrow=[]),
            "fewer than two prices in raw_today and raw_tomorrow",
        ),
        (
            state(raw_today=hours("2026-03-11", [1, 2]), raw_tomorrow={"2026-03-12": 1}),
            "attribute raw_tomorrow is not a list",
        ),
        (state("EUR/Wh", raw_today=hours("2026-03-11", [1, 2])), "is in 'EUR/Wh': only a price"),
        (state("%", raw_today=hours("2026-03-11", [1, 2])), "is in '%': only a price per kWh"),
        (state(None, raw_today=hours("2026-03-11", [1, 2])), "has no unit_of_measurement"),
        # A price is not converted: cents, or another currency, would price every hour wrong.
        (
            state("c/kWh", raw_today=hours("2026-03-11", [1, 2])),
            "is in 'c/kWh', the Group's prices in EUR (spec.electricity.currency)",
        ),
        (state("SEK/kWh", raw_today=hours("2026-03-11", [1, 2])), "is in 'SEK/kWh', the Group's"),
    ],
)
def test_what_does_not_read_is_refused_naming_the_attribute(given: EntityState, says: str) -> None:
    with pytest.raises(ReadError) as refused:
        sensor_prices(ENTITY, given, "EUR")
    assert says in str(refused.value)
    assert str(refused.value).startswith(ENTITY)


# ------------------------------------------------------------------ the reader and the lab's HA
@pytest.fixture
def ha() -> Iterator[HomeAssistant]:
    with HomeAssistant(token=TOKEN) as api:
        api.set_prices(
            today=[(MIDNIGHT + n * HOUR, 100.0 + n) for n in range(24)],
            tomorrow=[(MIDNIGHT + (24 + n) * HOUR, 50.0 + n) for n in range(24)],
            unit="EUR/MWh",
        )
        yield api


class PricesApi:
    """The calls the price task makes of `k8s.api.Api`: the token, the ConfigMap, events."""

    def __init__(self) -> None:
        self.secrets = {(NAMESPACE, "ha-prices"): {"token": TOKEN}}
        self.maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        data = self.secrets.get((namespace, name))
        return None if data is None else data[key]

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.maps.get((namespace, name))

    def apply_configmap(self, namespace: str, body: dict[str, Any]) -> None:
        self.writes.append(body)
        self.maps[(namespace, body["metadata"]["name"])] = body

    def post_event(self, on: Any, kind: str, reason: str, message: str, _by: str) -> None:
        assert on["kind"] == "Group"
        self.events.append((kind, reason, message))


def house(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "house", "namespace": NAMESPACE, "uid": "uid-house"},
        "spec": {
            "electricity": {
                "pricePerKWh": 0.30,
                "series": {"homeAssistant": sensor_block(url, **extra), "markupPerKWh": 0.18},
            }
        },
    }


def test_the_reader_reads_the_lab_sensor_as_home_assistant_serves_it(ha: HomeAssistant) -> None:
    api = PricesApi()
    sensor = PriceSeries.model_validate(house(ha.endpoint)["spec"]["electricity"]["series"])
    assert sensor.home_assistant is not None
    reader = HomeAssistantPriceReader(api, NAMESPACE, sensor.home_assistant, 2.0)  # type: ignore[arg-type]
    prices, error = asyncio.run(reader.read("EUR"))
    assert error is None and prices is not None
    assert (prices.series.first, prices.series.end) == (MIDNIGHT, MIDNIGHT + 48 * HOUR)
    assert prices.series.at(MIDNIGHT) == pytest.approx(0.1)  # 100 EUR/MWh
    assert prices.series.at(MIDNIGHT + 30 * HOUR) == pytest.approx(0.056)
    assert [path for _, path in ha.requests()] == [f"/api/states/{PRICE_SENSOR}"]


def test_the_lab_sensor_is_shaped_as_the_nord_pool_integrations(ha: HomeAssistant) -> None:
    source = HomeAssistantPrices.model_validate(sensor_block(ha.endpoint))
    attributes = fetch_states(source, [PRICE_SENSOR], TOKEN, 2.0)[PRICE_SENSOR].attributes
    raw_today = attributes["raw_today"]
    assert isinstance(raw_today, list) and len(raw_today) == 24
    assert raw_today[0] == {
        "start": "2026-03-11T00:00:00+01:00",
        "end": "2026-03-11T01:00:00+01:00",
        "value": 100.0,
    }
    assert attributes["unit_of_measurement"] == "EUR/MWh" and attributes["tomorrow_valid"] is True
    assert attributes["today"] == [100.0 + n for n in range(24)]


def price_sensors(api: PricesApi, group: dict[str, Any], *, cached: bool) -> PriceSensors:
    """The price task over one Group; `cached`: its watch cache holds the ConfigMaps written."""
    return PriceSensors(
        api,  # type: ignore[arg-type]
        groups=lambda: [group],
        series_maps=lambda: list(api.maps.values()) if cached else [],
        leading=lambda: True,
    )


def poll(sources: PriceSensors, *rounds: Any) -> None:
    """One poll of each Group per round; a round may be a change made before it."""

    async def polls() -> None:
        for change in rounds:
            if callable(change):
                change()
            for key, (group, electricity, _every) in sources._sensors().items():
                await sources.poll(key, group, electricity)
        sources.close()

    asyncio.run(polls())


def test_the_configmap_is_written_once_per_change_and_owned_by_the_group(
    ha: HomeAssistant,
) -> None:
    api = PricesApi()
    group = house(ha.endpoint)
    sources = price_sensors(api, group, cached=True)

    def cheaper_tomorrow() -> None:
        ha.set_prices(
            today=[(MIDNIGHT + n * HOUR, 100.0 + n) for n in range(24)],
            tomorrow=[(MIDNIGHT + (24 + n) * HOUR, 5.0) for n in range(24)],
            unit="EUR/MWh",
        )

    poll(sources, None, None, cheaper_tomorrow, None)
    assert len(api.writes) == 2, "written at the first read and when the prices changed"
    (first, second) = api.writes
    meta = first["metadata"]
    assert (meta["name"], meta["namespace"]) == ("lightsout-prices-house", NAMESPACE)
    assert meta["labels"] == {
        "lightsout.dev/series": "",
        "app.kubernetes.io/managed-by": "lightsout",
    }
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Group", "house", "uid-house")
    assert owner["apiVersion"] == "lightsout.dev/v1alpha1" and owner["controller"] is True
    assert list(first["data"]) == ["prices.csv"]
    assert meta["annotations"]["lightsout.dev/price-sensor"].startswith(f"{PRICE_SENSOR}@")
    assert ",0.005\n" not in first["data"]["prices.csv"]
    assert ",0.005\n" in second["data"]["prices.csv"]
    assert api.events == [], "nothing to say while every read is written"

    # The Group's series is read from it like any other, the markup added.
    electricity = Electricity.model_validate(group["spec"]["electricity"])
    maps = config_maps(list(api.maps.values()))
    resolved = resolve(electricity, NAMESPACE, maps, group="house")
    assert resolved.problem is None and resolved.prices is not None
    assert resolved.prices.at(MIDNIGHT + 30 * HOUR) == pytest.approx(0.005 + 0.18)


def test_an_unreadable_sensor_leaves_the_configmap_and_says_so_once_per_message(
    ha: HomeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api = PricesApi()
    group = house(ha.endpoint)
    sources = price_sensors(api, group, cached=True)

    def revoke() -> None:
        ha.token = "a-new-token-made-in-home-assistant"

    def put_back() -> None:  # the new token, into the Secret
        api.secrets[(NAMESPACE, "ha-prices")]["token"] = ha.token

    def garble() -> None:
        ha.set_state(PRICE_SENSOR, "0.1", raw_today=[{"start": "soon", "value": 1}])

    poll(sources, None, revoke, None, put_back, garble, None)
    assert len(api.writes) == 1, "the prices read first stay while the sensor is unreadable"
    reasons = [(kind, reason) for kind, reason, _ in api.events]
    assert reasons == [
        ("Warning", "PriceSensorUnreadable"),  # the token refused: said once for two polls
        ("Normal", "PriceSensorRead"),
        ("Warning", "PriceSensorUnreadable"),  # garbled
    ]
    refused, read, garbled = (message for _, _, message in api.events)
    assert f"refused the token in Secret {NAMESPACE}/ha-prices key token (HTTP 401)" in refused
    assert read.startswith("read 48 prices from 2026-03-10T23:00:00Z to 2026-03-12T23:00:00Z")
    assert read.endswith(f"from {PRICE_SENSOR} into ConfigMap lightsout-prices-house")
    assert f"{PRICE_SENSOR}'s raw_today[0].start 'soon' is not an ISO 8601 time" in garbled

    seen = repr(api.events) + repr(api.writes) + caplog.text
    assert "refused the token" in seen and TOKEN not in seen


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("no-secret", "Secret lab/ha-prices not found"),
        ("missing-entity", "has no entity sensor.nordpool_mwh_se3_sek_3_10_0 (HTTP 404)"),
        ("unit", f"{PRICE_SENSOR} is in 'EUR/Wh': only a price per kWh or per MWh"),
        ("down", "cannot reach Home Assistant at 127.0.0.1:"),
    ],
)
def test_each_error_is_an_event_that_says_what_to_fix(
    ha: HomeAssistant, change: str, says: str
) -> None:
    api = PricesApi()
    extra = {}
    if change == "no-secret":
        api.secrets.clear()
    elif change == "missing-entity":
        extra = {"entity": "sensor.nordpool_mwh_se3_sek_3_10_0"}
    elif change == "unit":
        ha.set_state(PRICE_SENSOR, "0.1", unit_of_measurement="EUR/Wh")
    elif change == "down":
        ha.unreachable = True
    group = house(ha.endpoint, **extra)
    sources = price_sensors(api, group, cached=False)
    poll(sources, None)
    (event,) = api.events
    assert event[:2] == ("Warning", "PriceSensorUnreadable")
    assert says in event[2] and TOKEN not in event[2]
    assert api.writes == []


def test_a_configmap_of_that_name_that_is_not_the_operators_is_left_alone(
    ha: HomeAssistant,
) -> None:
    api = PricesApi()
    theirs = {"metadata": {"name": "lightsout-prices-house"}, "data": {"notes": "mine"}}
    api.maps[(NAMESPACE, "lightsout-prices-house")] = theirs
    group = house(ha.endpoint)
    sources = price_sensors(api, group, cached=False)
    poll(sources, None, None)
    assert api.writes == [] and api.maps[(NAMESPACE, "lightsout-prices-house")] is theirs
    (event,) = api.events
    assert event[1] == "PricesNotWritten"
    assert "ConfigMap lab/lightsout-prices-house exists and is not the operator's" in event[2]


def test_a_group_not_read_yet_says_so_and_where_to_look() -> None:
    electricity = Electricity.model_validate(house("http://ha:8123")["spec"]["electricity"])
    resolved = resolve(electricity, NAMESPACE, {}, group="house")
    assert resolved.prices is None
    assert resolved.problem == (
        f"spec.electricity.series: the Home Assistant sensor {ENTITY} has not been read yet "
        "(the operator writes its prices into ConfigMap lab/lightsout-prices-house): see the "
        "Group's events"
    )
    # Another Group's prices are not this one's.
    maps = {(NAMESPACE, "lightsout-prices-flat"): {"prices.csv": "x"}}
    assert resolve(electricity, NAMESPACE, maps, group="house").prices is None


class Clock:
    """The one thing `PriceSensors._round` asks of the event loop: its time."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now


def test_a_sensor_is_read_at_once_then_every_poll_and_every_minute_while_it_fails(
    ha: HomeAssistant,
) -> None:
    api = PricesApi()
    group = house(ha.endpoint, pollSeconds=600)
    sources = price_sensors(api, group, cached=True)
    clock = Clock()
    reads: list[float] = []

    async def rounds() -> None:
        for at in (0, 10, 599, 600, 601, 1200, 1230, 1260):
            clock.now = at
            if at == 1200:
                ha.token = "a-new-token-made-in-home-assistant"
            if at == 1230:  # put into the Secret: used at the next try, not the next poll
                api.secrets[(NAMESPACE, "ha-prices")]["token"] = ha.token
            before = len(ha.requests())
            await sources._round(clock)  # type: ignore[arg-type]
            if len(ha.requests()) > before:
                reads.append(at)
        sources.close()

    asyncio.run(rounds())
    assert reads == [0, 600, 1200, 1260], "at start, after pollSeconds, a minute after a failure"
    group["spec"]["electricity"]["series"]["homeAssistant"]["entity"] = "sensor.other_prices"
    assert set(sources._sensors()) - set(sources.due), "a changed block is read at once"
