"""Three smart-plug APIs on 127.0.0.1, each a thin front-end of one ``PlugMachine``.

Who uses it: the e2e tests of the plug drivers (``tests/e2e/test_power_plugs.py``) and the
``plug_power`` role's molecule scenario. Written from the documented APIs
(../shared/research/plugs.md); only what the drivers use is served:

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

Each counts the relay orders it passed on (``machine.orders()``) and records its requests
(``requests()``). Example::

    with HomeAssistant(PlugMachine(box), token="t0k3n") as ha:
        ...  # a Node with homeassistant.endpoint = ha.endpoint
        assert ha.machine.orders() == []
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime

from lightsout_lab.plugs import PlugApi, PlugMachine, PlugRequest, RelayRefusedError, Response


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


class HomeAssistant(PlugApi):
    """Home Assistant's REST API with one switch entity and, optionally, a power sensor."""

    source = "homeassistant"

    def __init__(
        self,
        machine: PlugMachine,
        *,
        token: str,
        switch_entity: str = "switch.rack",
        power_entity: str | None = "sensor.rack_power",
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(machine, host=host)
        self.token = token
        self.switch_entity = switch_entity
        self.power_entity = power_entity

    def _state(self, entity: str) -> dict[str, object] | None:
        if entity == self.switch_entity:
            state, attributes = "on" if self.machine.relay_on else "off", {"friendly_name": "Rack"}
        elif entity == self.power_entity:
            state = str(self.machine.watts())
            attributes = {"unit_of_measurement": "W", "device_class": "power"}
        else:
            return None
        return {
            "entity_id": entity,
            "state": state,
            "attributes": attributes,
            "last_changed": _now(),
            "last_updated": _now(),
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
            if entity != self.switch_entity:
                return 200, []  # Home Assistant ignores entities it does not have
            on = service == "turn_on"
            try:
                was_on = self.machine.set_relay(on, self.source)
            except RelayRefusedError:
                return 200, []
            return 200, [] if was_on is on else [self._state(entity)]
        return 404, {"message": "Not found"}
