"""Reads a UPS through Home Assistant (`spec.battery.source.homeAssistant`) into the same
`planning.energy.mains.Reading` a NUT server gives, so everything after the read is NUT's path.

Called by `execution.ups.PowerSources`, which keeps one `HomeAssistantUps` per Group namespace
and source block (the token is a Secret of the Group's namespace) and calls `read` once per
poll. A read:

1. The token: the key `tokenSecretRef` names, in the Group's namespace, read through the API
   (`k8s.api.Api.read_secret_key`) and kept for `TOKEN_SECONDS`; read again on the next poll
   once Home Assistant refused it. A refused token is not sent again until the Secret holds
   another one or `REFUSED_SECONDS` have passed: Home Assistant can ban an address after
   failed logins (`http: login_attempts_threshold`).
2. `GET <url>/api/states/<entity>` with `Authorization: Bearer <token>`: the status entity,
   then the charge, runtime and load entities that are set. Each answer's `state` is a string.
3. The states become NUT's variables (`variables`, pure): the status entity's is `ups.status`
   and must be NUT's flags (upper-case words: `OL`, `OB DISCHRG LB`; the NUT integration's
   "Status" text, `On Battery`, is refused by name); the charge is `battery.charge`, the
   runtime `battery.runtime` in seconds after its `unit_of_measurement`, the load `ups.load`.
   A figure that is not a number, or in a unit not known, is left out: that field is unknown,
   as for a variable upsd does not serve.
4. Errors come back as a Reading's error, in words that say what to fix and never hold the
   token: the Secret or its key missing or not readable; Home Assistant not reachable; the
   token refused (401/403: "refused the token in Secret <ns>/<name> key <key>"); an entity
   it does not have (404, named); an entity `unavailable` or `unknown` (named: Home Assistant
   cannot read the UPS). The Group's mains are then Unknown, `PowerSourceReachable` False:
   no battery decision is made on a guess.

The HTTP client is the standard library's (`http.client`, in a thread): a few small GETs per
poll need no other dependency, and it never takes a proxy from the environment.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import re
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lightsout.k8s.api import Api, error_message
from lightsout.models.battery import HomeAssistantSource
from lightsout.planning.energy import mains
from lightsout.text import clip_middle

#: Seconds a token read from its Secret is used before the Secret is read again.
TOKEN_SECONDS = 300.0
#: Seconds before a token Home Assistant refused is sent again (sooner when the Secret changes).
REFUSED_SECONDS = 300.0
#: States that mean Home Assistant has no value for the entity now.
NOT_READ = frozenset({"unavailable", "unknown"})
#: NUT's `ups.status`: upper-case flags separated by spaces.
NUT_FLAGS = re.compile(r"[A-Z]+(?: +[A-Z]+)*")
#: A duration sensor's units (Home Assistant lets a user show the runtime in any), in seconds.
SECONDS_PER = {"s": 1.0, "ms": 0.001, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: The longest error kept (status.battery.error and the events carry it).
ERROR_BYTES = 512
#: What a token can be: printable ASCII without spaces (Home Assistant's are JWTs).
TOKEN = re.compile(r"[\x21-\x7e]+")
#: Tokens shorter than this are not looked for in messages (a real one is a long JWT).
REDACT_FROM = 8


class ReadError(Exception):
    """One read failed; the message says why, for the Group's status and events."""


class TokenRefusedError(ReadError):
    """Home Assistant answered 401 or 403 to the token."""


@dataclass(frozen=True)
class EntityState:
    """An entity's state as `GET /api/states/<entity>` returns it: a string, and its unit."""

    state: str
    unit: str | None = None


def variables(source: HomeAssistantSource, states: Mapping[str, EntityState]) -> dict[str, str]:
    """NUT's variables from the entities' states (ReadError when the status cannot be told)."""
    for name, state in states.items():
        if state.state.strip().lower() in NOT_READ:
            raise ReadError(
                f"{name} is {state.state.strip()} in Home Assistant: it cannot read the UPS"
            )
    flags = states[source.status_entity].state.strip()
    if not NUT_FLAGS.fullmatch(flags):
        shown = clip_middle(flags, 60)
        raise ReadError(
            f"{source.status_entity} is {shown!r}, not NUT status flags (OL, OB, LB ...): name "
            "the NUT integration's status data sensor (sensor.<ups>_status_data), not its "
            "status text"
        )
    out = {"ups.status": flags}
    figures: tuple[tuple[str, str | None, Callable[[EntityState], float | None]], ...] = (
        ("battery.charge", source.charge_entity, _percent),
        ("battery.runtime", source.runtime_entity, _seconds),
        ("ups.load", source.load_entity, _percent),
    )
    for variable, entity, convert in figures:
        found = states.get(entity) if entity else None
        value = None if found is None else convert(found)
        if value is not None:
            out[variable] = f"{value:g}"
    return out


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _percent(state: EntityState) -> float | None:
    return _number(state.state) if state.unit in (None, "", "%") else None


def _seconds(state: EntityState) -> float | None:
    per = SECONDS_PER.get(state.unit or "s")
    value = _number(state.state)
    return None if per is None or value is None else value * per


def fetch_states(
    source: HomeAssistantSource, entities: list[str], token: str, timeout: float
) -> dict[str, EntityState]:
    """Each entity's state, over one connection (blocking: run it in a thread)."""
    url = urlsplit(source.url)
    where = f"Home Assistant at {source.address}"
    connection: http.client.HTTPConnection
    try:
        if url.scheme == "https":
            context = ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                url.hostname or "", url.port, timeout=timeout, context=context
            )
        else:
            connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
    except ValueError as error:  # a port out of range
        raise ReadError(f"cannot reach {where}: {error}") from None
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    out: dict[str, EntityState] = {}
    try:
        for entity in entities:
            connection.request("GET", f"{url.path.rstrip('/')}/api/states/{entity}", None, headers)
            response = connection.getresponse()
            body = response.read()
            out[entity] = _state(where, entity, response.status, body)
    except (OSError, http.client.HTTPException) as error:
        said = str(error) if isinstance(error, OSError) and str(error) else type(error).__name__
        raise ReadError(f"cannot reach {where}: {said}") from None
    finally:
        connection.close()
    return out


def _state(where: str, entity: str, status: int, body: bytes) -> EntityState:
    if status in (401, 403):
        raise TokenRefusedError(str(status))
    if status == 404:
        raise ReadError(
            f"{where} has no entity {entity} (HTTP 404): check its id, and that it is enabled"
        )
    if status != 200:
        raise ReadError(f"{where} answered HTTP {status} for {entity}")
    try:
        found = json.loads(body)
        state = found["state"]
        attributes = found.get("attributes") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ReadError(f"{where} did not answer {entity}'s state as its REST API does") from None
    unit = attributes.get("unit_of_measurement") if isinstance(attributes, dict) else None
    return EntityState(str(state), None if unit is None else str(unit))


@dataclass
class HomeAssistantUps:
    """The reader of one source block for the Groups of one namespace; `read` never raises."""

    api: Api
    namespace: str
    source: HomeAssistantSource
    timeout: float
    clock: Callable[[], float] = time.monotonic
    _token: str | None = field(default=None, repr=False)
    _token_at: float = 0.0
    _refused: str | None = field(default=None, repr=False)
    _refused_at: float = 0.0
    _refusal: str = ""

    @property
    def secret(self) -> str:
        ref = self.source.token_secret_ref
        return f"Secret {self.namespace}/{ref.name} key {ref.key}"

    async def read(self) -> mains.Reading:
        """One read: NUT's variables, or the error in words."""
        try:
            return mains.Reading(await asyncio.to_thread(self._read))
        except ReadError as error:
            message = str(error)
        except Exception as error:  # a bug: said, not raised into the polling task
            message = f"{type(error).__name__}: {error}"
        # Nothing above quotes the token; this keeps it so should a library ever do.
        for token in (self._token, self._refused):
            if token and len(token) >= REDACT_FROM:
                message = message.replace(token, "<token>")
        return mains.Reading({}, clip_middle(message, ERROR_BYTES))

    def close(self) -> None:
        self._token = self._refused = None

    def _read(self) -> dict[str, str]:
        token = self._token_now()
        if token == self._refused and self.clock() - self._refused_at < REFUSED_SECONDS:
            raise ReadError(self._refusal)  # not sent again: the same words as the refusal
        source = self.source
        figures = (source.charge_entity, source.runtime_entity, source.load_entity)
        entities = list(dict.fromkeys([source.status_entity, *(e for e in figures if e)]))
        try:
            states = fetch_states(source, entities, token, self.timeout)
        except TokenRefusedError as refused:
            self._token, self._refused, self._refused_at = None, token, self.clock()
            self._refusal = (
                f"Home Assistant at {source.address} refused the token in {self.secret} "
                f"(HTTP {refused}): put a valid long-lived access token there"
            )
            raise ReadError(self._refusal) from None
        self._refused = None
        return variables(source, states)

    def _token_now(self) -> str:
        """The token, from memory or read from its Secret (ReadError when it cannot be)."""
        if self._token is not None and self.clock() - self._token_at < TOKEN_SECONDS:
            return self._token
        ref = self.source.token_secret_ref
        try:
            token = self.api.read_secret_key(self.namespace, ref.name, ref.key)
        except KeyError:
            raise ReadError(f"Secret {self.namespace}/{ref.name} has no key {ref.key}") from None
        except PermissionError as error:
            raise ReadError(
                f"the operator may not read Secret {self.namespace}/{ref.name} ({error}): name it "
                "in the chart's upsTokenSecrets"
            ) from None
        except ValueError as error:
            raise ReadError(str(error)) from None
        except Exception as error:  # the API server unreachable, or refusing otherwise
            raise ReadError(
                f"cannot read Secret {self.namespace}/{ref.name}: {error_message(error)}"
            ) from None
        if token is None:
            raise ReadError(f"Secret {self.namespace}/{ref.name} not found")
        if not TOKEN.fullmatch(token):
            # Not sent: an HTTP header cannot carry it, and the client's refusal would quote it.
            raise ReadError(
                f"{self.secret} holds no token (empty, or spaces or control characters)"
            )
        self._token, self._token_at = token, self.clock()
        return token
