"""When a failed power action was the hardware's endpoint being away, and how long to ride it out.

A BMC (or a hypervisor's API) that is rebooting its controller, overloaded or briefly off the
network refuses requests (HTTP 503, 429, 502, 504), drops connections or lets them time out. An
action Job that meets this fails like any other, but retrying it is what a person would do, and
the attempt it cost says nothing about the machine: `planning.fsm` calls `unavailable` on a
failed attempt's message and, while `rides_out` holds, retries it after the usual backoff
(`fsm.retry_backoff`: 30 s doubling up to 10 min) without spending the Node's `maxRetries`, with
reason `BMCUnavailable`. After `OUTAGE_WINDOW_SECONDS` in the action's phase an outage counts
like any failure, so a BMC that never comes back still ends in `Failed` and the autoscaler stops
counting on the machine.

Every attempt reads the power state before it sends an order (the roles' contract), so a retry
after an order whose answer was lost never sends a second one for a machine already on its way.

`attempts_within(window)` is the most attempts one action can start during an outage of that
many seconds: the figure the flapping-BMC test bounds the requests it counts with.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

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
