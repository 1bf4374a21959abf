"""Keeps the prices ConfigMap of each Group priced by a Home Assistant sensor
(`spec.electricity.series.homeAssistant`): the sensor's prices, as a series.

One task, started by `handlers.autoscale` and run by the replica that holds the autoscaler's
Lease (so one operator reads and writes), reads each such Group's sensor through its own
`prices_homeassistant.HomeAssistantPriceReader` (the token is a Secret of the Group's
namespace): at once when it starts leading or the Group's sensor block changes, then every
`pollSeconds` (15 minutes by default), and every `RETRY_SECONDS` at most after a failed read
or write.

A read's prices go into the ConfigMap `models.group.prices_config_map(<group>)`
(`lightsout-prices-<group>`, key `prices.csv`) in the Group's namespace, labelled
`lightsout.dev/series` (the operator's watch caches those, and every reader of series finds
it: `state.series.resolve`) and `app.kubernetes.io/managed-by: lightsout`, owned by the Group
(it goes with it). It is written only when its content differs from the watch cache's copy;
then it is read by name first, and one that is not the operator's is never overwritten. Its
change wakes the planner like any watched change; this module decides nothing.

A read that fails (the Secret, Home Assistant, the token refused, the entity, its attributes,
its unit) leaves the ConfigMap as it is (its prices hold until they end) and posts a
`PriceSensorUnreadable` Warning event on the Group, once per distinct message; a write that
fails, `PricesNotWritten`. The next good read after either posts `PriceSensorRead`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from lightsout import API_GROUP, API_VERSION
from lightsout.execution.jobs import LABEL_MANAGED_BY, MANAGED_BY, owner_reference
from lightsout.execution.prices_homeassistant import HomeAssistantPriceReader, SensorPrices
from lightsout.execution.sensors import GroupKey, GroupSensors, Obj, SensorKey
from lightsout.k8s.api import error_message
from lightsout.models.group import (
    PRICES_KEY,
    SERIES_LABEL,
    Electricity,
    HomeAssistantPrices,
    prices_config_map,
)

#: Seconds one read may take.
READ_TIMEOUT = 5.0
#: Seconds before a failed read or write is tried again (sooner with a shorter pollSeconds).
RETRY_SECONDS = 60.0
#: The annotation saying which sensor a prices ConfigMap was read from.
ANNOTATION_SENSOR = "lightsout.dev/price-sensor"
COMPONENT = "lightsout-prices"
UNREADABLE, NOT_WRITTEN, READ = "PriceSensorUnreadable", "PricesNotWritten", "PriceSensorRead"

log = logging.getLogger(__name__)


class NotOursError(Exception):
    """A ConfigMap of the prices ConfigMap's name exists and is not the operator's."""


def config_map(group: Obj, sensor: HomeAssistantPrices, prices: SensorPrices) -> dict[str, Any]:
    """The prices ConfigMap of `group` (pure)."""
    meta = group["metadata"]
    name = str(meta["name"])
    owner = owner_reference(f"{API_GROUP}/{API_VERSION}", "Group", name, str(meta.get("uid")))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": prices_config_map(name),
            "namespace": str(meta.get("namespace") or ""),
            "labels": {SERIES_LABEL: "", LABEL_MANAGED_BY: MANAGED_BY},
            "annotations": {ANNOTATION_SENSOR: f"{sensor.entity}@{sensor.address}"},
            "ownerReferences": [owner],
        },
        "data": {PRICES_KEY: prices.csv()},
    }


def _sensor(electricity: Electricity) -> HomeAssistantPrices:
    assert electricity.series is not None and electricity.series.home_assistant is not None
    return electricity.series.home_assistant


def _same(current: Obj | None, wanted: Obj) -> bool:
    """Whether `current` is the operator's prices ConfigMap with `wanted`'s content and owner."""
    if current is None:
        return False
    meta, want = current.get("metadata") or {}, wanted["metadata"]
    return (
        (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY
        and [o.get("uid") for o in meta.get("ownerReferences") or ()]
        == [o["uid"] for o in want["ownerReferences"]]
        and dict(current.get("data") or {}) == wanted["data"]
    )


@dataclass
class PriceSensors(GroupSensors[HomeAssistantPriceReader]):
    """The reading task's state (`sensors.GroupSensors`), and what was last said about each
    Group (None: its last read was written)."""

    _: KW_ONLY
    #: The ConfigMaps labelled `lightsout.dev/series`, as the watch cache holds them.
    series_maps: Callable[[], Iterable[Obj]]
    said: dict[GroupKey, tuple[str, str] | None] = field(default_factory=dict)

    task = "the Groups' price sensors"
    retry = RETRY_SECONDS
    component = COMPONENT

    def sensor_of(self, electricity: Electricity) -> tuple[str, float] | None:
        series = electricity.series
        if series is None or series.home_assistant is None:
            return None
        sensor = series.home_assistant
        # The currency is part of the block: the prices are checked against it.
        return f"{electricity.currency} {sensor.model_dump_json()}", sensor.poll_seconds

    async def poll(self, key: SensorKey, group: Obj, electricity: Electricity) -> bool:
        """Read the Group's sensor once and write its prices; whether both went well."""
        sensor = _sensor(electricity)
        reader = self.readers.get(key)
        if reader is None:
            reader = HomeAssistantPriceReader(self.api, key[0][0], sensor, READ_TIMEOUT)
            self.readers[key] = reader
        prices, error = await reader.read(electricity.currency)
        if prices is None:
            await self._say(key[0], group, (UNREADABLE, str(error)))
            return False
        wanted = config_map(group, sensor, prices)
        meta = wanted["metadata"]
        # On the event loop, where kopf changes its caches.
        cached = next(
            (
                found
                for found in self.series_maps()
                if (found.get("metadata") or {}).get("namespace") == meta["namespace"]
                and (found.get("metadata") or {}).get("name") == meta["name"]
            ),
            None,
        )
        try:
            written = not _same(cached, wanted) and await asyncio.to_thread(self._store, wanted)
        except NotOursError as refused:
            await self._say(key[0], group, (NOT_WRITTEN, str(refused)))
            return False
        except Exception as failed:
            log.exception("writing the prices of group %s/%s failed", *key[0][:2])
            said = f"cannot write the prices ConfigMap: {error_message(failed)}"
            await self._say(key[0], group, (NOT_WRITTEN, said))
            return False
        if written:
            log.info("group %s/%s: wrote %s", *key[0][:2], prices.describe())
        if self.said.get(key[0]) is not None:
            name = prices_config_map(key[0][1])
            message = f"read {prices.describe()} from {sensor.entity} into ConfigMap {name}"
            await self.post(group, "Normal", READ, message)
        self.said[key[0]] = None
        return True

    def _store(self, wanted: Obj) -> bool:
        """Write the prices ConfigMap `wanted` unless it holds them already (the watch cache
        may lag the last write, and holds no unlabelled ConfigMap: read by name first);
        whether it was written."""
        namespace, name = wanted["metadata"]["namespace"], wanted["metadata"]["name"]
        current = self.api.get_configmap(namespace, name)
        if _same(current, wanted):
            return False
        if current is not None:
            labels = (current.get("metadata") or {}).get("labels") or {}
            if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
                raise NotOursError(
                    f"ConfigMap {namespace}/{name} exists and is not the operator's (no label "
                    f"{LABEL_MANAGED_BY}: {MANAGED_BY}): delete or rename it, the operator "
                    "writes the prices of this Group's Home Assistant sensor there"
                )
        self.api.apply_configmap(namespace, wanted)
        return True

    async def _say(self, key: GroupKey, group: Obj, said: tuple[str, str]) -> None:
        """A Warning event, unless the same was said last about this Group."""
        if self.said.get(key) == said:
            return
        self.said[key] = said
        log.warning("group %s/%s: %s: %s", key[0], key[1], *said)
        await self.post(group, "Warning", *said)

    def forgotten(self, kept: Mapping[SensorKey, object]) -> None:
        groups = {group for group, _ in kept}
        self.said = {group: said for group, said in self.said.items() if group in groups}
