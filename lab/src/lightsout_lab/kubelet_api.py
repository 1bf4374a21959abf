"""The stand-in kubelet's HTTPS API: `GET /containerLogs/{namespace}/{pod}/{container}`, the
endpoint the API server calls for `kubectl logs` (and `lightsout logs`) of a pod on that node.

`lightsout_lab.kubelet.KubeletAgent` starts it on 127.0.0.1 and advertises its port in the
Node's `status.daemonEndpoints`; the API server reaches it at the Node's InternalIP, 127.0.0.1.
It serves what the pod's subprocess wrote (stdout and stderr, one file per pod), honouring
`tailLines` and `limitBytes`; `follow` returns what is there now. No authentication: it listens
on loopback only, like the rest of the lab.
"""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lightsout_lab.pki import self_signed_loopback

#: (namespace, pod) -> the file holding its container's output, or None when there is none.
LogFile = Callable[[str, str], Path | None]


def _tail(data: bytes, query: dict[str, list[str]]) -> bytes:
    lines = query.get("tailLines")
    if lines and int(lines[0]) >= 0:
        count = int(lines[0])
        data = b"".join(data.splitlines(keepends=True)[-count:]) if count else b""
    limit = query.get("limitBytes")
    if limit and int(limit[0]) > 0:
        data = data[: int(limit[0])]
    return data


class KubeletApi:
    """Serves `/containerLogs` over TLS on 127.0.0.1 until stop()."""

    def __init__(self, log_file: LogFile, cert_dir: Path) -> None:
        cert, key = self_signed_loopback(cert_dir, "kubelet")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                path = log_file(parts[1], parts[2]) if len(parts) == 4 else None
                if parts[0] != "containerLogs" or path is None or not path.exists():
                    self._send(404, b"no such container log on this node\n")
                    return
                self._send(200, _tail(path.read_bytes(), urllib.parse.parse_qs(url.query)))

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the API server's own log says who asked

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="kubelet-api", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
