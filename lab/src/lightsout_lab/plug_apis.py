"""Three smart-plug APIs on 127.0.0.1, each a thin front-end of one ``PlugMachine`` (Home
Assistant's also of the sensors a test sets: a UPS's, a price sensor).

Who uses it: the e2e tests of the plug drivers (``tests/e2e/test_power_plugs.py``), the
``plug_power`` role's molecule scenario, the UPS read through Home Assistant
(``tests/e2e/test_battery.py``) and its price sensor (``tests/e2e/test_cheap_hours.py``).
Written from the documented APIs (../shared/research/plugs.md, ups.md section 5; the Nord Pool
custom integration's sensor attributes, as its README and sensor describe them); only what the
operator uses is served:

- ``ShellyPlug`` — Shelly Gen2+ RPC over HTTP: ``GET /rpc/Switch.Set?id=0&on=true|false`` →
  ``{"was_on": …}``, ``GET /rpc/Switch.GetStatus?id=0`` → ``output``, ``apower`` (W),
  ``aenergy.total`` (Wh); the same methods as JSON-RPC ``POST /rpc``. A refused relay is an
  RPC error (HTTP 500, ``code`` -114).
- ``TasmotaPlug`` — ``GET /cm?cmnd=Power%20On|Off|Toggle`` (``Power`` alone reads) →
  ``{"POWER": "ON"}``; ``Status 8`` / ``Status 10`` → ``StatusSNS.ENERGY`` with ``Power`` (W)
  and ``Total`` (kWh). A refused relay answers with the state it stayed in, as Tasmota does.
- ``HomeAssistant`` — REST with ``Authorization: Bearer <token>`` (401 ``401: Unauthorized``
  otherwise): ``POST /api/services/switch/turn_on|turn_off`` with ``{"entity_id": …}`` → the
  changed states, ``GET /api/states/<entity>`` for the switch (``on``/``off``) and the
  optional power sensor (``state`` in W). A refused relay changes no state (200, ``[]``).
  Without a machine it has no switch; either way it has the sensors a test sets: a UPS's as
  Home Assistant's NUT integration names them (``sensor.<ups>_status_data`` with NUT's
  ``ups.status`` flags, ``_battery_charge`` in %, ``_battery_runtime`` in s, ``_load`` in %;
  ``set_ups``, ``ups_unavailable``), each state a string with its ``unit_of_measurement``; a
  day-ahead price sensor as the Nord Pool integration shows it (``set_prices``: ``raw_today``
  and ``raw_tomorrow`` lists of ``{start, end, value}``); a solar surplus sensor in W or kW
  (``set_surplus``); any other state and attributes
  (``set_state``); an entity never set is 404 ``{"message": "Entity not found."}``.

Each plug counts the relay orders it passed on (``machine.orders()``) and every API records its
requests (``requests()``). Example::

    with HomeAssistant(PlugMachine(box), token="t0k3n") as ha:
        ...  # a Node with homeassistant.endpoint = ha.endpoint
        assert ha.machine.orders() == []

    with HomeAssistant(token="t0k3n", ups="rack") as ha:
        ha.set_ups(status="OB DISCHRG", charge=80, runtime=900)  # sensor.rack_status_data ...
        ha.set_prices(today=[(midnight, 61.9), ...], unit="EUR/MWh")  # sensor.nordpool_...
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from lightsout_lab.plugs import (
    HttpApi,
    PlugApi,
    PlugMachine,
    PlugRequest,
    RelayRefusedError,
    Response,
)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ShellyPlug(PlugApi):
    """A Shelly Plus Plug S (one switch, id 0, with a meter)."""

    source = "shelly"

    def _status(self) -> dict[str, object]:
        watts = self.machine.watts()
        return {
            "id": 0,
            "source": "http",
            "output": self.machine.relay_on,
            "apower": watts,
            "voltage": 230.1,
            "current": round(watts / 230.1, 3),
            "aenergy": {"total": round(self.machine.energy_wh(), 3), "by_minute": [0, 0, 0]},
            "temperature": {"tC": 41.2, "tF": 106.2},
        }

    def _call(self, method: str, params: Mapping[str, object]) -> tuple[int, dict[str, object]]:
        if str(params.get("id", 0)) != "0":
            return 404, {"code": -105, "message": f"Argument 'id', value {params['id']} not found!"}
        if method == "Switch.GetStatus":
            return 200, self._status()
        if method == "Switch.Set":
            on = params.get("on")
            if isinstance(on, str):
                on = on.lower() == "true"
            if not isinstance(on, bool):
                return 400, {"code": -103, "message": "Missing required argument 'on'!"}
            try:
                return 200, {"was_on": self.machine.set_relay(on, self.source)}
            except RelayRefusedError as err:
                return 500, {"code": -114, "message": f"Resource unavailable: {err}"}
        return 404, {"code": -114, "message": f"No handler for {method}"}

    def answer(self, request: PlugRequest) -> Response:
        method, path, query, body = request.method, request.path, request.query, request.body
        if method == "GET" and path.startswith("/rpc/"):
            return self._call(path.removeprefix("/rpc/"), query)
        if method == "POST" and path == "/rpc":
            rpc = json.loads(body or b"{}")
            status, result = self._call(str(rpc.get("method")), rpc.get("params") or {})
            key = "result" if status == 200 else "error"
            return 200, {"id": rpc.get("id"), "src": "shellyplusplugs-lab", key: result}
        return 404, {"code": 404, "message": "Not Found"}


class TasmotaPlug(PlugApi):
    """A Tasmota plug with an energy monitor (one relay, POWER)."""

    source = "tasmota"

    def _energy(self) -> dict[str, object]:
        return {
            "StatusSNS": {
                "Time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
                "ENERGY": {
                    "TotalStartTime": "2026-01-01T00:00:00",
                    "Total": round(self.machine.energy_wh() / 1000, 6),
                    "Yesterday": 0.0,
                    "Today": round(self.machine.energy_wh() / 1000, 6),
                    "Power": self.machine.watts(),
                    "Voltage": 230,
                    "Current": round(self.machine.watts() / 230, 3),
                },
            }
        }

    def answer(self, request: PlugRequest) -> Response:
        path, query = request.path, request.query
        if path != "/cm":
            return 404, "404: Not Found"
        command, _, argument = query.get("cmnd", "").strip().partition(" ")
        command, argument = command.lower(), argument.strip().lower()
        if command in ("power", "power1"):
            wanted = {"on": True, "1": True, "off": False, "0": False}.get(argument)
            if argument in ("toggle", "2"):
                wanted = not self.machine.relay_on
            if wanted is not None:
                # Tasmota answers with the state the relay is in, switched or not.
                with contextlib.suppress(RelayRefusedError):
                    self.machine.set_relay(wanted, self.source)
            return 200, {"POWER": "ON" if self.machine.relay_on else "OFF"}
        if command == "status" and argument in ("8", "10"):
            return 200, self._energy()
        return 200, {"Command": "Unknown"}


#: The UPS sensors of Home Assistant's NUT integration a test can set: the name ``set_ups``
#: takes → (entity id suffix, attributes). Only the status data sensor has no unit.
UPS_SENSORS: dict[str, tuple[str, dict[str, object]]] = {
    "status": ("status_data", {"friendly_name": "Status data"}),
    "charge": (
        "battery_charge",
        {"unit_of_measurement": "%", "device_class": "battery", "state_class": "measurement"},
    ),
    "runtime": (
        "battery_runtime",
        {"unit_of_measurement": "s", "device_class": "duration", "state_class": "measurement"},
    ),
    "load": ("load", {"unit_of_measurement": "%", "state_class": "measurement"}),
}


#: The entity id ``set_prices`` gives a price sensor unless told otherwise (the Nord Pool
#: integration names its sensors after price type, area, currency, precision, low-price cutoff
#: and VAT).
PRICE_SENSOR = "sensor.nordpool_kwh_de_lu_eur_3_10_0"
#: The entity id ``set_surplus`` gives a solar surplus sensor unless told otherwise.
SURPLUS_SENSOR = "sensor.solar_surplus"


@dataclass
class _Sensor:
    state: str
    attributes: dict[str, object]
    last_changed: str = field(default_factory=_now)
    last_updated: str = field(default_factory=_now)


class HomeAssistant(HttpApi):
    """Home Assistant's REST API with, optionally, one switch entity and a power sensor in front
    of a ``PlugMachine``, and the sensors a test sets (a UPS's, through ``set_ups``)."""

    source = "homeassistant"

    def __init__(
        self,
        machine: PlugMachine | None = None,
        *,
        token: str,
        switch_entity: str = "switch.rack",
        power_entity: str | None = "sensor.rack_power",
        ups: str = "lab",
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(host=host)
        self.machine = machine
        #: The token it accepts; change it to revoke the one a client holds.
        self.token = token
        self.switch_entity = switch_entity
        self.power_entity = power_entity
        #: The NUT UPS name its UPS sensors are named after (``sensor.<ups>_status_data``).
        self.ups = ups
        #: True: every request is dropped unanswered (Home Assistant down).
        self.unreachable = False
        self._sensors: dict[str, _Sensor] = {}

    def dropping(self) -> bool:
        return self.unreachable or (self.machine is not None and self.machine.unreachable)

    # ------------------------------------------------------------------------------ sensors

    def ups_entity(self, name: str) -> str:
        """The entity id of a UPS sensor (``status``, ``charge``, ``runtime``, ``load``)."""
        return f"sensor.{self.ups}_{UPS_SENSORS[name][0]}"

    def set_state(self, entity: str, state: object, **attributes: object) -> None:
        """Give a sensor a state (any value, kept as its string, as Home Assistant keeps it)
        and attributes; ``last_changed`` moves only when the state does."""
        text = str(state)
        with self._lock:
            old = self._sensors.get(entity)
            sensor = _Sensor(text, {**(old.attributes if old else {}), **attributes})
            if old is not None and old.state == text:
                sensor.last_changed = old.last_changed
            self._sensors[entity] = sensor

    def set_ups(
        self,
        *,
        status: str | None = None,
        charge: float | str | None = None,
        runtime: float | str | None = None,
        load: float | str | None = None,
        runtime_unit: str | None = None,
    ) -> None:
        """Set the UPS sensors given; the others keep their state. A sensor exists once set
        (the NUT integration makes entities only for the variables the UPS has); one never set
        is answered 404. ``runtime_unit`` is the unit a user chose to show the runtime in."""
        given = {"status": status, "charge": charge, "runtime": runtime, "load": load}
        for name, value in given.items():
            if value is None:
                continue
            attributes = dict(UPS_SENSORS[name][1])
            attributes["friendly_name"] = f"{self.ups.title()} {name}"
            if name == "runtime" and runtime_unit is not None:
                attributes["unit_of_measurement"] = runtime_unit
            self.set_state(self.ups_entity(name), value, **attributes)

    def set_prices(
        self,
        entity: str = PRICE_SENSOR,
        *,
        today: Sequence[tuple[datetime, float]],
        tomorrow: Sequence[tuple[datetime, float]] = (),
        interval: timedelta = timedelta(hours=1),
        unit: str = "EUR/kWh",
        zone: str = "Europe/Berlin",
    ) -> None:
        """A price sensor as the Nord Pool integration shows one: ``raw_today`` and
        ``raw_tomorrow`` list ``{start, end, value}`` (each interval ``interval`` long, its times
        ISO 8601 in ``zone`` with their offset, as Home Assistant's JSON writes datetimes),
        ``today`` and ``tomorrow`` the bare values, ``tomorrow_valid`` whether tomorrow's are
        there; the state is the price in force now (``unknown`` outside both lists) and
        ``unit_of_measurement`` is ``unit`` (``<currency>/<kWh|MWh|Wh>``)."""
        local = ZoneInfo(zone)

        def raw(day: Sequence[tuple[datetime, float]]) -> list[dict[str, object]]:
            return [
                {
                    "start": start.astimezone(local).isoformat(),
                    "end": (start + interval).astimezone(local).isoformat(),
                    "value": value,
                }
                for start, value in day
            ]

        now = datetime.now(UTC)
        current = [v for start, v in (*today, *tomorrow) if start <= now < start + interval]
        currency, _, energy = unit.partition("/")
        self.set_state(
            entity,
            current[0] if current else "unknown",
            unit_of_measurement=unit,
            device_class="monetary",
            friendly_name="Nord Pool",
            currency=currency,
            unit=energy,
            today=[value for _, value in today],
            tomorrow=[value for _, value in tomorrow],
            tomorrow_valid=bool(tomorrow),
            raw_today=raw(today),
            raw_tomorrow=raw(tomorrow),
        )

    def set_surplus(
        self, watts: float | str, *, unit: str = "W", entity: str = SURPLUS_SENSOR
    ) -> None:
        """A solar surplus sensor (a power sensor: ``state`` in ``unit``, ``W`` or ``kW``;
        ``"unavailable"`` when the inverter does not answer)."""
        self.set_state(
            entity, watts, unit_of_measurement=unit, device_class="power", friendly_name="Surplus"
        )

    def ups_unavailable(self) -> None:
        """What a failed poll of the UPS does: every UPS sensor set so far is ``unavailable``."""
        with self._lock:
            known = [self.ups_entity(n) for n in UPS_SENSORS if self.ups_entity(n) in self._sensors]
        for entity in known:
            self.set_state(entity, "unavailable")

    # ------------------------------------------------------------------------------ REST

    def _state(self, entity: str) -> dict[str, object] | None:
        now = _now()
        with self._lock:
            sensor = self._sensors.get(entity)
        if sensor is not None:
            state, attributes = sensor.state, sensor.attributes
            changed, updated = sensor.last_changed, sensor.last_updated
        elif self.machine is not None and entity == self.switch_entity:
            state, attributes = "on" if self.machine.relay_on else "off", {"friendly_name": "Rack"}
            changed = updated = now
        elif self.machine is not None and entity == self.power_entity:
            state = str(self.machine.watts())
            attributes = {"unit_of_measurement": "W", "device_class": "power"}
            changed = updated = now
        else:
            return None
        return {
            "entity_id": entity,
            "state": state,
            "attributes": attributes,
            "last_changed": changed,
            "last_updated": updated,
            "context": {"id": "01LAB", "parent_id": None, "user_id": None},
        }

    def answer(self, request: PlugRequest) -> Response:
        method, path, body = request.method, request.path, request.body
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return 401, "401: Unauthorized"
        if method == "GET" and path.startswith("/api/states/"):
            state = self._state(path.removeprefix("/api/states/"))
            return (200, state) if state else (404, {"message": "Entity not found."})
        service = path.removeprefix("/api/services/switch/")
        if method == "POST" and service in ("turn_on", "turn_off"):
            entity = json.loads(body or b"{}").get("entity_id")
            if self.machine is None or entity != self.switch_entity:
                return 200, []  # Home Assistant ignores entities it does not have
            on = service == "turn_on"
            try:
                was_on = self.machine.set_relay(on, self.source)
            except RelayRefusedError:
                return 200, []
            return 200, [] if was_on is on else [self._state(entity)]
        return 404, {"message": "Not found"}
