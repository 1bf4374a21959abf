"""A flapping BMC: WSGI middleware making sushy-tools fail every other request while told to.

A BMC that is rebooting its management controller, or has too many sessions open, answers some
requests and not others. Wrapped around the emulator's app (inside the request recorder of
`lightsout_lab.sushy`, so every failed request is recorded too) by naming it in the emulator's
middlewares::

    SushyEmulator(systems, middlewares=(flapping.MIDDLEWARE,))

it does nothing until the test calls `start(bmc.workdir)`; from then on every `every`-th
request of the client (the harness' own requests, `sushy.HARNESS_HEADER`, are never failed nor
counted: the machine simulator reads power through them) fails, in turn:

- `refuse`: HTTP 503 Service Unavailable with `Retry-After`, as a busy BMC answers;
- `drop`: the connection is closed with no answer at all, which is what a client whose request
  timed out sees (it cannot tell whether the BMC acted on it), without the client's timeout.

Neither kind reaches sushy: the BMC did not act on it. The recorder writes both down (a refusal
with status 503, a drop with status 0), so `SushyEmulator.requests()` holds every request the
client sent, which the flapping-BMC e2e test bounds with `planning.machine.outages.outage_requests`.
`stop(bmc.workdir)` ends the flapping.
The state is a small JSON file in the emulator's work dir, read on every request, so a test
switches it while the emulator runs.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lightsout_lab.sushy import HARNESS_HEADER

#: The factory's name as `SushyEmulator(middlewares=...)` takes it.
MIDDLEWARE = "lightsout_lab.flapping:Flapping"
CONTROL_FILE = "flapping.json"
REFUSE, DROP = "refuse", "drop"
_HARNESS_KEY = "HTTP_" + HARNESS_HEADER.upper().replace("-", "_")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def start(workdir: Path, *, every: int = 2, modes: Sequence[str] = (REFUSE, DROP)) -> None:
    """Fail every `every`-th client request from now on, by each of `modes` in turn."""
    if every < 1 or not modes or set(modes) - {REFUSE, DROP}:
        raise ValueError(f"every must be >= 1 and modes among {REFUSE}, {DROP}")
    path = workdir / CONTROL_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"every": every, "modes": list(modes)}))
    tmp.replace(path)


def stop(workdir: Path) -> None:
    """Answer every request again."""
    (workdir / CONTROL_FILE).unlink(missing_ok=True)


class Flapping:
    """The middleware; `config` is sushy's app config (its state dir is in the work dir)."""

    def __init__(self, app: WSGIApp, config: Any) -> None:
        self.app = app
        self.control = Path(config["SUSHY_EMULATOR_STATE_DIR"]).parent / CONTROL_FILE
        self.lock = threading.Lock()
        self.seen = 0
        self.failed = 0

    def _verdict(self) -> str | None:
        """None to pass the request on, else how it fails."""
        try:
            settings = json.loads(self.control.read_text())
        except (OSError, ValueError):
            return None
        with self.lock:
            self.seen += 1
            if self.seen % int(settings["every"]):
                return None
            modes = settings["modes"]
            mode = str(modes[self.failed % len(modes)])
            self.failed += 1
            return mode

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterator[bytes]:
        verdict = None if environ.get(_HARNESS_KEY) else self._verdict()
        if verdict == DROP:
            sock = environ.get("werkzeug.socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                return iter(())
            verdict = REFUSE  # no socket to drop (another server): refuse instead
        if verdict == REFUSE:
            body = json.dumps(
                {"error": {"code": "Base.1.0.ServiceTemporarilyUnavailable", "message": "busy"}}
            ).encode()
            start_response(
                "503 Service Unavailable",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    ("Retry-After", "5"),
                ],
            )
            return iter((body,))
        return iter(self.app(environ, start_response))
