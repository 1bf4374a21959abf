"""The lab's smart plugs: the relay, the draw that follows the machine, the faults, and the
three APIs (Shelly Gen2 RPC, Tasmota cmnd, Home Assistant REST) on loopback."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from lightsout_lab.plug_apis import HomeAssistant, ShellyPlug, TasmotaPlug
from lightsout_lab.plugs import PlugMachine


class FakeOs:
    """An OS behind the plug: powered or not, answering once booted, obeying shutdown."""

    mac = "52:54:00:aa:bb:cc"

    def __init__(self) -> None:
        self.powered = False
        self.up = False
        self.requests = 0

    def power_state(self) -> str:
        return "On" if self.powered else "Off"

    def reachable(self) -> bool:
        return self.up

    def power_on(self) -> None:
        self.powered = True

    def power_off(self) -> None:
        self.powered = self.up = False

    def shutdown_requests(self) -> int:
        return self.requests


@pytest.fixture
def box() -> FakeOs:
    return FakeOs()


def test_draw_follows_relay_boot_run_shutdown_and_cut(box: FakeOs) -> None:
    plug = PlugMachine(box, standby_watts=1.5, boot_watts=35, idle_watts=14)
    assert (plug.machine_state(), plug.watts()) == ("unpowered", 0.0)
    assert plug.set_relay(True, "test") is False
    assert (plug.machine_state(), plug.watts()) == ("booting", 35)  # AC restore boots it
    box.up = True
    assert (plug.machine_state(), plug.watts()) == ("running", 14)
    box.requests, box.powered, box.up = 1, False, False  # the OS shut down
    assert (plug.machine_state(), plug.watts()) == ("soft-off", 1.5)
    assert plug.set_relay(False, "test") is True
    assert (plug.machine_state(), plug.watts()) == ("unpowered", 0.0)
    on, off = plug.orders()
    assert (on.on, on.machine_state, on.shutdown_requests) == (True, "unpowered", 0)
    assert (off.on, off.machine_state, off.watts, off.shutdown_requests) == (
        False,
        "soft-off",
        1.5,
        1,
    )


def test_without_ac_restore_only_a_wake_packet_with_power_boots_it(box: FakeOs) -> None:
    plug = PlugMachine(box, ac_restore=False)
    plug.power_on()  # a magic packet while the plug is off wakes nothing
    assert plug.power_state() == "Off"
    plug.set_relay(True, "test")
    assert plug.machine_state() == "soft-off"
    plug.power_on()
    assert plug.machine_state() == "booting"


def test_relay_off_cuts_a_running_machine_and_the_order_says_so(box: FakeOs) -> None:
    plug = PlugMachine(box)
    plug.set_relay(True, "test")
    box.up = True
    plug.set_relay(False, "test")
    assert not box.powered
    assert plug.orders(on=False)[0].machine_state == "running"


def test_a_refused_order_is_recorded_and_changes_nothing(box: FakeOs) -> None:
    plug = PlugMachine(box)
    plug.refuse_relay = True
    with pytest.raises(RuntimeError, match="refused"):
        plug.set_relay(True, "test")
    assert not plug.relay_on and not box.powered
    assert [o.switched for o in plug.orders()] == [False]


def _call(
    url: str, *, method: str = "GET", body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=5)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    data = None if body is None else json.dumps(body).encode()
    try:
        conn.request(method, f"{parts.path}?{parts.query}", body=data, headers=headers)
        response = conn.getresponse()
        status, text = response.status, response.read().decode()
    finally:
        conn.close()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


@pytest.fixture
def plug(box: FakeOs) -> PlugMachine:
    return PlugMachine(box, idle_watts=14)


@pytest.fixture
def shelly(plug: PlugMachine) -> Iterator[ShellyPlug]:
    with ShellyPlug(plug) as api:
        yield api


def test_shelly_switch_set_and_get_status(shelly: ShellyPlug, box: FakeOs) -> None:
    assert _call(f"{shelly.endpoint}/rpc/Switch.Set?id=0&on=true") == (200, {"was_on": False})
    box.up = True
    status, body = _call(f"{shelly.endpoint}/rpc/Switch.GetStatus?id=0")
    assert (status, body["output"], body["apower"]) == (200, True, 14)
    assert body["aenergy"]["total"] >= 0
    status, body = _call(
        f"{shelly.endpoint}/rpc",
        method="POST",
        body={"id": 7, "method": "Switch.Set", "params": {"id": 0, "on": False}},
    )
    assert (status, body["id"], body["result"]) == (200, 7, {"was_on": True})
    assert [o.on for o in shelly.machine.orders()] == [True, False]
    assert _call(f"{shelly.endpoint}/rpc/Switch.GetStatus?id=1")[0] == 404


def test_shelly_refused_relay_is_an_rpc_error(shelly: ShellyPlug) -> None:
    shelly.machine.refuse_relay = True
    status, body = _call(f"{shelly.endpoint}/rpc/Switch.Set?id=0&on=true")
    assert (status, body["code"]) == (500, -114)


def test_tasmota_power_and_energy(plug: PlugMachine, box: FakeOs) -> None:
    with TasmotaPlug(plug) as api:
        assert _call(f"{api.endpoint}/cm?cmnd=Power%20On") == (200, {"POWER": "ON"})
        box.up = True
        assert _call(f"{api.endpoint}/cm?cmnd=Power") == (200, {"POWER": "ON"})
        status, body = _call(f"{api.endpoint}/cm?cmnd=Status%208")
        assert (status, body["StatusSNS"]["ENERGY"]["Power"]) == (200, 14)
        plug.refuse_relay = True
        assert _call(f"{api.endpoint}/cm?cmnd=Power%20Off") == (200, {"POWER": "ON"})
        assert [(o.on, o.switched) for o in plug.orders()] == [(True, True), (False, False)]


def test_home_assistant_token_states_and_services(plug: PlugMachine, box: FakeOs) -> None:
    with HomeAssistant(plug, token="right") as ha:
        turn_on = f"{ha.endpoint}/api/services/switch/turn_on"
        assert _call(turn_on, method="POST", body={"entity_id": "switch.rack"}, token="wrong") == (
            401,
            "401: Unauthorized",
        )
        assert plug.orders() == []
        status, changed = _call(
            turn_on, method="POST", body={"entity_id": "switch.rack"}, token="right"
        )
        assert (status, [s["state"] for s in changed]) == (200, ["on"])
        box.up = True
        _, sensor = _call(f"{ha.endpoint}/api/states/sensor.rack_power", token="right")
        assert (sensor["state"], sensor["attributes"]["unit_of_measurement"]) == ("14", "W")
        _, switch = _call(f"{ha.endpoint}/api/states/switch.rack", token="right")
        assert switch["state"] == "on"
        assert len(plug.orders()) == 1


def test_home_assistant_ups_sensors_as_its_nut_integration_shows_them() -> None:
    with HomeAssistant(token="right", ups="rack") as ha:
        status_url = f"{ha.endpoint}/api/states/{ha.ups_entity('status')}"
        assert ha.ups_entity("status") == "sensor.rack_status_data"
        assert _call(status_url, token="right") == (404, {"message": "Entity not found."})
        assert _call(status_url, token="wrong") == (401, "401: Unauthorized")
        assert _call(f"{ha.endpoint}/api/states/switch.rack", token="right")[0] == 404  # no plug

        ha.set_ups(status="OL CHRG", charge=100, runtime=1800, load=23)
        _, status = _call(status_url, token="right")
        assert (status["entity_id"], status["state"]) == ("sensor.rack_status_data", "OL CHRG")
        assert "unit_of_measurement" not in status["attributes"]
        _, runtime = _call(f"{ha.endpoint}/api/states/sensor.rack_battery_runtime", token="right")
        assert (runtime["state"], runtime["attributes"]["unit_of_measurement"]) == ("1800", "s")
        _, charge = _call(f"{ha.endpoint}/api/states/sensor.rack_battery_charge", token="right")
        assert (charge["state"], charge["attributes"]["unit_of_measurement"]) == ("100", "%")

        ha.set_ups(status="OL CHRG", runtime=30, runtime_unit="min")  # the status unchanged
        _, same = _call(status_url, token="right")
        assert same["last_changed"] == status["last_changed"]
        ha.set_ups(status="OB DISCHRG")
        _, moved = _call(status_url, token="right")
        assert (moved["state"], moved["last_changed"] > status["last_changed"]) == (
            "OB DISCHRG",
            True,
        )
        _, runtime = _call(f"{ha.endpoint}/api/states/sensor.rack_battery_runtime", token="right")
        assert (runtime["state"], runtime["attributes"]["unit_of_measurement"]) == ("30", "min")

        ha.ups_unavailable()  # a failed poll of the UPS
        for name in ("status", "charge", "runtime", "load"):
            url = f"{ha.endpoint}/api/states/{ha.ups_entity(name)}"
            assert _call(url, token="right")[1]["state"] == "unavailable"
        ha.unreachable = True
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            _call(status_url, token="right")


def test_an_unreachable_plug_drops_the_connection(shelly: ShellyPlug) -> None:
    shelly.machine.unreachable = True
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        _call(f"{shelly.endpoint}/rpc/Switch.GetStatus?id=0")
    assert shelly.machine.orders() == []
    assert len(shelly.requests()) == 1
