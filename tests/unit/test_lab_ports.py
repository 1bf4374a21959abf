"""The lab's ports: chosen outside the kernel's ephemeral range and reserved across processes,
so that a server never finds its port taken between the choice and its bind."""

from __future__ import annotations

import fcntl
import itertools
import os
import random
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from lightsout_lab import process


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ports `free_port` tries, in this order (instead of random ones)."""
    ports: list[int] = []

    def choice(candidates: Sequence[int]) -> int:
        assert ports, "free_port tried more ports than scripted"
        port = ports.pop(0)
        assert port in candidates
        return port

    monkeypatch.setattr(random, "choice", choice)
    return ports


def test_ports_lie_outside_the_kernels_ephemeral_range() -> None:
    low, high = process._ephemeral_range()
    ports = [process.free_port() for _ in range(20)]
    assert all(not low <= port <= high for port in ports), ports
    assert len(set(ports)) == 20  # reserved: none is handed out twice


#: Ports scripted after the one a test makes unusable: the lab's other processes (tests run in
#: parallel) may take one of them between this test's check and `free_port`'s.
SPARE = 5


def test_a_port_another_process_reserved_is_skipped(scripted: list[int]) -> None:
    taken, *spare = unreserved(1 + SPARE)
    locks = Path(tempfile.gettempdir()) / "lightsout-ports"
    locks.mkdir(exist_ok=True)
    # Another open file description holds the lock, as another worker's process would.
    fd = os.open(locks / str(taken), os.O_CREAT | os.O_RDWR, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        scripted.extend([taken, *spare])
        assert process.free_port() in spare  # tried first, skipped
    finally:
        os.close(fd)


def unreserved(count: int) -> list[int]:
    """Lab ports nothing listens on (TCP and UDP) and this process has not handed out."""
    return list(
        itertools.islice(
            (
                port
                for port in process._lab_ports()
                if port not in process._RESERVED
                and process._bindable("127.0.0.1", port, socket.SOCK_STREAM)
                and process._bindable("127.0.0.1", port, socket.SOCK_DGRAM)
            ),
            count,
        )
    )


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM], ids=["tcp", "udp"])
def test_a_port_something_listens_on_is_skipped(
    scripted: list[int], kind: socket.SocketKind
) -> None:
    busy, *spare = unreserved(1 + SPARE)
    with socket.socket(type=kind) as listener:
        listener.bind(("127.0.0.1", busy))
        scripted.extend([busy, *spare])
        assert process.free_port(kind=kind) in spare  # tried first, skipped
