"""The roles' request action (roles/http_request: `http_request`) answers in uri's words.

The redfish_power and plug_power tasks and the operator read what ansible.builtin.uri
returned before the action replaced it: `status` (-1 when nothing answered), `json`,
`content`, `x_auth_token`, `location` made absolute, `etag`, and `msg`, whose words the outage
and credential classifiers know (planning.machine.outages). Sent here to a local HTTP server.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest

from lightsout.planning.machine import outages
from tests.conftest import ROOT

pytestmark = pytest.mark.unit


def _load() -> ModuleType:
    path = ROOT / "roles/http_request/action_plugins/http_request.py"
    spec = importlib.util.spec_from_file_location("http_request", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


http_action = _load()


class _BMC(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/system":
            body = json.dumps({"PowerState": "On"}).encode()
            self._answer(200, body, "application/json", ETag='W/"7"')
        elif self.path == "/busy":
            error = {"error": {"code": "Base.1.0.GeneralError", "message": "try later"}}
            self._answer(503, json.dumps(error).encode(), "application/json; charset=utf-8")
        elif self.path == "/denied":
            self._answer(401, b"no", "text/plain")

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        echo = {"body": json.loads(self.rfile.read(length)), "type": self.headers["Content-Type"]}
        self._answer(
            201,
            json.dumps(echo).encode(),
            "application/json",
            X_Auth_Token="token-1",
            Location="/redfish/v1/SessionService/Sessions/1",
        )

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def bmc() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BMC)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_json_answer_is_parsed_with_its_headers(bmc: str) -> None:
    answer = http_action.request({"url": f"{bmc}/system"})
    assert answer["status"] == 200
    assert answer["json"] == {"PowerState": "On"}
    assert answer["etag"] == 'W/"7"'
    assert answer["msg"].startswith("OK (")
    assert "failed" not in answer
    assert "content" not in answer


def test_the_body_is_returned_when_asked(bmc: str) -> None:
    """A plug's answer is read from `content` too (plug_power asks return_content)."""
    answer = http_action.request({"url": f"{bmc}/system", "return_content": True})
    assert json.loads(answer["content"]) == {"PowerState": "On"}


def test_a_json_body_is_sent_as_json_and_the_location_made_absolute(bmc: str) -> None:
    answer = http_action.request(
        {
            "url": f"{bmc}/redfish/v1/SessionService/Sessions",
            "method": "POST",
            "body": {"UserName": "u", "Password": "p"},
            "body_format": "json",
            "status_code": [200, 201],
        }
    )
    assert answer["status"] == 201
    assert answer["json"] == {
        "body": {"UserName": "u", "Password": "p"},
        "type": "application/json",
    }
    assert answer["x_auth_token"] == "token-1"
    assert answer["location"] == f"{bmc}/redfish/v1/SessionService/Sessions/1"


def test_a_refusal_keeps_the_bmcs_words_and_fails_like_uri(bmc: str) -> None:
    answer = http_action.request({"url": f"{bmc}/busy"})
    assert answer["status"] == 503
    assert answer["json"]["error"]["message"] == "try later"
    assert answer["failed"] is True
    assert answer["msg"] == "Status code was 503 and not [200]: HTTP Error 503: Service Unavailable"


def test_wrong_credentials_are_a_status_not_an_outage(bmc: str) -> None:
    answer = http_action.request({"url": f"{bmc}/denied"})
    assert answer["status"] == 401
    assert answer["msg"] == "Status code was 401 and not [200]: HTTP Error 401: Unauthorized"
    assert not outages.unavailable(answer["msg"])


def test_nothing_listening_is_status_minus_one_in_uris_words() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = http_action.request({"url": f"http://127.0.0.1:{port}/system", "timeout": 5})
    assert answer["status"] == -1
    assert answer["msg"] == (
        "Status code was -1 and not [200]: "
        "Request failed: <urlopen error [Errno 111] Connection refused>"
    )
    # The role quotes msg when nothing answered (http_error.yml): the operator reads an outage.
    assert outages.unavailable(answer["msg"])
