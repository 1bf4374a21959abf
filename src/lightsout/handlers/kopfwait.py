"""One shared wait per kopf toggle set, so start-up does not slow down with the square of objects.

Applied by `lightsout.handlers` when it is imported (before kopf starts), for the whole process.

kopf holds back every object's handlers until every index has listed its objects: at start-up
each listed object gets a toggle in `operator_indexed` (a `ToggleSet` of `all`), and its worker
indexes it, turns its toggle on and waits in `ToggleSet.wait_for(True)`, on one
`asyncio.Condition` that every toggle change notifies. So each of N toggle changes wakes every one
of up to N waiting workers, and each re-reads up to N toggles: with the fleet benchmark's 1000
machines this held the first pass back about 16 s of a 2-core machine (a bare model of it: 21 s
for 1000 objects, 209 s for 2000), and 5000 would take hours.

Here the callers waiting for one state of one set share a single wait: the first starts kopf's
own `wait_for` as a task, the others await that task. A toggle change then wakes one waiter
instead of all of them, and what each caller is told is unchanged: it returns once the set was
seen in the state it asked for. A caller cancelled meanwhile leaves the shared task to the others
(`asyncio.shield`); when it is done, the next caller starts a new one.
"""

from __future__ import annotations

import asyncio
import weakref

# A private kopf module (checked with kopf 1.45): pyproject.toml holds kopf below 1.46 until
# a newer one is checked against this (tests/unit/test_kopfwait.py).
from kopf._cogs.aiokits.aiotoggles import ToggleSet

#: kopf's own `ToggleSet.wait_for` (also what the shared task runs).
_KOPF_WAIT_FOR = ToggleSet.wait_for
#: Per toggle set: the task each wanted state is being waited for in.
_WAITS: weakref.WeakKeyDictionary[ToggleSet, dict[bool, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


async def shared_wait_for(toggles: ToggleSet, state: bool, /) -> None:
    """`ToggleSet.wait_for(state)`, with every caller of one set and state in one wait."""
    waits = _WAITS.setdefault(toggles, {})
    wanted = bool(state)
    shared = waits.get(wanted)
    if shared is None or shared.done() or shared.get_loop() is not asyncio.get_running_loop():
        shared = asyncio.ensure_future(_KOPF_WAIT_FOR(toggles, wanted))
        waits[wanted] = shared
    await asyncio.shield(shared)


def apply() -> None:
    """Make every kopf `ToggleSet` wait through `shared_wait_for` (idempotent)."""
    ToggleSet.wait_for = shared_wait_for  # type: ignore[method-assign,assignment]
