"""The flapping BMC middleware of the lab (`lightsout_lab.flapping`): which requests it fails,
how, and that the harness' own requests are never touched."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from lightsout_lab import flapping
from lightsout_lab.sushy import HARNESS_HEADER

pytestmark = pytest.mark.unit


def app(_environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"sushy"]


class Socket:
    def __init__(self) -> None:
        self.shut: list[int] = []

    def shutdown(self, how: int) -> None:
        self.shut.append(how)


def call(middleware: flapping.Flapping, **environ: Any) -> tuple[str, Socket]:
    sock = Socket()
    seen: list[str] = []
    body = list(middleware({"werkzeug.socket": sock, **environ}, lambda s, _h: seen.append(s)))
    return (seen[0] if seen else "dropped" if sock.shut else f"no answer {body}"), sock


def test_every_other_request_is_refused_or_dropped_in_turn(tmp_path: Path) -> None:
    middleware = flapping.Flapping(app, {"SUSHY_EMULATOR_STATE_DIR": str(tmp_path / "state")})
    assert [call(middleware)[0] for _ in range(2)] == ["200 OK", "200 OK"], "not flapping yet"
    flapping.start(tmp_path)
    answers = [call(middleware)[0] for _ in range(6)]
    assert answers == [
        "200 OK",
        "503 Service Unavailable",
        "200 OK",
        "dropped",
        "200 OK",
        "503 Service Unavailable",
    ]
    harness = {"HTTP_" + HARNESS_HEADER.upper().replace("-", "_"): "1"}
    assert {call(middleware, **harness)[0] for _ in range(4)} == {"200 OK"}
    assert call(middleware)[0] == "200 OK", "harness requests are not counted"
    flapping.stop(tmp_path)
    assert {call(middleware)[0] for _ in range(4)} == {"200 OK"}


def test_a_drop_closes_the_connection_both_ways(tmp_path: Path) -> None:
    middleware = flapping.Flapping(app, {"SUSHY_EMULATOR_STATE_DIR": str(tmp_path / "state")})
    flapping.start(tmp_path, every=1, modes=(flapping.DROP,))
    answer, sock = call(middleware)
    assert answer == "dropped" and sock.shut == [socket.SHUT_RDWR]


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every must be"):
        flapping.start(tmp_path, every=0)
    with pytest.raises(ValueError, match="modes among"):
        flapping.start(tmp_path, modes=("explode",))
