"""An OpenSSH server on loopback, and a "machine" that is on while its sshd runs.

Who uses it: the e2e tests of the runner (``tests/e2e/test_runner_wol.py``) and of the
operator (Wake-on-LAN + SSH machines), and ``lightsout-lab demo``'s mini PC
(``lightsout_lab.extras``), together with ``lightsout_lab.wol``.

What it gives you:

- ``SshServer()`` — ``/usr/sbin/sshd`` started as the current user (root in CI: sshd needs it
  for public-key logins of other users, and for its privilege separation) on 127.0.0.1 and a
  free port, with a fresh host key, a fresh client key in its ``authorized_keys``, and no
  PAM/password logins. It exposes ``known_hosts_line`` (``[127.0.0.1]:PORT ssh-ed25519 …``),
  ``client_key_path`` / ``client_key`` (the private key, what a Secret would hold),
  ``stranger_key_path`` (a key it does not accept), ``port``, ``user``. ``start()`` and
  ``stop()`` may be called again and again: the port and keys stay.
- ``SshMachine(name, power_state="Off")`` — a machine whose probe port is its sshd: running
  means On. ``shutdown_command`` is what to configure as the Node's ``ssh.shutdownCommand``:
  it records the request in a file; a watcher thread then powers the machine off (stops the
  sshd) after ``shutdown_seconds`` — unless ``obey_shutdown`` is false, like a machine whose
  ``sudo`` is misconfigured. ``power_on()`` boots it (sshd after ``boot_seconds``),
  ``power_state()`` / ``power_reader()`` read it, ``shutdown_requests()`` counts requests.

Example::

    with SshMachine("mini-1", power_state="On") as box:
        run_shutdown(ssh_port=box.ssh.port, known_hosts=box.ssh.known_hosts_line,
                     key=box.ssh.client_key, command=box.shutdown_command)
        box.wait_power_state("Off")
        assert box.shutdown_requests() == 1
"""

from __future__ import annotations

import getpass
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Self

from lightsout_lab.process import Service, free_port, read_log, terminate

PowerState = Literal["On", "Off"]

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself: it must be started by absolute path
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; systemd normally creates it


class SshdError(RuntimeError):
    """sshd could not be started."""


class SshServer(Service):
    """An OpenSSH server on 127.0.0.1 with its own keys; start/stop repeatedly (same port).

    Args:
        workdir: where keys, config, pid and log go (default: a temp dir, removed by
            ``cleanup()`` / the context manager).
        user: the only user allowed to log in (default: the current user).
        start_timeout: seconds to wait for the port to accept connections.
    """

    def __init__(
        self, *, workdir: Path | None = None, user: str | None = None, start_timeout: float = 10.0
    ) -> None:
        self.host = "127.0.0.1"
        self.user = user or getpass.getuser()
        self.start_timeout = start_timeout
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="sshd-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._make_keys()
        self._write_config()

    # ------------------------------------------------------------------------------- keys

    @property
    def host_key_path(self) -> Path:
        return self.workdir / "host_key"

    @property
    def client_key_path(self) -> Path:
        """The private key the server accepts (mode 0600)."""
        return self.workdir / "client_key"

    @property
    def client_key(self) -> str:
        """The accepted private key's text, as a kubernetes.io/ssh-auth Secret holds it."""
        return self.client_key_path.read_text()

    @property
    def stranger_key_path(self) -> Path:
        """A private key the server does not accept."""
        return self.workdir / "stranger_key"

    @property
    def known_hosts_line(self) -> str:
        """``[127.0.0.1]:PORT KEYTYPE KEY``: the line a client's known_hosts needs."""
        keytype, key = (self.workdir / "host_key.pub").read_text().split()[:2]
        return f"[{self.host}]:{self.port} {keytype} {key}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    def log_text(self) -> str:
        return read_log(self.log_path)

    # -------------------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start sshd (no-op when running); return once the port accepts connections."""
        with self._lock:
            if self.running:
                return self
            if not os.path.exists(SSHD):
                raise SshdError(f"{SSHD} not found (tools/ci/system-packages.sh installs it)")
            PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
            # -D: stay in the foreground (our child, so stop() ends exactly this process).
            self._proc = subprocess.Popen(
                [SSHD, "-D", "-f", str(self.workdir / "sshd_config"), "-E", str(self.log_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + self.start_timeout
            while not _accepts(self.host, self.port):
                if self._proc.poll() is not None:
                    self._proc = None
                    raise SshdError(f"sshd exited at start:\n{self.log_text()}")
                if time.monotonic() >= deadline:
                    raise SshdError(f"sshd did not listen within {self.start_timeout}s")
                time.sleep(0.05)
            return self

    def stop(self) -> None:
        """Stop sshd (sessions it already forked end on their own)."""
        with self._lock:
            proc, self._proc = self._proc, None
            terminate(proc)

    def cleanup(self) -> None:
        """Stop and remove the work dir (when the harness made it)."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def close(self) -> None:
        """Leaving a ``with`` block removes the work dir as well."""
        self.cleanup()

    def ssh(self, command: str, *, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on the server as ``user`` with strict host key checking."""
        known_hosts = self.workdir / "client_known_hosts"
        known_hosts.write_text(self.known_hosts_line + "\n")
        return subprocess.run(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(key or self.client_key_path),
                "-p",
                str(self.port),
                "-l",
                self.user,
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={known_hosts}",
                "--",
                self.host,
                command,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    # --------------------------------------------------------------------------- internals

    def _make_keys(self) -> None:
        for name in ("host_key", "client_key", "stranger_key"):
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"lightsout-lab-{name}",
                    "-f",
                    str(self.workdir / name),
                ],
                check=True,
                capture_output=True,
            )
        shutil.copyfile(self.workdir / "client_key.pub", self.workdir / "authorized_keys")

    def _write_config(self) -> None:
        text = f"""ListenAddress {self.host}:{self.port}
HostKey {self.host_key_path}
PidFile none
AuthorizedKeysFile {self.workdir / "authorized_keys"}
AllowUsers {self.user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
LogLevel VERBOSE
"""
        config = self.workdir / "sshd_config"
        config.write_text(text)
        config.chmod(0o600)


class SshMachine(Service):
    """A machine whose power state is whether its sshd runs; a context manager.

    Args:
        name: for messages.
        power_state: the state it starts in.
        mac: its MAC address (for ``lightsout_lab.wol``), default derived from the name.
        boot_seconds: delay between ``power_on()`` and the sshd listening.
        shutdown_seconds: delay between a shutdown request and the power going off.
        obey_shutdown: when false, requests are recorded but the machine stays on.
    """

    def __init__(
        self,
        name: str,
        *,
        power_state: PowerState = "Off",
        mac: str | None = None,
        boot_seconds: float = 0.0,
        shutdown_seconds: float = 0.0,
        obey_shutdown: bool = True,
        workdir: Path | None = None,
    ) -> None:
        self.name = name
        self.mac = (mac or _mac_for(name)).lower()
        self.boot_seconds = boot_seconds
        self.shutdown_seconds = shutdown_seconds
        self.obey_shutdown = obey_shutdown
        self.ssh = SshServer(workdir=workdir)
        self._initial = power_state
        self._requests_seen = 0
        self._stop = threading.Event()
        self._timers: list[threading.Timer] = []
        self._watcher: threading.Thread | None = None
        self._power_lock = threading.Lock()
        self._powered = False
        self.power_ons = 0

    @property
    def requests_path(self) -> Path:
        return self.ssh.workdir / "shutdown-requests"

    @property
    def shutdown_command(self) -> str:
        """The Node's ``ssh.shutdownCommand`` for this machine: records one request."""
        return f"echo shutdown >> {self.requests_path}"

    def shutdown_requests(self) -> int:
        """How many times the shutdown command ran."""
        try:
            return len(self.requests_path.read_text().splitlines())
        except FileNotFoundError:
            return 0

    def power_state(self) -> PowerState:
        """On from ``power_on()`` (booting included) until the power goes off."""
        return "On" if self._powered else "Off"

    def reachable(self) -> bool:
        """Whether its SSH port (the probe) accepts connections: booted and not yet off."""
        return _accepts(self.ssh.host, self.ssh.port)

    def power_reader(self) -> Callable[[], str]:
        """A callable reading the power state (for the machine simulator)."""
        return self.power_state

    def power_on(self, *, delay: float | None = None) -> None:
        """Boot: the sshd listens after ``delay`` (default ``boot_seconds``) seconds.

        Nothing happens for a machine that is on or already booting.
        """
        with self._power_lock:
            if self._powered:
                return
            self._powered = True
            self.power_ons += 1

        def boot() -> None:
            with self._power_lock:
                if self._powered:  # not cut off meanwhile
                    self.ssh.start()

        self._later(self.boot_seconds if delay is None else delay, boot)

    def power_off(self) -> None:
        """Cut the power at once (not a shutdown request)."""
        with self._power_lock:
            self._powered = False
            self.ssh.stop()

    def wait_power_state(self, state: PowerState, timeout: float = 20.0) -> None:
        """Wait until the power state is ``state`` and the probe agrees (port open = On)."""
        deadline = time.monotonic() + timeout
        while self.power_state() != state or self.reachable() != (state == "On"):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.name} stayed {self.power_state()}, not {state}")
            time.sleep(0.05)

    def start(self) -> Self:
        self.requests_path.write_text("")
        if self._initial == "On":
            self._powered = True
            self.ssh.start()
        self._watcher = threading.Thread(target=self._watch, name=f"{self.name}-os", daemon=True)
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for timer in self._timers:
            timer.cancel()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self.ssh.cleanup()

    def _later(self, delay: float, action: Callable[[], object]) -> None:
        if delay <= 0:
            action()
            return
        timer = threading.Timer(delay, action)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _watch(self) -> None:
        """The machine's "OS": a new shutdown request powers it off (if it obeys)."""
        while not self._stop.wait(0.05):
            seen = self.shutdown_requests()
            if seen > self._requests_seen:
                self._requests_seen = seen
                if self.obey_shutdown:
                    self._later(self.shutdown_seconds, self.power_off)


def _mac_for(name: str) -> str:
    """A stable, locally administered MAC address for a machine name."""
    digits = hashlib.sha256(name.encode()).hexdigest()[:6]
    return "52:54:00:" + ":".join(digits[i : i + 2] for i in range(0, 6, 2))


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
