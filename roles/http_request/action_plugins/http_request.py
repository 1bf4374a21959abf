# Copyright Lights-Out authors
# SPDX-License-Identifier: Apache-2.0
"""One HTTP(S) request, sent from Ansible's worker process: the roles' transport to BMCs and plugs.

Why not `ansible.builtin.uri`: uri is a module, so every request starts a new Python that
unpacks the module's zip and imports ansible's module_utils again, about 0.5 CPU-s a request on
a small machine, and a Redfish power-on sends five or more (a plug's draw is polled every few
seconds). This action runs in the worker that Ansible forks for the task anyway, whose
module_utils are already imported: a request costs what the request costs.

It answers like uri, for the options the roles use (url, method, headers, body with
body_format json, return_content, validate_certs, ca_path, timeout, status_code): `status` (-1
when nothing answered), `msg` in uri's words ("OK (N bytes)", "Status code was 503 and not
[200]: HTTP Error 503: …", "… Request failed: <urlopen error …>", "… Connection failure: …"),
`json` when the answer is JSON, `content` with return_content, the answer's headers lowercased
with `-` as `_` (`x_auth_token`, `etag`, and `location` made absolute), and `failed` when the
status is not in status_code. The operator's outage and credential classifiers read those words
(planning.machine.outages), so they are the ones uri (ansible.module_utils.urls.fetch_url) uses.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.error
from typing import Any
from urllib.parse import urljoin

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True},
    "method": {"type": "str", "default": "GET"},
    "headers": {"type": "dict", "default": {}},
    "body": {"type": "raw"},
    "body_format": {"type": "str", "default": "raw", "choices": ["raw", "json"]},
    "validate_certs": {"type": "bool", "default": True},
    "ca_path": {"type": "path"},
    "timeout": {"type": "int", "default": 30},
    "status_code": {"type": "list", "elements": "int", "default": [200]},
    "return_content": {"type": "bool", "default": False},
}

#: Content types whose body is parsed into `json` (application/json, application/problem+json).
JSON_TYPES = {"json", "javascript"}


class ActionModule(ActionBase):  # type: ignore[misc] # ansible-core ships no type hints
    """Sends the request and returns what uri would have returned for it."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        result.update(request(args))
        return result


def request(args: dict[str, Any]) -> dict[str, Any]:
    """Sends the request the (validated) options describe; returns uri's answer for it."""
    headers = {str(k): str(v) for k, v in (args.get("headers") or {}).items()}
    body = args.get("body")
    if args.get("body_format") == "json" and body is not None:
        if not isinstance(body, str):
            body = json.dumps(body)
        if "content-type" not in {k.lower() for k in headers}:
            headers["Content-Type"] = "application/json"
    started = time.monotonic()
    answer = send(args, headers, body)
    if not args.get("return_content"):
        answer.pop("content", None)
    answer["elapsed"] = int(time.monotonic() - started)
    answer["changed"] = False
    status_code = list(args.get("status_code") or [200])
    if "failed" not in answer and answer["status"] not in status_code:
        answer["failed"] = True
        answer["msg"] = f"Status code was {answer['status']} and not {status_code}: {answer['msg']}"
    return answer


def send(args: dict[str, Any], headers: dict[str, str], body: str | None) -> dict[str, Any]:
    """The request's answer as uri reports it (fetch_url's `info`, then uri's additions)."""
    url = args["url"]
    info: dict[str, Any] = {"url": url, "status": -1}
    content: bytes = b""
    try:
        response = open_url(
            url,
            data=body,
            headers=headers,
            method=args.get("method", "GET"),
            timeout=args.get("timeout", 30),
            validate_certs=args.get("validate_certs", True),
            ca_path=args.get("ca_path"),
            # uri's own defaults.
            follow_redirects="safe",
            http_agent="ansible-httpget",
        )
        info.update(_headers(response.headers))
        content = response.read()
        info.update(
            msg=f"OK ({response.headers.get('Content-Length', 'unknown')} bytes)",
            url=response.geturl(),
            status=response.status,
        )
        content_type = response.headers.get_content_type()
    except UrlsConnectionError as error:  # e.g. the certificate did not validate
        return {**info, "failed": True, "msg": to_native(error)}
    except urllib.error.HTTPError as error:
        info.update(_headers(error.headers))
        try:
            content = error.read()
        except (OSError, http.client.HTTPException):
            content = b""
        info.update(msg=to_native(error), status=error.code)
        content_type = error.headers.get_content_type() if error.headers else ""
    except urllib.error.URLError as error:
        return {
            **info,
            "msg": f"Request failed: {to_native(error)}",
            "status": int(getattr(error, "code", -1)),
        }
    except OSError as error:
        return {**info, "msg": f"Connection failure: {error}"}
    except http.client.BadStatusLine as error:
        return {
            **info,
            "msg": "Connection failure: connection was closed before a valid response was "
            f"received: {to_native(error)}",
        }
    except Exception as error:
        return {**info, "msg": f"An unknown error occurred: {to_native(error)}"}
    info["redirected"] = info["url"] != url
    info["content"] = to_text(content)
    if "location" in info:
        info["location"] = urljoin(url, info["location"])
    subtype = content_type.partition("/")[2].lower()
    if subtype.rpartition("+")[2] in JSON_TYPES and content:
        with contextlib.suppress(ValueError):
            info["json"] = json.loads(to_text(content))
    return info


def _headers(headers: Any) -> dict[str, str]:
    """The answer's headers as uri names them: lowercased, `-` as `_`."""
    if headers is None:
        return {}
    return {key.lower().replace("-", "_"): value for key, value in headers.items()}
