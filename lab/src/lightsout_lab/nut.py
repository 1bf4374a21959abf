"""A real Network UPS Tools server on loopback: Debian's ``upsd`` in front of the ``dummy-ups``
driver, serving one UPS whose readings the test sets.

Who uses it: tests of the operator's UPS awareness (reading a UPS through the NUT protocol, e.g.
with aionut) and anyone who needs a NUT server on 127.0.0.1. It needs Debian's ``nut-server``
and ``nut-client`` (``tools/ci/system-packages.sh``); nothing is installed as a service, the two
daemons run in the foreground from a work dir (``NUT_CONFPATH``/``NUT_STATEPATH``).

What it gives you:

- ``NutServer(ups="lab", status="OL CHRG", charge=100, runtime=1800, load=23)`` — a context
  manager that writes ups.conf, upsd.conf, upsd.users and ``<ups>.dev``, starts the driver, then
  upsd on a free loopback port (or the one given), and returns once upsd serves the readings.
  ``server.address`` is ``ups@host:port`` (what ``upsc`` takes); ``server.username`` /
  ``server.password`` may SET variables, set FSD and run any instant command.
- ``server.set(status="OB DISCHRG", charge=80, runtime=600)`` — change what the UPS reports and
  wait until upsd serves it. The driver runs in dummy-once mode (it re-reads the .dev file when
  the file's mtime changes, compared in whole seconds), so each write gives the file a strictly
  increasing mtime of its own; edits in the same second are never lost.
- ``server.read()`` — the variables as upsd serves them now (``LIST VAR``).
- ``server.pause()`` / ``server.resume()`` — the NUT server goes away (connections refused) and
  comes back on the same port with the readings last set. Both daemons are restarted together:
  killing upsd alone can make dummy-ups 2.8.0 abort. A restart also clears an FSD set by a
  client (upsd latches it until it restarts).

Quirks (see research/ups.md, section 3): the driver polls once a second here (``pollinterval =
1``; the default 2 doubles it), so a ``set`` returns after about 1 s, and a start or resume takes
about 3 s (the driver's socket appears after 1 s; upsd then answers ``ups.status`` ``WAIT``
for 2 s, until the driver's first data). As root both daemons run as root (``-u root``; else
they drop to the ``nut`` account), otherwise as the calling user.

Example::

    with NutServer() as ups:
        client = AIONUTClient(ups.host, ups.port)
        assert (await client.list_vars(ups.ups))["ups.status"] == "OL CHRG"
        ups.set(status="OB DISCHRG LB", charge=8, runtime=90)
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

from lightsout_lab import process

#: Where Debian puts the drivers and upsd (``/lib/nut``; ``/usr/lib/nut`` from trixie on, where
#: /lib is a symlink to it).
NUT_DIRS = (Path("/lib/nut"), Path("/usr/lib/nut"))
#: The UPS's real power at 100 % load (``ups.realpower.nominal``), for ``ups.realpower``.
NOMINAL_WATTS = 900
#: Fixed readings: the thresholds at which a real UPS raises LB, the mains voltage.
BATTERY_CHARGE_LOW = 20
BATTERY_RUNTIME_LOW = 120
INPUT_VOLTAGE = "230.0"
#: Seconds upsd serves a driver's data without news from it (upsd pings a quiet driver sooner).
MAXAGE = 15

_UPS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: A Unix socket path (sun_path) holds at most 107 bytes and a NUL.
_MAX_SOCKET_PATH = 107
_LOG_TAIL_LINES = 20


class NutServerError(RuntimeError):
    """The NUT server could not be started, died, or did not serve what was set in time."""


def _unquote(value: str) -> str:
    r"""A NUT protocol value without its quotes and ``\"`` / ``\\`` escapes."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return re.sub(r"\\(.)", r"\1", value)


def list_vars(host: str, port: int, ups: str, timeout: float = 2.0) -> dict[str, str]:
    """``LIST VAR <ups>`` over the NUT protocol: variable -> value.

    Raises ``OSError`` when upsd is unreachable and ``NutServerError`` for an ``ERR`` answer
    (``ERR DRIVER-NOT-CONNECTED``, ``ERR DATA-STALE`` …) or a malformed one.
    """
    begin, end = f"BEGIN LIST VAR {ups}", f"END LIST VAR {ups}"
    prefix = f"VAR {ups} "
    values: dict[str, str] = {}
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(f"LIST VAR {ups}\n".encode())
        with sock.makefile("r", encoding="ascii", errors="replace", newline="\n") as reader:
            first = reader.readline().strip()
            if first != begin:
                raise NutServerError(f"LIST VAR {ups}: {first or 'connection closed'}")
            for raw in reader:
                line = raw.strip()
                if line == end:
                    return values
                if not line.startswith(prefix):
                    raise NutServerError(f"LIST VAR {ups}: unexpected line {line!r}")
                name, _, value = line[len(prefix) :].partition(" ")
                values[name] = _unquote(value)
    raise NutServerError(f"LIST VAR {ups}: connection closed before {end!r}")


def _nut_binary(name: str) -> Path:
    for directory in NUT_DIRS:
        if (directory / name).is_file():
            return directory / name
    raise NutServerError(
        f"{name} not found in {', '.join(map(str, NUT_DIRS))}: install nut-server and "
        "nut-client (tools/ci/system-packages.sh)"
    )


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    text = process.read_log(path).rstrip()
    if not text:
        return f"({path.name}: empty)"
    return f"last lines of {path}:\n" + "\n".join(text.splitlines()[-lines:])


class NutServer(process.WorkdirService):
    """upsd and dummy-ups serving one UPS; a context manager.

    Args:
        workdir: where the config (``etc/``), the driver's socket (``state/``) and the logs
            (``driver.log``, ``upsd.log``) go (default: a temp dir, removed on stop).
        ups: the UPS's name (``LIST VAR <ups>``).
        host / port: where upsd listens (default: a free loopback port).
        username / password: the account allowed to SET variables, set FSD and run commands.
        status / charge / runtime / load: the first readings (``ups.status``,
            ``battery.charge`` in %, ``battery.runtime`` in s, ``ups.load`` in %).
        start_timeout: seconds to wait for each daemon on start and resume.
    """

    error = NutServerError
    not_started = "NUT server not started"
    workdir_prefix = "nut-"

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        ups: str = "lab",
        host: str = "127.0.0.1",
        port: int | None = None,
        username: str = "admin",
        password: str = "lightsout-nut-pw",
        status: str = "OL CHRG",
        charge: float = 100.0,
        runtime: int = 1800,
        load: float = 23.0,
        start_timeout: float = 20.0,
    ) -> None:
        if not _UPS_NAME.fullmatch(ups):
            raise ValueError(f"not a NUT UPS name: {ups!r}")
        for what, value in (("username", username), ("password", password)):
            if not value or any(c.isspace() or c in "\"'\\" for c in value):
                raise ValueError(f"the NUT {what} needs no blanks, quotes or backslashes")
        super().__init__(workdir)
        self._ups = ups
        self._host = host
        self._wanted_port = port
        self._port: int | None = None
        self.username = username
        self.password = password
        self.start_timeout = start_timeout
        self._values = _readings(status, charge, runtime, load)
        self._mtime = 0
        self._driver: subprocess.Popen[bytes] | None = None
        self._upsd: subprocess.Popen[bytes] | None = None

    # ---------------------------------------------------------------------------- addresses

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        if self._port is None:
            raise NutServerError(self.not_started)
        return self._port

    @property
    def ups(self) -> str:
        return self._ups

    @property
    def address(self) -> str:
        """``ups@host:port``, as ``upsc`` and ``upsrw`` take it."""
        return f"{self.ups}@{self.host}:{self.port}"

    @property
    def driver_log(self) -> Path:
        return self.workdir / "driver.log"

    @property
    def upsd_log(self) -> Path:
        return self.workdir / "upsd.log"

    def log_text(self) -> str:
        """The last lines of both daemons' logs (for error and assertion messages)."""
        return f"{_tail(self.driver_log)}\n{_tail(self.upsd_log)}"

    # ---------------------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Write the config, start dummy-ups then upsd; return once upsd serves the readings."""
        if self._port is not None:
            raise NutServerError("NUT server already started")
        for binary in ("dummy-ups", "upsd"):
            _nut_binary(binary)  # a clear error before anything is written
        self._make_workdir()
        try:
            self._write_config()
            if self._wanted_port is not None:
                self._start_on(self._wanted_port)
            else:
                process.start_on_free_port(
                    self.host,
                    self._start_on,
                    self._halt,
                    error=NutServerError,
                    what="NUT server",
                    log=self.log_text,
                )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End both daemons and remove the temp work dir (when it was made here)."""
        self._halt()
        self._port = None
        self._remove_workdir()

    def pause(self) -> None:
        """Make the server unreachable (both daemons end; connections are refused) until
        ``resume``; the port and the readings stay."""
        if self._upsd is None:
            raise NutServerError("NUT server is not running")
        self._halt()

    def resume(self) -> None:
        """Start both daemons again on the same port, after ``pause``; return once upsd serves
        the readings last set."""
        if self._port is None:
            raise NutServerError(self.not_started)
        if self._upsd is not None:
            raise NutServerError("NUT server is running")
        try:
            self._launch(self._port)
        except BaseException:
            self._halt()
            raise

    # ------------------------------------------------------------------------------ readings

    def set(
        self,
        status: str | None = None,
        charge: float | None = None,
        runtime: int | None = None,
        load: float | None = None,
        *,
        timeout: float = 15.0,
    ) -> None:
        """Change what the UPS reports (None: unchanged) and wait until upsd serves it.

        Raises ``NutServerError`` when upsd does not serve the new readings within
        ``timeout`` seconds or a daemon died.
        """
        current = self._values
        self._values = _readings(
            current["ups.status"] if status is None else status,
            float(current["battery.charge"]) if charge is None else charge,
            int(current["battery.runtime"]) if runtime is None else runtime,
            float(current["ups.load"]) if load is None else load,
        )
        if self._port is None:
            return  # not started: start() writes them
        self._write_dev()
        if self._upsd is None:
            return  # paused: resume() serves them
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            problem = self._differs()
            if problem is None:
                return
            if time.monotonic() >= deadline:
                raise NutServerError(
                    f"upsd did not serve the new readings within {timeout}s: {problem}\n"
                    + self.log_text()
                )
            time.sleep(0.1)

    def read(self) -> dict[str, str]:
        """The UPS's variables as upsd serves them now.

        Raises ``NutServerError`` when upsd refuses (e.g. ``ERR DATA-STALE``) or is unreachable.
        """
        try:
            return list_vars(self.host, self.port, self.ups)
        except OSError as exc:
            raise NutServerError(f"upsd at {self.host}:{self.port}: {exc}") from exc

    @property
    def readings(self) -> dict[str, str]:
        """What the .dev file says (what upsd serves once the driver has read it)."""
        return dict(self._values)

    # ------------------------------------------------------------------------------ internals

    @property
    def _conf_dir(self) -> Path:
        return self.workdir / "etc"

    @property
    def _state_dir(self) -> Path:
        return self.workdir / "state"

    @property
    def _driver_socket(self) -> Path:
        return self._state_dir / f"dummy-ups-{self.ups}"

    def _write_config(self) -> None:
        self._conf_dir.mkdir(mode=0o700, exist_ok=True)
        self._state_dir.mkdir(mode=0o700, exist_ok=True)
        if len(str(self._driver_socket).encode()) > _MAX_SOCKET_PATH:
            raise NutServerError(
                f"the driver's socket path {self._driver_socket} is too long for a Unix "
                "socket: give a shorter workdir"
            )
        (self._conf_dir / "ups.conf").write_text(
            f"[{self.ups}]\n"
            "  driver = dummy-ups\n"
            f"  port = {self.ups}.dev\n"  # *.dev: dummy-once mode
            # The driver re-reads the file once a poll: 1 s halves the default's wait per set.
            "  pollinterval = 1\n"
            '  desc = "Lights-Out lab UPS"\n'
        )
        users = self._conf_dir / "upsd.users"
        users.touch(mode=0o600)
        users.chmod(0o600)
        users.write_text(
            f"[{self.username}]\n"
            f"  password = {self.password}\n"
            "  actions = SET\n"
            "  actions = FSD\n"
            "  instcmds = ALL\n"
        )
        self._write_dev()

    def _write_dev(self) -> None:
        """Write ``<ups>.dev`` whole (a rename: the driver never reads half of it), with an
        mtime one second past the last one written: dummy-once compares whole seconds."""
        self._mtime = max(self._mtime + 1, int(time.time()))
        dev = self._conf_dir / f"{self.ups}.dev"
        tmp = dev.with_name(f".{dev.name}.tmp")
        tmp.write_text("".join(f"{name}: {value}\n" for name, value in self._values.items()))
        os.utime(tmp, (self._mtime, self._mtime))
        tmp.replace(dev)

    def _start_on(self, port: int) -> None:
        self._port = port
        self._launch(port)

    def _launch(self, port: int) -> None:
        """Start the driver, wait for its socket, then upsd on ``port``; wait for the data."""
        driver, upsd = _nut_binary("dummy-ups"), _nut_binary("upsd")
        upsd_conf = self._conf_dir / "upsd.conf"
        upsd_conf.write_text(f"LISTEN {self.host} {port}\nMAXAGE {MAXAGE}\n")
        upsd_conf.chmod(0o600)
        env = {
            **os.environ,
            "NUT_CONFPATH": str(self._conf_dir),
            "NUT_STATEPATH": str(self._state_dir),
            "NUT_ALTPIDPATH": str(self._state_dir),
        }
        # As root both drop to the compiled-in `nut` unless told otherwise; as anyone else upsd
        # still looks that account up. Run them as whoever runs the lab.
        user = pwd.getpwuid(os.geteuid()).pw_name
        self._driver_socket.unlink(missing_ok=True)
        self._driver = process.spawn(
            [str(driver), "-a", self.ups, "-F", "-u", user], self.driver_log, self.workdir, env
        )

        def driver_socket() -> str | None:
            self._check_alive()
            return None if self._driver_socket.exists() else f"no socket {self._driver_socket}"

        process.wait_ready(
            None, driver_socket, self.start_timeout, error=NutServerError, what="dummy-ups"
        )
        self._upsd = process.spawn([str(upsd), "-F", "-u", user], self.upsd_log, self.workdir, env)

        def serving() -> str | None:
            self._check_alive()
            return self._differs()

        process.wait_ready(
            None, serving, self.start_timeout, error=NutServerError, what="upsd", interval=0.1
        )

    def _differs(self) -> str | None:
        """None when upsd serves the readings last written; else what it serves instead."""
        try:
            served = list_vars(self.host, self.port, self.ups, timeout=1.0)
        except (OSError, NutServerError) as exc:
            return str(exc)
        wrong = {
            name: served.get(name)
            for name, value in self._values.items()
            if served.get(name) != value
        }
        return f"serves {wrong}, wanted {self._values}" if wrong else None

    def _check_alive(self) -> None:
        for what, proc, log in (
            ("dummy-ups", self._driver, self.driver_log),
            ("upsd", self._upsd, self.upsd_log),
        ):
            if proc is not None and proc.poll() is not None:
                raise NutServerError(f"{what} exited with {proc.returncode}; {_tail(log)}")

    def _halt(self) -> None:
        # The driver first: killing upsd under a running dummy-ups 2.8.0 can make it abort.
        driver, self._driver = self._driver, None
        process.terminate(driver)
        upsd, self._upsd = self._upsd, None
        process.terminate(upsd)


def _readings(status: str, charge: float, runtime: int, load: float) -> dict[str, str]:
    """The .dev file's variables, written as NUT drivers report them (integers as such)."""
    flags = status.split()
    if not flags or any(not f.isalnum() for f in flags):
        raise ValueError(f"ups.status needs space-separated flags such as 'OL CHRG': {status!r}")
    if not 0 <= charge <= 100:
        raise ValueError(f"battery.charge is a percentage: {charge}")
    if runtime < 0 or load < 0:
        raise ValueError(f"runtime and load cannot be negative: {runtime}, {load}")
    return {
        "ups.status": " ".join(flags),
        "battery.charge": str(round(charge)),
        "battery.charge.low": str(BATTERY_CHARGE_LOW),
        "battery.runtime": str(int(runtime)),
        "battery.runtime.low": str(BATTERY_RUNTIME_LOW),
        "ups.load": str(round(load)),
        "ups.realpower": str(round(NOMINAL_WATTS * load / 100)),
        "ups.realpower.nominal": str(NOMINAL_WATTS),
        "input.voltage": INPUT_VOLTAGE,
    }
