"""Table tests of the power state machine `lightsout.planning.machine.fsm.decide`.

Each row is (machine state, observations, time) -> (phase, reason, effects). Effects are
compared as short strings (`StartJob:startup:g5:a1`, `Condition:Drifted=True:DriftDetected`,
`Event:Warning:RetriesExhausted`, ...) so a row reads like the transition it pins down. A fake
clock is plain datetimes around T0.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lightsout.planning.machine.common import Reason, retry_backoff
from lightsout.planning.machine.effects import (
    AcquireLease,
    Decision,
    DeleteCoreNode,
    DeleteJob,
    Effect,
    Event,
    Requeue,
    SetCondition,
    SetDesiredPowerState,
    StartJob,
)
from lightsout.planning.machine.fsm import core_node_failed, decide, select_job
from lightsout.planning.types import (
    Action,
    DrainStatus,
    JobPhase,
    LeaseState,
    MachineState,
    NodeRemovalPolicy,
    Observations,
    ObservedJob,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
ON, OFF = ObservedPowerState.ON, ObservedPowerState.OFF
STARTUP, SHUTDOWN = Action.STARTUP, Action.SHUTDOWN
PROVISION, DEPROVISION = Action.PROVISION, Action.DEPROVISION
RUNNING, SUCCEEDED, FAILED = (
    OperationResult.RUNNING,
    OperationResult.SUCCEEDED,
    OperationResult.FAILED,
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def machine(phase: Phase, desired: ObservedPowerState, gen: int = 5, **kw: Any) -> MachineState:
    kw.setdefault("phase_since", T0)
    return MachineState(
        name="m1",
        kubernetes_node_name="worker-1",
        phase=phase,
        desired=desired,
        intent_generation=gen,
        **kw,
    )


def op(
    action: Action = STARTUP,
    gen: int = 5,
    attempt: int = 1,
    result: OperationResult = RUNNING,
    **kw: Any,
) -> Operation:
    kw.setdefault("started", T0)
    if result is not RUNNING:
        kw.setdefault("finished", T0)
    return Operation(action, gen, attempt, result=result, **kw)


def job(
    action: Action = STARTUP,
    gen: int = 5,
    attempt: int = 1,
    state: JobPhase = JobPhase.RUNNING,
    **kw: Any,
) -> ObservedJob:
    return ObservedJob(action, gen, attempt, state, **kw)


def obs(**kw: Any) -> Observations:
    return Observations(**kw)


READY_NODE = {"node_exists": True, "node_ready": True, "node_metadata_applied": True}


def summarize(effect: Effect) -> str:
    match effect:
        case StartJob(action, generation, attempt):
            return f"StartJob:{action}:g{generation}:a{attempt}"
        case DeleteJob(action, generation, attempt):
            return f"DeleteJob:{action}:g{generation}:a{attempt}"
        case SetCondition(kind, status, reason, _):
            return f"Condition:{kind}={status}:{reason}"
        case Event(kind, reason, _):
            return f"Event:{kind}:{reason}"
        case Requeue():
            return "Requeue"
        case SetDesiredPowerState(state):
            return f"SetDesired:{state}"
        case _:
            return type(effect).__name__


def summary(decision: Decision) -> list[str]:
    return [summarize(e) for e in decision.effects]


LEASE = "AcquireLease"
#: Every on-action Job comes after the core Node is created or tainted (the startup taint).
PREPARE = "PrepareCoreNode"
START_ON = [LEASE, PREPARE, "StartJob:startup:g5:a1", "Event:Normal:PowerOnRequested", "Requeue"]
WAIT_JOB = [LEASE, "Requeue"]


def retry(cause: str, *, drifted: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    conditions = [f"Condition:PowerActionSucceeded=False:{cause}"]
    if drifted:
        conditions.append(f"Condition:Drifted=True:{cause}")
    return [LEASE, *conditions, *extra, f"Event:Warning:{cause}", "Requeue"]


def exhausted(cause: str, *, drifted: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    conditions = [f"Condition:PowerActionSucceeded=False:{cause}"]
    if drifted:
        conditions.append(f"Condition:Drifted=True:{cause}")
    return [
        *conditions,
        *extra,
        "ReleaseLease",
        f"Event:Warning:{cause}",
        "Event:Warning:RetriesExhausted",
    ]


REGISTERED = [
    "ApplyNodeMetadata",
    "Uncordon",
    "Condition:Registered=True:NodeRegistered",
    "Condition:Drifted=False:NodeRegistered",
    "ReleaseLease",
    "Event:Normal:NodeRegistered",
]


def drain_start(reason: str, *, cordon: bool = True) -> list[str]:
    return [
        LEASE,
        *(["Cordon"] if cordon else []),
        "Drain",
        "Condition:Draining=True:Draining",
        f"Event:Normal:{reason}",
        "Requeue",
    ]


def start(action: str, gen: int, attempt: int, reason: str, *extra: str) -> list[str]:
    return [
        LEASE,
        *extra,
        *([PREPARE] if action in ("startup", "provision") else []),
        f"StartJob:{action}:g{gen}:a{attempt}",
        f"Event:Normal:{reason}",
        "Requeue",
    ]


def cancel(action: str, gen: int = 5) -> list[str]:
    return [f"DeleteJob:{action}:g{gen}:a1", LEASE, "Event:Normal:ActionCancelled", "Requeue"]


POWERED_OFF = [
    "Condition:PowerActionSucceeded=True:JobSucceeded",
    "Condition:Registered=False:JobSucceeded",
    "Condition:Drifted=False:JobSucceeded",
    "ReleaseLease",
    "Event:Normal:JobSucceeded",
]

# (id, machine, observations, now, expected phase, expected reason, expected effects).
# The tables keep one transition per visual block, so formatting is left to the author.
Row = tuple[str, MachineState, Observations, datetime, Phase, str, list[str]]

# fmt: off
OFF_ROWS: list[Row] = [
    ("steady-keeps-reason", machine(Phase.OFF, OFF, reason="JobSucceeded"), obs(), at(60),
     Phase.OFF, "JobSucceeded", []),
    ("steady-default-reason", machine(Phase.OFF, OFF), obs(), at(60),
     Phase.OFF, "ObservedOff", []),
    ("steady-releases-own-lease", machine(Phase.OFF, OFF), obs(lease=LeaseState.HELD_BY_ME),
     at(60), Phase.OFF, "ObservedOff", ["ReleaseLease"]),
    ("desired-on-starts-startup", machine(Phase.OFF, ON), obs(), at(60),
     Phase.POWERING_ON, "PowerOnRequested", START_ON),
    ("desired-on-ephemeral-provisions", machine(Phase.OFF, ON, ephemeral=True), obs(), at(60),
     Phase.PROVISIONING, "PowerOnRequested",
     start("provision", 5, 1, "PowerOnRequested")),
    ("desired-on-new-intent-restarts-attempts",
     machine(Phase.OFF, ON, operation=op(SHUTDOWN, gen=4, attempt=3, result=SUCCEEDED)),
     obs(), at(60), Phase.POWERING_ON, "PowerOnRequested", START_ON),
    ("desired-on-same-intent-never-reuses-a-job-name",
     machine(Phase.OFF, ON, operation=op(STARTUP, attempt=2, result=FAILED)), obs(), at(60),
     Phase.POWERING_ON, "PowerOnRequested", start("startup", 5, 3, "PowerOnRequested")),
    ("running-while-off-is-drift", machine(Phase.OFF, OFF), obs(**READY_NODE), at(600),
     Phase.OFF, "DriftDetected",
     ["Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected"]),
    ("ready-node-within-grace-is-not-drift", machine(Phase.OFF, OFF), obs(**READY_NODE), at(30),
     Phase.OFF, "ObservedOff", []),
    ("fresh-health-on-is-drift", machine(Phase.OFF, OFF),
     obs(power_state=ON, power_state_observed_at=at(10)), at(20),
     Phase.OFF, "DriftDetected",
     ["Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected"]),
    ("stale-health-on-is-ignored", machine(Phase.OFF, OFF),
     obs(power_state=ON, power_state_observed_at=at(-10)), at(20),
     Phase.OFF, "ObservedOff", []),
    ("drift-corrected-by-draining", machine(Phase.OFF, OFF, correct_drift=True),
     obs(**READY_NODE), at(600), Phase.DRAINING, "DriftCorrection",
     [LEASE, "Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected", "Cordon",
      "Drain", "Condition:Draining=True:Draining", "Event:Normal:DriftCorrection", "Requeue"]),
    ("drift-corrected-without-node-powers-off",
     machine(Phase.OFF, OFF, correct_drift=True, operation=op(SHUTDOWN, result=SUCCEEDED)),
     obs(power_state=ON, power_state_observed_at=at(10)), at(20),
     Phase.POWERING_OFF, "DriftCorrection",
     start("shutdown", 5, 2, "DriftCorrection",
           "Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected")),
    ("drift-repeated-posts-no-second-event", machine(Phase.OFF, OFF, reason="DriftDetected"),
     obs(**READY_NODE), at(600), Phase.OFF, "DriftDetected",
     ["Condition:Drifted=True:DriftDetected"]),
    ("drift-resolved", machine(Phase.OFF, OFF, reason="DriftDetected"), obs(), at(600),
     Phase.OFF, "DriftResolved", ["Condition:Drifted=False:DriftResolved"]),
]

POWERING_ON_ROWS: list[Row] = [
    ("job-running-waits", machine(Phase.POWERING_ON, ON, operation=op()), obs(job=job()),
     at(60), Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("job-pending-waits", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.PENDING)), at(60), Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("job-not-visible-yet-asks-again-same-name",
     machine(Phase.POWERING_ON, ON, operation=op()), obs(), at(10),
     Phase.POWERING_ON, "WaitingForJob", [LEASE, PREPARE, "StartJob:startup:g5:a1", "Requeue"]),
    ("older-job-visible-is-not-ours", machine(Phase.POWERING_ON, ON, operation=op(attempt=2)),
     obs(job=job(attempt=1, state=JobPhase.FAILED)), at(10),
     Phase.POWERING_ON, "WaitingForJob", [LEASE, PREPARE, "StartJob:startup:g5:a2", "Requeue"]),
    ("job-lost-is-a-failed-attempt", machine(Phase.POWERING_ON, ON, operation=op()), obs(),
     at(601), Phase.POWERING_ON, "RetryScheduled", retry("JobLost")),
    ("job-succeeded-power-on-boots", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(60),
     Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
    ("job-succeeded-unreported-power-boots", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED)), at(60), Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
    ("job-succeeded-power-unknown-boots", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=ObservedPowerState.UNKNOWN)), at(60),
     Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
    ("job-succeeded-wrong-power-state-retries", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=OFF)), at(60),
     Phase.POWERING_ON, "RetryScheduled", retry("PowerStateMismatch", drifted=True)),
    ("wrong-power-state-on-last-attempt-fails",
     machine(Phase.POWERING_ON, ON, operation=op(attempt=4)),
     obs(job=job(attempt=4, state=JobPhase.SUCCEEDED, power_state=OFF)), at(60),
     Phase.FAILED, "RetriesExhausted", exhausted("PowerStateMismatch", drifted=True)),
    ("job-failed-retries", machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.FAILED, failed_task="Power on", message="401")), at(60),
     Phase.POWERING_ON, "RetryScheduled", retry("JobFailed")),
    ("job-failed-retries-exhausted", machine(Phase.POWERING_ON, ON, operation=op(attempt=4)),
     obs(job=job(attempt=4, state=JobPhase.FAILED)), at(60),
     Phase.FAILED, "RetriesExhausted", exhausted("JobFailed")),
    ("job-failed-no-retries-configured",
     machine(Phase.POWERING_ON, ON, operation=op(), max_retries=0),
     obs(job=job(state=JobPhase.FAILED)), at(60),
     Phase.FAILED, "RetriesExhausted", exhausted("JobFailed")),
    ("desired-changed-job-running-lets-it-finish",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op()), obs(job=job()), at(60),
     Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("desired-changed-job-pending-cancels",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op()),
     obs(job=job(state=JobPhase.PENDING)), at(60), Phase.POWERING_ON, "ActionCancelled",
     cancel("startup")),
    ("desired-changed-job-never-created-cancels",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op()), obs(), at(5),
     Phase.POWERING_ON, "ActionCancelled", cancel("startup")),
    ("after-cancel-waits-until-the-job-is-gone",
     machine(Phase.POWERING_ON, OFF, gen=6, reason="ActionCancelled", operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.PENDING)), at(6), Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("after-cancel-acts-on-the-new-intent",
     machine(Phase.POWERING_ON, OFF, gen=6, reason="ActionCancelled", operation=op(result=FAILED)),
     obs(), at(6), Phase.POWERING_OFF, "PowerOffRequested",
     start("shutdown", 6, 1, "PowerOffRequested")),
    ("failed-in-status-but-job-active-waits",
     machine(Phase.POWERING_ON, ON, operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.PENDING)), at(600), Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("desired-changed-job-finished-boots-then-acts",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(60),
     Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
    ("retry-waits-for-backoff",
     machine(Phase.POWERING_ON, ON, reason="RetryScheduled", operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.FAILED)), at(10),
     Phase.POWERING_ON, "RetryScheduled", WAIT_JOB),
    ("retry-starts-next-attempt-after-backoff",
     machine(Phase.POWERING_ON, ON, reason="RetryScheduled", operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.FAILED)), at(30),
     Phase.POWERING_ON, "Retrying", start("startup", 5, 2, "Retrying")),
    ("retry-abandoned-when-desired-changes",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.FAILED)), at(10),
     Phase.POWERING_OFF, "PowerOffRequested", start("shutdown", 6, 1, "PowerOffRequested")),
    ("retry-abandoned-node-up-drains",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op(result=FAILED)),
     obs(job=job(state=JobPhase.FAILED), **READY_NODE), at(10),
     Phase.DRAINING, "PowerOffRequested", drain_start("PowerOffRequested")),
    ("max-retries-lowered-while-waiting",
     machine(Phase.POWERING_ON, ON, max_retries=1, operation=op(attempt=2, result=FAILED)),
     obs(), at(10), Phase.FAILED, "RetriesExhausted",
     ["ReleaseLease", "Event:Warning:RetriesExhausted"]),
    ("no-operation-in-status-starts-one", machine(Phase.POWERING_ON, ON), obs(), at(10),
     Phase.POWERING_ON, "PowerOnRequested", START_ON),
    ("succeeded-in-status-finishes-the-step",
     machine(Phase.POWERING_ON, ON, operation=op(result=SUCCEEDED, power_state=ON)), obs(),
     at(10), Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
    ("provision-succeeded-boots",
     machine(Phase.PROVISIONING, ON, ephemeral=True, operation=op(PROVISION)),
     obs(job=job(PROVISION, state=JobPhase.SUCCEEDED, power_state=ON)), at(60),
     Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
]

ADOPTION_ROWS: list[Row] = [
    ("restart-adopts-running-startup-no-new-job", machine(Phase.OFF, ON), obs(job=job()),
     at(60), Phase.POWERING_ON, "JobAdopted", [LEASE, "Event:Normal:JobAdopted", "Requeue"]),
    ("unknown-adopts-running-shutdown", machine(Phase.UNKNOWN, OFF, phase_since=None),
     obs(job=job(SHUTDOWN, state=JobPhase.PENDING)), at(60),
     Phase.POWERING_OFF, "JobAdopted", [LEASE, "Event:Normal:JobAdopted", "Requeue"]),
    ("foreign-running-job-is-followed-not-duplicated",
     machine(Phase.READY, OFF, gen=6, operation=op(result=SUCCEEDED)),
     obs(job=job(SHUTDOWN, gen=6), **READY_NODE), at(60),
     Phase.POWERING_OFF, "JobAdopted", [LEASE, "Event:Normal:JobAdopted", "Requeue"]),
    ("healthcheck-job-is-not-a-power-command", machine(Phase.OFF, OFF),
     obs(job=job(Action.HEALTHCHECK)), at(60), Phase.OFF, "ObservedOff", []),
    ("restart-after-crash-before-status-reuses-the-name", machine(Phase.OFF, ON),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(60),
     Phase.POWERING_ON, "PowerOnRequested", START_ON),
]

BOOTING_ROWS: list[Row] = [
    ("node-ready-registers",
     machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)),
     obs(node_exists=True, node_ready=True), at(100), Phase.READY, "NodeRegistered", REGISTERED),
    ("waits-for-registration", machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)),
     obs(), at(100), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Registered=False:WaitingForNode", "Requeue"]),
    ("registered-but-not-ready-waits",
     machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)), obs(node_exists=True),
     at(100), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Registered=False:NodeNotReady", "Requeue"]),
    ("timeout-counts-from-power-on-not-phase",
     machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED, finished=at(100))), obs(),
     at(650), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Registered=False:WaitingForNode", "Requeue"]),
    ("never-registers-retries", machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)),
     obs(), at(601), Phase.POWERING_ON, "RetryScheduled",
     retry("RegistrationTimeout", extra=("Condition:Registered=False:RegistrationTimeout",))),
    ("never-registers-retries-exhausted",
     machine(Phase.BOOTING, ON, operation=op(attempt=4, result=SUCCEEDED)), obs(), at(601),
     Phase.FAILED, "RetriesExhausted",
     exhausted("RegistrationTimeout",
               extra=("Condition:Registered=False:RegistrationTimeout",))),
    # An Ephemeral clone that never joins is deprovisioned before the machine is Failed.
    ("ephemeral-never-joins-deprovisions",
     machine(Phase.BOOTING, ON, ephemeral=True,
             operation=op(PROVISION, attempt=4, result=SUCCEEDED)),
     obs(), at(601), Phase.DEPROVISIONING, "RegistrationTimeout",
     start("deprovision", 5, 1, "RegistrationTimeout",
           "Condition:Registered=False:RegistrationTimeout",
           "Condition:PowerActionSucceeded=False:RegistrationTimeout")),
    ("never-joined-clone-deprovision-not-cancelled",
     machine(Phase.DEPROVISIONING, ON, ephemeral=True,
             operation=op(DEPROVISION, started=at(601))),
     obs(), at(602), Phase.DEPROVISIONING, "WaitingForJob",
     [LEASE, "StartJob:deprovision:g5:a1", "Requeue"]),
    ("never-joined-clone-deprovision-runs",
     machine(Phase.DEPROVISIONING, ON, ephemeral=True, operation=op(DEPROVISION)),
     obs(job=job(DEPROVISION)), at(610), Phase.DEPROVISIONING, "WaitingForJob", WAIT_JOB),
    ("never-joined-clone-deprovisioned-is-failed",
     machine(Phase.DEPROVISIONING, ON, ephemeral=True, operation=op(DEPROVISION)),
     obs(job=job(DEPROVISION, state=JobPhase.SUCCEEDED, power_state=OFF), node_exists=True),
     at(620), Phase.FAILED, "RegistrationTimeout",
     ["DeleteCoreNode", "ReleaseLease", "Event:Warning:RetriesExhausted"]),
    ("never-joined-clone-failed-stays-failed",
     machine(Phase.FAILED, ON, ephemeral=True, reason="RegistrationTimeout",
             operation=op(DEPROVISION, result=SUCCEEDED)),
     obs(), at(700), Phase.FAILED, "RegistrationTimeout", []),
    ("desired-off-during-never-joined-deprovision-ends-off",
     machine(Phase.DEPROVISIONING, OFF, gen=6, ephemeral=True, operation=op(DEPROVISION)),
     obs(job=job(DEPROVISION, state=JobPhase.SUCCEEDED, power_state=OFF)), at(620),
     Phase.OFF, "JobSucceeded", POWERED_OFF),
    ("desired-off-while-booting-drains",
     machine(Phase.BOOTING, OFF, gen=6, operation=op(result=SUCCEEDED)), obs(**READY_NODE),
     at(100), Phase.DRAINING, "PowerOffRequested", drain_start("PowerOffRequested")),
    ("desired-off-before-registration-powers-off",
     machine(Phase.BOOTING, OFF, gen=6, operation=op(result=SUCCEEDED)), obs(), at(100),
     Phase.POWERING_OFF, "PowerOffRequested", start("shutdown", 6, 1, "PowerOffRequested")),
]

READY_ROWS: list[Row] = [
    ("steady", machine(Phase.READY, ON, reason="NodeRegistered"), obs(**READY_NODE), at(60),
     Phase.READY, "NodeRegistered", []),
    ("reapplies-missing-metadata", machine(Phase.READY, ON, reason="NodeRegistered"),
     obs(node_exists=True, node_ready=True), at(60),
     Phase.READY, "NodeRegistered", ["ApplyNodeMetadata"]),
    ("desired-off-cordons-and-drains", machine(Phase.READY, OFF, gen=6), obs(**READY_NODE),
     at(60), Phase.DRAINING, "PowerOffRequested", drain_start("PowerOffRequested")),
    ("desired-off-already-cordoned", machine(Phase.READY, OFF, gen=6),
     obs(node_cordoned=True, **READY_NODE), at(60),
     Phase.DRAINING, "PowerOffRequested", drain_start("PowerOffRequested", cordon=False)),
    ("desired-off-node-gone-powers-off", machine(Phase.READY, OFF, gen=6), obs(), at(60),
     Phase.POWERING_OFF, "PowerOffRequested", start("shutdown", 6, 1, "PowerOffRequested")),
    ("desired-off-ephemeral-deprovisions", machine(Phase.READY, OFF, gen=6, ephemeral=True),
     obs(), at(60), Phase.DEPROVISIONING, "PowerOffRequested",
     start("deprovision", 6, 1, "PowerOffRequested")),
    ("node-not-ready-warns", machine(Phase.READY, ON, reason="NodeRegistered"),
     obs(node_exists=True), at(60), Phase.READY, "NodeNotReady",
     ["Condition:Registered=False:NodeNotReady", "Event:Warning:NodeNotReady"]),
    ("node-not-ready-warns-once", machine(Phase.READY, ON, reason="NodeNotReady"), obs(),
     at(60), Phase.READY, "NodeNotReady", ["Condition:Registered=False:NodeNotReady"]),
    ("node-back", machine(Phase.READY, ON, reason="NodeNotReady"), obs(**READY_NODE), at(60),
     Phase.READY, "NodeRegistered",
     ["Condition:Registered=True:NodeRegistered", "Condition:Drifted=False:DriftResolved",
      "Event:Normal:NodeRegistered"]),
    ("health-off-is-drift", machine(Phase.READY, ON),
     obs(power_state=OFF, power_state_observed_at=at(30), **READY_NODE), at(60),
     Phase.READY, "DriftDetected",
     ["Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected"]),
    ("health-off-corrected-with-a-new-attempt",
     machine(Phase.READY, ON, correct_drift=True, operation=op(result=SUCCEEDED)),
     obs(power_state=OFF, power_state_observed_at=at(30)), at(60),
     Phase.POWERING_ON, "DriftCorrection",
     start("startup", 5, 2, "DriftCorrection",
           "Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected")),
    ("lease-episode-reason-is-replaced",
     machine(Phase.READY, ON, reason="LeaseHeldElsewhere"), obs(**READY_NODE), at(60),
     Phase.READY, "NodeRegistered", []),
]

PDB = DrainStatus(2, blocked_by="shop/web-pdb", blocked_message="needs 2 healthy pods")
DRAIN_KEEP = [LEASE, "Drain"]

DRAINING_ROWS: list[Row] = [
    ("progressing", machine(Phase.DRAINING, OFF, gen=6),
     obs(node_cordoned=True, drain=DrainStatus(3), **READY_NODE), at(60),
     Phase.DRAINING, "Draining", [*DRAIN_KEEP, "Condition:Draining=True:Draining", "Requeue"]),
    ("re-cordons-if-uncordoned-by-someone", machine(Phase.DRAINING, OFF, gen=6),
     obs(drain=DrainStatus(3), **READY_NODE), at(60), Phase.DRAINING, "Draining",
     [LEASE, "Cordon", "Drain", "Condition:Draining=True:Draining", "Requeue"]),
    ("not-measured-yet", machine(Phase.DRAINING, OFF, gen=6),
     obs(node_cordoned=True, **READY_NODE), at(60), Phase.DRAINING, "Draining",
     [*DRAIN_KEEP, "Condition:Draining=True:Draining", "Requeue"]),
    ("blocked-by-pdb", machine(Phase.DRAINING, OFF, gen=6, reason="Draining"),
     obs(node_cordoned=True, drain=PDB, **READY_NODE), at(60), Phase.DRAINING, "DrainBlocked",
     [*DRAIN_KEEP, "Condition:Draining=False:DrainBlocked", "Event:Warning:DrainBlocked",
      "Requeue"]),
    ("blocked-by-pdb-warns-once", machine(Phase.DRAINING, OFF, gen=6, reason="DrainBlocked"),
     obs(node_cordoned=True, drain=PDB, **READY_NODE), at(120), Phase.DRAINING, "DrainBlocked",
     [*DRAIN_KEEP, "Condition:Draining=False:DrainBlocked", "Requeue"]),
    ("timeout-never-forces", machine(Phase.DRAINING, OFF, gen=6, reason="DrainBlocked"),
     obs(node_cordoned=True, drain=PDB, **READY_NODE), at(900), Phase.DRAINING, "DrainTimeout",
     [*DRAIN_KEEP, "Condition:Draining=False:DrainTimeout", "Event:Warning:DrainTimeout",
      "Requeue"]),
    ("drained-powers-off", machine(Phase.DRAINING, OFF, gen=6),
     obs(node_cordoned=True, drain=DrainStatus(0), **READY_NODE), at(60),
     Phase.POWERING_OFF, "Drained",
     start("shutdown", 6, 1, "Drained", "Condition:Draining=False:Drained")),
    ("node-gone-powers-off", machine(Phase.DRAINING, OFF, gen=6), obs(drain=DrainStatus(3)),
     at(60), Phase.POWERING_OFF, "Drained",
     start("shutdown", 6, 1, "Drained", "Condition:Draining=False:Drained")),
    ("ephemeral-drained-deprovisions", machine(Phase.DRAINING, OFF, gen=6, ephemeral=True),
     obs(drain=DrainStatus(0), **READY_NODE), at(60), Phase.DEPROVISIONING, "Drained",
     start("deprovision", 6, 1, "Drained", "Condition:Draining=False:Drained")),
    ("desired-on-cancels-drain", machine(Phase.DRAINING, ON, gen=7),
     obs(node_cordoned=True, drain=PDB, **READY_NODE), at(60), Phase.READY, "DrainCancelled",
     ["Uncordon", "Condition:Draining=False:DrainCancelled", "ReleaseLease",
      "Event:Normal:DrainCancelled"]),
]

OFF_OP = op(SHUTDOWN, gen=6)
POWERING_OFF_ROWS: list[Row] = [
    ("confirmed-off-deletes-core-node", machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF),
         node_exists=True), at(60), Phase.OFF, "JobSucceeded", ["DeleteCoreNode", *POWERED_OFF]),
    ("confirmed-off-keeps-core-node-by-policy",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP,
             node_removal_policy=NodeRemovalPolicy.KEEP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF),
         node_exists=True), at(60), Phase.OFF, "JobSucceeded", POWERED_OFF),
    ("confirmed-off-core-node-already-gone",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF)), at(60),
     Phase.OFF, "JobSucceeded", POWERED_OFF),
    ("deprovisioned-vm-node-always-deleted",
     machine(Phase.DEPROVISIONING, OFF, gen=6, ephemeral=True,
             node_removal_policy=NodeRemovalPolicy.KEEP, operation=op(DEPROVISION, gen=6)),
     obs(job=job(DEPROVISION, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF),
         node_exists=True), at(60), Phase.OFF, "JobSucceeded", ["DeleteCoreNode", *POWERED_OFF]),
    ("still-on-after-shutdown-is-a-mismatch",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=ON)), at(60),
     Phase.POWERING_OFF, "RetryScheduled", retry("PowerStateMismatch", drifted=True)),
    ("unconfirmed-power-off-is-a-mismatch",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED)), at(60),
     Phase.POWERING_OFF, "RetryScheduled", retry("PowerStateMismatch", drifted=True)),
    ("power-unknown-after-shutdown-is-a-mismatch",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED,
                 power_state=ObservedPowerState.UNKNOWN)),
     at(60), Phase.POWERING_OFF, "RetryScheduled", retry("PowerStateMismatch", drifted=True)),
    ("shutdown-failed-retries", machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.FAILED)), at(60),
     Phase.POWERING_OFF, "RetryScheduled", retry("JobFailed")),
    ("desired-on-mid-shutdown-lets-it-finish",
     machine(Phase.POWERING_OFF, ON, gen=7, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6)), at(60), Phase.POWERING_OFF, "WaitingForJob", WAIT_JOB),
    ("desired-on-before-shutdown-pod-starts-cancels",
     machine(Phase.POWERING_OFF, ON, gen=7, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.PENDING), **READY_NODE), at(60),
     Phase.POWERING_OFF, "ActionCancelled", cancel("shutdown", 6)),
    ("after-cancel-node-up-uncordons",
     machine(Phase.POWERING_OFF, ON, gen=7, reason="ActionCancelled",
             operation=op(SHUTDOWN, gen=6, result=FAILED)),
     obs(**READY_NODE), at(61), Phase.READY, "NodeRegistered", REGISTERED),
    ("after-cancel-node-gone-powers-on",
     machine(Phase.POWERING_OFF, ON, gen=7, reason="ActionCancelled",
             operation=op(SHUTDOWN, gen=6, result=FAILED)),
     obs(), at(61), Phase.POWERING_ON, "PowerOnRequested",
     start("startup", 7, 1, "PowerOnRequested")),
    ("desired-on-after-shutdown-finished-goes-off-then-on",
     machine(Phase.POWERING_OFF, ON, gen=7, operation=OFF_OP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF)), at(60),
     Phase.OFF, "JobSucceeded", [*POWERED_OFF, "Requeue"]),
]

FAILED_OP = op(attempt=4, result=FAILED, message="startup playbook failed")
FAILED_ROWS: list[Row] = [
    ("stays-failed", machine(Phase.FAILED, ON, reason="RetriesExhausted", operation=FAILED_OP),
     obs(), at(60), Phase.FAILED, "RetriesExhausted", []),
    ("releases-own-lease", machine(Phase.FAILED, ON, reason="RetriesExhausted",
                                   operation=FAILED_OP),
     obs(lease=LeaseState.HELD_BY_ME), at(60), Phase.FAILED, "RetriesExhausted",
     ["ReleaseLease"]),
    ("same-generation-desired-flip-is-not-a-new-intent",
     machine(Phase.FAILED, OFF, reason="RetriesExhausted", operation=FAILED_OP), obs(), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("new-generation-retries-from-scratch",
     machine(Phase.FAILED, ON, gen=6, operation=FAILED_OP), obs(), at(60),
     Phase.POWERING_ON, "PowerOnRequested", start("startup", 6, 1, "PowerOnRequested")),
    ("new-generation-off-powers-off", machine(Phase.FAILED, OFF, gen=6, operation=FAILED_OP),
     obs(), at(60), Phase.POWERING_OFF, "PowerOffRequested",
     start("shutdown", 6, 1, "PowerOffRequested")),
    ("new-generation-off-node-up-drains",
     machine(Phase.FAILED, OFF, gen=6, operation=FAILED_OP), obs(**READY_NODE), at(60),
     Phase.DRAINING, "PowerOffRequested", drain_start("PowerOffRequested")),
    ("late-registration-recovers", machine(Phase.FAILED, ON, operation=FAILED_OP),
     obs(**READY_NODE), at(60), Phase.READY, "NodeRegistered", REGISTERED),
]

#: The last attempt's pod could not start: its Job was deleted (foreground, so it lingers).
STUCK_OP = op(attempt=4, result=FAILED, message="startup Job (attempt 4) failed: FailedMount")
GAVE_UP = machine(Phase.FAILED, ON, reason="RetriesExhausted", operation=STUCK_OP)
RETRY_DUE = machine(Phase.POWERING_ON, ON, reason="RetryScheduled", operation=op(result=FAILED))

# Every way the cache can show the Job of an attempt that has ended: being deleted, with or
# without its pod (pending or running); not yet marked deleted but podless; an earlier attempt.
# None of them is adopted, and a Failed machine starts nothing.
DYING_JOB_ROWS: list[Row] = [
    ("failed-ignores-its-last-job-being-deleted-podless", GAVE_UP,
     obs(job=job(attempt=4, state=JobPhase.PENDING, deleting=True)), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-ignores-its-last-job-being-deleted-pod-running", GAVE_UP,
     obs(job=job(attempt=4, state=JobPhase.RUNNING, deleting=True)), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-ignores-its-last-job-before-the-deletion-shows", GAVE_UP,
     obs(job=job(attempt=4, state=JobPhase.PENDING)), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-ignores-an-earlier-attempts-job", GAVE_UP,
     obs(job=job(attempt=2, state=JobPhase.PENDING)), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-ignores-an-earlier-intents-job",
     replace(GAVE_UP, operation=replace(STUCK_OP, intent_generation=6), intent_generation=6),
     obs(job=job(SHUTDOWN, gen=5, state=JobPhase.RUNNING)), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-and-job-gone-starts-nothing", GAVE_UP, obs(), at(60),
     Phase.FAILED, "RetriesExhausted", []),
    ("failed-still-follows-a-newer-intents-job", GAVE_UP,
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.RUNNING)), at(60),
     Phase.POWERING_OFF, "JobAdopted", [LEASE, "Event:Normal:JobAdopted", "Requeue"]),
    ("retry-waits-for-the-failed-attempts-job-to-go",
     RETRY_DUE, obs(job=job(state=JobPhase.PENDING, deleting=True)), at(45),
     Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("deleted-running-attempt-fails-and-is-not-recreated",
     machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.RUNNING, deleting=True)), at(30),
     Phase.POWERING_ON, "RetryScheduled", retry("JobLost")),
    ("deleted-last-attempt-gives-up",
     machine(Phase.POWERING_ON, ON, operation=op(attempt=4)),
     obs(job=job(attempt=4, state=JobPhase.PENDING, deleting=True)), at(30),
     Phase.FAILED, "RetriesExhausted", exhausted("JobLost")),
    ("deleted-attempt-with-a-new-intent-is-cancelled",
     machine(Phase.POWERING_ON, OFF, gen=6, operation=op()),
     obs(job=job(state=JobPhase.PENDING, deleting=True)), at(30),
     Phase.POWERING_ON, "ActionCancelled", cancel("startup")),
    ("finished-job-being-deleted-still-counts",
     machine(Phase.POWERING_ON, ON, operation=op()),
     obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON, deleting=True)), at(30),
     Phase.BOOTING, "JobSucceeded",
     [LEASE, "Condition:PowerActionSucceeded=True:JobSucceeded", "Event:Normal:JobSucceeded",
      "Requeue"]),
]

UNREGISTERED = {"node_exists": True, "node_unregistered": True}
REMOVED = ["DeleteCoreNode", "Event:Normal:CoreNodeRemoved"]

# A core Node made before power-on that no kubelet registered goes when the machine ends
# Failed or Off, and only then.
UNREGISTERED_NODE_ROWS: list[Row] = [
    ("last-attempt-stuck-fails-and-removes-the-node",
     machine(Phase.POWERING_ON, ON, operation=op(attempt=4)),
     obs(job=job(attempt=4, state=JobPhase.STUCK, message="FailedMount"), **UNREGISTERED),
     at(30), Phase.FAILED, "RetriesExhausted",
     exhausted("PodStartFailed", extra=("DeleteJob:startup:g5:a4",)) + REMOVED),
    ("failed-removes-a-leftover-node", GAVE_UP, obs(**UNREGISTERED), at(60),
     Phase.FAILED, "RetriesExhausted", REMOVED),
    ("off-removes-a-leftover-node", machine(Phase.OFF, OFF, reason="ObservedOff"),
     obs(**UNREGISTERED), at(60), Phase.OFF, "ObservedOff", REMOVED),
    ("cancelled-power-on-powered-off-removes-the-node",
     machine(Phase.POWERING_OFF, OFF, gen=6, operation=op(SHUTDOWN, gen=6),
             node_removal_policy=NodeRemovalPolicy.KEEP),
     obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=OFF), **UNREGISTERED),
     at(60), Phase.OFF, "JobSucceeded", [*POWERED_OFF, *REMOVED]),
    ("powering-on-keeps-the-node", machine(Phase.OFF, ON, reason="ObservedOff"),
     obs(**UNREGISTERED), at(60), Phase.POWERING_ON, "PowerOnRequested", START_ON),
    ("booting-keeps-the-node", machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)),
     obs(**UNREGISTERED), at(100), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Registered=False:NodeNotReady", "Requeue"]),
    ("retry-pending-keeps-the-node", RETRY_DUE, obs(**UNREGISTERED), at(10),
     Phase.POWERING_ON, "RetryScheduled", [LEASE, "Requeue"]),
]


HEALTH_ON = {"power_state": ON, "power_state_observed_at": at(10)}
HEALTH_OFF = {"power_state": OFF, "power_state_observed_at": at(10)}
NOTICED = ["Condition:Drifted=True:DriftDetected", "Event:Warning:DriftDetected"]
CORRECT = {"correct_drift": True, "max_corrections": 2, "correction_window_seconds": 3600}
SHUT = op(SHUTDOWN, result=SUCCEEDED)

DRIFT_POLICY_ROWS: list[Row] = [
    ("correction-within-the-limit",
     machine(Phase.OFF, OFF, operation=SHUT, drift_corrections=(at(-7200), at(-60)), **CORRECT),
     obs(**HEALTH_ON), at(20), Phase.POWERING_OFF, "DriftCorrection",
     start("shutdown", 5, 2, "DriftCorrection", *NOTICED)),
    ("corrections-exhausted-fails",
     machine(Phase.OFF, OFF, operation=SHUT, drift_corrections=(at(-600), at(-60)), **CORRECT),
     obs(**HEALTH_ON), at(20), Phase.FAILED, "DriftCorrectionsExhausted",
     [*NOTICED, "Event:Warning:DriftCorrectionsExhausted"]),
    ("corrections-exhausted-ready-fails",
     machine(Phase.READY, ON, operation=op(result=SUCCEEDED),
             drift_corrections=(at(-600), at(-60)), **CORRECT),
     obs(**HEALTH_OFF), at(20), Phase.FAILED, "DriftCorrectionsExhausted",
     [*NOTICED, "Event:Warning:DriftCorrectionsExhausted"]),
    ("exhausted-stays-failed",
     machine(Phase.FAILED, OFF, operation=SHUT, reason="DriftCorrectionsExhausted", **CORRECT),
     obs(**HEALTH_ON), at(20), Phase.FAILED, "DriftCorrectionsExhausted", []),
    ("adopt-found-on-sets-desired-on", machine(Phase.OFF, OFF, adopt_drift=True),
     obs(**HEALTH_ON), at(20), Phase.OFF, "DriftAdopted",
     [*NOTICED, "Event:Normal:DriftAdopted", "SetDesired:On", "Requeue"]),
    ("adopt-node-ready-sets-desired-on", machine(Phase.OFF, OFF, adopt_drift=True),
     obs(**READY_NODE), at(600), Phase.OFF, "DriftAdopted",
     [*NOTICED, "Event:Normal:DriftAdopted", "SetDesired:On", "Requeue"]),
    ("adopted-on-boots-without-a-job",
     machine(Phase.OFF, ON, gen=6, reason="DriftAdopted", operation=SHUT, adopt_drift=True),
     obs(**HEALTH_ON), at(30), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Drifted=False:DriftAdopted", "Event:Normal:WaitingForNode", "Requeue"]),
    ("adopted-on-node-ready-is-ready",
     machine(Phase.OFF, ON, gen=6, reason="DriftAdopted", adopt_drift=True),
     obs(**READY_NODE), at(30), Phase.READY, "NodeRegistered", REGISTERED),
    ("adopt-found-off-sets-desired-off", machine(Phase.READY, ON, adopt_drift=True),
     obs(**HEALTH_OFF, **READY_NODE), at(20), Phase.READY, "DriftAdopted",
     [*NOTICED, "Event:Normal:DriftAdopted", "SetDesired:Off", "Requeue"]),
    ("adopted-off-is-off-without-a-job",
     machine(Phase.READY, OFF, gen=6, reason="DriftAdopted", adopt_drift=True),
     obs(**HEALTH_OFF, **READY_NODE), at(30), Phase.OFF, "ObservedOff",
     ["DeleteCoreNode", "Condition:Registered=False:ObservedOff",
      "Condition:Drifted=False:DriftAdopted", "Event:Normal:ObservedOff"]),
    ("adopted-off-clone-is-deprovisioned",
     machine(Phase.READY, OFF, gen=6, reason="DriftAdopted", adopt_drift=True, ephemeral=True),
     obs(**HEALTH_OFF), at(30), Phase.DEPROVISIONING, "PowerOffRequested",
     start("deprovision", 6, 1, "PowerOffRequested")),
    ("failed-then-adopt-sets-desired-on",
     machine(Phase.FAILED, OFF, operation=SHUT, reason="DriftCorrectionsExhausted",
             adopt_drift=True),
     obs(**HEALTH_ON), at(20), Phase.FAILED, "DriftAdopted",
     [*NOTICED, "Event:Normal:DriftAdopted", "SetDesired:On", "Requeue"]),
    ("failed-adopted-boots-without-a-job",
     machine(Phase.FAILED, ON, gen=6, operation=SHUT, reason="DriftAdopted", adopt_drift=True),
     obs(**HEALTH_ON), at(30), Phase.BOOTING, "WaitingForNode",
     [LEASE, "Condition:Drifted=False:DriftAdopted", "Event:Normal:WaitingForNode", "Requeue"]),
    # The pass right after the DriftAdopted status write may still read the old spec: the
    # adoption waits for its own patch (sent again) instead of undoing itself.
    ("failed-adopted-stale-spec-waits",
     machine(Phase.FAILED, OFF, operation=SHUT, reason="DriftAdopted", adopt_drift=True,
             adopting=ON),
     obs(**HEALTH_ON), at(21), Phase.FAILED, "DriftAdopted", ["SetDesired:On", "Requeue"]),
    ("off-adopted-stale-spec-waits",
     machine(Phase.OFF, OFF, reason="DriftAdopted", adopt_drift=True, adopting=ON),
     obs(**HEALTH_ON), at(21), Phase.OFF, "DriftAdopted", ["SetDesired:On", "Requeue"]),
    ("ready-adopted-stale-spec-waits",
     machine(Phase.READY, ON, reason="DriftAdopted", adopt_drift=True, adopting=OFF),
     obs(**HEALTH_OFF, **READY_NODE), at(21), Phase.READY, "DriftAdopted",
     ["SetDesired:Off", "Requeue"]),
]

UNKNOWN_ROWS: list[Row] = [
    ("nothing-seen-is-off", machine(Phase.UNKNOWN, OFF, phase_since=None), obs(), at(0),
     Phase.OFF, "ObservedOff", []),
    ("nothing-seen-desired-on-powers-on", machine(Phase.UNKNOWN, ON, phase_since=None), obs(),
     at(0), Phase.POWERING_ON, "PowerOnRequested", START_ON),
    ("registered-desired-on-adopts-node", machine(Phase.UNKNOWN, ON, phase_since=None),
     obs(node_exists=True, node_ready=True), at(0), Phase.READY, "NodeRegistered", REGISTERED),
    ("registered-desired-off-drains", machine(Phase.UNKNOWN, OFF, phase_since=None),
     obs(**READY_NODE), at(0), Phase.DRAINING, "PowerOffRequested",
     drain_start("PowerOffRequested")),
    ("health-on-waits-for-registration", machine(Phase.UNKNOWN, ON, phase_since=None),
     obs(power_state=ON, power_state_observed_at=at(-5)), at(0), Phase.BOOTING,
     "WaitingForNode", [LEASE, "Condition:Registered=False:WaitingForNode", "Requeue"]),
    ("running-operation-resumes", machine(Phase.UNKNOWN, ON, phase_since=None, operation=op()),
     obs(job=job()), at(60), Phase.POWERING_ON, "WaitingForJob", WAIT_JOB),
    ("running-operation-job-missing-recreated-same-name",
     machine(Phase.UNKNOWN, ON, phase_since=None, operation=op()), obs(), at(60),
     Phase.POWERING_ON, "WaitingForJob", [LEASE, PREPARE, "StartJob:startup:g5:a1", "Requeue"]),
]
# fmt: on


def rows(group: list[Row]) -> list[Any]:
    return [pytest.param(*row[1:], id=row[0]) for row in group]


def check(
    m: MachineState,
    o: Observations,
    now: datetime,
    phase: Phase,
    reason: str,
    effects: list[str],
) -> Decision:
    decision = decide(m, o, now)
    assert (decision.phase, decision.reason, summary(decision)) == (phase, reason, effects)
    assert decision.message
    return decision


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(OFF_ROWS))
def test_off(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(POWERING_ON_ROWS))
def test_powering_on(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(ADOPTION_ROWS))
def test_readoption(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(BOOTING_ROWS))
def test_booting(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(READY_ROWS))
def test_ready(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(DRAINING_ROWS))
def test_draining(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(POWERING_OFF_ROWS))
def test_powering_off(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(DRIFT_POLICY_ROWS))
def test_drift_policy(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


def test_corrections_are_counted_within_the_window() -> None:
    m = machine(Phase.OFF, OFF, operation=SHUT, drift_corrections=(at(-7200), at(-60)), **CORRECT)
    decision = decide(m, obs(**HEALTH_ON), at(20))
    # The one older than the window (3600 s) is dropped; this correction is added.
    assert decision.drift_corrections == (at(-60), at(20))
    assert "correction 2 of 2" in decision.message
    failed = decide(
        replace(m, drift_corrections=decision.drift_corrections), obs(**HEALTH_ON), at(30)
    )
    assert failed.phase is Phase.FAILED
    assert "already corrected 2 times within 3600s (maxCorrections 2)" in failed.message
    assert "driftPolicy to Adopt" in failed.message


def test_a_new_intent_after_failure_forgets_the_corrections() -> None:
    m = machine(
        Phase.FAILED,
        OFF,
        gen=6,
        operation=SHUT,
        reason="DriftCorrectionsExhausted",
        drift_corrections=(at(-60), at(-30)),
        **CORRECT,
    )
    assert decide(m, obs(), at(20)).drift_corrections == ()


def test_adopted_booting_times_out_from_adoption_not_from_the_old_power_off() -> None:
    # The last operation is the power-off of long ago: the boot timeout counts from adoption.
    old_off = op(SHUTDOWN, result=SUCCEEDED, started=at(-9000), finished=at(-9000))
    m = machine(Phase.BOOTING, ON, gen=6, operation=old_off, phase_since=at(0))
    decision = decide(m, obs(), at(30))
    assert (decision.phase, decision.reason) == (Phase.BOOTING, "WaitingForNode")


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(FAILED_ROWS))
def test_failed(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(DYING_JOB_ROWS))
def test_dying_job(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


@pytest.mark.parametrize(
    ("m", "o", "now", "phase", "reason", "effects"), rows(UNREGISTERED_NODE_ROWS)
)
def test_unregistered_node(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


def test_last_attempt_that_cannot_start_is_never_started_again() -> None:
    """The flap of issue 31 replayed: the last attempt's pod cannot mount its Secret; its Job
    is deleted and lingers in the cache (deleting, podless, then not yet marked) and is then
    gone. Each pass is fed the previous pass's status: Failed throughout, no Job started."""
    m = machine(Phase.POWERING_ON, ON, operation=op(attempt=4))
    caches = [
        job(attempt=4, state=JobPhase.STUCK, message="FailedMount: secret not found"),
        job(attempt=4, state=JobPhase.PENDING, deleting=True),
        job(attempt=4, state=JobPhase.PENDING),
        None,
        None,
    ]
    phases, started = [], []
    for seconds, seen in enumerate(caches):
        decision = decide(m, obs(job=seen), at(30 + seconds))
        phases.append(decision.phase)
        started += [e for e in decision.effects if isinstance(e, StartJob)]
        m = replace(
            m,
            phase=decision.phase,
            reason=decision.reason,
            message=decision.message,
            operation=decision.operation,
            phase_since=decision.phase_since,
        )
    assert phases == [Phase.FAILED] * len(caches)
    assert started == []
    assert m.operation is not None and m.operation.result is FAILED


def test_failed_message_says_the_unregistered_node_was_removed_and_ends_with_the_failure() -> None:
    m = machine(Phase.POWERING_ON, ON, operation=op(attempt=4))
    seen = obs(job=job(attempt=4, state=JobPhase.STUCK, message="FailedMount"), **UNREGISTERED)
    decision = decide(m, seen, at(30))
    assert decision.message.startswith("removed core Node worker-1, which Lights-Out made")
    assert decision.message.endswith("(gave up after 4 attempts)")
    assert any(isinstance(e, DeleteCoreNode) and e.unregistered_only for e in decision.effects)


@pytest.mark.parametrize(("m", "o", "now", "phase", "reason", "effects"), rows(UNKNOWN_ROWS))
def test_unknown(m: Any, o: Any, now: Any, phase: Any, reason: Any, effects: Any) -> None:
    check(m, o, now, phase, reason, effects)


# --- messages a person reads -------------------------------------------------------------


def test_failed_job_message_quotes_the_playbook() -> None:
    decision = decide(
        machine(Phase.POWERING_ON, ON, operation=op(attempt=4)),
        obs(
            job=job(
                attempt=4,
                state=JobPhase.FAILED,
                failed_task="Power on through Redfish",
                message="HTTP 500 Internal Server Error",
            )
        ),
        at(60),
    )
    assert decision.phase is Phase.FAILED
    assert "Power on through Redfish" in decision.message
    assert "HTTP 500 Internal Server Error" in decision.message
    assert "gave up after 4 attempts" in decision.message
    assert decision.operation is not None
    assert decision.operation.result is FAILED
    assert decision.operation.failed_task == "Power on through Redfish"
    assert decision.operation.finished == at(60)


def test_retry_message_says_when_and_which_attempt() -> None:
    decision = decide(
        machine(Phase.POWERING_ON, ON, operation=op(attempt=2)),
        obs(job=job(attempt=2, state=JobPhase.FAILED, message="BMC unreachable")),
        at(60),
    )
    assert decision.reason == "RetryScheduled"
    assert "retrying in 60s (attempt 3 of 4)" in decision.message
    assert decision.requeue_after == 60


def test_drain_blocked_names_the_pdb() -> None:
    decision = decide(
        machine(Phase.DRAINING, OFF, gen=6),
        obs(node_cordoned=True, drain=PDB, **READY_NODE),
        at(60),
    )
    condition = next(e for e in decision.effects if isinstance(e, SetCondition))
    assert "shop/web-pdb" in condition.message
    assert "needs 2 healthy pods" in condition.message


def test_registration_timeout_names_the_node_and_timeout() -> None:
    decision = decide(machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)), obs(), at(601))
    assert "worker-1" in decision.message
    assert "600s" in decision.message


def test_power_state_mismatch_reports_what_was_seen() -> None:
    decision = decide(
        machine(Phase.POWERING_OFF, OFF, gen=6, operation=OFF_OP),
        obs(job=job(SHUTDOWN, gen=6, state=JobPhase.SUCCEEDED, power_state=ON)),
        at(60),
    )
    assert "reports power state On, expected Off" in decision.message
    assert decision.operation is not None
    assert decision.operation.power_state is ON


# --- status bookkeeping -------------------------------------------------------------------


def test_start_records_the_operation_it_starts() -> None:
    decision = decide(machine(Phase.OFF, ON), obs(), at(60))
    assert decision.operation == Operation(STARTUP, 5, 1, started=at(60))
    assert decision.attempts == 1
    assert decision.phase_since == at(60)


def test_phase_since_kept_while_phase_unchanged() -> None:
    decision = decide(machine(Phase.POWERING_ON, ON, operation=op()), obs(job=job()), at(60))
    assert decision.phase_since == T0


def test_job_success_records_result_and_power_state() -> None:
    decision = decide(
        machine(Phase.POWERING_ON, ON, operation=op()),
        obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON, message="powered on")),
        at(60),
    )
    assert decision.observed_power_state is ON
    assert decision.operation == replace(
        op(), result=SUCCEEDED, finished=at(60), power_state=ON, message=decision.message
    )


def test_provision_keeps_the_clone_the_playbook_reported() -> None:
    reported = {"power_state": "On", "driver": "proxmox", "changed": True, "vmid": 300}
    decision = decide(
        machine(Phase.PROVISIONING, ON, ephemeral=True, operation=op(PROVISION)),
        obs(job=job(PROVISION, state=JobPhase.SUCCEEDED, power_state=ON, values=reported)),
        at(60),
    )
    assert decision.phase is Phase.BOOTING
    assert decision.operation is not None
    assert decision.operation.values == reported


def test_failed_provision_still_records_the_clone() -> None:
    reported = {"power_state": "Unknown", "driver": "proxmox", "vmid": 300, "host": "pve2"}
    failed = job(PROVISION, state=JobPhase.FAILED, message="no quorum", values=reported)
    decision = decide(
        machine(Phase.PROVISIONING, ON, ephemeral=True, operation=op(PROVISION)),
        obs(job=failed),
        at(60),
    )
    assert decision.operation is not None
    assert decision.operation.result is FAILED
    assert decision.operation.values["vmid"] == 300
    # A later failure (registration timeout) keeps what the provision reported.
    later = decision.operation.finish(FAILED, at(90), "timeout")
    assert later.values == reported


def test_retry_backoff_doubles_and_caps() -> None:
    assert [retry_backoff(n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]
    assert retry_backoff(0) == 30


def test_booting_requeues_no_later_than_the_timeout() -> None:
    decision = decide(machine(Phase.BOOTING, ON, operation=op(result=SUCCEEDED)), obs(), at(595))
    assert decision.requeue_after == 5


# --- select_job ---------------------------------------------------------------------------


def test_select_job_prefers_an_active_power_job() -> None:
    old_running = job(gen=4)
    newer_done = job(SHUTDOWN, gen=5, state=JobPhase.SUCCEEDED)
    assert select_job([newer_done, old_running], op(SHUTDOWN, gen=5)) == old_running


def test_select_job_then_the_operation_job_then_the_newest() -> None:
    mine = job(gen=5, attempt=1, state=JobPhase.FAILED)
    newer = job(gen=5, attempt=2, state=JobPhase.FAILED)
    assert select_job([newer, mine], op(attempt=1)) == mine
    assert select_job([mine, newer], None) == newer
    assert select_job([], None) is None
    health = job(Action.HEALTHCHECK, gen=9)
    assert select_job([health, mine], op(attempt=1)) == mine


# --- invariants over the whole input space -------------------------------------------------

JOB_VARIANTS: list[ObservedJob | None] = [
    None,
    *(job(STARTUP, 5, 1, state, power_state=ON) for state in JobPhase),
    *(job(SHUTDOWN, 5, 1, state, power_state=OFF) for state in JobPhase),
    job(STARTUP, 5, 2, JobPhase.RUNNING),
]
OPERATION_VARIANTS: list[Operation | None] = [
    None,
    op(STARTUP),
    op(STARTUP, result=FAILED),
    op(STARTUP, result=SUCCEEDED),
    op(SHUTDOWN),
    op(SHUTDOWN, result=FAILED),
    op(STARTUP, attempt=4, result=FAILED),
]
NODE_VARIANTS: list[dict[str, Any]] = [
    {},
    {"node_exists": True},
    {"node_exists": True, "node_ready": True, "drain": DrainStatus(0)},
    {"node_exists": True, "node_ready": True, "drain": PDB, "node_cordoned": True},
]


def sweep() -> list[tuple[MachineState, Observations]]:
    cases = []
    for phase, desired, operation, found, node, lease in itertools.product(
        Phase, (ON, OFF), OPERATION_VARIANTS, JOB_VARIANTS, NODE_VARIANTS, LeaseState
    ):
        m = machine(phase, desired, operation=operation)
        cases.append((m, obs(job=found, lease=lease, **node)))
    return cases


SWEEP = sweep()


@pytest.mark.parametrize("when", [at(0), at(45), at(700), at(5000)])
def test_invariants_hold_for_every_input(when: datetime) -> None:
    for m, o in SWEEP:
        decision = decide(m, o, when)
        context = f"{m.phase}/{m.desired}/{m.operation}/{o}"
        assert decision == decide(m, o, when), context  # pure and deterministic
        assert decision.reason in set(Reason), context
        assert decision.message, context
        assert decision.phase_since is not None, context
        starts = [e for e in decision.effects if isinstance(e, StartJob)]
        assert len(starts) <= 1, context
        if o.lease is LeaseState.HELD_BY_OTHER:
            assert decision.effects == (Requeue(30.0),), context
            assert decision.phase is m.phase, context
            continue
        if o.job is not None and o.job.active and o.job.action.target is not None:
            # Never a second power command while one is in flight, whatever the status says.
            assert not starts, context
        if o.job is not None and o.job.state is JobPhase.RUNNING:
            assert not any(isinstance(e, DeleteJob) for e in decision.effects), context
        if starts:
            (start_job,) = starts
            kinds = [type(e) for e in decision.effects]
            assert kinds.index(AcquireLease) < kinds.index(StartJob), context
            assert decision.operation is not None, context
            recorded = decision.operation
            assert (recorded.action, recorded.intent_generation, recorded.attempt) == (
                start_job.action,
                start_job.generation,
                start_job.attempt,
            ), context
            assert decision.phase is not Phase.FAILED, context
        if decision.phase is Phase.FAILED:
            assert not starts, context


def test_sweep_is_large() -> None:
    # Guard against the sweep silently shrinking when an enum changes.
    assert len(SWEEP) > 10_000


# --- scenarios: decisions fed back into status, with a fake world ----------------------------


def persist(m: MachineState, d: Decision) -> MachineState:
    """What the handler writes back to status, as the next reconcile will read it."""
    return replace(
        m,
        phase=d.phase,
        phase_since=d.phase_since,
        reason=d.reason,
        message=d.message,
        operation=d.operation,
    )


def test_scenario_full_cycle_on_then_off() -> None:
    m = machine(Phase.OFF, ON)
    started: list[StartJob] = []

    def step(o: Observations, now: datetime) -> Decision:
        nonlocal m
        d = decide(m, o, now)
        started.extend(e for e in d.effects if isinstance(e, StartJob))
        m = persist(m, d)
        return d

    assert step(obs(), at(0)).phase is Phase.POWERING_ON
    assert step(obs(), at(1)).phase is Phase.POWERING_ON  # watch lag: same Job asked again
    assert step(obs(job=job()), at(30)).phase is Phase.POWERING_ON
    d = step(obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(60))
    assert d.phase is Phase.BOOTING
    assert step(obs(node_exists=True), at(120)).phase is Phase.BOOTING
    assert step(obs(node_exists=True, node_ready=True), at(180)).phase is Phase.READY
    assert step(obs(**READY_NODE), at(240)).effects == ()

    m = replace(m, desired=OFF, intent_generation=6)
    assert step(obs(**READY_NODE), at(300)).phase is Phase.DRAINING
    blocked = obs(node_cordoned=True, drain=PDB, **READY_NODE)
    assert step(blocked, at(310)).reason == "DrainBlocked"
    drained = obs(node_cordoned=True, drain=DrainStatus(0), **READY_NODE)
    assert step(drained, at(400)).phase is Phase.POWERING_OFF
    shutdown = job(SHUTDOWN, gen=6)
    assert step(obs(job=shutdown, node_cordoned=True, **READY_NODE), at(430)).effects == (
        AcquireLease(),
        Requeue(30.0),
    )
    done = replace(shutdown, state=JobPhase.SUCCEEDED, power_state=OFF)
    d = step(obs(job=done, node_exists=True), at(460))
    assert (d.phase, d.observed_power_state) == (Phase.OFF, OFF)
    assert step(obs(), at(600)).effects == ()

    # Exactly two power commands were asked for; a repeat only ever names the same Job.
    assert sorted({(s.action, s.generation, s.attempt) for s in started}) == [
        (SHUTDOWN, 6, 1),
        (STARTUP, 5, 1),
    ]


def test_scenario_powers_on_but_never_registers() -> None:
    m = machine(Phase.OFF, ON, max_retries=2)
    now = T0
    names: list[tuple[Action, int, int]] = []
    for _ in range(500):
        d = decide(m, obs(), now)
        for e in d.effects:
            if isinstance(e, StartJob):
                names.append((e.action, e.generation, e.attempt))
        if d.phase is Phase.FAILED:
            break
        # The fake world: every startup Job succeeds at once, the node never shows up.
        if d.operation is not None and d.operation.result is RUNNING:
            d = decide(
                persist(m, d),
                obs(job=job(attempt=d.operation.attempt, state=JobPhase.SUCCEEDED)),
                now,
            )
        m = persist(m, d)
        now += timedelta(seconds=d.requeue_after or 60)
    assert m.phase is Phase.FAILED or d.phase is Phase.FAILED
    assert d.reason == "RetriesExhausted"
    assert "did not become Ready within 600s" in d.message
    assert sorted(set(names)) == [(STARTUP, 5, 1), (STARTUP, 5, 2), (STARTUP, 5, 3)]


def test_scenario_restart_mid_action_readopts_instead_of_restarting() -> None:
    # Status was lost entirely (phase Unknown, no operation) while a startup Job runs.
    m = machine(Phase.UNKNOWN, ON, phase_since=None)
    d = decide(m, obs(job=job()), at(0))
    assert (d.phase, d.reason) == (Phase.POWERING_ON, "JobAdopted")
    assert not any(isinstance(e, StartJob) for e in d.effects)
    m = persist(m, d)
    # The adopted Job is now "ours": the next reconcile just waits for it.
    d = decide(m, obs(job=job()), at(30))
    assert (d.phase, d.reason, summary(d)) == (Phase.POWERING_ON, "WaitingForJob", WAIT_JOB)
    m = persist(m, d)
    d = decide(m, obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(60))
    assert d.phase is Phase.BOOTING


def test_scenario_desired_flips_during_action_one_command_per_intent() -> None:
    m = persist(machine(Phase.OFF, ON), decide(machine(Phase.OFF, ON), obs(), at(0)))
    # Person flips to Off while the startup container already runs.
    m = replace(m, desired=OFF, intent_generation=6)
    for t in (10, 20, 30):
        d = decide(m, obs(job=job()), at(t))
        assert not any(isinstance(e, (StartJob, DeleteJob)) for e in d.effects)
        m = persist(m, d)
    d = decide(m, obs(job=job(state=JobPhase.SUCCEEDED, power_state=ON)), at(40))
    m = persist(m, d)
    assert d.phase is Phase.BOOTING
    d = decide(m, obs(), at(41))
    assert d.phase is Phase.POWERING_OFF
    assert [e for e in d.effects if isinstance(e, StartJob)] == [StartJob(SHUTDOWN, 6, 1)]


def test_lease_elsewhere_freezes_every_phase() -> None:
    for phase, desired in itertools.product(Phase, (ON, OFF)):
        m = machine(phase, desired, operation=op())
        d = decide(m, obs(job=job(), lease=LeaseState.HELD_BY_OTHER, **READY_NODE), at(60))
        assert (d.phase, d.reason, d.effects) == (
            phase,
            "LeaseHeldElsewhere",
            (Requeue(30.0),),
        )
        assert d.operation == m.operation


@pytest.mark.parametrize(
    ("expires_in", "look"),
    [(8.0, 9.0), (0.2, 1.2), (-3.0, 1.0), (300.0, 30.0)],
    ids=["as-it-ends", "in-a-moment", "renewal-late", "renewed-far-ahead"],
)
def test_a_lease_held_elsewhere_is_looked_at_again_as_its_hold_ends(
    expires_in: float, look: float
) -> None:
    m = machine(Phase.POWERING_ON, ON, operation=op())
    lease = {"lease": LeaseState.HELD_BY_OTHER, "lease_expires": at(60 + expires_in)}
    d = decide(m, obs(job=job(), **lease), at(60))
    assert (d.reason, d.effects) == ("LeaseHeldElsewhere", (Requeue(look),))


# --- the core Node before power-on ---------------------------------------------------------


def test_every_on_action_job_comes_after_the_core_node_is_prepared() -> None:
    decision = decide(machine(Phase.OFF, ON), obs(), at(1))
    names = summary(decision)

    assert names.index(PREPARE) < names.index("StartJob:startup:g5:a1")
    off = decide(machine(Phase.READY, OFF), obs(), at(1))
    assert PREPARE not in summary(off)


def test_a_refused_core_node_retries_without_powering_on() -> None:
    m = machine(Phase.OFF, ON)
    started = decide(m, obs(), at(1))

    failed = core_node_failed(m, started, "403 nodes is forbidden", at(1))

    assert (failed.phase, failed.reason) == (Phase.POWERING_ON, "RetryScheduled")
    assert not any(isinstance(e, StartJob) for e in failed.effects)
    assert "Event:Warning:CoreNodeFailed" in summary(failed)
    assert failed.operation is not None and failed.operation.result is FAILED
    assert "403 nodes is forbidden" in failed.message
    assert "not powered on" in failed.message


def test_a_refused_core_node_past_max_retries_is_failed_with_the_reason() -> None:
    m = machine(Phase.OFF, ON, max_retries=0)
    started = decide(m, obs(), at(1))

    failed = core_node_failed(m, started, "403 nodes is forbidden", at(1))

    assert (failed.phase, failed.reason) == (Phase.FAILED, "RetriesExhausted")
    assert "403 nodes is forbidden" in failed.message
    assert not any(isinstance(e, StartJob) for e in failed.effects)
    assert "Event:Warning:CoreNodeFailed" in summary(failed)


def test_a_ready_machine_whose_node_keeps_the_startup_taint_gets_its_metadata_again() -> None:
    decision = decide(
        machine(Phase.READY, ON, reason="NodeRegistered"),
        obs(node_exists=True, node_ready=True, node_metadata_applied=False),
        at(60),
    )

    assert "ApplyNodeMetadata" in summary(decision)
