"""A failure's message keeps its actionable end on every way to a person: the runner's
termination message, `status.message`, conditions, events and `status.lastOperation`.

The case is the wrong-systemId failure of a BMC with many systems: the redfish_power role lists
every system it found and ends with what to set; the state machine adds "(gave up after N
attempts)". Whatever the number of systems, both survive, and `lastOperation.message` keeps
every system as long as the runner's message could carry them.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from lightsout.actuation.inputs import node_spec
from lightsout.config import OperatorConfig
from lightsout.execution.actuator import JOB_OVERHEAD_SECONDS, KubeMachine
from lightsout.execution.jobs import CONTAINER_NAME
from lightsout.execution.results import observe_job
from lightsout.execution.statuswriter import wanted_status
from lightsout.models.node import DEFAULT_BOOT_TIMEOUT_SECONDS, DEFAULT_SHUTDOWN_TIMEOUT_SECONDS
from lightsout.planning.machine.effects import Event, StartJob
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import (
    Action,
    MachineState,
    Observations,
    ObservedPowerState,
    Operation,
    Phase,
)
from lightsout.runner.result import RunResult, render_result
from lightsout.text import MARK, MESSAGE_LIMIT, clip_middle

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
ENDPOINT = "https://bmc-rack-7.example.internal:8443"
TASK = "redfish_power : Fail when no system has this id or UUID"
HINT = (
    "Set redfish_power_system_id (a Node's spec.driver.redfish.systemId) to one of these Ids "
    "or UUIDs."
)
GAVE_UP = "(gave up after 2 attempts)"


def role_message(systems: list[str], wrong: str) -> str:
    """The role's fail_msg (roles/redfish_power/tasks/resolve.yml) for these system UUIDs."""
    listed = ", ".join(
        f"/redfish/v1/Systems/{s} (Id {s}, UUID {s}, Name blade-{i})" for i, s in enumerate(systems)
    )
    return (
        f"System {wrong} not found on {ENDPOINT}: no ComputerSystem has this Id or UUID. "
        f"The BMC's systems: {listed}. {HINT}"
    )


def failed_job(termination: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    labels = {
        "lightsout.dev/action": "startup",
        "lightsout.dev/generation": "3",
        "lightsout.dev/attempt": "2",
    }
    job = {
        "metadata": {"name": "lo-box-startup-g3-a2", "labels": labels},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimit"}]},
    }
    pod = {
        "metadata": {"name": "lo-box-startup-g3-a2-x"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": CONTAINER_NAME,
                    "state": {"terminated": {"exitCode": 1, "message": termination}},
                }
            ],
        },
    }
    return job, [pod]


def context() -> KubeMachine:
    node = {
        "metadata": {"name": "box", "namespace": "lab", "generation": 3},
        "spec": {
            "group": "lab",
            "kubernetesNodeName": "box",
            "desiredPowerState": "On",
            "driver": {"ipmi": {"host": "10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}},
        },
        "status": {},
    }
    config = OperatorConfig(identity="test")
    # No client: building the wanted status calls no API.
    return KubeMachine(None, node, node_spec(node), None, config)


@pytest.mark.parametrize("count", [7, 40])
def test_wrong_system_id_message_ends_with_the_hint_whatever_the_number_of_systems(
    count: int,
) -> None:
    systems = [str(uuid.uuid4()) for _ in range(count)]
    wrong = "System.Embedded.9"
    termination = render_result(RunResult("Failed", TASK, role_message(systems, wrong), {}))
    observed = observe_job(*failed_job(termination))
    assert observed is not None
    machine = MachineState(
        name="box",
        kubernetes_node_name="box",
        phase=Phase.POWERING_ON,
        desired=ObservedPowerState.ON,
        intent_generation=3,
        max_retries=1,
        operation=Operation(Action.STARTUP, 3, 2, started=NOW),
    )
    decision = decide(machine, Observations(job=observed), NOW)
    assert decision.phase is Phase.FAILED

    ctx = context()
    status = wanted_status(ctx.node, ctx.spec, decision, NOW, (ObservedPowerState.ON, 3))
    message = status["message"]
    print(f"{count} systems: status.message {len(message.encode())} bytes: …{message[-90:]}")
    assert len(message.encode()) <= MESSAGE_LIMIT
    assert message.startswith("startup playbook failed at task")
    assert f"System {wrong} not found on {ENDPOINT}" in message
    assert message.endswith(f"{HINT} {GAVE_UP}")
    for condition in status["conditions"]:
        assert condition["message"].endswith(HINT), condition
    for event in (e for e in decision.effects if isinstance(e, Event)):
        assert clip_middle(event.message).endswith(HINT) or clip_middle(event.message).endswith(
            GAVE_UP
        )
    kept = status["lastOperation"]["message"]
    assert kept.endswith(HINT)
    # The runner's message (at most 2048 bytes) carries seven systems whole; forty are cut in
    # the middle there, and both ends still arrive.
    if count == 7:
        assert MARK not in kept and all(s in kept for s in systems)
    else:
        assert MARK in kept and systems[0] in kept and systems[-1] in kept


@pytest.mark.parametrize(
    "text", ["a" * 5000, "é" * 3000, "日本" * 900 + " set x to y", "start " + "\n" * 4000 + "end"]
)
def test_clip_middle_keeps_both_ends_within_the_limit(text: str) -> None:
    clipped = clip_middle(text, 300)
    assert len(clipped.encode()) <= 300
    assert MARK in clipped
    assert clipped.endswith(text.rstrip()[-3:]) and clipped.startswith(text[:2])
    assert clip_middle("short", 300) == "short"
    json.dumps(clipped)  # valid text: no half of a multi-byte character


@pytest.mark.parametrize(
    ("action", "seconds"),
    [
        (Action.STARTUP, DEFAULT_BOOT_TIMEOUT_SECONDS),
        (Action.SHUTDOWN, DEFAULT_SHUTDOWN_TIMEOUT_SECONDS),
    ],
)
def test_an_action_jobs_deadline_is_its_timeout_plus_the_playbooks_own_work(
    action: Action, seconds: int
) -> None:
    """Kubernetes ends a Job that never reports at its deadline: the machine's boot (or
    shutdown) timeout plus 5 minutes for the playbook's own tasks, which on a busy runner node
    took over the 2 minutes this margin used to be."""
    request = context().job_request(StartJob(action, 3, 1))
    assert request.deadline_seconds == seconds + JOB_OVERHEAD_SECONDS == seconds + 300
