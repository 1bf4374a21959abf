"""What a health check's result means for one machine: pure, for the operator and the replay.

A Group's health-check Job (built in `execution.health`) reads each machine's controller; the
newest result filed under a machine is judged here (`assess`) into `status.lastHealthCheck`,
the `Healthy` condition and the power state the state machine may use; a result that came
while an action Job held the machine is recorded as skipped, never used. `planning.machine.passes`
adds the verdict to the machine's decision, the same in both drivers.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lightsout.planning.machine import inspection
from lightsout.planning.machine.common import set_condition
from lightsout.planning.machine.effects import SetCondition
from lightsout.planning.types import (
    TRANSITIONING,
    ConditionStatus,
    ConditionType,
    LeaseState,
    ObservedPowerState,
    OperationResult,
)
from lightsout.state.parse import format_time, parse_power_state, parse_time
from lightsout.state.references import ReferenceReason, Unresolved
from lightsout.state.status import NodeStatusView
from lightsout.text import clip_middle

# Reasons of the Healthy condition and of lastHealthCheck.
HEALTHY = "Healthy"
BMC_UNREACHABLE = "BMCUnreachable"
AUTHENTICATION_FAILED = "AuthenticationFailed"
TLS_ERROR = "TLSError"
UNKNOWN_SYSTEM = "UnknownSystem"
CHECK_FAILED = "CheckFailed"
ACTION_IN_PROGRESS = "ActionInProgress"
#: A machine left out of the check for a missing reference is in it again.
REFERENCES_RESOLVED = "ReferencesResolved"

#: (reason, pattern) in order: the first match names the failure. Matched against the failed
#: task's message, which the driver roles word as "<request> on <endpoint> failed: <why>
#: (<hint>)" with the BMC's or the client library's own words.
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        TLS_ERROR,
        re.compile(r"CERTIFICATE_VERIFY_FAILED|SSLError|SSL:|certificate verify|TLS", re.I),
    ),
    (
        AUTHENTICATION_FAILED,
        re.compile(
            r"authentication failed|HTTP 401|Unauthori[sz]ed|incorrect password|"
            r"unauthorized name|invalid credentials|permission denied \(publickey",
            re.I,
        ),
    ),
    (
        UNKNOWN_SYSTEM,
        re.compile(
            r"no system|not found among|no such resource|HTTP 404|does not exist|"
            r"unknown system|no vm ",
            re.I,
        ),
    ),
    (
        BMC_UNREACHABLE,
        re.compile(
            r"connection refused|timed out|timeout|unreachable|no route to host|"
            r"name or service not known|failed to establish|connection reset|"
            r"Request failed|no answer|not answering|could not connect|EOF occurred",
            re.I,
        ),
    ),
)


def classify(message: str) -> str:
    """The Healthy condition's reason for a failed check's message."""
    for reason, pattern in _CLASSES:
        if pattern.search(message):
            return reason
    return CHECK_FAILED


@dataclass(frozen=True)
class Assessment:
    """What a machine's status says about its health, and what the state machine gets."""

    #: The new `status.lastHealthCheck`, None when no newer check arrived.
    record: dict[str, Any] | None
    condition: SetCondition | None
    #: Power state read by the last check the state machine may use, and when.
    power_state: ObservedPowerState
    power_state_at: dt.datetime | None
    observed_power_state: ObservedPowerState | None
    #: `status.power` / `status.inspected` a new healthy check reported
    #: (`planning.machine.inspection`).
    measured: Mapping[str, Any] | None = None


def not_checked(assessment: Assessment, problem: Unresolved) -> Assessment:
    """A machine left out of its Group's check by a missing reference: `Healthy=False` with the
    reference's reason (SecretNotFound, ConfigMapNotFound, ...) naming the object."""
    message = f"{problem.message}; not health-checked until it exists"
    condition = set_condition(ConditionType.HEALTHY, False, str(problem.reason), message)
    return replace(assessment, condition=condition)


def included_again(assessment: Assessment, status: NodeStatusView) -> Assessment:
    """A machine `not_checked` until now whose references resolve again: `Healthy=Unknown`
    until the next check says (a new check's own condition wins)."""
    if assessment.condition is not None:
        return assessment
    current = status.condition(ConditionType.HEALTHY) or {}
    if current.get("reason") not in set(ReferenceReason):
        return assessment
    unknown = SetCondition(
        ConditionType.HEALTHY,
        ConditionStatus.UNKNOWN,
        REFERENCES_RESOLVED,
        "every object the health check needs exists; waiting for its next run",
    )
    return replace(assessment, condition=unknown)


def assess(
    status: NodeStatusView, record: Mapping[str, Any] | None, lease: LeaseState
) -> Assessment:
    """Turn the newest check into status, unless status already has it or an action is on."""
    last = status.last_health_check or {}
    unchanged = Assessment(None, None, *_usable(last), None)
    if record is None:
        return unchanged
    started = parse_time(record.get("started"))
    if started is None or (
        (seen := parse_time(last.get("time"))) is not None
        and (started < seen or (started == seen and record.get("job") == last.get("job")))
    ):
        return unchanged
    base = {"time": format_time(started), "job": record.get("job")}
    phase = status.phase
    if lease in (LeaseState.HELD_BY_ME, LeaseState.HELD_BY_OTHER) or phase in TRANSITIONING:
        message = (
            f"not used: the machine was {phase or 'busy'} and an action Job holds its Lease; "
            "a health check never drives a machine an action is driving"
        )
        skipped = {**base, "result": "Skipped", "reason": ACTION_IN_PROGRESS, "message": message}
        return Assessment(skipped, None, *_usable(last), None)
    message = clip_middle(str(record.get("message") or ""))
    if record.get("result") == OperationResult.SUCCEEDED:
        power = parse_power_state(record.get("powerState")) or ObservedPowerState.UNKNOWN
        text = f"the controller answered: power {power}"
        new = {
            **base,
            "result": "Healthy",
            "reason": HEALTHY,
            "message": text,
            "powerState": str(power),
        }
        condition = set_condition(ConditionType.HEALTHY, True, HEALTHY, text)
        measured = inspection.measured_status(record, str(base["time"])) or None
        return Assessment(new, condition, power, started, power, measured)
    reason = classify(message)
    new = {**base, "result": "Unhealthy", "reason": reason, "message": message}
    condition = set_condition(ConditionType.HEALTHY, False, reason, message)
    return Assessment(new, condition, ObservedPowerState.UNKNOWN, None, ObservedPowerState.UNKNOWN)


def _usable(last: Mapping[str, Any]) -> tuple[ObservedPowerState, dt.datetime | None]:
    if last.get("result") != "Healthy":
        return ObservedPowerState.UNKNOWN, None
    power = parse_power_state(last.get("powerState")) or ObservedPowerState.UNKNOWN
    return power, parse_time(last.get("time"))
