"""An endpoint that refuses the credentials: which failures are refusals, which Secret the
message names, and that the action ends Failed after the first attempt whatever `maxRetries`
says (`planning.machine.outages.credentials_refused`, `credentials_source`;
`planning.machine.fsm`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.planning.machine import outages
from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import Action, JobPhase, OperationResult, Phase
from tests.unit.test_fsm import OFF, ON, T0, at, job, machine, obs, op, summary

pytestmark = pytest.mark.unit

SECRET = "Secret lab/bmc-box-1, keys 'username' and 'password'"

# The roles' own failure messages, as their runner e2e tests and molecule scenarios see them.
REDFISH_401 = (
    "Reading /redfish/v1/Systems on https://10.0.0.21 failed: HTTP 401: Unauthorized "
    "(authentication failed: check the username and password the BMC expects)"
)
REDFISH_403 = (
    "On of system s1 on https://10.0.0.21 failed: HTTP 403: Insufficient privileges "
    "(the BMC account may not do this: check its role)"
)
IPMI_PASSWORD = (
    "Reading the power state through the BMC at 10.0.0.22:623 failed: Incorrect password "
    "provided (authentication failed: check the username and password the BMC expects)"
)
IPMI_USER = (
    "Reading the power state through the BMC at 10.0.0.22:623 failed: Unauthorized name "
    "(the BMC has no such user: check the username)"
)
HA_401 = (
    "Home Assistant at http://ha:8123 answered HTTP 401 to GET http://ha:8123/api/states/"
    "switch.rack: 401 Unauthorized (authentication failed: the long-lived access token is "
    "wrong or revoked; make one in the Home Assistant user profile and put it in the Secret)"
)
SHELLY_401 = (
    "Shelly at http://192.0.2.40 answered HTTP 401 to GET http://192.0.2.40/rpc/Switch."
    "GetStatus?id=0: Status code was 401 and not [200]: HTTP Error 401: Unauthorized"
)
PROXMOX = (
    "Reading VM 101 on https://pve:8006 failed: Couldn't authenticate user: root@pam 401 "
    "(authentication failed: check the API user and password, or the API token, in the "
    "credentials)"
)
TASK = "redfish_power : Fail with the BMC's answer"


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        (REDFISH_401, True),
        (REDFISH_403, True),
        (IPMI_PASSWORD, True),
        (IPMI_USER, True),
        (HA_401, True),
        (SHELLY_401, True),
        (PROXMOX, True),
        ("through the BMC at 10.0.0.22:623 failed: insufficient privilege level", True),
        ("On of system s1 on https://bmc failed: HTTP 503: Service Unavailable", False),
        ("Request failed: <urlopen error [Errno 111] Connection refused>", False),
        ("System s1 not found on https://bmc: no ComputerSystem has this Id or UUID", False),
        ("HTTP 404: no such resource on this BMC", False),
        ("HTTP 4010", False),
        (
            "failed: no answer (check the host, the UDP port and that IPMI over LAN is enabled)",
            False,
        ),
    ],
)
def test_which_failures_are_refused_credentials(message: str, refused: bool) -> None:
    assert outages.credentials_refused(message) is refused
    if refused:
        # A refusal is never an outage: it would be retried for 30 minutes otherwise.
        assert not outages.unavailable(message)


def node_spec(driver: dict[str, Any]) -> Any:
    return inputs.node_spec(
        {
            "metadata": {"name": "box-1", "namespace": "lab", "generation": 1},
            "spec": {
                "desiredPowerState": "On",
                "group": "homelab",
                "kubernetesNodeName": "box-1",
                "driver": driver,
            },
        }
    )


SSH = {"host": "192.0.2.31", "user": "lightsout", "privateKeySecretRef": {"name": "box-ssh"}}


@pytest.mark.parametrize(
    ("driver", "source"),
    [
        (
            {
                "redfish": {
                    "endpoint": "https://10.0.0.21",
                    "systemId": "s1",
                    "credentialsSecretRef": {"name": "bmc-box-1"},
                }
            },
            SECRET,
        ),
        (
            {
                "ipmi": {
                    "host": "10.0.0.22",
                    "credentialsSecretRef": {
                        "name": "ipmi-box-1",
                        "usernameKey": "user",
                        "passwordKey": "pass",
                    },
                }
            },
            "Secret lab/ipmi-box-1, keys 'user' and 'pass'",
        ),
        (
            {
                "proxmox": {
                    "endpoint": "https://pve:8006",
                    "node": "pve1",
                    "vmid": 101,
                    "credentialsSecretRef": {
                        "name": "pve",
                        "tokenIdKey": "token-id",
                        "tokenSecretKey": "token-secret",
                    },
                }
            },
            "Secret lab/pve, keys 'token-id' and 'token-secret'",
        ),
        (
            {
                "proxmox": {
                    "endpoint": "https://pve:8006",
                    "node": "pve1",
                    "vmid": 101,
                    "credentialsSecretRef": {"name": "pve"},
                }
            },
            "Secret lab/pve, keys 'username' and 'password'",
        ),
        (
            {
                "homeassistant": {
                    "endpoint": "http://ha:8123",
                    "switchEntity": "switch.rack",
                    "tokenSecretRef": {"name": "box-ssh", "key": "ha-token"},
                    "ssh": SSH,
                }
            },
            "Secret lab/box-ssh, key 'ha-token'",
        ),
        ({"shelly": {"endpoint": "http://192.0.2.40", "ssh": SSH}}, ""),
    ],
)
def test_the_message_names_the_secret_and_keys_the_driver_reads(
    driver: dict[str, Any], source: str
) -> None:
    assert outages.credentials_source(node_spec(driver), "lab") == source


def refused_attempt(
    message: str = REDFISH_401, *, action: Action = Action.STARTUP, credentials: str = SECRET
) -> Any:
    phase = Phase.POWERING_ON if action is Action.STARTUP else Phase.POWERING_OFF
    desired = ON if action is Action.STARTUP else OFF
    failed = job(action=action, state=JobPhase.FAILED, failed_task=TASK, message=message)
    # The default maxRetries (3): attempts would remain.
    m = machine(phase, desired, operation=op(action=action), credentials=credentials)
    assert m.max_retries == 3
    return decide(m, obs(job=failed), at(20))


def test_a_refused_power_on_is_failed_after_the_first_attempt() -> None:
    decision = refused_attempt()
    assert decision.phase is Phase.FAILED
    assert decision.reason == Reason.AUTHENTICATION_FAILED
    assert summary(decision) == [
        "Condition:PowerActionSucceeded=False:AuthenticationFailed",
        "ReleaseLease",
        "Event:Warning:AuthenticationFailed",
    ]
    assert "HTTP 401" in decision.message
    assert f"refused the credentials from {SECRET}" in decision.message
    assert "not retried" in decision.message
    # The record of the attempt says the same, for `kubectl get lsn -o yaml` and the events.
    operation = decision.operation
    assert operation is not None
    assert (operation.attempt, operation.result) == (1, OperationResult.FAILED)
    assert SECRET in operation.message
    assert operation.failed_task == TASK


def test_a_refused_power_off_is_failed_at_once_too() -> None:
    credentials = "Secret lab/box-ssh, key 'token'"
    decision = refused_attempt(HA_401, action=Action.SHUTDOWN, credentials=credentials)
    assert decision.phase is Phase.FAILED
    assert decision.reason == Reason.AUTHENTICATION_FAILED
    assert not any(s.startswith("StartJob") for s in summary(decision))
    assert credentials in decision.message


def test_a_driver_that_sends_no_credentials_says_so() -> None:
    decision = refused_attempt(SHELLY_401, credentials="")
    assert decision.phase is Phase.FAILED
    assert "asks for credentials this driver does not send" in decision.message


def test_a_failed_machine_keeps_its_reason_and_a_spec_edit_starts_over() -> None:
    first = refused_attempt()
    assert first.operation is not None
    failed = machine(
        Phase.FAILED,
        ON,
        operation=first.operation,
        phase_since=at(20),
        reason=first.reason,
        message=first.message,
        credentials=SECRET,
    )
    later = decide(failed, obs(), at(3600))
    assert (later.phase, later.reason) == (Phase.FAILED, Reason.AUTHENTICATION_FAILED)
    assert not any(s.startswith("StartJob") for s in summary(later))
    # A fixed spec (a new generation) is a new intent: attempt 1 again.
    edited = decide(replace(failed, intent_generation=6), obs(), at(3600))
    assert "StartJob:startup:g6:a1" in summary(edited)


def test_a_pending_retry_of_a_refusal_is_not_started() -> None:
    """A refusal recorded as a pending retry (by an operator from before refusals ended the
    action) ends Failed rather than starting attempt 2."""
    pending = op(
        result=OperationResult.FAILED, failed_task=TASK, message=f"startup failed: {REDFISH_401}"
    )
    m = machine(Phase.POWERING_ON, ON, operation=pending, credentials=SECRET)
    decision = decide(m, obs(), T0.replace(hour=13))
    assert decision.phase is Phase.FAILED
    assert decision.reason == Reason.AUTHENTICATION_FAILED
    assert not any(s.startswith("StartJob") for s in summary(decision))


def test_an_outage_is_still_retried() -> None:
    decision = refused_attempt("On of system s1 on https://bmc failed: HTTP 503: busy")
    assert decision.phase is Phase.POWERING_ON
    assert decision.reason == Reason.BMC_UNAVAILABLE


def test_the_machine_state_carries_the_secret_of_its_node() -> None:
    node = {
        "metadata": {"name": "box-1", "namespace": "lab", "generation": 1},
        "spec": {
            "desiredPowerState": "On",
            "group": "homelab",
            "kubernetesNodeName": "box-1",
            "driver": {
                "redfish": {
                    "endpoint": "https://10.0.0.21",
                    "systemId": "s1",
                    "credentialsSecretRef": {"name": "bmc-box-1"},
                }
            },
        },
    }
    state = inputs.machine_state(node, inputs.node_spec(node), None)
    assert state.credentials == SECRET
