"""Vendor profiles for the lab's Redfish emulator: real BMCs' documented differences.

sushy-tools (`lightsout_lab.sushy`) is a generic, well-behaved Redfish service. The BMCs people
own differ from it exactly where generic clients break (research/bmc-vendors.md, with sources).
This module is a WSGI middleware in front of sushy's app that makes chosen systems behave like
one family each, written from those documented facts (no vendor's files copied):

- ``idrac``: lists no ``GracefulRestart``; answers the first attempt of every Reset order
  "busy" (HTTP 400, MessageId ``IDRAC…SYS518``); answers a redundant ``On`` with HTTP 409
  "already powered ON" (the power-on the BMC already started counts, even while PowerState
  still reads Off).
- ``ilo``: lists no ``GracefulShutdown``; a soft power-off is ``PushPowerButton`` (a short press:
  the OS is asked to shut down; pressed while Off it powers on); busy answers carry
  ``InvalidOperationForSystemState``.
- ``ami``: a PATCH needs ``If-Match`` with the resource's current ETag (HTTP 428 without it,
  412 when stale); GETs carry a strong ETag.
- ``etag-strict``: sends its ETag weak (``W/"…"``, as compression makes some BMCs do) but only
  accepts the strong form in ``If-Match``; ``If-Match: *`` is refused (412).
- ``no-if-match``: sends a weak ETag but refuses every PATCH carrying ``If-Match`` (412), weak,
  strong or ``*`` alike (bmclib added a switch to stop sending it for such BMCs); a PATCH
  without one is taken.
- ``falls-back`` / ``falls-back-once``: accepts a power-on (204), PowerState reads
  ``PoweringOn`` for ``FALLBACK_SECONDS``, then ``Off`` again: the host did not complete its
  power-on (chaos/powerman#154). ``falls-back`` does so at every power-on, ``falls-back-once``
  at the first one only (the next power-on works). ``PoweringOn`` lasts until it has also been
  read once: a client polling slower than the window (Ansible on a loaded machine) still sees
  the power-on start and fall back, which is what these rows are about.
- ``sessions-only``: Basic auth refused (401); only a session created with
  ``POST /redfish/v1/SessionService/Sessions`` (token in ``X-Auth-Token``) works.
- ``idrac10``: the ``idrac`` behaviours, and a boot-override PATCH on the ComputerSystem is
  refused: it goes to the system's ``@Redfish.Settings`` object (``…/Systems/<id>/Settings``).

Any Reset type a profile does not list is refused with HTTP 400. Systems without a profile are
sushy's. When any system has a profile, the BMC also serves a SessionService (every family named
here has one): sessions are kept in memory, and ``X-Auth-Token`` works for every system.

Requests carrying the harness header (``lightsout_lab.sushy.HARNESS_HEADER``) pass untouched, so
tests can set a machine up and read it without tripping a profile. A harness Reset with
``X-Lightsout-Hold: 1`` starts a power change the BMC keeps to itself (PowerState unchanged) until
a client's Reset for that system arrives: the race that makes an iDRAC answer 409 to an On.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, Protocol

EtagMode = Literal["none", "required", "strict", "refused"]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

SYSTEMS = "/redfish/v1/Systems/"
SESSIONS = "/redfish/v1/SessionService/Sessions"
SESSION_SERVICE = "/redfish/v1/SessionService"
RESET_SUFFIX = "/Actions/ComputerSystem.Reset"
SETTINGS_SUFFIX = "/Settings"
HOLD_HEADER = "X-Lightsout-Hold"
#: Seconds a power-on that falls back reads PoweringOn before it reads Off again: long enough
#: for a client polling every second to see it even when its play runs several hosts in step
#: (a first read 3 s after the order missed it on a loaded machine).
FALLBACK_SECONDS = 10.0

#: What sushy-tools lists (and what a profile without its own list keeps).
SUSHY_RESET_TYPES = (
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
)


@dataclasses.dataclass(frozen=True)
class Busy:
    """The answer a busy BMC gives; the client is meant to retry the same order."""

    message_id: str
    message: str


@dataclasses.dataclass(frozen=True)
class Profile:
    """How one vendor family's BMC differs from sushy-tools.

    ``busy``: the first attempt of every Reset order is answered with it (HTTP 400); the retry
    is accepted. ``already_on_conflict``: an On/ForceOn for a system that is (or is becoming)
    On is answered 409. ``push_button``: PushPowerButton works as a short press.
    ``falls_back``: how many power-ons (On/ForceOn) per system the BMC accepts but the host does
    not complete (PoweringOn, then Off again; nothing reaches sushy).
    """

    name: str
    reset_types: tuple[str, ...] = SUSHY_RESET_TYPES
    busy: Busy | None = None
    already_on_conflict: bool = False
    push_button: bool = False
    etag: EtagMode = "none"
    sessions_only: bool = False
    boot_via_settings: bool = False
    falls_back: int = 0


_SYS518 = Busy(
    "IDRAC.2.8.SYS518",
    "iDRAC is currently unable to perform the requested operation because it is busy. Retry the"
    " operation.",
)
_IDRAC = Profile(
    name="idrac",
    reset_types=("On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi"),
    busy=_SYS518,
    already_on_conflict=True,
    push_button=True,
)

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        _IDRAC,
        Profile(
            name="ilo",
            reset_types=("On", "ForceOff", "ForceRestart", "Nmi", "PushPowerButton"),
            busy=Busy(
                "iLO.2.14.InvalidOperationForSystemState",
                "The operation is not allowed in the current system state. Retry later.",
            ),
            push_button=True,
        ),
        Profile(name="ami", etag="required"),
        Profile(name="etag-strict", etag="strict"),
        Profile(name="no-if-match", etag="refused"),
        Profile(name="falls-back", falls_back=1_000_000),
        Profile(name="falls-back-once", falls_back=1),
        Profile(name="sessions-only", sessions_only=True),
        dataclasses.replace(_IDRAC, name="idrac10", boot_via_settings=True),
    )
}


class PowerBackend(Protocol):
    """What the middleware needs from the emulator's systems driver (in the same process)."""

    def target_state(self, uuid: str) -> str:
        """The power state the system is in or already on its way to (On/Off)."""

    def hold(self, uuid: str) -> None:
        """Keep the pending power change from landing until `release`."""

    def release(self, uuid: str) -> None:
        """Let a held power change land (a second or so later)."""


@dataclasses.dataclass
class _Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


def redfish_error(status: int, message: str, message_id: str = "Base.1.0.GeneralError") -> _Answer:
    """A Redfish error answer with the message in both places clients look."""
    body = {
        "error": {
            "code": message_id,
            "message": message,
            "@Message.ExtendedInfo": [{"MessageId": message_id, "Message": message}],
        }
    }
    return _json_answer(status, body)


def _json_answer(status: int, body: Any, headers: Iterable[tuple[str, str]] = ()) -> _Answer:
    return _Answer(
        status, [("Content-Type", "application/json"), *headers], json.dumps(body).encode()
    )


def etag_of(resource: Mapping[str, Any]) -> str:
    """A strong ETag (quoted) over the resource's JSON, without its own @odata.etag."""
    data = {k: v for k, v in resource.items() if k != "@odata.etag"}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return f'"{digest}"'


class ProfileMiddleware:
    """WSGI middleware giving systems their vendor profile (see the module docstring).

    Args:
        app: sushy's WSGI app (with its Basic auth middleware).
        profiles: system uuid -> profile.
        aliases: other names of those systems in URLs (sushy's system names) -> uuid.
        username / password: the BMC account; a valid session token is turned into Basic
            auth for sushy with them.
        backend: the systems driver's power state, for 409 and held changes.
        harness_header: requests carrying it pass untouched.
    """

    def __init__(
        self,
        app: WSGIApp,
        profiles: Mapping[str, Profile],
        *,
        aliases: Mapping[str, str] | None = None,
        username: str,
        password: str,
        backend: PowerBackend,
        harness_header: str,
    ) -> None:
        self.app = app
        self.profiles = dict(profiles)
        self.aliases = {k: v for k, v in (aliases or {}).items() if v in self.profiles}
        self.username = username
        self.password = password
        self.backend = backend
        self.harness_key = _environ_key(harness_header)
        self.sessions: dict[str, str] = {}  # session id -> token
        self.lock = threading.Lock()
        self._refused_busy: set[str] = set()  # systems whose last Reset was answered busy
        self._fell_back: dict[str, int] = {}  # system -> power-ons that fell back so far
        # system -> when its PoweringOn ends, and whether a client has read it since
        self._powering_on: dict[str, tuple[float, bool]] = {}
        self._basic = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()

    def _uuid(self, identity: str | None) -> str | None:
        if identity is None:
            return None
        return identity if identity in self.profiles else self.aliases.get(identity)

    # ------------------------------------------------------------------------------ WSGI

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        body = _read_body(environ)
        if environ.get(self.harness_key):
            return self._harness(environ, body, start_response)
        answer = self._handle(environ, body)
        if answer is None:
            return self.app(environ, start_response)
        return _send(answer, start_response)

    def _harness(
        self, environ: dict[str, Any], body: bytes, start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == SESSIONS and environ.get("REQUEST_METHOD") == "GET":
            return _send(self._list_sessions(), start_response)
        answer = self._call(environ, body)
        system = _system_of(path)
        uuid = self._uuid(system) or system
        if environ.get(_environ_key(HOLD_HEADER)) and path.endswith(RESET_SUFFIX) and uuid:
            self.backend.hold(uuid)
        return _send(answer, start_response)

    def _handle(self, environ: dict[str, Any], body: bytes) -> _Answer | None:
        """The profile's answer, or None to let sushy answer as it is."""
        path = environ.get("PATH_INFO", "").rstrip("/") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if self.profiles and path.startswith(SESSION_SERVICE):
            return self._session_service(environ, method, path, body)
        token = environ.get("HTTP_X_AUTH_TOKEN")
        if token is not None:
            if token not in self.sessions.values():
                return redfish_error(
                    401, "The session token is not valid.", "Base.1.8.NoValidSession"
                )
            environ["HTTP_AUTHORIZATION"] = self._basic
        system = _system_of(path)
        uuid = self._uuid(system)
        if uuid is None or system is None:
            return None
        profile = self.profiles[uuid]
        if profile.sessions_only and token is None:
            return redfish_error(
                401,
                "Basic authentication is disabled on this BMC: create a session.",
                "Base.1.8.NoValidSession",
            )
        resource = f"{SYSTEMS}{system}"
        if path == resource and method == "GET":
            return self._get_system(environ, body, profile, system)
        if path == resource and method == "PATCH":
            if profile.boot_via_settings and "Boot" in (_json(body) or {}):
                return redfish_error(
                    400,
                    "The property Boot cannot be changed on the ComputerSystem: PATCH it on the"
                    " settings object named by @Redfish.Settings.",
                    "Base.1.8.PropertyNotWritable",
                )
            return self._patch(environ, body, profile, system)
        if profile.boot_via_settings and path == resource + SETTINGS_SUFFIX:
            return self._settings(environ, body, method, profile, system)
        if path == resource + RESET_SUFFIX and method == "POST":
            return self._reset(environ, body, profile, uuid)
        return None

    # --------------------------------------------------------------------------- sessions

    def _session_service(
        self, environ: dict[str, Any], method: str, path: str, body: bytes
    ) -> _Answer:
        if path == SESSION_SERVICE and method == "GET":
            return _json_answer(
                200,
                {
                    "@odata.id": SESSION_SERVICE,
                    "Id": "SessionService",
                    "ServiceEnabled": True,
                    "Sessions": {"@odata.id": SESSIONS},
                },
            )
        if path == SESSIONS and method == "POST":
            data = _json(body) or {}
            if data.get("UserName") != self.username or data.get("Password") != self.password:
                return redfish_error(
                    401, "Invalid username or password.", "Base.1.8.NoValidSession"
                )
            session_id, token = secrets.token_hex(8), secrets.token_hex(16)
            with self.lock:
                self.sessions[session_id] = token
            location = f"{SESSIONS}/{session_id}"
            return _json_answer(
                201,
                {"@odata.id": location, "Id": session_id, "UserName": self.username},
                [("X-Auth-Token", token), ("Location", location)],
            )
        if not self._authorized(environ):
            return redfish_error(401, "Authentication required.", "Base.1.8.NoValidSession")
        if path == SESSIONS and method == "GET":
            return self._list_sessions()
        session_id = path[len(SESSIONS) + 1 :] if path.startswith(SESSIONS + "/") else ""
        if session_id and method == "DELETE":
            with self.lock:
                found = self.sessions.pop(session_id, None)
            if found is None:
                return redfish_error(
                    404, f"No session {session_id}.", "Base.1.8.ResourceMissingAtURI"
                )
            return _Answer(204, [], b"")
        if session_id and method == "GET" and session_id in self.sessions:
            return _json_answer(
                200, {"@odata.id": path, "Id": session_id, "UserName": self.username}
            )
        return redfish_error(404, f"No resource at {path}.", "Base.1.8.ResourceMissingAtURI")

    def _authorized(self, environ: dict[str, Any]) -> bool:
        token = environ.get("HTTP_X_AUTH_TOKEN")
        if token is not None:
            return token in self.sessions.values()
        return bool(environ.get("HTTP_AUTHORIZATION") == self._basic)

    def _list_sessions(self) -> _Answer:
        with self.lock:
            members = [{"@odata.id": f"{SESSIONS}/{sid}"} for sid in self.sessions]
        return _json_answer(
            200, {"@odata.id": SESSIONS, "Members": members, "Members@odata.count": len(members)}
        )

    # ---------------------------------------------------------------- resources and ETags

    def _get_system(
        self, environ: dict[str, Any], body: bytes, profile: Profile, system: str
    ) -> _Answer:
        answer = self._call(environ, body)
        resource = answer.json()
        if answer.status != 200 or not isinstance(resource, dict):
            return answer
        _shape(resource, profile, system)
        uuid = self._uuid(system) or system
        with self.lock:
            stalled = self._powering_on.get(uuid)
            if stalled is not None and stalled[1] and time.monotonic() >= stalled[0]:
                del self._powering_on[uuid]
            elif stalled is not None:
                resource["PowerState"] = "PoweringOn"
                self._powering_on[uuid] = (stalled[0], True)
        headers = [(k, v) for k, v in answer.headers if k.lower() != "content-length"]
        if profile.etag != "none":
            etag = etag_of(resource)
            sent = "W/" + etag if profile.etag in ("strict", "refused") else etag
            resource["@odata.etag"] = sent
            headers.append(("ETag", sent))
        return _Answer(200, headers, json.dumps(resource).encode())

    def _current_etag(self, environ: dict[str, Any], system: str) -> str:
        read = self._call(_get_environ(environ, f"{SYSTEMS}{system}"), b"")
        resource = read.json()
        if read.status != 200 or not isinstance(resource, dict):
            return ""
        profile = self.profiles[self._uuid(system) or system]
        _shape(resource, profile, system)
        return etag_of(resource)

    def _patch(
        self, environ: dict[str, Any], body: bytes, profile: Profile, system: str
    ) -> _Answer | None:
        if profile.etag == "none":
            return None
        if_match = environ.get("HTTP_IF_MATCH")
        current = self._current_etag(environ, system)
        refusal = check_if_match(profile.etag, if_match, current)
        if refusal is not None:
            return refusal
        return self._call(environ, body)

    def _settings(
        self, environ: dict[str, Any], body: bytes, method: str, profile: Profile, system: str
    ) -> _Answer:
        if method == "GET":
            read = self._call(_get_environ(environ, f"{SYSTEMS}{system}"), b"")
            resource = read.json()
            if read.status != 200 or not isinstance(resource, dict):
                return read
            return _json_answer(
                200,
                {
                    "@odata.id": f"{SYSTEMS}{system}{SETTINGS_SUFFIX}",
                    "Id": "Settings",
                    "Boot": resource.get("Boot", {}),
                },
            )
        if method == "PATCH":
            # The pending settings apply at once here: a one-time override is used at the next
            # boot either way, which is the only thing a client of this emulator can observe.
            environ["PATH_INFO"] = f"{SYSTEMS}{system}"
            patched = self._patch(environ, body, profile, system)
            return patched if patched is not None else self._call(environ, body)
        return redfish_error(405, f"{method} is not allowed here.", "Base.1.8.OperationNotAllowed")

    # ------------------------------------------------------------------------------ power

    def _reset(self, environ: dict[str, Any], body: bytes, profile: Profile, uuid: str) -> _Answer:
        reset_type = str((_json(body) or {}).get("ResetType", ""))
        if reset_type not in profile.reset_types:
            return redfish_error(
                400,
                f"The value {reset_type} for the parameter ResetType is not supported.",
                "Base.1.8.ActionParameterNotSupported",
            )
        with self.lock:
            if profile.busy is not None and uuid not in self._refused_busy:
                self._refused_busy.add(uuid)
                return redfish_error(400, profile.busy.message, profile.busy.message_id)
            self._refused_busy.discard(uuid)
        target = self.backend.target_state(uuid)
        if profile.already_on_conflict and reset_type in ("On", "ForceOn") and target == "On":
            self.backend.release(uuid)
            return redfish_error(
                409,
                "Unable to perform the operation because the server is already powered ON.",
                "IDRAC.2.8.PSU501",
            )
        self.backend.release(uuid)
        with self.lock:
            self._powering_on.pop(uuid, None)  # any later order ends a power-on that stalled
            fell_back = self._fell_back.get(uuid, 0)
            if (
                reset_type in ("On", "ForceOn")
                and target == "Off"
                and fell_back < profile.falls_back
            ):
                # Accepted, and the host starts, but never completes its power-on.
                self._fell_back[uuid] = fell_back + 1
                self._powering_on[uuid] = (time.monotonic() + FALLBACK_SECONDS, False)
                return _Answer(204, [], b"")
        if reset_type == "PushPowerButton" and profile.push_button:
            # A short press: the OS is asked to shut down when on; the machine starts when off.
            pressed = "GracefulShutdown" if target == "On" else "On"
            body = json.dumps({"ResetType": pressed}).encode()
            environ["CONTENT_LENGTH"] = str(len(body))
        return self._call(environ, body)

    # ---------------------------------------------------------------------------- helpers

    def _call(self, environ: dict[str, Any], body: bytes) -> _Answer:
        """Let sushy answer (with the request's own credentials) and collect its answer."""
        inner = dict(environ)
        inner["wsgi.input"] = io.BytesIO(body)
        inner["CONTENT_LENGTH"] = str(len(body))
        captured: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            captured["status"] = int(status.split(" ", 1)[0])
            captured["headers"] = list(headers)

        chunks = self.app(inner, start_response)
        try:
            data = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return _Answer(captured.get("status", 500), captured.get("headers", []), data)


def check_if_match(mode: EtagMode, if_match: str | None, current: str) -> _Answer | None:
    """The refusal a BMC with ETag ``mode`` gives a PATCH with this If-Match, or None.

    ``current`` is the strong (quoted) ETag. ``required`` (AMI): no If-Match is 428; a stale one
    412; weak or strong forms of the current one, or ``*``, pass. ``strict``: ``*`` and weak
    forms are 412; no If-Match passes. ``refused``: any If-Match is 412; none passes.
    """
    if if_match is None:
        if mode == "required":
            return redfish_error(
                428,
                "A PATCH of this resource needs an If-Match header with its ETag.",
                "Base.1.8.PreconditionRequired",
            )
        return None
    candidates = [tag.strip() for tag in if_match.split(",")]
    if mode == "refused":
        return redfish_error(
            412,
            "This BMC does not support conditional requests: send the PATCH without If-Match.",
            "Base.1.8.PreconditionFailed",
        )
    if mode == "required":
        ok = any(tag == "*" or tag.removeprefix("W/") == current for tag in candidates)
    else:
        ok = current in candidates
    if ok:
        return None
    return redfish_error(
        412,
        f"The ETag in If-Match ({if_match}) does not match the resource's current ETag.",
        "Base.1.8.PreconditionFailed",
    )


def _shape(resource: dict[str, Any], profile: Profile, system: str) -> None:
    """Make sushy's ComputerSystem look like the profile's: its reset types, settings object."""
    reset = resource.get("Actions", {}).get("#ComputerSystem.Reset")
    if isinstance(reset, dict):
        reset["ResetType@Redfish.AllowableValues"] = list(profile.reset_types)
    if profile.boot_via_settings:
        resource["@Redfish.Settings"] = {
            "SettingsObject": {"@odata.id": f"{SYSTEMS}{system}{SETTINGS_SUFFIX}"}
        }


def _system_of(path: str) -> str | None:
    if not path.startswith(SYSTEMS):
        return None
    return path[len(SYSTEMS) :].split("/", 1)[0] or None


def _environ_key(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_")


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw: bytes = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    return raw


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _get_environ(environ: dict[str, Any], path: str) -> dict[str, Any]:
    read = {k: v for k, v in environ.items() if k not in ("CONTENT_TYPE", "HTTP_IF_MATCH")}
    read.update(REQUEST_METHOD="GET", PATH_INFO=path, QUERY_STRING="")
    return read


def _send(answer: _Answer, start_response: Callable[..., Any]) -> Iterator[bytes]:
    headers = [(k, v) for k, v in answer.headers if k.lower() != "content-length"]
    headers.append(("Content-Length", str(len(answer.body))))
    start_response(f"{answer.status} {_REASONS.get(answer.status, 'Answer')}", headers)
    yield answer.body


_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    412: "Precondition Failed",
    428: "Precondition Required",
}
