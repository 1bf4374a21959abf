"""Every command that talks to the cluster says in one line what is wrong and exits non-zero,
as kubectl does: no kubeconfig, an API server that refuses the connection or does not answer,
one that refuses the request (401, 403), and things that are not there (404) — never a
traceback. The API servers here are sockets and a small HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli

pytestmark = pytest.mark.unit

#: Each command the way a person types it; `{out}` is a directory the test may write to.
COMMANDS = {
    "status": ["status"],
    "plan": ["plan"],
    "power": ["power", "on", "worker-1"],
    "logs": ["logs", "worker-1"],
    "healthcheck": ["healthcheck", "worker-1"],
    "trace record": ["trace", "record", "-o", "{out}", "--duration", "5s"],
}

FORBIDDEN = (
    'nodes.lightsout.dev "worker-1" is forbidden: User "alice" cannot get resource "nodes" '
    'in API group "lightsout.dev" in the namespace "lab"'
)


def _argv(name: str, tmp_path: Path) -> list[str]:
    return [part.replace("{out}", str(tmp_path / "trace")) for part in COMMANDS[name]]


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "alice", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "alice", "namespace": "lab"}}
                ],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def _outside_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(cli, "CONNECT_SECONDS", 0.5)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _error(name: str, err: str) -> str:
    """The line naming the problem (`trace record` says it with its own prefix)."""
    line = _one_error_line(err)
    prefix = "lightsout trace record: " if name == "trace record" else "error: "
    assert line.startswith(prefix), line
    return line


# ---------------------------------------------------------------- no kubeconfig
@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_kubeconfig_is_one_line(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code == 1
    line = _error(name, err)
    assert f"no kubeconfig: {missing} (KUBECONFIG) does not exist" in line


def test_an_invalid_kubeconfig_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    code, err = _run(["status"], capsys)
    assert code == 1
    assert _one_error_line(err).startswith(f"error: invalid kubeconfig {broken} (KUBECONFIG): ")


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    done = subprocess.run(
        [sys.executable, "-m", "lightsout.cli", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert _one_error_line(done.stderr).startswith("error: no kubeconfig: ")


# ---------------------------------------------------------------- an API server not there
def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("name", list(COMMANDS))
def test_connection_refused_is_one_line(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    server = f"https://127.0.0.1:{port}"
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", server)))
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code == 1
    line = _error(name, err)
    assert f"cannot reach the API server {server}: connection refused" in line


def test_an_api_server_that_does_not_answer_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It listens (the kernel completes the TCP handshake) but never says a word: no TLS.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        server = f"https://127.0.0.1:{mute.getsockname()[1]}"
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", server)))
        monkeypatch.setattr(cli, "CONNECT_SECONDS", 0.2)
        code, err = _run(["status"], capsys)
    assert code == 1
    assert _one_error_line(err) == (
        f"error: cannot reach the API server {server}: timed out: it does not answer"
    )


# ---------------------------------------------------------------- an API server that refuses
Reply = tuple[int, str, str]  # status, content type, body


def _status(code: int, reason: str, message: str, name: str | None = None) -> Reply:
    details: dict[str, Any] = {"group": "lightsout.dev", "kind": "nodes"}
    if name:
        details["name"] = name
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }
    return code, "application/json", json.dumps(body)


def _always(reply: Reply) -> Callable[[str, str], Reply]:
    return lambda _method, _path: reply


class _FakeApiServer(ThreadingHTTPServer):
    daemon_threads = True
    answer: Callable[[str, str], Reply]


class _Handler(BaseHTTPRequestHandler):
    server: _FakeApiServer

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        code, content_type, body = self.server.answer(self.command, self.path)
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply()

    def do_POST(self) -> None:
        self._reply()

    def do_PATCH(self) -> None:
        self._reply()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Callable[[str, str], Reply]], None]]:
    """Install how the fake API server answers (method, path) → (status, type, body)."""
    server = _FakeApiServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", url)))

    def answer(how: Callable[[str, str], Reply]) -> None:
        server.answer = how

    try:
        yield answer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_forbidden_is_the_api_servers_line(
    name: str,
    tmp_path: Path,
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_server(_always(_status(403, "Forbidden", FORBIDDEN)))
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code == 1
    line = _error(name, err)
    assert line.endswith(f"403 {FORBIDDEN}"), line


@pytest.mark.parametrize("name", list(COMMANDS))
def test_unauthorized_says_the_credentials_are_refused(
    name: str,
    tmp_path: Path,
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_server(_always(_status(401, "Unauthorized", "Unauthorized")))
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code == 1
    line = _error(name, err)
    if name == "trace record":  # its own line, with the API server's words
        assert line.endswith("401 Unauthorized"), line
    else:
        assert line == (
            "error: 401 Unauthorized (the API server does not accept the kubeconfig's credentials)"
        )


# ---------------------------------------------------------------- things that are not there
def _no_such_node(method: str, path: str) -> Reply:
    if path.startswith("/apis/lightsout.dev/v1alpha1/namespaces/lab/nodes/worker-1"):
        return _status(404, "NotFound", 'nodes.lightsout.dev "worker-1" not found', "worker-1")
    return 200, "application/json", json.dumps({"items": []})


@pytest.mark.parametrize("name", ["power", "logs", "healthcheck"])
def test_a_machine_that_does_not_exist_is_named(
    name: str,
    tmp_path: Path,
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_server(_no_such_node)
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code == 3
    assert _one_error_line(err) == "error: Node 'worker-1' not found in namespace 'lab'"


def test_healthcheck_of_a_group_that_does_not_exist_is_named(
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_server(
        _always(
            _status(404, "NotFound", 'cronjobs.batch "lo-health-gone" not found', "lo-health-gone")
        )
    )
    code, err = _run(["healthcheck", "-g", "gone", "-n", "lab"], capsys)
    assert code == 3
    assert _one_error_line(err).startswith("error: Group 'gone' in 'lab' has no health-check")


@pytest.mark.parametrize("name", ["status", "plan", "power", "logs", "healthcheck"])
def test_no_crds_says_so(
    name: str,
    tmp_path: Path,
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_group(method: str, path: str) -> Reply:
        if path.startswith("/apis/lightsout.dev/"):
            return 404, "text/plain; charset=utf-8", "404 page not found\n"
        return 200, "application/json", json.dumps({"items": []})

    api_server(no_group)
    code, err = _run(_argv(name, tmp_path), capsys)
    assert code != 0
    line = _one_error_line(err)
    if name in {"status", "plan"}:  # a list: the kind is not there
        assert line == (
            "error: 404 Not Found (are the Lights-Out CRDs installed? "
            "`lightsout crds | kubectl apply -f -`)"
        )
    else:  # a get: the machine is not there
        assert line == "error: Node 'worker-1' not found in namespace 'lab'"


def test_success_is_unchanged(
    api_server: Callable[[Callable[[str, str], Reply]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_server(_always((200, "application/json", json.dumps({"items": []}))))
    assert cli.main(["status", "-o", "json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out) is not None


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: object) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_crds", broken)
    with pytest.raises(KeyError):
        cli.main(["crds"])
