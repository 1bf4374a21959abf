"""How a failed power action is classified: the endpoint was away (ride it out), or it refused
the credentials (give up at once).

A BMC (or a hypervisor's API) that is rebooting its controller, overloaded or briefly off the
network refuses requests (HTTP 503, 429, 502, 504), drops connections or lets them time out. An
action Job that meets this fails like any other, but retrying it is what a person would do, and
the attempt it cost says nothing about the machine: `planning.machine.fsm` calls `unavailable` on a
failed attempt's message and, while `rides_out` holds, retries it after the usual backoff
(`common.retry_backoff`: 30 s doubling up to 10 min) without spending the Node's `maxRetries`, with
reason `BMCUnavailable`. After `OUTAGE_WINDOW_SECONDS` in the action's phase an outage counts
like any failure, so a BMC that never comes back still ends in `Failed` and the autoscaler stops
counting on the machine.

Every attempt reads the power state before it sends an order (the roles' contract), so a retry
after an order whose answer was lost never sends a second one for a machine already on its way.

`attempts_within(window)` is the most attempts one action can start during an outage of that
many seconds; `outage_requests` turns it into the most requests an endpoint receives from an
outage's start until the action is done, with `redfish_power_on_requests` (the most one run of
roles/redfish_power sends for a power-on, from the role's retry settings `REDFISH_*`, which a
unit test keeps equal to the role's and the playbooks' YAML). The flapping-BMC e2e test
asserts it.

A refusal of the credentials (HTTP 401/403 from a BMC, a plug or a hypervisor API, IPMI's
"incorrect password") is the opposite: the endpoint answered, and it will answer the same until
a person changes the Secret or the account. `planning.machine.fsm` calls `credentials_refused` on a
failed attempt's message and ends the action at once (`Failed`, reason AuthenticationFailed)
instead of spending `maxRetries` on the same answer minutes apart. It is tested before
`unavailable`: an answer that names the credentials is not an outage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime

from lightsout.models.drivers import HomeAssistantDriver, IPMIDriver, ProxmoxDriver, RedfishDriver
from lightsout.models.node import NodeSpec

#: How long an action keeps retrying an unavailable endpoint without spending `maxRetries`.
OUTAGE_WINDOW_SECONDS = 1800

#: What the roles' failure messages say when the endpoint did not act on a request: a refusal
#: that means "not now" (RFC 9110 503/502/504, RFC 6585 429), or no answer at all (urllib's and
#: Python's words for a refused, reset, dropped or timed-out connection).
_UNAVAILABLE = re.compile(
    r"HTTP (?:429|502|503|504)\b"
    r"|Connection refused|Connection reset|Connection aborted|RemoteDisconnected"
    r"|Remote end closed connection|timed out|No route to host|Network is unreachable",
    re.IGNORECASE,
)


#: What the roles' failure messages say when the endpoint refused the credentials: the roles'
#: own hint "authentication failed" (redfish_power, ipmi_power, proxmox_vm, plug_power), the HTTP
#: status they quote as "HTTP 401"/"HTTP 403" (RFC 9110: not authenticated; authenticated but
#: not allowed), and the BMC's own words that ipmi_power quotes (pyghmi: "Incorrect password
#: provided", "Unauthorized name", "insufficient privilege").
_REFUSED = re.compile(
    r"authentication failed|HTTP 40[13]\b|Incorrect password|Unauthorized name"
    r"|insufficient privilege",
    re.IGNORECASE,
)


def credentials_refused(message: str) -> bool:
    """Whether a failed attempt's message says the endpoint refused the credentials."""
    return bool(_REFUSED.search(message))


def unavailable(message: str) -> bool:
    """Whether a failed attempt's message says the machine's endpoint was not answering."""
    return bool(_UNAVAILABLE.search(message))


def rides_out(phase_since: datetime | None, now: datetime) -> bool:
    """Whether an outage met now is still retried without spending `maxRetries`."""
    if phase_since is None:
        return True
    return (now - phase_since).total_seconds() < OUTAGE_WINDOW_SECONDS


def attempts_within(window_seconds: float, backoff: Callable[[int], int]) -> int:
    """The most attempts of one action that can start within `window_seconds` of the first
    (each failing at once, so only the backoff between them counts): 1 + the retries whose
    summed backoff delays fall inside the window."""
    attempts, elapsed = 1, 0.0
    while True:
        elapsed += backoff(attempts)
        if elapsed >= window_seconds:
            return attempts
        attempts += 1


#: roles/redfish_power's retry settings as the action playbooks run it (playbooks/vars/
#: drivers.yml passes the first three with the role's defaults/main.yml as defaults; no Node field
#: changes them): seconds an accepted order may take to show in PowerState, seconds between two
#: PowerState reads, resends of an order or PATCH the BMC refused as busy, power-on orders at
#: most (another only after the host fell back to Off).
REDFISH_TRANSITION_TIMEOUT_SECONDS = 120
REDFISH_POLL_INTERVAL_SECONDS = 5
REDFISH_BUSY_RETRIES = 5
REDFISH_POWER_ON_ATTEMPTS = 2


def redfish_power_on_requests(*, pxe: bool = False) -> int:
    """The most HTTP requests one run of roles/redfish_power sends a BMC to power a machine on,
    when the BMC resolves the system id directly (a UUID on sushy-tools, System.Embedded.1 on
    iDRAC; a BMC that answers 404 adds its systems listing): the session login (session.yml),
    the system read (resolve.yml), the wait for a power-off in progress (wait.yml), with `pxe`
    the boot override (boot.yml: on the system, then on its settings object, each an ETag read
    and up to 3 PATCHes), `REDFISH_POWER_ON_ATTEMPTS` power-on attempts (power_on_order.yml:
    the order, the wait for On or PoweringOn, the wait for On or a fall back to Off in
    power_on_pending.yml), and the logout (logout_session.yml, run even after a failure). A
    wait reads PowerState at most
    ceil(timeout / interval) + 1 times; an order or PATCH is sent at most
    1 + `REDFISH_BUSY_RETRIES` times (Ansible's `retries` counts resends)."""
    polls = math.ceil(REDFISH_TRANSITION_TIMEOUT_SECONDS / REDFISH_POLL_INTERVAL_SECONDS) + 1
    sends = 1 + REDFISH_BUSY_RETRIES
    login = read = logout = 1
    boot = 2 * (1 + 3 * sends) if pxe else 0
    attempt = sends + 2 * polls
    return login + read + polls + boot + REDFISH_POWER_ON_ATTEMPTS * attempt + logout


def outage_requests(
    window_seconds: float, backoff: Callable[[int], int], *, pods: int, per_pod: int
) -> int:
    """The most requests a machine's endpoint receives for one action from the start of an
    outage of `window_seconds` until the action is done: the attempts started within the outage
    (`attempts_within`) and one after it (an endpoint that answers again lets it through), each
    run by at most `pods` pods (the Job's backoffLimit + 1) of at most `per_pod` requests."""
    return (attempts_within(window_seconds, backoff) + 1) * pods * per_pod


def credentials_source(spec: NodeSpec, namespace: str) -> str:
    """Where the credentials the endpoint checks come from, for a refusal's message: the
    Secret's namespace/name and the keys the driver reads (names only, never a value); '' for a
    driver that sends its endpoint none (Shelly, Tasmota, Wake-on-LAN)."""
    block = spec.driver.config
    if isinstance(block, HomeAssistantDriver):
        token = block.token_secret_ref
        return f"Secret {namespace}/{token.name}, key '{token.key}'"
    if isinstance(block, ProxmoxDriver):
        ref = block.credentials_secret_ref
        if ref.token_id_key is not None and ref.token_secret_key is not None:
            # The role uses the token instead of the password when its keys are named.
            keys = (ref.token_id_key, ref.token_secret_key)
        else:
            keys = (ref.username_key, ref.password_key)
        return f"Secret {namespace}/{ref.name}, keys '{keys[0]}' and '{keys[1]}'"
    if isinstance(block, RedfishDriver | IPMIDriver):
        bmc = block.credentials_secret_ref
        return f"Secret {namespace}/{bmc.name}, keys '{bmc.username_key}' and '{bmc.password_key}'"
    return ""
