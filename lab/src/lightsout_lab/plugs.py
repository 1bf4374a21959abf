"""A machine behind a smart plug: the relay, the power meter and the machine's draw.

Who uses it: the e2e tests of the plug drivers (``tests/e2e/test_power_plugs.py``) through the
three API front-ends of ``lightsout_lab.plug_apis`` (Shelly Gen2 RPC, Tasmota ``cmnd``, Home
Assistant REST), which all switch and read one ``PlugMachine``; written from the documented
APIs (../shared/research/plugs.md), not from any other emulator.

The model:

- the relay is on or off; every order an API passes on is recorded (``orders()``), with how
  many OS shutdown requests the machine had seen by then and the draw the meter read just
  before, so a test can tell an order that cut a running OS from one that did not;
- the machine is a ``lightsout_lab.sshd.SshMachine`` (on while its sshd runs, an OS that obeys
  or ignores its shutdown command). Relay on boots it when its firmware has "power on after AC
  loss" (``ac_restore``); otherwise it stays soft-off until a Wake-on-LAN packet (the plug
  machine is a ``Wakeable`` for ``WolListener.wakes``), which only works while the relay is on.
  Relay off cuts it at once, like pulling the cord;
- the draw follows the state: 0 W with the relay off, ``standby_watts`` soft-off,
  ``boot_watts`` while booting (powered, SSH not answering yet), ``idle_watts`` once up.
  ``energy_wh()`` integrates it (the meter's total);
- faults: ``unreachable`` (the API closes every connection unanswered), ``refuse_relay`` (an
  order is acknowledged by the API's own means but the relay stays where it is).

Example::

    with SshMachine("nuc-1") as box, ShellyPlug(PlugMachine(box)) as plug:
        run_startup(endpoint=plug.endpoint, ...)
        assert [o.on for o in plug.machine.orders()] == [True]
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, Protocol, Self
from urllib.parse import parse_qs, urlsplit

from lightsout_lab.process import Service

MachineState = Literal["unpowered", "soft-off", "booting", "running"]


class OsMachine(Protocol):
    """What the plug needs of the machine behind it (``lightsout_lab.sshd.SshMachine``)."""

    mac: str

    def power_state(self) -> str: ...

    def reachable(self) -> bool: ...

    def power_on(self) -> None: ...

    def power_off(self) -> None: ...

    def shutdown_requests(self) -> int: ...


class RelayRefusedError(RuntimeError):
    """The relay did not switch (``PlugMachine.refuse_relay``)."""


@dataclass(frozen=True)
class RelayOrder:
    """One order to switch the relay, as the plug received it."""

    time: float
    on: bool
    #: Which API passed it on (shelly, tasmota, homeassistant).
    source: str
    #: The machine's OS shutdown requests so far (its ``shutdown_requests()``).
    shutdown_requests: int
    #: What the machine was doing, and drew, just before the order.
    machine_state: MachineState
    watts: float
    #: Whether the relay switched (False: refused).
    switched: bool


class PlugMachine:
    """A relay with a power meter in front of an ``SshMachine``; thread-safe."""

    def __init__(
        self,
        machine: OsMachine,
        *,
        relay_on: bool = False,
        ac_restore: bool = True,
        standby_watts: float = 1.5,
        boot_watts: float = 35.0,
        idle_watts: float = 14.0,
    ) -> None:
        self.machine = machine
        self.ac_restore = ac_restore
        self.standby_watts = standby_watts
        self.boot_watts = boot_watts
        self.idle_watts = idle_watts
        self.unreachable = False
        self.refuse_relay = False
        self._relay = relay_on
        self._lock = threading.Lock()
        self._orders: list[RelayOrder] = []
        self._energy_wh = 0.0
        self._metered_at = time.monotonic()
        self._metered_watts = 0.0

    # ------------------------------------------------------------------------------ state

    @property
    def mac(self) -> str:
        return self.machine.mac

    @property
    def relay_on(self) -> bool:
        return self._relay

    def machine_state(self) -> MachineState:
        """What the machine is doing, which sets its draw."""
        if not self._relay:
            return "unpowered"
        if self.machine.power_state() == "Off":
            return "soft-off"
        return "running" if self.machine.reachable() else "booting"

    def watts(self) -> float:
        """What the meter reads now."""
        draw = {
            "unpowered": 0.0,
            "soft-off": self.standby_watts,
            "booting": self.boot_watts,
            "running": self.idle_watts,
        }[self.machine_state()]
        with self._lock:
            now = time.monotonic()
            self._energy_wh += self._metered_watts * (now - self._metered_at) / 3600
            self._metered_at, self._metered_watts = now, draw
        return draw

    def energy_wh(self) -> float:
        """Energy through the plug since it started, in Wh (the meter's running total)."""
        self.watts()
        with self._lock:
            return self._energy_wh

    def power_state(self) -> str:
        """The machine's power (``Wakeable``): On while it boots or runs."""
        return "On" if self._relay and self.machine.power_state() == "On" else "Off"

    def power_on(self) -> None:
        """A Wake-on-LAN packet (``Wakeable``): boots the machine only while it has power."""
        if self._relay:
            self.machine.power_on()

    # ------------------------------------------------------------------------------ relay

    def set_relay(self, on: bool, source: str) -> bool:
        """Switch the relay; returns whether it was on. RelayRefusedError when it stays put."""
        state, watts = self.machine_state(), self.watts()
        with self._lock:
            was_on = self._relay
            switched = not self.refuse_relay
            self._orders.append(
                RelayOrder(
                    time.time(),
                    on,
                    source,
                    self.machine.shutdown_requests(),
                    state,
                    watts,
                    switched,
                )
            )
            if not switched:
                raise RelayRefusedError(f"relay refused to switch {'on' if on else 'off'}")
            self._relay = on
        if on and not was_on and self.ac_restore:
            self.machine.power_on()
        if not on:
            self.machine.power_off()
        self.watts()
        return was_on

    def orders(self, on: bool | None = None) -> list[RelayOrder]:
        """Every relay order so far (only switch-on or switch-off ones, when given)."""
        with self._lock:
            return [o for o in self._orders if on is None or o.on is on]


Response = tuple[int, Mapping[str, object] | list[object] | str]


@dataclass(frozen=True)
class PlugRequest:
    """One HTTP request to a plug API (headers keyed in lower case, the query's last values)."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes


class HttpApi(Service):
    """An HTTP API on 127.0.0.1; subclasses answer requests.

    ``requests()`` lists every request the API got (method and path with query), whether or
    not it was answered; while ``dropping()`` says so, requests are dropped unanswered.
    """

    source = "http"

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        if not host.startswith("127."):
            raise ValueError("the emulated plugs listen on loopback only")
        self.host = host
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._requests: list[tuple[str, str]] = []

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def requests(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._requests)

    def answer(self, request: PlugRequest) -> Response:
        """The status and body (JSON, or text for a str) that answer ``request``."""
        raise NotImplementedError

    def dropping(self) -> bool:
        """Whether requests are dropped unanswered now (the device unreachable)."""
        return False

    def start(self) -> Self:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # the requests are recorded instead

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with api._lock:
                    api._requests.append((self.command, self.path))
                if api.dropping():
                    self.close_connection = True
                    return  # nothing sent: the client sees the connection drop
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = PlugRequest(self.command, url.path, query, headers, body)
                status, payload = api.answer(request)
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                kind = "text/plain" if isinstance(payload, str) else "application/json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"{self.source}-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class PlugApi(HttpApi):
    """An HTTP API on 127.0.0.1 in front of a ``PlugMachine``, dropping every request while
    the machine's plug is ``unreachable``."""

    source = "plug"

    def __init__(self, machine: PlugMachine, *, host: str = "127.0.0.1") -> None:
        super().__init__(host=host)
        self.machine = machine

    def dropping(self) -> bool:
        return self.machine.unreachable
