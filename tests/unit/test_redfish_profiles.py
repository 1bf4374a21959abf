"""The lab emulator's vendor profiles (`lightsout_lab.redfish_profiles`), in front of a small
stand-in for sushy's WSGI app: what each family answers, and what reaches sushy."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from lightsout_lab import redfish_profiles
from lightsout_lab.redfish_profiles import (
    FALLBACK_SECONDS,
    PROFILES,
    SESSIONS,
    ProfileMiddleware,
    check_if_match,
    etag_of,
)
from lightsout_lab.sushy import FakeSystem

pytestmark = pytest.mark.unit

USER, PASSWORD = "admin", "secret"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
UUID = "00000000-0000-4000-8000-000000000001"
SYSTEM = f"/redfish/v1/Systems/{UUID}"
RESET = f"{SYSTEM}/Actions/ComputerSystem.Reset"
HARNESS = "X-Lightsout-Harness"


class Sushy:
    """Stands in for sushy's app behind its Basic auth: one system, orders recorded."""

    def __init__(self) -> None:
        self.power = "Off"
        self.boot = "Hdd"
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length)) if length else None
        if environ.get("HTTP_AUTHORIZATION") != BASIC:
            start_response("401 Unauthorized", [])
            return [b""]
        self.calls.append((method, path, body))
        if method == "GET" and path == SYSTEM:
            resource = {
                "@odata.id": SYSTEM,
                "PowerState": self.power,
                "Boot": {"BootSourceOverrideTarget": self.boot},
                "Actions": {
                    "#ComputerSystem.Reset": {
                        "target": RESET,
                        "ResetType@Redfish.AllowableValues": ["On", "ForceOff"],
                    }
                },
            }
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(resource).encode()]
        if method == "PATCH" and path == SYSTEM:
            self.boot = body["Boot"]["BootSourceOverrideTarget"]
        start_response("204 No Content", [])
        return [b""]


class Backend:
    def __init__(self, sushy: Sushy) -> None:
        self.sushy = sushy
        self.held: list[str] = []
        self.released: list[str] = []
        self.pending: dict[str, str] = {}  # uuid -> the state a change under way leads to

    def target_state(self, uuid: str) -> str:
        return self.pending.get(uuid) or self.sushy.power

    def hold(self, uuid: str) -> None:
        self.held.append(uuid)

    def release(self, uuid: str) -> None:
        self.released.append(uuid)


class Bmc:
    def __init__(self, profile: str | None) -> None:
        self.sushy = Sushy()
        self.backend = Backend(self.sushy)
        self.app = ProfileMiddleware(
            self.sushy,
            {UUID: PROFILES[profile]} if profile else {},
            aliases={"box-1": UUID},
            username=USER,
            password=PASSWORD,
            backend=self.backend,
            harness_header=HARNESS,
        )

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        environ: dict[str, Any] = {}
        setup_testing_defaults(environ)
        raw = json.dumps(body).encode() if body is not None else b""
        environ.update(
            REQUEST_METHOD=method,
            PATH_INFO=path,
            CONTENT_LENGTH=str(len(raw)),
            HTTP_AUTHORIZATION=BASIC,
        )
        environ["wsgi.input"] = io.BytesIO(raw)
        for name, value in (headers or {}).items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        answer: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            answer["status"] = int(status.split(maxsplit=1)[0])
            answer["headers"] = dict(response_headers)

        data = b"".join(self.app(environ, start_response))
        return answer["status"], answer["headers"], json.loads(data) if data else None

    def resets(self) -> list[str]:
        return [b["ResetType"] for m, p, b in self.sushy.calls if p == RESET and m == "POST"]


def message_id(answer: Any) -> str:
    return str(answer["error"]["@Message.ExtendedInfo"][0]["MessageId"])


@pytest.mark.parametrize(
    ("profile", "missing"),
    [("idrac", "GracefulRestart"), ("ilo", "GracefulShutdown"), ("ami", "PushPowerButton")],
)
def test_a_family_lists_its_reset_types_and_refuses_others(profile: str, missing: str) -> None:
    bmc = Bmc(profile)
    status, _, system = bmc.call("GET", SYSTEM)
    listed = system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"]
    assert status == 200
    assert missing not in listed
    for _ in range(2):  # a busy family would answer busy first
        status, _, answer = bmc.call("POST", RESET, {"ResetType": missing})
        assert status == 400
    assert message_id(answer).endswith("ActionParameterNotSupported")
    assert bmc.resets() == []


@pytest.mark.parametrize(
    ("profile", "busy_id"),
    [("idrac", "SYS518"), ("ilo", "InvalidOperationForSystemState")],
)
def test_busy_family_refuses_each_order_once(profile: str, busy_id: str) -> None:
    bmc = Bmc(profile)
    status, _, answer = bmc.call("POST", RESET, {"ResetType": "On"})
    assert (status, message_id(answer).rsplit(".", 1)[-1]) == (400, busy_id)
    assert bmc.resets() == []
    assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 204
    assert bmc.resets() == ["On"]
    bmc.sushy.power = "On"
    assert bmc.call("POST", RESET, {"ResetType": "ForceOff"})[0] == 400  # the next order too
    assert bmc.call("POST", RESET, {"ResetType": "ForceOff"})[0] == 204


def test_idrac_answers_a_redundant_on_with_409_and_lets_the_power_on_land() -> None:
    bmc = Bmc("idrac")
    bmc.backend.pending[UUID] = "On"  # a power-on under way, PowerState still Off
    assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 400  # busy first
    status, _, answer = bmc.call("POST", RESET, {"ResetType": "On"})
    assert status == 409
    assert "already powered ON" in answer["error"]["message"]
    assert bmc.resets() == []
    assert bmc.backend.released == [UUID]


def test_a_family_without_409_takes_a_redundant_on() -> None:
    bmc = Bmc("ami")
    bmc.sushy.power = "On"
    assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 204


@pytest.mark.parametrize(("power", "pressed"), [("On", "GracefulShutdown"), ("Off", "On")])
def test_ilo_push_power_button_is_a_short_press(power: str, pressed: str) -> None:
    bmc = Bmc("ilo")
    bmc.sushy.power = power
    bmc.call("POST", RESET, {"ResetType": "PushPowerButton"})  # busy
    assert bmc.call("POST", RESET, {"ResetType": "PushPowerButton"})[0] == 204
    assert bmc.resets() == [pressed]


STRONG = '"abc"'


@pytest.mark.parametrize(
    ("mode", "if_match", "status"),
    [
        ("required", None, 428),
        ("required", STRONG, None),
        ("required", "W/" + STRONG, None),
        ("required", "*", None),
        ("required", '"old"', 412),
        ("strict", None, None),
        ("strict", STRONG, None),
        ("strict", "W/" + STRONG, 412),
        ("strict", "*", 412),
        ("strict", '"old", ' + STRONG, None),
        ("refused", None, None),
        ("refused", STRONG, 412),
        ("refused", "W/" + STRONG, 412),
        ("refused", "*", 412),
    ],
)
def test_if_match_rules(mode: Any, if_match: str | None, status: int | None) -> None:
    refusal = check_if_match(mode, if_match, STRONG)
    assert (refusal.status if refusal else None) == status


def test_ami_wants_the_current_etag_on_patch() -> None:
    bmc = Bmc("ami")
    _, headers, system = bmc.call("GET", SYSTEM)
    etag = headers["ETag"]
    assert etag == system["@odata.etag"] == etag_of(system)
    boot = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    assert bmc.call("PATCH", SYSTEM, boot)[0] == 428
    assert bmc.sushy.boot == "Hdd"
    assert bmc.call("PATCH", SYSTEM, boot, {"If-Match": etag})[0] == 204
    assert bmc.sushy.boot == "Pxe"
    # The resource changed: the ETag read before is stale now.
    assert bmc.call("PATCH", SYSTEM, boot, {"If-Match": etag})[0] == 412


def test_etag_strict_sends_a_weak_etag_and_wants_the_strong_one() -> None:
    bmc = Bmc("etag-strict")
    _, headers, _ = bmc.call("GET", SYSTEM)
    assert headers["ETag"].startswith('W/"')
    boot = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    assert bmc.call("PATCH", SYSTEM, boot, {"If-Match": headers["ETag"]})[0] == 412
    assert bmc.call("PATCH", SYSTEM, boot, {"If-Match": "*"})[0] == 412
    assert bmc.call("PATCH", SYSTEM, boot, {"If-Match": headers["ETag"][2:]})[0] == 204


def test_no_if_match_takes_a_patch_only_without_if_match() -> None:
    bmc = Bmc("no-if-match")
    _, headers, _ = bmc.call("GET", SYSTEM)
    assert headers["ETag"].startswith('W/"')
    boot = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    for if_match in (headers["ETag"], headers["ETag"][2:], "*"):
        status, _, answer = bmc.call("PATCH", SYSTEM, boot, {"If-Match": if_match})
        assert status == 412
        assert "without If-Match" in answer["error"]["message"]
    assert bmc.sushy.boot == "Hdd"
    assert bmc.call("PATCH", SYSTEM, boot)[0] == 204
    assert bmc.sushy.boot == "Pxe"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("profile", "falls_back"), [("falls-back-once", 1), ("falls-back", 3)])
def test_a_power_on_that_falls_back_reads_powering_on_then_off(
    monkeypatch: pytest.MonkeyPatch, profile: str, falls_back: int
) -> None:
    clock = Clock()
    monkeypatch.setattr(redfish_profiles.time, "monotonic", clock)
    bmc = Bmc(profile)
    for _ in range(falls_back):
        assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 204
        assert bmc.call("GET", SYSTEM)[2]["PowerState"] == "PoweringOn"
        clock.now += FALLBACK_SECONDS
        assert bmc.call("GET", SYSTEM)[2]["PowerState"] == "Off"
        assert bmc.resets() == []  # nothing reached the machine
    assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 204
    if profile == "falls-back-once":
        assert bmc.resets() == ["On"]  # the next power-on is the machine's
    else:
        assert bmc.resets() == []
        assert bmc.call("GET", SYSTEM)[2]["PowerState"] == "PoweringOn"


def test_a_fall_back_is_seen_by_a_client_that_polls_slower_than_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first read comes after the window: it still shows the power-on under way, the next
    # one the fall-back (else a slow poller would read Off only, as if nothing had started).
    clock = Clock()
    monkeypatch.setattr(redfish_profiles.time, "monotonic", clock)
    bmc = Bmc("falls-back-once")
    assert bmc.call("POST", RESET, {"ResetType": "On"})[0] == 204
    clock.now += 3 * FALLBACK_SECONDS
    assert bmc.call("GET", SYSTEM)[2]["PowerState"] == "PoweringOn"
    assert bmc.call("GET", SYSTEM)[2]["PowerState"] == "Off"


def login(bmc: Bmc, password: str = PASSWORD) -> tuple[int, dict[str, str]]:
    status, headers, _ = bmc.call(
        "POST", SESSIONS, {"UserName": USER, "Password": password}, {"Authorization": None}
    )
    return status, headers


def live(bmc: Bmc) -> int:
    return len(bmc.call("GET", SESSIONS, headers={HARNESS: "1"})[2]["Members"])


def test_sessions_only_refuses_basic_auth_and_takes_a_session_token() -> None:
    bmc = Bmc("sessions-only")
    status, _, answer = bmc.call("GET", SYSTEM)
    assert status == 401
    assert "create a session" in answer["error"]["message"]
    assert login(bmc, "wrong")[0] == 401
    status, headers = login(bmc)
    assert status == 201
    token = {"X-Auth-Token": headers["X-Auth-Token"], "Authorization": None}
    status, _, system = bmc.call("GET", SYSTEM, headers=token)
    assert (status, system["PowerState"]) == (200, "Off")
    assert bmc.call("GET", "/redfish/v1/Systems/other", headers=token)[0] == 204  # any system
    assert live(bmc) == 1
    assert bmc.call("DELETE", headers["Location"], headers=token)[0] == 204
    assert live(bmc) == 0
    assert bmc.call("GET", SYSTEM, headers=token)[0] == 401  # the token died with its session


def test_without_profiles_there_is_no_session_service() -> None:
    bmc = Bmc(None)
    assert login(bmc)[0] == 401  # sushy's own answer: no Basic auth on the request
    assert bmc.call("GET", SYSTEM)[0] == 200


def test_idrac10_takes_the_boot_override_on_its_settings_object() -> None:
    bmc = Bmc("idrac10")
    _, _, system = bmc.call("GET", SYSTEM)
    settings = system["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
    boot = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    status, _, answer = bmc.call("PATCH", SYSTEM, boot)
    assert status == 400
    assert "@Redfish.Settings" in answer["error"]["message"]
    assert bmc.sushy.boot == "Hdd"
    assert bmc.call("PATCH", settings, boot)[0] == 204
    assert bmc.sushy.boot == "Pxe"
    assert bmc.call("GET", settings)[2]["Boot"]["BootSourceOverrideTarget"] == "Pxe"


def test_the_harness_is_never_refused_and_can_hold_a_power_change() -> None:
    bmc = Bmc("idrac")
    harness = {HARNESS: "1", "X-Lightsout-Hold": "1"}
    assert bmc.call("POST", RESET, {"ResetType": "On"}, harness)[0] == 204  # not busy
    assert bmc.backend.held == [UUID]
    assert bmc.resets() == ["On"]


def test_a_system_is_known_by_its_name_too() -> None:
    bmc = Bmc("sessions-only")
    assert bmc.call("GET", "/redfish/v1/Systems/box-1")[0] == 401


def test_an_unknown_profile_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"FakeSystem\.profile 'dell' is not one of: ami, etag"):
        FakeSystem(uuid=UUID, name="box-1", profile="dell")
