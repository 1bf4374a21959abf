#!/usr/bin/env python3
"""Fetch one file over TFTP (RFC 1350 read request, octet mode) and print it to stdout.

Used by verify.yml to prove dnsmasq serves the iPXE script: tftp_get.py HOST PORT PATH.
Exits 1 with the server's error message (or a timeout) on failure.
"""

from __future__ import annotations

import socket
import struct
import sys

RRQ, DATA, ACK, ERROR = 1, 3, 4, 5
BLOCK = 512


def fetch(host: str, port: int, path: str, timeout: float = 5.0) -> bytes:
    """The file's bytes; raises OSError (timeout, TFTP error) on failure."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(struct.pack("!H", RRQ) + path.encode() + b"\0octet\0", (host, port))
        data, expected, server = b"", 1, None
        while True:
            packet, peer = sock.recvfrom(4 + BLOCK)
            if server is None:
                server = peer  # the transfer continues from the server's own port
            elif peer != server:
                continue
            opcode = struct.unpack("!H", packet[:2])[0]
            if opcode == ERROR:
                code = struct.unpack("!H", packet[2:4])[0]
                raise OSError(
                    f"TFTP error {code}: {packet[4:].rstrip(bytes(1)).decode(errors='replace')}"
                )
            if opcode != DATA:
                raise OSError(f"unexpected TFTP opcode {opcode}")
            block = struct.unpack("!H", packet[2:4])[0]
            sock.sendto(struct.pack("!HH", ACK, block), server)
            if block == expected:
                data += packet[4:]
                expected = (expected + 1) % 65536
                if len(packet) - 4 < BLOCK:
                    return data


def main() -> int:
    host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        sys.stdout.buffer.write(fetch(host, port, path))
    except OSError as exc:
        sys.stderr.write(f"tftp://{host}:{port}/{path}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
