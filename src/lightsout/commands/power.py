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
from lightsout.planning.types import operation_from_status
from lightsout.state.status import node_status

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
    status = node_status(node)
    return Progress(str(status.phase or Phase.UNKNOWN), status.reason or "", status.message)


def verdict(node: Obj, desired: DesiredPowerState, generation: int) -> Verdict:
    """Whether the machine reached `desired` for the intent of `generation` (or later)."""
    status, progress = node_status(node), progress_of(node)
    current = (status.observed_generation or 0) >= generation and (
        status.intent_desired == desired.value
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
    status = node_status(node)
    op = operation_from_status(status.last_operation)
    message = (op and op.message) or status.message
    if op and op.failed_task:
        message = f"task {op.failed_task!r}: {message}"
    return Progress(Phase.FAILED.value, status.reason or "Failed", message)
