"""Issue 19, parts 1 and 2 in pure code: which reference is missing (`state.references`), what the
state machine does about it, what the autoscaler's snapshot makes of it, and a Job pod that
cannot start (`execution.results`) as a failed attempt that deletes its Job.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lightsout.execution.jobs import CONTAINER_NAME
from lightsout.execution.results import observe_job
from lightsout.planning.autoscaler.cluster import Availability, classify
from lightsout.planning.machine.common import Reason
from lightsout.planning.machine.effects import DeleteJob, Event, SetCondition, StartJob
from lightsout.planning.machine.fsm import decide
from lightsout.planning.types import (
    Action,
    ConditionStatus,
    ConditionType,
    EventType,
    JobPhase,
    MachineState,
    Observations,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
)
from lightsout.state.build import (
    CONFIGMAPS_KEY,
    GROUPS_KEY,
    MACHINES_KEY,
    SECRETS_KEY,
    snapshot_from,
)
from lightsout.state.references import ReferenceReason, Unresolved, contents_entry, unresolved

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-03-01T12:00:00Z"
GROUP = {"metadata": {"name": "lab", "namespace": "ns"}, "spec": {}}


def node(**spec: Any) -> dict[str, Any]:
    driver = {
        "redfish": {
            "endpoint": "https://bmc",
            "systemId": "1",
            "credentialsSecretRef": {"name": "bmc"},
            "tls": {"caSecretRef": {"name": "bmc-ca"}},
        }
    }
    return {
        "metadata": {"name": "box", "namespace": "ns"},
        "spec": {"group": "lab", "kubernetesNodeName": "box", "driver": driver, **spec},
    }


HELD = {
    "bmc": frozenset({"username", "password"}),
    "bmc-ca": frozenset({"ca.crt"}),
    "short": frozenset({"username"}),
    "overlay": frozenset({"mine.yml"}),
}


def check(
    machine: dict[str, Any], group: dict[str, Any] | None = GROUP, held: Any = None
) -> Unresolved | None:
    have = HELD if held is None else held
    return unresolved(machine, group, "startup", have.get, have.get)


@pytest.mark.parametrize(
    ("machine", "group", "held", "reason", "named"),
    [
        (node(), None, None, ReferenceReason.GROUP_NOT_FOUND, "Group ns/lab"),
        (node(), GROUP, {"bmc-ca": HELD["bmc-ca"]}, ReferenceReason.SECRET_NOT_FOUND, "ns/bmc "),
        (
            node(),
            GROUP,
            {"bmc": HELD["bmc"]},
            ReferenceReason.SECRET_NOT_FOUND,
            "CA Secret ns/bmc-ca",
        ),
        (
            node(),
            GROUP,
            {"bmc": HELD["short"], "bmc-ca": HELD["bmc-ca"]},
            ReferenceReason.SECRET_KEY_MISSING,
            "no key 'password'",
        ),
        (
            node(playbooks={"configMapName": "gone"}),
            GROUP,
            None,
            ReferenceReason.CONFIGMAP_NOT_FOUND,
            "ConfigMap ns/gone",
        ),
        (
            node(),
            {**GROUP, "spec": {"playbooks": {"configMapName": "gone"}}},
            None,
            ReferenceReason.CONFIGMAP_NOT_FOUND,
            "(Group lab)",
        ),
        (
            node(playbooks={"configMapName": "overlay", "startup": "other.yml"}),
            GROUP,
            None,
            ReferenceReason.PLAYBOOK_NOT_FOUND,
            "'other.yml'",
        ),
    ],
    ids=["group", "secret", "ca-secret", "key", "configmap", "group-configmap", "playbook"],
)
def test_the_first_missing_reference_is_named(
    machine: dict[str, Any], group: Any, held: Any, reason: ReferenceReason, named: str
) -> None:
    problem = check(machine, group, held)
    assert problem is not None and problem.reason is reason
    assert named in problem.message


def test_everything_present_resolves_including_an_overlay_playbook_and_a_shipped_one() -> None:
    assert check(node()) is None
    assert check(node(playbooks={"configMapName": "overlay", "startup": "mine.yml"})) is None
    assert check(node(playbooks={"startup": "shutdown.yml"})) is None


def test_a_join_flavors_secret_and_template_are_needed_for_provision_only() -> None:
    machine = node()
    join = {"apiServerEndpoint": "10.0.0.10:6443"}
    machine["spec"]["driver"] = {"proxmox": {"credentialsSecretRef": {"name": "bmc"}, "join": join}}
    held = {"bmc": HELD["bmc"]}
    join.update(flavor="k3s", k3sTokenSecretRef={"name": "k3s", "key": "token"})
    problem = unresolved(machine, GROUP, "provision", held.get, {}.get)
    assert problem is not None and problem.reason is ReferenceReason.SECRET_NOT_FOUND
    assert "k3s token Secret ns/k3s" in problem.message
    assert unresolved(machine, GROUP, "deprovision", held.get, {}.get) is None
    del join["k3sTokenSecretRef"]
    join.update(flavor="template", userDataTemplateRef={"name": "ud"})
    problem = unresolved(machine, GROUP, "provision", held.get, {"ud": frozenset({"x"})}.get)
    assert problem is not None and problem.reason is ReferenceReason.CONFIGMAP_NOT_FOUND
    assert "user-data template ConfigMap ns/ud has no key 'user-data'" in problem.message
    ud = {"ud": frozenset({"user-data"})}
    assert unresolved(machine, GROUP, "provision", held.get, ud.get) is None


def test_proxmox_token_keys_replace_username_and_password() -> None:
    machine = node()
    machine["spec"]["driver"] = {
        "proxmox": {
            "credentialsSecretRef": {"name": "pve", "tokenIdKey": "id", "tokenSecretKey": "s"}
        }
    }
    assert check(machine, held={"pve": frozenset({"id", "s"})}) is None
    problem = check(machine, held={"pve": frozenset({"id"})})
    assert problem is not None and "'s'" in problem.message


# ------------------------------------------------------------------ the state machine
MISSING = Unresolved(ReferenceReason.SECRET_NOT_FOUND, "credentials Secret ns/bmc not found")


def machine_state(phase: Phase, **kw: Any) -> MachineState:
    return MachineState("box", "box", phase, ObservedPowerState.ON, 5, phase_since=T0, **kw)


def test_a_missing_secret_holds_the_power_on_back_in_its_phase_with_a_warning() -> None:
    decision = decide(
        machine_state(Phase.OFF), Observations(unresolved={Action.STARTUP: MISSING}), T0
    )
    assert (decision.phase, decision.reason) == (Phase.OFF, "SecretNotFound")
    assert not any(isinstance(e, StartJob) for e in decision.effects)
    assert "ns/bmc" in decision.message
    condition = SetCondition(
        ConditionType.REFERENCES_RESOLVED,
        ConditionStatus.FALSE,
        "SecretNotFound",
        decision.message,
    )
    assert condition in decision.effects
    assert Event(EventType.WARNING, "SecretNotFound", decision.message) in decision.effects


def test_a_retry_held_back_spends_no_attempt_and_starts_once_the_secret_exists() -> None:
    failed = Operation(
        Action.STARTUP, 5, 2, started=T0, result=OperationResult.FAILED, finished=T0, message="x"
    )
    later = T0 + timedelta(hours=1)
    m = machine_state(Phase.POWERING_ON, operation=failed)
    held = decide(m, Observations(unresolved={Action.STARTUP: MISSING}), later)
    assert (held.phase, held.reason, held.operation) == (
        Phase.POWERING_ON,
        "SecretNotFound",
        failed,
    )
    m = machine_state(Phase.POWERING_ON, operation=failed, reason="SecretNotFound")
    go = decide(m, Observations(), later)
    assert StartJob(Action.STARTUP, 5, 3) in go.effects
    assert any(
        isinstance(e, SetCondition) and e.type == "ReferencesResolved" and e.status == "True"
        for e in go.effects
    )


# ------------------------------------------------------------------ the autoscaler's snapshot
def test_a_machine_whose_references_do_not_resolve_is_never_a_power_on_candidate() -> None:
    objects: dict[str, Any] = {
        MACHINES_KEY: [node()],
        GROUPS_KEY: [GROUP],
        SECRETS_KEY: [contents_entry("ns", "bmc-ca", ["ca.crt"])],
        CONFIGMAPS_KEY: [],
    }
    (machine,) = snapshot_from(objects, complete=True).machines
    availability, state = classify(machine, None)
    assert availability is Availability.UNAVAILABLE
    assert state == "off, cannot be powered on: SecretNotFound: credentials Secret ns/bmc not found"
    objects[SECRETS_KEY].append(contents_entry("ns", "bmc", ["username", "password"]))
    (machine,) = snapshot_from(objects, complete=True).machines
    assert classify(machine, None) == (Availability.OFF, "Off")


# ------------------------------------------------------------------ a Job pod that cannot start
def job_and_pod(
    waiting: str | None, scheduled: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    labels = {
        "lightsout.dev/action": "startup",
        "lightsout.dev/generation": "5",
        "lightsout.dev/attempt": "1",
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "image 'runner:0' is not present"}}
        status["containerStatuses"] = [{"name": CONTAINER_NAME, "state": state}]
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", **scheduled}]
    return {"metadata": {"labels": labels}, "status": {"active": 1}}, [{"status": status}]


@pytest.mark.parametrize(
    ("waiting", "scheduled", "cause"),
    [
        ("ErrImageNeverPull", None, "ErrImageNeverPull: image 'runner:0' is not present"),
        ("ImagePullBackOff", None, "ImagePullBackOff"),
        ("CreateContainerConfigError", None, "CreateContainerConfigError"),
        (
            None,
            {"reason": "Unschedulable", "message": "0/3 nodes", "lastTransitionTime": STAMP},
            "Unschedulable: 0/3 nodes",
        ),
    ],
)
def test_a_pod_that_cannot_start_fails_the_attempt_and_deletes_its_job(
    waiting: str | None, scheduled: dict[str, str] | None, cause: str
) -> None:
    observed = observe_job(*job_and_pod(waiting, scheduled), T0 + timedelta(seconds=121))
    assert observed is not None and observed.state is JobPhase.STUCK and cause in observed.message
    running = Operation(Action.STARTUP, 5, 1, started=T0)
    m = machine_state(Phase.POWERING_ON, operation=running)
    decision = decide(m, Observations(job=observed), T0 + timedelta(seconds=5))
    assert decision.phase is Phase.POWERING_ON and decision.reason == Reason.RETRY_SCHEDULED
    assert DeleteJob(Action.STARTUP, 5, 1) in decision.effects
    assert decision.operation is not None
    warning = Event(EventType.WARNING, "PodStartFailed", decision.operation.message)
    assert warning in decision.effects
    assert cause in decision.message


def test_a_pod_still_creating_its_container_or_briefly_unschedulable_is_only_pending() -> None:
    observed = observe_job(*job_and_pod("ContainerCreating"))
    assert observed is not None and observed.state is JobPhase.PENDING
    refused = {
        "reason": "Unschedulable",
        "message": "Insufficient cpu",
        "lastTransitionTime": STAMP,
    }
    observed = observe_job(*job_and_pod(None, refused), T0 + timedelta(seconds=30))
    assert observed is not None and observed.state is JobPhase.PENDING
    assert "Insufficient cpu" in observed.message


def mount_event(message: str, pod: str = "startup-abc-x1", uid: str = "u1") -> dict[str, Any]:
    about = {"kind": "Pod", "name": pod, "uid": uid}
    return {"involvedObject": about, "reason": "FailedMount", "message": message}


GONE = 'MountVolume.SetUp failed for volume "credentials" : secret "bmc" not found'


def test_a_pod_whose_secret_volume_is_missing_fails_the_attempt_from_its_failedmount_event() -> (
    None
):
    """A real kubelet keeps the pod in ContainerCreating; only its event names the Secret."""
    job, pods = job_and_pod("ContainerCreating")
    pods[0]["metadata"] = {"name": "startup-abc-x1", "uid": "u1"}
    observed = observe_job(job, pods, T0, [mount_event(GONE)])
    assert observed is not None and observed.state is JobPhase.STUCK
    assert observed.message == f"its pod cannot start: FailedMount: {GONE}"
    running = Operation(Action.STARTUP, 5, 1, started=T0)
    decision = decide(
        machine_state(Phase.POWERING_ON, operation=running),
        Observations(job=observed),
        T0 + timedelta(seconds=5),
    )
    assert DeleteJob(Action.STARTUP, 5, 1) in decision.effects
    assert (
        decision.reason == Reason.RETRY_SCHEDULED and 'secret "bmc" not found' in decision.message
    )


@pytest.mark.parametrize(
    "event",
    [
        # Another pod's, an earlier pod of the same name's, and a mount failure that passes.
        mount_event(GONE, pod="other-pod"),
        mount_event(GONE, uid="u0"),
        mount_event(
            'MountVolume.SetUp failed for volume "credentials" : failed to sync secret cache: '
            "timed out waiting for the condition"
        ),
    ],
)
def test_other_mount_events_leave_the_pod_pending(event: dict[str, Any]) -> None:
    job, pods = job_and_pod("ContainerCreating")
    pods[0]["metadata"] = {"name": "startup-abc-x1", "uid": "u1"}
    observed = observe_job(job, pods, T0, [event])
    assert observed is not None and observed.state is JobPhase.PENDING


def test_an_operator_that_cannot_see_secrets_checks_everything_else() -> None:
    """A cluster-wide operator lists no Secret: they are not checked (a missing one shows as the
    Job pod's FailedMount), the ConfigMaps and the Group still are."""
    machine = node(playbooks={"configMapName": "gone"})
    problem = unresolved(machine, GROUP, "startup", None, {}.get)
    assert problem is not None and problem.reason is ReferenceReason.CONFIGMAP_NOT_FOUND
    assert unresolved(node(), GROUP, "startup", None, {}.get) is None
    snapshot = snapshot_from(
        {
            GROUPS_KEY: [GROUP],
            MACHINES_KEY: [machine],
            CONFIGMAPS_KEY: [],
        },
        complete=True,
    )
    (held,) = snapshot.machines
    assert held.unresolved is not None and held.unresolved.startswith("ConfigMapNotFound")
