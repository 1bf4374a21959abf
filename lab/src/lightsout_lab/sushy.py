"""A real Redfish BMC for tests: sushy-tools' emulator with TLS, basic auth and a request log.

Who uses it: the e2e tests of the runner and of the operator (startup/shutdown/healthcheck
Jobs against a Redfish "machine"), and anyone who needs a BMC on 127.0.0.1.

What it gives you:

- ``SushyEmulator(systems=[FakeSystem(...)], ...)`` — a context manager that starts
  ``sushy-emulator`` (fake driver, no libvirt) in a subprocess on a free loopback port, over
  HTTPS with a fresh self-signed certificate for 127.0.0.1 (``ca_path``), HTTP basic auth with a
  bcrypt htpasswd file (``username``/``password``), and a fresh state directory. Optional
  ``disable_power_off=True`` makes the BMC refuse power-off with HTTP 400, and
  ``FakeSystem(..., graceful_shutdown="ignore")`` is a machine whose OS ignores a
  ``GracefulShutdown`` (the BMC accepts it, the machine stays On until a ``ForceOff``).
- ``middlewares=("module:factory", ...)`` — WSGI middlewares wrapped around sushy's app inside
  the recorder (``MIDDLEWARES``), e.g. ``lightsout_lab.flapping`` (a BMC failing every other
  request).
  ``FakeSystem(..., profile="idrac")`` gives a system a vendor family's documented behaviour
  (``lightsout_lab.redfish_profiles``: idrac, ilo, ami, etag-strict, no-if-match,
  falls-back, falls-back-once, sessions-only, idrac10); with any profile the BMC also serves
  a SessionService (``live_sessions()``).
- ``power_state(uuid)`` / ``wait_power_state(uuid, "On")`` — read a system's PowerState.
- ``power_requests(...)`` / ``count_power_requests(...)`` — every
  ``POST /redfish/v1/Systems/<id>/Actions/ComputerSystem.Reset`` that reached the emulator,
  with its ``ResetType`` and HTTP status, recorded by a small WSGI middleware wrapped around
  sushy's Flask app *outside* its auth middleware (so refused requests are counted too).
  Requests the harness itself makes (``reset``) are not counted.

Remember sushy's quirks (see research/emulators.md): a power change lands 1-11 s after the
order, and a second order sent while one is pending is silently dropped.

Running this module (``python -m lightsout_lab.sushy serve CONFIG RECORD``) is the
emulator process itself; tests never need to do that by hand.

Example::

    with SushyEmulator([FakeSystem(uuid=UUID, name="node-1")]) as bmc:
        run_startup(endpoint=bmc.endpoint, ca=bmc.ca_path, password=bmc.password)
        assert bmc.power_state(UUID) == "On"
        assert bmc.count_power_requests(UUID, reset_types=POWER_ON) == 1
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, Self

from lightsout_lab import process, redfish_profiles
from lightsout_lab.redfish_power_meter import POWER_METERS, PowerMeter, PowerMeterMiddleware

PowerState = Literal["On", "Off"]
GracefulShutdown = Literal["obey", "ignore"]

#: ResetType values that turn a machine on / off (for ``count_power_requests``).
POWER_ON: frozenset[str] = frozenset({"On", "ForceOn"})
POWER_OFF: frozenset[str] = frozenset({"ForceOff", "GracefulShutdown"})

#: Header the harness adds to its own requests so they are not counted as the client's.
HARNESS_HEADER = "X-Lightsout-Harness"

#: Setting in the emulator's config: the uuids of the systems whose OS ignores GracefulShutdown.
IGNORES_GRACEFUL_SHUTDOWN = "LIGHTSOUT_IGNORES_GRACEFUL_SHUTDOWN"
#: Settings in the emulator's config: {uuid: profile name}, {name: uuid}, [username, password].
PROFILES = "LIGHTSOUT_REDFISH_PROFILES"
ALIASES = "LIGHTSOUT_REDFISH_ALIASES"
ACCOUNT = "LIGHTSOUT_REDFISH_ACCOUNT"
#: Setting in the emulator's config: [low, high] seconds after which an order lands.
LANDING = "LIGHTSOUT_LANDING_SECONDS"

#: Setting in the emulator's config: WSGI middlewares ("module:factory") wrapped around sushy's
#: app inside the recorder (so what they refuse is recorded); each factory is called as
#: `factory(app, config)` and returns the wrapped app (e.g. `lightsout_lab.flapping:Flapping`).
MIDDLEWARES = "LIGHTSOUT_MIDDLEWARES"

_RESET_SUFFIX = "/Actions/ComputerSystem.Reset"
_SYSTEMS_PREFIX = "/redfish/v1/Systems/"


@dataclasses.dataclass(frozen=True)
class FakeSystem:
    """One machine behind the emulated BMC.

    ``uuid`` is what Redfish clients must use as the system id (``resource_id``); ``name`` is
    only an alias. ``mac`` defaults to one derived from the uuid (sushy requires a NIC).
    ``graceful_shutdown="ignore"``: the machine's OS ignores the ACPI power button. Redfish's
    ``GracefulShutdown`` asks the OS to shut down and power off; a BMC accepts the order
    (HTTP 204) and the system stays ``On`` until ``ForceOff`` cuts the power.
    ``meter=PowerMeter(on_watts=…, memory_gib=…)``: the BMC reports consumed watts that follow
    the PowerState, and processors and memory (`lightsout_lab.redfish_power_meter`).
    ``profile``: a name in ``redfish_profiles.PROFILES`` (None: sushy-tools as it is).
    """

    uuid: str
    name: str
    power_state: PowerState = "Off"
    mac: str | None = None
    graceful_shutdown: GracefulShutdown = "obey"
    #: Measured draw and inventory to report (`redfish_power_meter`); None: none, as sushy.
    meter: PowerMeter | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and self.profile not in redfish_profiles.PROFILES:
            known = ", ".join(sorted(redfish_profiles.PROFILES))
            raise ValueError(f"FakeSystem.profile {self.profile!r} is not one of: {known}")

    def to_sushy(self) -> dict[str, Any]:
        """The dict sushy's fake driver expects in SUSHY_EMULATOR_FAKE_SYSTEMS."""
        digits = self.uuid.replace("-", "")[-12:].ljust(12, "0")
        mac = self.mac or "52:54:" + ":".join(digits[i : i + 2] for i in range(4, 12, 2))
        return {
            "uuid": self.uuid,
            "name": self.name,
            "power_state": self.power_state,
            "nics": [{"mac": mac, "ip": "127.0.0.1"}],
        }


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request that reached the emulator (before authentication)."""

    time: float
    method: str
    path: str
    status: int
    body: Any
    from_harness: bool

    @property
    def system(self) -> str | None:
        """The system identity in the URL, for requests under /redfish/v1/Systems/<id>."""
        if not self.path.startswith(_SYSTEMS_PREFIX):
            return None
        rest = self.path[len(_SYSTEMS_PREFIX) :]
        return rest.split("/", 1)[0] or None

    @property
    def is_reset(self) -> bool:
        """True for a POST to the ComputerSystem.Reset action."""
        return self.method == "POST" and self.path.rstrip("/").endswith(_RESET_SUFFIX)

    @property
    def reset_type(self) -> str | None:
        """The ResetType of a Reset action (None for other requests)."""
        if not self.is_reset or not isinstance(self.body, dict):
            return None
        value = self.body.get("ResetType")
        return value if isinstance(value, str) else None


class SushyError(RuntimeError):
    """The emulator could not be started or answered unexpectedly."""


class SushyEmulator(process.WorkdirService):
    """A sushy-tools Redfish emulator in a subprocess; use it as a context manager.

    Args:
        systems: the machines it emulates (at least one).
        username / password: basic-auth credentials it accepts.
        disable_power_off: refuse ForceOff/GracefulShutdown with HTTP 400.
        middlewares: "module:factory" names of WSGI middlewares to add (see MIDDLEWARES).
        landing_seconds: an accepted order lands this many seconds later, drawn at random
            (sushy's own 1-11 s by default; tests with many orders draw from a shorter range).
        workdir: where the cert, htpasswd, config, state and logs go (default: a temp dir,
            removed on stop).
        start_timeout: seconds to wait for the emulator to answer (sushy-tools imports Flask
            and its friends: on a machine running three labs that can take a minute).

    Its ``workdir`` holds cert.pem, key.pem, htpasswd, config.py, state/ and the logs.
    """

    error = SushyError
    not_started = "emulator not started"
    workdir_prefix = "sushy-"

    def __init__(
        self,
        systems: Iterable[FakeSystem],
        *,
        username: str = "admin",
        password: str = "lights-out-test-password",
        disable_power_off: bool = False,
        landing_seconds: tuple[int, int] = (1, 11),
        workdir: Path | None = None,
        start_timeout: float = 120.0,
        middlewares: Iterable[str] = (),
    ) -> None:
        self.systems = tuple(systems)
        if not self.systems:
            raise ValueError("SushyEmulator needs at least one FakeSystem")
        self.username = username
        self.password = password
        self.disable_power_off = disable_power_off
        self.landing_seconds = landing_seconds
        self.start_timeout = start_timeout
        self.middlewares = tuple(middlewares)
        self.host = "127.0.0.1"
        self.port = 0
        super().__init__(workdir)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: io.BufferedWriter | None = None

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def endpoint(self) -> str:
        """The BMC URL, e.g. ``https://127.0.0.1:40123`` (what a Node's spec names)."""
        return f"https://{self.host}:{self.port}"

    @property
    def baseuri(self) -> str:
        """``host:port`` as community.general's redfish modules want it."""
        return f"{self.host}:{self.port}"

    @property
    def ca_path(self) -> Path:
        """PEM file to trust for the emulator's self-signed certificate."""
        return self.workdir / "cert.pem"

    @property
    def log_path(self) -> Path:
        """The emulator process' stdout/stderr (werkzeug access log, tracebacks)."""
        return self.workdir / "emulator.log"

    @property
    def record_path(self) -> Path:
        """JSON lines, one per request that reached the emulator."""
        return self.workdir / "requests.jsonl"

    def start(self) -> Self:
        """Write the files and start the emulator; return once it answers over HTTPS."""
        if self._proc is not None:
            raise SushyError("emulator already started")
        self._make_workdir()
        self._write_tls()
        self._write_htpasswd()
        process.start_on_free_port(
            self.host,
            self._start_on,
            self._terminate,
            error=SushyError,
            what="sushy-emulator",
            log=self.log_text,
        )
        return self

    def stop(self) -> None:
        """Stop the emulator and remove its temp dir (when the harness created it)."""
        self._terminate()
        self._remove_workdir()

    def halt(self) -> None:
        """Stop answering, as a BMC that lost power or network does: the process ends, the
        port, the systems' state and the request record stay for `resume`."""
        self._terminate()

    def resume(self) -> None:
        """Answer again on the same port with the same systems' state, after `halt`."""
        if self._proc is not None:
            raise SushyError("emulator is running")
        self._launch()
        self._wait_ready()

    def log_text(self) -> str:
        """The emulator's log so far (for assertion messages)."""
        return process.read_log(self.log_path)

    # --------------------------------------------------------------------------- Redfish I/O

    def system_url(self, uuid: str) -> str:
        """The system's resource URL."""
        return f"{self.endpoint}{_SYSTEMS_PREFIX}{uuid}"

    def get_system(self, uuid: str) -> dict[str, Any]:
        """GET the ComputerSystem resource (reading it also lets a pending change land)."""
        response = self._request("GET", self.system_url(uuid))
        if response.status_code != 200:
            raise SushyError(f"GET {uuid}: HTTP {response.status_code} {response.text}")
        data: dict[str, Any] = response.json()
        return data

    def power_state(self, uuid: str) -> str:
        """The system's current PowerState (``On`` or ``Off``)."""
        return str(self.get_system(uuid)["PowerState"])

    def power_reader(self, uuid: str) -> Callable[[], str]:
        """A callable reading one system's PowerState (for the machine simulator)."""
        return lambda: self.power_state(uuid)

    def wait_power_state(
        self, uuid: str, state: PowerState, timeout: float = 20.0, interval: float = 0.5
    ) -> None:
        """Poll until PowerState is ``state``; raise SushyError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        current = self.power_state(uuid)
        while current != state:
            if time.monotonic() >= deadline:
                raise SushyError(f"{uuid} stayed {current}, expected {state} within {timeout}s")
            time.sleep(interval)
            current = self.power_state(uuid)

    def reset(self, uuid: str, reset_type: str, *, wait: PowerState | None = None) -> None:
        """Send a Reset as the harness (not counted); optionally wait for the new state.

        Use it to put a machine in a state before a test, e.g. ``reset(u, "On", wait="On")``.
        """
        response = self._request(
            "POST",
            f"{self.system_url(uuid)}{_RESET_SUFFIX}",
            json_body={"ResetType": reset_type},
        )
        if response.status_code >= 300:
            raise SushyError(f"Reset {reset_type}: HTTP {response.status_code} {response.text}")
        if wait is not None:
            self.wait_power_state(uuid, wait)

    # ------------------------------------------------------------------------ request record

    def requests(self, *, include_harness: bool = False) -> list[RecordedRequest]:
        """Every request recorded so far, oldest first."""
        records: list[RecordedRequest] = []
        try:
            lines = self.record_path.read_text().splitlines()
        except OSError:
            return records
        for line in lines:
            if not line.strip():
                continue
            raw = json.loads(line)
            record = RecordedRequest(
                time=float(raw["time"]),
                method=str(raw["method"]),
                path=str(raw["path"]),
                status=int(raw["status"]),
                body=raw.get("body"),
                from_harness=bool(raw.get("harness")),
            )
            if include_harness or not record.from_harness:
                records.append(record)
        return records

    def power_requests(
        self,
        uuid: str | None = None,
        *,
        reset_types: Iterable[str] | None = None,
        accepted_only: bool = False,
    ) -> list[RecordedRequest]:
        """Reset actions that reached the emulator (not the harness' own).

        Args:
            uuid: only those for this system.
            reset_types: only these ResetType values (e.g. ``POWER_ON``).
            accepted_only: only those the emulator answered with 2xx.
        """
        wanted = None if reset_types is None else frozenset(reset_types)
        return [
            r
            for r in self.requests()
            if r.is_reset
            and (uuid is None or r.system == uuid)
            and (wanted is None or r.reset_type in wanted)
            and (not accepted_only or 200 <= r.status < 300)
        ]

    def count_power_requests(
        self,
        uuid: str | None = None,
        *,
        reset_types: Iterable[str] | None = None,
        accepted_only: bool = False,
    ) -> int:
        """How many Reset actions matched (see ``power_requests``)."""
        return len(self.power_requests(uuid, reset_types=reset_types, accepted_only=accepted_only))

    def boot_requests(self, uuid: str, *, accepted_only: bool = False) -> list[RecordedRequest]:
        """PATCHes carrying ``Boot`` for the system (on it or on its settings object)."""
        return [
            r
            for r in self.requests()
            if r.method == "PATCH"
            and r.system == uuid
            and isinstance(r.body, dict)
            and "Boot" in r.body
            and (not accepted_only or 200 <= r.status < 300)
        ]

    def live_sessions(self) -> int:
        """How many Redfish sessions the BMC holds (clients must delete theirs)."""
        response = self._request("GET", f"{self.endpoint}{redfish_profiles.SESSIONS}")
        if response.status_code != 200:
            raise SushyError(f"GET sessions: HTTP {response.status_code} {response.text}")
        return len(response.json()["Members"])

    def start_unseen_power_on(self, uuid: str) -> None:
        """Start a power-on the BMC keeps to itself: PowerState reads Off until a client's
        Reset for the system arrives (a profile with ``already_on_conflict`` then answers 409
        to an On). The race in which an iDRAC answers "already powered ON"."""
        response = self._request(
            "POST",
            f"{self.system_url(uuid)}{_RESET_SUFFIX}",
            json_body={"ResetType": "On"},
            headers={redfish_profiles.HOLD_HEADER: "1"},
        )
        if response.status_code >= 300:
            raise SushyError(f"Reset On: HTTP {response.status_code} {response.text}")

    def clear_requests(self) -> None:
        """Forget the requests recorded so far."""
        with self.record_path.open("w"):
            pass

    # ------------------------------------------------------------------------------ internals

    def _request(
        self,
        method: str,
        url: str,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        import requests  # only the client side needs it

        # verify= per request: the environment may export REQUESTS_CA_BUNDLE.
        return requests.request(
            method,
            url,
            json=json_body,
            auth=(self.username, self.password),
            headers={HARNESS_HEADER: "1", **(headers or {})},
            verify=str(self.ca_path),
            timeout=10,
        )

    def _write_tls(self) -> None:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(self.workdir / "key.pem"),
                "-out",
                str(self.ca_path),
                "-days",
                "2",
                "-subj",
                f"/CN={self.host}",
                "-addext",
                f"subjectAltName=IP:{self.host}",
            ],
            check=True,
            capture_output=True,
        )

    def _write_htpasswd(self) -> None:
        import bcrypt

        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        (self.workdir / "htpasswd").write_text(f"{self.username}:{digest}\n")

    def _write_config(self) -> None:
        state_dir = self.workdir / "state"
        shutil.rmtree(state_dir, ignore_errors=True)
        state_dir.mkdir()
        settings: dict[str, Any] = {
            "SUSHY_EMULATOR_LISTEN_IP": self.host,
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(self.ca_path),
            "SUSHY_EMULATOR_SSL_KEY": str(self.workdir / "key.pem"),
            "SUSHY_EMULATOR_STATE_DIR": str(state_dir),
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_FAKE_SYSTEMS": [s.to_sushy() for s in self.systems],
            "SUSHY_EMULATOR_AUTH_FILE": str(self.workdir / "htpasswd"),
            "SUSHY_EMULATOR_DISABLE_POWER_OFF": self.disable_power_off,
            # Ours, not sushy's: read by serve.
            IGNORES_GRACEFUL_SHUTDOWN: [
                s.uuid for s in self.systems if s.graceful_shutdown == "ignore"
            ],
            MIDDLEWARES: list(self.middlewares),
            POWER_METERS: {s.uuid: s.meter.to_config() for s in self.systems if s.meter},
            PROFILES: {s.uuid: s.profile for s in self.systems if s.profile},
            ALIASES: {s.name: s.uuid for s in self.systems if s.profile},
            ACCOUNT: [self.username, self.password],
            LANDING: list(self.landing_seconds),
        }
        lines = [f"{key} = {value!r}" for key, value in settings.items()]
        (self.workdir / "config.py").write_text("\n".join(lines) + "\n")

    def _start_on(self, port: int) -> None:
        self.port = port
        self._write_config()
        self.record_path.write_text("")
        self._launch()
        self._wait_ready()

    def _launch(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                __name__,
                "serve",
                str(self.workdir / "config.py"),
                str(self.record_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def _wait_ready(self, timeout: float | None = None) -> None:
        import requests

        def probe() -> str | None:
            try:
                response = requests.get(
                    f"{self.endpoint}/redfish/v1/", verify=str(self.ca_path), timeout=2
                )
            except requests.RequestException as exc:
                return str(exc)
            return None if response.status_code == 200 else f"HTTP {response.status_code}"

        process.wait_ready(
            self._proc,
            probe,
            self.start_timeout if timeout is None else timeout,
            error=SushyError,
            what="emulator",
        )

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        process.terminate(proc)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


# ---------------------------------------------------------------------- the emulator process

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Recorder:
    """WSGI middleware appending one JSON line per request (method, path, status, body)."""

    def __init__(self, app: WSGIApp, path: Path) -> None:
        self.app = app
        self.path = path
        self.lock = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterator[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        status: list[int] = [0]

        def recording_start_response(code: str, headers: Any, *args: Any) -> Any:
            status[0] = int(code.split(" ", 1)[0])
            return start_response(code, headers, *args)

        try:
            yield from self.app(environ, recording_start_response)
        finally:
            self._write(environ, raw, status[0])

    def _write(self, environ: dict[str, Any], raw: bytes, status: int) -> None:
        body: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = base64.b64encode(raw).decode()
        record = {
            "time": time.time(),
            "method": environ.get("REQUEST_METHOD", ""),
            "path": environ.get("PATH_INFO", ""),
            "status": status,
            "body": body,
            "harness": bool(environ.get("HTTP_" + HARNESS_HEADER.upper().replace("-", "_"))),
        }
        with self.lock, self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


def _ignoring_graceful_shutdown(driver: type[Any], uuids: Iterable[str]) -> type[Any]:
    """sushy's fake systems driver, except that the systems `uuids` ignore GracefulShutdown.

    The order is accepted as before (the route answers 204), but nothing changes: the OS never
    acts on the power button, so the machine stays On. Other orders behave as sushy's.
    """
    ignoring = frozenset(uuids)

    class OsIgnoresGracefulShutdown(driver):  # type: ignore[misc]
        def set_power_state(self, identity: str, state: str) -> None:
            if state == "GracefulShutdown" and self.uuid(identity) in ignoring:
                return
            super().set_power_state(identity, state)

    return OsIgnoresGracefulShutdown


class _Landing(random.Random):
    """sushy's fake driver draws an order's delay with randint(1, 11): draw from [low, high]."""

    def __init__(self, low: int, high: int) -> None:
        super().__init__()
        self.low, self.high = low, high

    def randint(self, a: int, b: int) -> int:  # noqa: ARG002 (sushy's range is replaced)
        return super().randint(self.low, self.high)


class _FakeDriverPower:
    """`redfish_profiles.PowerBackend` over sushy's fake driver (its pending power change)."""

    #: Far enough ahead that a held change never lands by itself during a test.
    HELD = 2**40

    def __init__(self, app: Any) -> None:
        self.app = app

    def target_state(self, uuid: str) -> str:
        system = self.app.systems._get(uuid)
        pending = system.get("pending_power") or {}
        wanted = str(pending.get("power_state") or system["power_state"])
        return "On" if "On" in wanted or "Restart" in wanted else wanted

    def hold(self, uuid: str) -> None:
        system = self.app.systems._get(uuid)
        pending = system.get("pending_power")
        if pending:
            self.app.systems._update(system, pending_power={**pending, "apply_time": self.HELD})

    def release(self, uuid: str) -> None:
        system = self.app.systems._get(uuid)
        pending = system.get("pending_power")
        if pending and pending["apply_time"] >= self.HELD:
            landing = int(time.time()) + 1
            self.app.systems._update(system, pending_power={**pending, "apply_time": landing})


def serve(config_path: str, record_path: str) -> int:
    """Run sushy's Flask app like ``sushy-emulator --config``, with the vendor profiles in front
    of its auth middleware and the recorder outermost."""
    import ssl

    from sushy_tools.emulator import main as emulator  # type: ignore[import-untyped]
    from sushy_tools.emulator.resources.systems import (  # type: ignore[import-untyped]
        fakedriver,
    )

    app = emulator.app
    app.configure(config_file=config_path)  # wraps the auth middleware first
    # The app makes its systems driver from this module attribute on first use.
    fakedriver.FakeDriver = _ignoring_graceful_shutdown(
        fakedriver.FakeDriver, app.config.get(IGNORES_GRACEFUL_SHUTDOWN, ())
    )
    # Inside the recorder, outside sushy's auth (the meter checks auth through the app).
    app.wsgi_app = PowerMeterMiddleware(app.wsgi_app, app.config.get(POWER_METERS, {}))
    low, high = app.config.get(LANDING) or (1, 11)
    fakedriver.random = _Landing(low, high)
    profiles = app.config.get(PROFILES) or {}
    if profiles:
        username, password = app.config[ACCOUNT]
        app.wsgi_app = redfish_profiles.ProfileMiddleware(
            app.wsgi_app,
            {uuid: redfish_profiles.PROFILES[name] for uuid, name in profiles.items()},
            aliases=app.config.get(ALIASES) or {},
            username=username,
            password=password,
            backend=_FakeDriverPower(app),
            harness_header=HARNESS_HEADER,
        )
    # Faults (lab/src/lightsout_lab/flapping.py) go around the meter: a refused request never
    # reaches a system; the recorder outside them still counts it.
    for name in app.config.get(MIDDLEWARES, ()):
        module, _, factory = name.partition(":")
        app.wsgi_app = getattr(importlib.import_module(module), factory)(app.wsgi_app, app.config)
    app.wsgi_app = _Recorder(app.wsgi_app, Path(record_path))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(
        app.config["SUSHY_EMULATOR_SSL_CERT"], app.config["SUSHY_EMULATOR_SSL_KEY"]
    )
    app.run(
        host=app.config["SUSHY_EMULATOR_LISTEN_IP"],
        port=app.config["SUSHY_EMULATOR_LISTEN_PORT"],
        ssl_context=context,
    )
    return 0


if __name__ == "__main__":
    # Run as a script, this file's directory is sys.path[0]; keep "sushy" meaning the library.
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2], sys.argv[3]))
    sys.exit("usage: sushy.py serve CONFIG RECORD")
