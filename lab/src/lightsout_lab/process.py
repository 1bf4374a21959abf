"""The lifecycle the lab's emulators share (sushy, ipmi_sim, sshd, fakepve, the WoL LAN).

- ``Service`` — ``start()`` / ``stop()`` and the context manager around them.
- ``WorkdirService`` — a ``Service`` whose files live in a work dir: the one given, or a temp
  dir made on start and removed on stop.
- ``free_port``, ``start_on_free_port`` — pick a free loopback port and start there, again on
  another port if the first was taken meanwhile.
- ``spawn``, ``wait_ready``, ``terminate``, ``read_log`` — start a daemon in its own session
  with its output in a log file, wait until it answers, end it, and read its log for errors.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self


class Service:
    """Something started and stopped; leaving a ``with`` block calls ``close()``."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """What leaving a ``with`` block does: ``stop()`` unless a subclass cleans up more."""
        self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WorkdirService(Service):
    """A ``Service`` with a work dir: the one given, else a temp dir made by ``_make_workdir``.

    Subclasses set ``error`` (raised when the work dir is asked for before start), the message
    it carries, and the temp dir's prefix.
    """

    error: ClassVar[type[Exception]] = RuntimeError
    not_started: ClassVar[str] = "not started"
    workdir_prefix: ClassVar[str] = "lightsout-"

    def __init__(self, workdir: Path | None) -> None:
        self._own_workdir = workdir is None
        self._workdir = workdir

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise self.error(self.not_started)
        return self._workdir

    def _make_workdir(self) -> Path:
        """The work dir, made (a temp dir unless one was given) if it does not exist yet."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=self.workdir_prefix))
        self._workdir.mkdir(parents=True, exist_ok=True)
        return self._workdir

    def _remove_workdir(self) -> None:
        """Remove the work dir when it is the temp dir made here (a given one stays)."""
        if self._own_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for port-0 binds and outgoing connections' source ports."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _lab_ports() -> range:
    """Where the lab's servers listen: outside the ephemeral range, so no connection made
    meanwhile (whose source port the kernel picks there) can take a port between the moment
    it is chosen and the moment its server binds it."""
    low, high = _ephemeral_range()
    if low - 1024 >= 4096:
        return range(max(1024, low - 12288), low)
    return range(high + 1, 65536)


#: Ports this process handed out lately: port -> (fd of its lock file, when). Another process
#: of the lab (a parallel test worker) skips a port whose lock file is locked.
_RESERVED: dict[int, tuple[int, float]] = {}
#: How long a handed-out port stays reserved: longer than any server takes to bind it.
RESERVATION_SECONDS = 600.0


def _release_old_reservations(now: float) -> None:
    for port, (fd, since) in list(_RESERVED.items()):
        if now - since > RESERVATION_SECONDS:
            os.close(fd)  # the lock goes with the descriptor
            del _RESERVED[port]


def _bindable(host: str, port: int, kind: socket.SocketKind) -> bool:
    with socket.socket(socket.AF_INET, kind) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A port nobody listens on (TCP, or UDP with ``kind=SOCK_DGRAM``), reserved for a while.

    Not a port-0 probe (bind, read, close, hand on): the kernel may give that port to another
    socket before the server binds it, which failed lab starts with `address already in use`.
    These ports lie outside the kernel's ephemeral range, and each is locked (a lock file under
    the temp dir) so that the lab's other processes do not hand it out too.
    """
    now = time.monotonic()
    _release_old_reservations(now)
    locks = Path(tempfile.gettempdir()) / "lightsout-ports"
    locks.mkdir(mode=0o777, exist_ok=True)
    ports = _lab_ports()
    for _ in range(500):
        port = random.choice(ports)  # noqa: S311 - spreads the lab's processes, no secret
        if port in _RESERVED:
            continue
        fd = os.open(locks / str(port), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another lab process holds it
            continue
        if not _bindable(host, port, kind):
            os.close(fd)
            continue
        _RESERVED[port] = (fd, now)
        return port
    raise OSError(f"no free port on {host} in {ports.start}-{ports.stop - 1} after 500 tries")


def start_on_free_port(
    host: str,
    attempt: Callable[[int], None],
    undo: Callable[[], None],
    *,
    error: type[Exception],
    what: str,
    log: Callable[[], str],
    kind: socket.SocketKind = socket.SOCK_STREAM,
    attempts: int = 3,
) -> int:
    """Call ``attempt(port)`` with a free port until it returns; the port it started on.

    ``attempt`` raises ``error`` when it did not start; ``undo`` then cleans up before the
    next port. After ``attempts`` failures: ``error`` with the last one and ``log()``.
    """
    last_error = ""
    for _ in range(attempts):  # a free port can be taken between probing and binding
        port = free_port(host, kind)
        try:
            attempt(port)
        except error as exc:
            last_error = str(exc)
            undo()
            continue
        return port
    raise error(f"{what} did not start: {last_error}\n{log()}")


def spawn(
    argv: Sequence[str], log: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (its group can be killed), output appended to
    ``log``, no standard input; ``env`` replaces the environment when given."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )


def wait_ready(
    proc: subprocess.Popen[bytes] | None,
    probe: Callable[[], str | None],
    timeout: float,
    *,
    error: type[Exception],
    what: str,
    interval: float = 0.2,
) -> None:
    """Return once ``probe()`` answers None (ready); else it says what is wrong.

    Raises ``error`` when ``proc`` exits first or ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise error(f"{what} exited with {proc.returncode}")
        problem = probe()
        if problem is None:
            return
        if time.monotonic() >= deadline:
            raise error(f"no answer within {timeout}s: {problem}")
        time.sleep(interval)


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """End ``proc``: SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_log(path: Path) -> str:
    """A process' log so far (for error messages); empty when there is none yet."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
