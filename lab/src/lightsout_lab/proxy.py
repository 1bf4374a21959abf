"""A TCP proxy a test can cut: one operator replica's way to the API server, for a partition.

`Proxy(target_port).start()` listens on a free loopback port and forwards every connection to
`127.0.0.1:target_port` byte for byte (TLS passes through untouched: the API server's
certificate names 127.0.0.1, whatever the port). `cut()` is the partition: every open
connection is closed and new ones are closed as soon as they are accepted, so the replica
behind it sees its watches and requests fail while the rest of the cluster goes on. `mend()`
forwards again. `kubeconfig(cluster, path)` writes a copy of the cluster's kubeconfig that goes
through the proxy. Used by `tests/e2e/test_control_plane_faults.py`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Self

from lightsout_lab.cluster import Cluster
from lightsout_lab.process import Service, free_port


class Proxy(Service):
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self._stop = threading.Event()

    def start(self) -> Self:
        self.port = free_port(self.host)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        listener.settimeout(0.5)
        self._listener = listener
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._close_all()
        if self._listener is not None:
            self._listener.close()

    def cut(self) -> None:
        """The partition: drop every connection, and each new one at once."""
        self._cut.set()
        self._close_all()

    def mend(self) -> None:
        self._cut.clear()

    def kubeconfig(self, cluster: Cluster, path: Path) -> Path:
        """The cluster's admin kubeconfig, going through this proxy."""
        config = json.loads(cluster.kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://{self.host}:{self.port}"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def _close_all(self) -> None:
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._open -= {source, sink}
