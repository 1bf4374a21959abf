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

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
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


def free_port(host: str, kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A port nobody listens on right now (TCP, or UDP with ``kind=SOCK_DGRAM``)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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


def spawn(argv: Sequence[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (its group can be killed), output appended to
    ``log``, no standard input."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
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
