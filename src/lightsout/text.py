"""Shortening text for fields with a size limit (status messages, conditions, events, the
runner's termination message) without losing either end.

A message starts with what failed and ends with what to do about it ("… set systemId to one
of these"; "(gave up after 2 attempts)"); whatever sits between (a list of systems, a task's
output) is what can go. Both the operator and the runner use this, so it imports nothing.
"""

from __future__ import annotations

#: What replaces the cut middle.
MARK = " … "
#: Kubernetes' limit on an Event's message, and the one Lights-Out keeps for status messages
#: and conditions (the CRD's schema says maxLength 1024).
MESSAGE_LIMIT = 1024


def clip_middle(text: str, max_bytes: int = MESSAGE_LIMIT) -> str:
    """`text` in at most `max_bytes` UTF-8 bytes: unchanged when it fits, else its beginning
    and its end joined by `MARK` (the end gets the larger half: it says what to do)."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    room = max_bytes - len(MARK.encode())
    if room <= 0:
        return raw[:max_bytes].decode(errors="ignore")
    head = room * 2 // 5
    # A cut inside a multi-byte character drops that character's bytes (errors="ignore").
    start = raw[:head].decode(errors="ignore")
    end = raw[len(raw) - (room - head) :].decode(errors="ignore")
    return start.rstrip() + MARK + end.lstrip()
