"""A Wake-on-LAN "network" on loopback: a UDP listener that records magic packets.

Who uses it: the e2e tests of the runner (``tests/e2e/test_runner_wol.py``) and of the
operator (Wake-on-LAN machines), and ``lightsout-lab demo``'s mini PC
(``lightsout_lab.extras``), with ``lightsout_lab.sshd.SshMachine`` as the machines.

Never aim a Wake-on-LAN sender at a real broadcast address here: configure the Node's
(or the role's) broadcast address as ``listener.host`` (127.0.0.1) and its port as
``listener.port``.

What it gives you:

- ``parse_magic_packet(data)`` — the MAC address a datagram wakes (its first 102 bytes are
  6 x 0xFF then 16 x the MAC; community.general.wakeonlan sends 20 copies, 126 bytes), or None.
- ``WolListener()`` — a context manager: a UDP socket on 127.0.0.1 and a free port, a thread
  recording every datagram (``packets()``, ``magic_packets(mac)``, ``wait_for_packet(mac)``).
- ``listener.wakes(machine, …)`` — a magic packet for a machine's MAC while it is off powers
  it on (``SshMachine.power_on()``: its sshd starts after ``boot_seconds``), like a network
  card with Wake-on-LAN enabled.

Example::

    with WolListener() as lan, SshMachine("mini-1") as box:
        lan.wakes(box)
        run_startup(mac=box.mac, broadcast=lan.host, port=lan.port, ssh_port=box.ssh.port)
        assert box.power_state() == "On"
        assert len(lan.magic_packets(box.mac)) == 1
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, Self

from lightsout_lab.process import Service

#: Bytes a network card matches: 6 x 0xFF, then the MAC 16 times.
MAGIC_LENGTH = 6 + 16 * 6


def normalize_mac(mac: str) -> str:
    """``AA-BB-CC-DD-EE-FF`` / ``aabbccddeeff`` -> ``aa:bb:cc:dd:ee:ff``; ValueError otherwise."""
    digits = mac.replace(":", "").replace("-", "").replace(".", "").lower()
    if len(digits) != 12 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"not a MAC address: {mac!r}")
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def magic_packet(mac: str) -> bytes:
    """The 102 bytes that wake ``mac``."""
    return b"\xff" * 6 + bytes.fromhex(normalize_mac(mac).replace(":", "")) * 16


def parse_magic_packet(data: bytes) -> str | None:
    """The MAC address ``data`` wakes (``aa:bb:…``), or None when it is not a magic packet."""
    if len(data) < MAGIC_LENGTH or data[:6] != b"\xff" * 6:
        return None
    mac = data[6:12]
    if data[6:MAGIC_LENGTH] != mac * 16:
        return None
    return ":".join(f"{b:02x}" for b in mac)


@dataclass(frozen=True)
class Datagram:
    """One UDP datagram the listener received."""

    time: float
    source: tuple[str, int]
    data: bytes

    @property
    def mac(self) -> str | None:
        """The MAC address it wakes, if it is a magic packet."""
        return parse_magic_packet(self.data)


class Wakeable(Protocol):
    """What ``WolListener.wakes`` needs of a machine (``lightsout_lab.sshd.SshMachine``)."""

    mac: str

    def power_state(self) -> str: ...

    def power_on(self) -> None: ...


class WolListener(Service):
    """Records every UDP datagram sent to 127.0.0.1:``port``; a context manager."""

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        if not host.startswith("127."):
            raise ValueError("the emulated LAN listens on loopback only")
        self.host = host
        self.port = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._received = threading.Condition(self._lock)
        self._packets: list[Datagram] = []
        self._handlers: list[Callable[[Datagram], None]] = []

    def start(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((self.host, 0))
        sock.settimeout(0.2)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name="wol-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # --------------------------------------------------------------------------- records

    def packets(self) -> list[Datagram]:
        """Every datagram so far, oldest first."""
        with self._lock:
            return list(self._packets)

    def magic_packets(self, mac: str | None = None) -> list[Datagram]:
        """Magic packets (for ``mac`` only, when given)."""
        wanted = None if mac is None else normalize_mac(mac)
        return [
            p for p in self.packets() if p.mac is not None and (wanted is None or p.mac == wanted)
        ]

    def wait_for_packet(self, mac: str, timeout: float = 10.0) -> Datagram:
        """The first magic packet for ``mac``; AssertionError after ``timeout`` seconds."""
        wanted = normalize_mac(mac)
        deadline = time.monotonic() + timeout
        with self._received:
            while True:
                for packet in self._packets:
                    if packet.mac == wanted:
                        return packet
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no magic packet for {wanted} within {timeout}s")
                self._received.wait(left)

    def clear(self) -> None:
        with self._lock:
            self._packets.clear()

    # ------------------------------------------------------------------------- machines

    def on_packet(self, handler: Callable[[Datagram], None]) -> None:
        """Call ``handler`` for every datagram (in the listener's thread)."""
        with self._lock:
            self._handlers.append(handler)

    def wakes(self, *machines: Wakeable) -> None:
        """A magic packet for one of ``machines`` while it is off powers it on."""
        by_mac = {normalize_mac(m.mac): m for m in machines}

        def wake(packet: Datagram) -> None:
            machine = by_mac.get(packet.mac or "")
            if machine is not None and machine.power_state() == "Off":
                machine.power_on()

        self.on_packet(wake)

    def _loop(self) -> None:
        while True:
            sock = self._sock
            if sock is None:
                return
            try:
                data, source = sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            packet = Datagram(time.time(), (str(source[0]), int(source[1])), data)
            with self._received:
                self._packets.append(packet)
                handlers = list(self._handlers)
                self._received.notify_all()
            for handler in handlers:
                handler(packet)
