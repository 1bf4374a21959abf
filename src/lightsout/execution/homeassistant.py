"""Reads entities' states from Home Assistant's REST API with a token kept in a Secret: what a
UPS read through Home Assistant (`execution.ups_homeassistant`) and a price sensor
(`execution.prices_homeassistant`) share.

`HomeAssistantReader` is the base of both readers, one per Group namespace and source block (the
token is a Secret of the Group's namespace). `states` (blocking: the readers call it in a
thread) does:

1. The token: the key `tokenSecretRef` names, in the Group's namespace, read through the API
   (`k8s.api.Api.read_secret_key`) and kept for `TOKEN_SECONDS`; read again on the next read
   once Home Assistant refused it. A refused token is not sent again until the Secret holds
   another one or `REFUSED_SECONDS` have passed: Home Assistant can ban an address after
   failed logins (`http: login_attempts_threshold`).
2. `GET <url>/api/states/<entity>` with `Authorization: Bearer <token>` for each entity, over
   one connection: its `state` (a string), `unit_of_measurement` and attributes.
3. Errors are `ReadError`s in words that say what to fix: the Secret or its key missing or not
   readable; Home Assistant not reachable; the token refused (401/403: "refused the token in
   Secret <ns>/<name> key <key>"); an entity it does not have (404, named); an answer that is
   not a state. None quotes the token, and `attempt`, which runs a reader's work in a thread and
   turns any error into its message, replaces the token should one ever slip in.

The HTTP client is the standard library's (`http.client`): a few small GETs per read need no
other dependency, and it never takes a proxy from the environment.
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
from typing import Any
from urllib.parse import urlsplit

from lightsout.k8s.api import Api, error_message
from lightsout.models.homeassistant import HomeAssistantApi
from lightsout.text import clip_middle

#: Seconds a token read from its Secret is used before the Secret is read again.
TOKEN_SECONDS = 300.0
#: Seconds before a token Home Assistant refused is sent again (sooner when the Secret changes).
REFUSED_SECONDS = 300.0
#: States that mean Home Assistant has no value for the entity now.
NOT_READ = frozenset({"unavailable", "unknown"})
#: The longest error kept (statuses and events carry it).
ERROR_BYTES = 512
#: What a token can be: printable ASCII without spaces (Home Assistant's are JWTs).
TOKEN = re.compile(r"[\x21-\x7e]+")
#: Tokens shorter than this are not looked for in messages (a real one is a long JWT).
REDACT_FROM = 8
#: The largest answer read for one entity (a price sensor's two days of quarter-hours are
#: about 30 kB).
MAX_BODY = 1 << 20


class ReadError(Exception):
    """One read failed; the message says why, for the Group's status and events."""


class TokenRefusedError(ReadError):
    """Home Assistant answered 401 or 403 to the token."""


@dataclass(frozen=True)
class EntityState:
    """An entity's state as `GET /api/states/<entity>` returns it: a string, its unit, and its
    other attributes."""

    state: str
    unit: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def known(self, entity: str, meaning: str) -> str:
        """The state, stripped; ReadError when Home Assistant has no value for `entity` now
        (`NOT_READ`), saying `meaning`: what that is to the reader."""
        said = self.state.strip()
        if said.lower() in NOT_READ:
            raise ReadError(f"{entity} is {said} in Home Assistant: {meaning}")
        return said


def number(text: str) -> float | None:
    """A state that is a finite number, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def fetch_states(
    source: HomeAssistantApi, entities: list[str], token: str, timeout: float
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
            body = response.read(MAX_BODY + 1)
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
    if len(body) > MAX_BODY:
        raise ReadError(f"{where} answered more than {MAX_BODY} bytes for {entity}")
    try:
        found = json.loads(body)
        state = found["state"]
        attributes = found.get("attributes") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ReadError(f"{where} did not answer {entity}'s state as its REST API does") from None
    if not isinstance(attributes, dict):
        attributes = {}
    unit = attributes.get("unit_of_measurement")
    return EntityState(str(state), None if unit is None else str(unit), attributes)


@dataclass
class HomeAssistantReader:
    """The token and the refusals of one source block for the Groups of one namespace."""

    api: Api
    namespace: str
    source: HomeAssistantApi
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

    async def attempt[T](self, work: Callable[[], T]) -> tuple[T | None, str | None]:
        """`work` run in a thread: its result, or why it failed (in words without the token)."""
        try:
            return await asyncio.to_thread(work), None
        except ReadError as error:
            message = str(error)
        except Exception as error:  # a bug: said, not raised into the polling task
            message = f"{type(error).__name__}: {error}"
        # Nothing above quotes the token; this keeps it so should a library ever do.
        for token in (self._token, self._refused):
            if token and len(token) >= REDACT_FROM:
                message = message.replace(token, "<token>")
        return None, clip_middle(message, ERROR_BYTES)

    def close(self) -> None:
        self._token = self._refused = None

    def states(self, entities: list[str]) -> dict[str, EntityState]:
        """The entities' states (blocking; ReadError when they cannot be read)."""
        token = self._token_now()
        if token == self._refused and self.clock() - self._refused_at < REFUSED_SECONDS:
            self._token = None  # the Secret is read again next time: it may hold another then
            raise ReadError(self._refusal)  # not sent again: the same words as the refusal
        try:
            states = fetch_states(self.source, entities, token, self.timeout)
        except TokenRefusedError as refused:
            self._token, self._refused, self._refused_at = None, token, self.clock()
            self._refusal = (
                f"Home Assistant at {self.source.address} refused the token in {self.secret} "
                f"(HTTP {refused}): put a valid long-lived access token there"
            )
            raise ReadError(self._refusal) from None
        self._refused = None
        return states

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
