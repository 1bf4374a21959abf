"""`lightsout power on|off NODE [--wait]`: set a machine's desired state and follow it. Pure.

The loop in `cli.py` patches `spec.desiredPowerState`, remembers the generation the patch
produced, then reads the Node until `verdict` says it is done. Only a status computed from that
generation or later counts: a Failed phase left over from an earlier intent must not end the
wait, and neither may a Ready phase reached before an Off was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from lightsout.models.enums import DesiredPowerState, Phase

Obj = dict[str, Any]


class ExitCode(IntEnum):
    """What `lightsout power` exits with; scripts may rely on these."""

    DONE = 0
    FAILED = 1
    TIMED_OUT = 2
    NOT_FOUND = 3


#: The phase each desired state ends in.
GOAL = {DesiredPowerState.ON: Phase.READY, DesiredPowerState.OFF: Phase.OFF}


@dataclass(frozen=True, slots=True)
class Progress:
    """Where the machine is, as one progress line shows it."""

    phase: str
    reason: str
    message: str

    def line(self, name: str) -> str:
        if not self.reason:
            return f"{name}: {self.phase}"
        tail = f": {self.message}" if self.message else ""
        return f"{name}: {self.phase} ({self.reason}){tail}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """`code` is None while the wait goes on."""

    code: ExitCode | None
    progress: Progress


def progress_of(node: Obj) -> Progress:
    status = node.get("status") or {}
    return Progress(
        phase=str(status.get("phase") or "Unknown"),
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
    )


def verdict(node: Obj, desired: DesiredPowerState, generation: int) -> Verdict:
    """Whether the machine reached `desired` for the intent of `generation` (or later)."""
    status = node.get("status") or {}
    progress = progress_of(node)
    intent = status.get("intent") or {}
    current = (status.get("observedGeneration") or 0) >= generation and (
        intent.get("desired") == desired.value
    )
    if not current:
        return Verdict(None, progress)
    if progress.phase == GOAL[desired].value:
        return Verdict(ExitCode.DONE, progress)
    if progress.phase == Phase.FAILED.value:
        return Verdict(ExitCode.FAILED, failure(node))
    return Verdict(None, progress)


def failure(node: Obj) -> Progress:
    """The Failed progress with the cause a person needs: the action's message and the task."""
    status = node.get("status") or {}
    op = status.get("lastOperation") or {}
    message = str(op.get("message") or status.get("message") or "")
    if op.get("failedTask"):
        message = f"task {op['failedTask']!r}: {message}"
    return Progress(Phase.FAILED.value, str(status.get("reason") or "Failed"), message)
