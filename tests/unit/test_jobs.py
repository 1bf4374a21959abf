"""Action Jobs, their extravars ConfigMaps, and reading a Job's outcome back.

The built objects are compared with stored snapshots (tests/unit/snapshots/*.json; rewrite them
with UPDATE_SNAPSHOTS=1 after an intended change and review the diff), and the properties that
keep a machine's credentials and the cluster safe are asserted directly, so a snapshot update
cannot quietly drop one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lightsout.execution.jobs import (
    EXTRAVARS_PATH,
    JobRequest,
    build_action_job,
    build_extravars_configmap,
    extravars_configmap_name,
    job_labels,
    job_name,
    job_selector,
)
from lightsout.execution.results import (
    JobOutcome,
    observe_job,
    parse_job_outcome,
    parse_runner_result,
)
from lightsout.planning.types import Action, JobPhase, ObservedPowerState, OperationResult

pytestmark = pytest.mark.unit

SNAPSHOTS = Path(__file__).parent / "snapshots"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
UID = "6c1f3a8e-2d4b-4f7a-9b1e-0a5c7d9e1f23"

REDFISH = JobRequest(
    node_name="big-box",
    namespace="lab",
    node_uid=UID,
    generation=7,
    attempt=2,
    action=Action.STARTUP,
    image="ghcr.io/lightsout/runner:0.1.0",
    extravars={
        "lightsout_action": "startup",
        "lightsout_credentials_dir": "/etc/lightsout/credentials",
        "lightsout_node": {"name": "big-box", "namespace": "lab"},
        "lightsout_redfish": {
            "endpoint": "https://10.1.2.3",
            "system_id": "437XR1138R2",
            "username_key": "username",
            "password_key": "password",
            "ca_path": "/etc/lightsout/ca/ca.crt",
        },
    },
    credentials_secret="big-box-bmc",
    ca_secret="bmc-ca",
    overlay_configmap="my-playbooks",
    playbook="startup-pxe.yml",
    deadline_seconds=720,
    ttl_seconds=3600,
    node_selector={"node-role.kubernetes.io/control-plane": ""},
    tolerations=({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},),
)

WOL = JobRequest(
    node_name="mini-1",
    namespace="lab",
    node_uid=UID,
    generation=3,
    attempt=1,
    action=Action.SHUTDOWN,
    image="ghcr.io/lightsout/runner:0.1.0",
    extravars={"lightsout_wol": {"macAddress": "aa:bb:cc:dd:ee:ff"}},
    credentials_secret="mini-1-ssh",
    host_network=True,
)


def assert_snapshot(name: str, obj: Any) -> None:
    path = SNAPSHOTS / f"{name}.json"
    rendered = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"no snapshot {path.name}; run with UPDATE_SNAPSHOTS=1 and review it"
    assert json.loads(path.read_text()) == json.loads(rendered), (
        f"{path.name} differs; if the change is intended, rerun with UPDATE_SNAPSHOTS=1"
    )


def walk(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) in a nested dict/list, keys included as values."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{path}.{key}", key
            yield from walk(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from walk(value, f"{path}[{index}]")
    else:
        yield path, obj


def container(job: dict[str, Any]) -> dict[str, Any]:
    (only,) = job["spec"]["template"]["spec"]["containers"]
    return dict(only)


def env(job: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(job)["env"]}


# --- snapshots ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "request_"),
    [("job_redfish_startup", REDFISH), ("job_wol_shutdown", WOL)],
)
def test_job_snapshot(name: str, request_: JobRequest) -> None:
    assert_snapshot(name, build_action_job(request_))


def test_extravars_configmap_snapshot() -> None:
    assert_snapshot("configmap_redfish_startup", build_extravars_configmap(REDFISH))


# --- names and labels -----------------------------------------------------------------------


def test_job_name_follows_the_contract() -> None:
    assert job_name("big-box", "startup", 7, 2) == "lo-big-box-startup-g7-a2"


@pytest.mark.parametrize(
    "node",
    [
        "big-box",
        "a" * 63,
        "rack-3.row-2.datacenter.example.org",
        "Upper.Case.Host",
        "x" * 253,
        "...",
    ],
)
@pytest.mark.parametrize("action", list(Action))
def test_job_name_is_a_dns_label_for_any_node_name(node: str, action: Action) -> None:
    name = job_name(node, action, 123456789, 10)
    assert len(name) <= 63
    assert DNS_LABEL.match(name)
    assert name.startswith("lo-")
    assert name.endswith(f"-{action}-g123456789-a10")
    assert job_name(node, action, 123456789, 10) == name  # deterministic


def test_shortened_names_stay_distinct() -> None:
    long_a, long_b = "a" * 60 + "-one", "a" * 60 + "-two"
    assert job_name(long_a, "startup", 1, 1) != job_name(long_b, "startup", 1, 1)
    # Cleaning alone would map these two to the same label; the hash keeps them apart.
    assert job_name("node.a", "startup", 1, 1) != job_name("node-a", "startup", 1, 1)


def test_every_attempt_and_intent_gets_its_own_job() -> None:
    names = {job_name("n", "startup", g, a) for g in (1, 2) for a in (1, 2, 3)}
    assert len(names) == 6


def test_labels_follow_the_contract() -> None:
    job = build_action_job(REDFISH)
    expected = {
        "app.kubernetes.io/managed-by": "lightsout",
        "lightsout.dev/node": "big-box",
        "lightsout.dev/action": "startup",
        "lightsout.dev/generation": "7",
        "lightsout.dev/attempt": "2",
    }
    assert expected.items() <= job["metadata"]["labels"].items()
    assert expected.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job_selector("big-box") == (
        "app.kubernetes.io/managed-by=lightsout,lightsout.dev/node=big-box"
    )


def test_label_of_a_very_long_node_name_is_valid_and_full_name_annotated() -> None:
    node = "n" * 100
    labels = job_labels(node, "startup", 1, 1)
    assert len(labels["lightsout.dev/node"]) <= 63
    job = build_action_job(JobRequest(node, "lab", UID, 1, 1, Action.STARTUP, image="runner:1"))
    assert job["metadata"]["annotations"]["lightsout.dev/node-name"] == node


def test_intent_annotation() -> None:
    annotation = build_action_job(REDFISH)["metadata"]["annotations"]["lightsout.dev/intent"]
    assert json.loads(annotation) == {
        "action": "startup",
        "desiredPowerState": "On",
        "generation": 7,
        "attempt": 2,
    }


# --- safety ---------------------------------------------------------------------------------


def test_owned_by_the_lightsout_node_in_its_namespace() -> None:
    job = build_action_job(REDFISH)
    assert job["metadata"]["namespace"] == "lab"
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "lightsout.dev/v1alpha1",
            "kind": "Node",
            "name": "big-box",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    configmap = build_extravars_configmap(REDFISH)
    assert configmap["metadata"]["ownerReferences"] == job["metadata"]["ownerReferences"]
    assert configmap["metadata"]["namespace"] == "lab"


def test_configmap_can_be_owned_by_its_job() -> None:
    configmap = build_extravars_configmap(REDFISH, job_uid="job-uid")
    (owner,) = configmap["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Job",
        "lo-big-box-startup-g7-a2",
        "job-uid",
    )


@pytest.mark.parametrize("request_", [REDFISH, WOL], ids=["redfish", "wol"])
def test_pod_is_locked_down(request_: JobRequest) -> None:
    job = build_action_job(request_)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["fsGroup"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(job)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security
    mounts = {m["mountPath"]: m for m in container(job)["volumeMounts"]}
    assert "/tmp" in mounts  # the only writable place
    assert all(m.get("readOnly") for path, m in mounts.items() if path != "/tmp")


@pytest.mark.parametrize("request_", [REDFISH, WOL], ids=["redfish", "wol"])
def test_credentials_only_reach_the_pod_as_a_read_only_volume(request_: JobRequest) -> None:
    job = build_action_job(request_)
    configmap = build_extravars_configmap(request_)
    for path, value in [*walk(job), *walk(configmap)]:
        assert value not in ("secretKeyRef", "envFrom"), path
    secret_uses = [path for path, value in walk(job) if value == request_.credentials_secret]
    assert secret_uses == [".spec.template.spec.volumes[2].secret.secretName"]
    mount = next(m for m in container(job)["volumeMounts"] if m["name"] == "credentials")
    assert mount == {
        "name": "credentials",
        "mountPath": "/etc/lightsout/credentials",
        "readOnly": True,
    }
    assert "args" not in container(job)
    assert container(job)["command"] == ["python", "-m", "lightsout.runner"]


@pytest.mark.parametrize(
    "extravars",
    [
        {"password": "x"},
        {"lightsout_redfish": {"bmc_password": "x"}},
        {"lightsout_proxmox": {"tokenSecret": "x"}},
        {"ssh": {"private_key": "-----BEGIN"}},
        {"items": [{"api_key": "x"}]},
        {"Passphrase": "x"},
    ],
)
def test_extravars_refuse_credential_values(extravars: dict[str, Any]) -> None:
    request_ = JobRequest("n", "lab", UID, 1, 1, Action.STARTUP, "img", extravars=extravars)
    with pytest.raises(ValueError, match="credential"):
        build_extravars_configmap(request_)


def test_extravars_may_name_where_credentials_are() -> None:
    allowed = {
        "password_key": "password",
        "username_key": "username",
        "credentials_secret_name": "bmc",
        "lightsout_credentials_dir": "/etc/lightsout/credentials",
        "ssh": {"privateKeySecretRef": {"name": "k", "key": "ssh-privatekey"}},
        "token_id_key": "tokenId",
    }
    request_ = JobRequest("n", "lab", UID, 1, 1, Action.STARTUP, "img", extravars=allowed)
    data = build_extravars_configmap(request_)["data"]["extravars.json"]
    assert json.loads(data) == allowed


def test_job_is_bounded_and_retries_belong_to_the_operator() -> None:
    spec = build_action_job(REDFISH)["spec"]
    assert spec["activeDeadlineSeconds"] == 720
    assert spec["ttlSecondsAfterFinished"] == 3600
    assert 0 <= spec["backoffLimit"] <= 3
    assert spec["podReplacementPolicy"] == "Failed"
    rules = spec["podFailurePolicy"]["rules"]
    assert {
        "action": "FailJob",
        "onExitCodes": {"containerName": "action", "operator": "NotIn", "values": [0]},
    } in rules
    assert all(rule["action"] == "FailJob" for rule in rules)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attempt": 0}, "attempt"),
        ({"backoff_limit": 6}, "backoff_limit"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
    ],
)
def test_request_refuses_unsafe_settings(changes: dict[str, Any], message: str) -> None:
    fields = {
        "node_name": "n",
        "namespace": "lab",
        "node_uid": UID,
        "generation": 1,
        "attempt": 1,
        "action": Action.STARTUP,
        "image": "img",
    }
    with pytest.raises(ValueError, match=message):
        JobRequest(**{**fields, **changes})


# --- the runner's contract ------------------------------------------------------------------


def test_environment_and_mounts_follow_the_runner_contract() -> None:
    job = build_action_job(REDFISH)
    assert env(job) == {
        "LIGHTSOUT_ACTION": "startup",
        "LIGHTSOUT_NODE": "big-box",
        "LIGHTSOUT_ATTEMPT": "2",
        "LIGHTSOUT_EXTRAVARS": "/etc/lightsout/extravars.json",
        "LIGHTSOUT_RESULT_PATH": "/dev/termination-log",
        "LIGHTSOUT_WORK_DIR": "/tmp/lightsout",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LIGHTSOUT_CREDENTIALS_DIR": "/etc/lightsout/credentials",
        "LIGHTSOUT_CA_DIR": "/etc/lightsout/ca",
        "LIGHTSOUT_OVERLAY_DIR": "/etc/lightsout/overlay",
        "LIGHTSOUT_PLAYBOOK": "startup-pxe.yml",
    }
    c = container(job)
    assert (c["terminationMessagePath"], c["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )
    extravars = next(m for m in c["volumeMounts"] if m["name"] == "extravars")
    assert (extravars["mountPath"], extravars["subPath"]) == (EXTRAVARS_PATH, "extravars.json")
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "extravars")
    assert volume["configMap"]["name"] == extravars_configmap_name(REDFISH)
    assert build_extravars_configmap(REDFISH)["metadata"]["name"] == volume["configMap"]["name"]


def test_optional_parts_are_left_out() -> None:
    job = build_action_job(WOL)
    assert "LIGHTSOUT_PLAYBOOK" not in env(job)
    assert "LIGHTSOUT_OVERLAY_DIR" not in env(job)
    assert "LIGHTSOUT_CA_DIR" not in env(job)
    pod = job["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "extravars", "credentials"]
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_host_network_only_when_asked() -> None:
    wol = build_action_job(WOL)["spec"]["template"]["spec"]
    assert (wol["hostNetwork"], wol["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert "hostNetwork" not in build_action_job(REDFISH)["spec"]["template"]["spec"]


def test_scheduling_from_the_request() -> None:
    pod = build_action_job(REDFISH)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
    ]


# --- reading outcomes -----------------------------------------------------------------------


def result(**fields: Any) -> str:
    base: dict[str, Any] = {"result": "Succeeded", "failedTask": None, "message": "", "values": {}}
    return json.dumps({**base, **fields})


def pod(
    *,
    message: str | None = None,
    exit_code: int = 0,
    reason: str | None = None,
    phase: str = "Succeeded",
    finished: str = "2026-03-01T12:00:00Z",
    waiting: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    state: dict[str, Any]
    if waiting is not None:
        state = {"waiting": waiting}
    elif phase in ("Pending",):
        state = {}
    elif phase == "Running":
        state = {"running": {"startedAt": "2026-03-01T11:59:00Z"}}
    else:
        terminated: dict[str, Any] = {"exitCode": exit_code, "finishedAt": finished}
        if message is not None:
            terminated["message"] = message
        if reason is not None:
            terminated["reason"] = reason
        state = {"terminated": terminated}
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-03-01T11:58:00Z"},
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [{"name": "action", "state": state}],
        },
    }


def job_obj(*conditions: tuple[str, str, str], **status: Any) -> dict[str, Any]:
    conds = [
        {"type": kind, "status": "True", "reason": reason, "message": message}
        for kind, reason, message in conditions
    ]
    return {
        "metadata": {
            "name": "lo-big-box-startup-g7-a2",
            "labels": {
                "lightsout.dev/action": "startup",
                "lightsout.dev/generation": "7",
                "lightsout.dev/attempt": "2",
            },
        },
        "status": {"conditions": conds, **status},
    }


COMPLETE = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
DEADLINE = ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
BACKOFF = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
POLICY = (
    "Failed",
    "PodFailurePolicy",
    "Container action for pod lab/p failed with exit code 137 matching FailJob rule at index 0",
)
FAILED_RESULT = result(
    result="Failed",
    failedTask="Power on through Redfish",
    message="HTTP 401: Unauthorized",
)

# fmt: off
OUTCOMES = [
    pytest.param(
        job_obj(COMPLETE, succeeded=1),
        [pod(message=result(message="powered on", values={"power_state": "On"}))],
        JobPhase.SUCCEEDED, "powered on", None, ObservedPowerState.ON,
        id="complete-with-result",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod(message=FAILED_RESULT)],
        JobPhase.FAILED, "HTTP 401", "Power on through Redfish", None,
        id="complete-but-runner-says-failed",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod()],
        JobPhase.SUCCEEDED, "the runner left no result", None, None,
        id="complete-without-result",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod(message="PLAY RECAP ok=3")],
        JobPhase.SUCCEEDED, "not JSON", None, None,
        id="complete-with-garbage",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod(message=result(message="x" * 5000)[:4096])],
        JobPhase.SUCCEEDED, "cut at 4096 bytes", None, None,
        id="complete-with-truncated-json",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod(message="[1, 2]")],
        JobPhase.SUCCEEDED, "not a JSON object", None, None,
        id="complete-with-json-array",
    ),
    pytest.param(
        job_obj(COMPLETE, succeeded=1), [pod(message='{"result": "Maybe"}')],
        JobPhase.SUCCEEDED, "no valid 'result'", None, None,
        id="complete-with-wrong-shape",
    ),
    pytest.param(
        job_obj(BACKOFF, failed=1), [pod(message=FAILED_RESULT, exit_code=2, phase="Failed")],
        JobPhase.FAILED, "HTTP 401: Unauthorized", "Power on through Redfish", None,
        id="failed-with-result",
    ),
    pytest.param(
        job_obj(DEADLINE, failed=1), [pod(message=FAILED_RESULT, exit_code=2, phase="Failed")],
        JobPhase.FAILED, "DeadlineExceeded", "Power on through Redfish", None,
        id="deadline-with-result",
    ),
    pytest.param(
        job_obj(DEADLINE), [],
        JobPhase.FAILED, "DeadlineExceeded: Job was active longer", None, None,
        id="deadline-before-any-pod",
    ),
    pytest.param(
        job_obj(POLICY, failed=1), [pod(exit_code=137, reason="OOMKilled", phase="Failed")],
        JobPhase.FAILED, "container exited with code 137 (OOMKilled)", None, None,
        id="oom-killed-without-result",
    ),
    pytest.param(
        job_obj(BACKOFF, failed=1), [pod(message=result(), exit_code=1, phase="Failed")],
        JobPhase.FAILED, "although the runner reported success", None, None,
        id="failed-although-runner-succeeded",
    ),
    pytest.param(
        job_obj(("FailureTarget", "PodFailurePolicy", "Container action failed"), active=1),
        [pod(phase="Running")],
        JobPhase.RUNNING, "finishing: Container action failed", None, None,
        id="failure-target-is-not-terminal",
    ),
    pytest.param(
        job_obj(active=1), [pod(phase="Running")],
        JobPhase.RUNNING, "", None, None,
        id="running",
    ),
    # The job controller behind (after an API server outage): its one pod already says it all.
    pytest.param(
        job_obj(active=1),
        [pod(message=result(message="powered on", values={"power_state": "On"}))],
        JobPhase.SUCCEEDED, "powered on", None, ObservedPowerState.ON,
        id="pod-succeeded-before-the-controller-noticed",
    ),
    pytest.param(
        job_obj(active=1),
        [pod(message=result(message="powered on")), pod(phase="Running")],
        JobPhase.RUNNING, "", None, None,
        id="pod-succeeded-but-another-runs",
    ),
    pytest.param(
        job_obj(active=1), [pod(message=FAILED_RESULT, exit_code=2, phase="Failed")],
        JobPhase.RUNNING, "", None, None,
        id="a-failed-pod-waits-for-the-controller",
    ),
    pytest.param(
        job_obj(active=1), [pod()],
        JobPhase.RUNNING, "", None, None,
        id="a-pod-without-result-waits-for-the-controller",
    ),
    pytest.param(
        job_obj(active=1),
        [pod(phase="Pending", waiting={"reason": "ImagePullBackOff", "message": "not found"})],
        JobPhase.STUCK, "its pod cannot start: ImagePullBackOff: not found", None, None,
        id="image-pull-back-off-cannot-start",
    ),
    pytest.param(
        job_obj(active=1),
        [pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                          "reason": "Unschedulable",
                                          "message": "0/3 nodes are available"}])],
        JobPhase.PENDING, "Unschedulable: 0/3 nodes are available", None, None,
        id="pending-unschedulable",
    ),
    pytest.param(
        job_obj(), [],
        JobPhase.PENDING, "waiting for its pod to be created", None, None,
        id="just-created",
    ),
    pytest.param(
        job_obj(active=1), [],
        JobPhase.RUNNING, "", None, None,
        id="active-pod-not-visible-counts-as-started",
    ),
    pytest.param(
        {"metadata": {}, "status": {"conditions": "garbage", "active": "x"}}, [{"status": 5}],
        JobPhase.PENDING, "waiting", None, None,
        id="garbage-status",
    ),
]
# fmt: on


@pytest.mark.parametrize(("job", "pods", "state", "message", "failed_task", "power"), OUTCOMES)
def test_parse_job_outcome(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    state: JobPhase,
    message: str,
    failed_task: str | None,
    power: ObservedPowerState | None,
) -> None:
    outcome = parse_job_outcome(job, pods)
    assert outcome.state is state
    assert message in outcome.message
    assert outcome.failed_task == failed_task
    assert outcome.power_state == power


def test_reason_and_runner_verdict_are_kept() -> None:
    outcome = parse_job_outcome(
        job_obj(DEADLINE, failed=1), [pod(message=FAILED_RESULT, exit_code=2, phase="Failed")]
    )
    assert outcome.reason == "DeadlineExceeded"
    assert outcome.runner_result is OperationResult.FAILED


def test_latest_finished_pod_carries_the_result() -> None:
    first = pod(message=result(result="Failed", message="first"), finished="2026-03-01T11:00:00Z")
    last = pod(message=result(result="Failed", message="last"), finished="2026-03-01T12:00:00Z")
    outcome = parse_job_outcome(job_obj(BACKOFF, failed=2), [last, first])
    assert outcome.message == "last"


def test_runaway_message_is_clipped() -> None:
    outcome = parse_job_outcome(
        job_obj(COMPLETE, succeeded=1), [pod(message=result(message="y" * 3000))]
    )
    assert len(outcome.message) <= 2048


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"power_state": "On"}, ObservedPowerState.ON),
        ({"power_state": "off"}, ObservedPowerState.OFF),
        ({"power_state": "Unknown"}, ObservedPowerState.UNKNOWN),
        ({"powerState": "ON "}, ObservedPowerState.ON),
        ({"power_state": 1}, None),
        ({"power_state": "Standby"}, None),
        ({}, None),
    ],
)
def test_power_state_from_values(
    values: dict[str, Any], expected: ObservedPowerState | None
) -> None:
    assert JobOutcome(JobPhase.SUCCEEDED, "", values=values).power_state == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "no result"),
        ("   ", "no result"),
        ('{"result": "Succeeded", "message": 5, "values": []}', ""),
    ],
)
def test_parse_runner_result_edges(text: str | None, problem: str) -> None:
    parsed, why = parse_runner_result(text)
    assert problem in why
    if not problem:
        assert parsed is not None
        assert parsed.values == {}
        assert parsed.message == "5"


def test_observe_job_reads_identity_from_labels() -> None:
    observed = observe_job(
        job_obj(COMPLETE, succeeded=1),
        [pod(message=result(message="ok", values={"power_state": "On"}))],
    )
    assert observed is not None
    assert (observed.action, observed.generation, observed.attempt) == (Action.STARTUP, 7, 2)
    assert (observed.state, observed.power_state, observed.message) == (
        JobPhase.SUCCEEDED,
        ObservedPowerState.ON,
        "ok",
    )


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {
            "lightsout.dev/action": "reboot",
            "lightsout.dev/generation": "1",
            "lightsout.dev/attempt": "1",
        },
        {
            "lightsout.dev/action": "startup",
            "lightsout.dev/generation": "one",
            "lightsout.dev/attempt": "1",
        },
    ],
)
def test_observe_job_ignores_jobs_without_our_identity(labels: dict[str, str]) -> None:
    assert observe_job({"metadata": {"labels": labels}, "status": {}}, []) is None
