"""The health check's pure parts: the Group's CronJob, the pods' results, what status says.

The end-to-end proof (a real CronJob, real BMC emulators) is tests/e2e/test_health_check.py;
these pin down the rules one by one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.commands import healthcheck
from lightsout.config import OperatorConfig
from lightsout.execution import health
from lightsout.planning.machine import healthjudge
from lightsout.planning.types import ConditionStatus, LeaseState, ObservedPowerState
from lightsout.runner import indexed
from lightsout.runner.config import ConfigError
from lightsout.state.references import ReferenceReason, Unresolved
from lightsout.state.status import NodeStatusView, node_status

CONFIG = OperatorConfig(identity="me", runner_image="runner:1", job_tolerations=("runner",))


def status(**fields: Any) -> NodeStatusView:
    """A Node's status holding `fields`, as the codec reads it."""
    return node_status({"status": fields})


def group(**check: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "lab", "namespace": "ns", "uid": "g-uid"},
        "spec": {"healthCheck": {"schedule": "0 * * * *", **check}},
    }


def redfish(
    name: str, secret: str, *, endpoint: str = "https://10.0.0.1", ca: str = "ca", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "group": "lab",
            "kubernetesNodeName": name,
            "driver": {
                "redfish": {
                    "endpoint": endpoint,
                    "systemId": name[:128],
                    "credentialsSecretRef": {"name": secret},
                    "tls": {"caSecretRef": {"name": ca}},
                }
            },
            **spec,
        },
    }


def build(
    group: dict[str, Any], machines: list[dict[str, Any]], config: OperatorConfig = CONFIG
) -> health.HealthObjects:
    """`build_health_objects` with the Group's and the machines' specs read, as `healthsync`
    gives them."""
    members = health.readable(machines)
    assert len(members) == len(machines), "every machine's spec reads"
    return health.build_health_objects(group, inputs.group_spec(group), members, config)


def test_one_indexed_pod_per_machine_with_only_the_groups_secrets() -> None:
    machines = [redfish("b", "shared"), redfish("a", "shared"), redfish("c", "own")]
    objects = build(group(), machines)
    cron = objects.cronjob
    assert cron["metadata"]["name"] == "lo-health-lab"
    assert cron["metadata"]["ownerReferences"][0]["uid"] == "g-uid"
    spec = cron["spec"]
    assert (spec["schedule"], spec["concurrencyPolicy"]) == ("0 * * * *", "Forbid")
    job = spec["jobTemplate"]["spec"]
    assert (job["completionMode"], job["completions"], job["backoffLimitPerIndex"]) == (
        "Indexed",
        3,
        1,
    )
    pod = job["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["tolerations"] == [{"key": "runner", "operator": "Exists"}]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"shared", "own", "ca"}
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    # Machines in name order; entry N is what the pod of completion index N checks.
    entries = json.loads(objects.configmap["data"]["machines.json"])
    assert [e["node"] for e in entries] == ["a", "b", "c"]
    assert env[f"LIGHTSOUT_CREDENTIALS_DIR_{entries[0]['credentials']}"].endswith("-1")
    assert entries[0]["credentials"] == entries[1]["credentials"] != entries[2]["credentials"]


def test_the_pods_use_the_host_network_when_a_machine_is_woken_by_lan_or_told_to() -> None:
    def host_network(machines: list[dict[str, Any]], config: OperatorConfig = CONFIG) -> bool:
        cron = build(group(), machines, config).cronjob
        return bool(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"].get("hostNetwork"))

    wol = redfish("pc", "s")
    ssh = {"host": "10.0.0.9", "user": "ops", "privateKeySecretRef": {"name": "k"}}
    wol["spec"]["driver"] = {"wol": {"macAddress": "52:54:00:12:34:56", "ssh": ssh}}
    assert not host_network([redfish("a", "s")])
    assert host_network([redfish("a", "s"), wol])
    assert host_network([redfish("a", "s")], replace(CONFIG, job_host_network=True))


def test_a_machine_whose_spec_does_not_read_or_whose_secret_is_missing_is_not_checked() -> None:
    bad = redfish("bad", "s", endpoint="http://10.0.0.1")  # refused: not https
    machines = [redfish("a", "s"), bad, redfish("c", "gone")]
    checked = health.checkable(machines, lambda m: m["metadata"]["name"] == "c" or None)
    members = health.readable(checked)
    assert [(m["metadata"]["name"], spec.kubernetes_node_name) for m, spec in members] == [
        ("a", "a")
    ]


def test_the_default_schedule_is_hourly() -> None:
    unscheduled = {"metadata": group()["metadata"], "spec": {}}
    cron = build(unscheduled, [redfish("a", "s")]).cronjob
    assert cron["spec"]["schedule"] == "0 * * * *"


def test_the_hash_changes_with_the_schedule_and_the_members_only() -> None:
    one = build(group(), [redfish("a", "s")]).spec_hash
    again = build(group(), [redfish("a", "s")]).spec_hash
    other = build(group(schedule="*/1 * * * *"), [redfish("a", "s")])
    more = build(group(), [redfish("a", "s"), redfish("b", "s")])
    assert one == again
    assert len({one, other.spec_hash, more.spec_hash}) == 3


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("Request failed: <urlopen error [Errno 111] Connection refused>", "BMCUnreachable"),
        ("HTTP 401: Incorrect username or password", "AuthenticationFailed"),
        ("failed: Incorrect password provided", "AuthenticationFailed"),
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "TLSError"),
        ("HTTP 404: no such resource on this BMC", "UnknownSystem"),
        ("something else entirely", "CheckFailed"),
    ],
)
def test_a_failed_check_is_named_by_its_cause(message: str, reason: str) -> None:
    assert healthjudge.classify(message) == reason


def pod(message: dict[str, Any] | str, started: str = "2026-01-01T10:00:00Z") -> dict[str, Any]:
    text = message if isinstance(message, str) else json.dumps(message)
    return {
        "metadata": {
            "name": "check-1-0-x",
            "labels": {"batch.kubernetes.io/job-name": "check-1", "lightsout.dev/group": "lab"},
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "action",
                    "state": {"terminated": {"message": text, "startedAt": started}},
                }
            ]
        },
    }


OK = {"result": "Succeeded", "message": "", "values": {"node": "a", "power_state": "On"}}


def test_a_pod_result_is_filed_under_the_machine_it_names() -> None:
    found = health.pod_record(pod(OK))
    assert found is not None
    name, record = found
    assert (name, record["job"], record["powerState"]) == ("a", "check-1", "On")
    assert health.pod_record(pod({**OK, "values": {"power_state": "On"}})) is None
    assert health.pod_record(pod("not json")) is None


def record(result: dict[str, Any], started: str = "2026-01-01T10:00:00Z") -> dict[str, Any]:
    found = health.pod_record(pod(result, started))
    assert found is not None
    return found[1]


def test_a_new_result_sets_the_health_fields_and_hands_the_power_to_the_fsm() -> None:
    seen = healthjudge.assess(status(phase="Off"), record(OK), LeaseState.FREE)
    assert seen.record is not None and seen.record["reason"] == "Healthy"
    assert seen.condition is not None and seen.condition.status is ConditionStatus.TRUE
    assert (seen.power_state, seen.observed_power_state) == (
        ObservedPowerState.ON,
        ObservedPowerState.ON,
    )
    assert seen.power_state_at is not None
    # The same result again changes nothing, but still tells the FSM what was read.
    again = healthjudge.assess(
        status(phase="Off", lastHealthCheck=seen.record), record(OK), LeaseState.FREE
    )
    assert again.record is None and again.power_state is ObservedPowerState.ON


def test_a_failed_check_is_unhealthy_and_its_power_state_unknown() -> None:
    failed = {"result": "Failed", "message": "HTTP 401: nope", "values": {"node": "a"}}
    seen = healthjudge.assess(status(phase="Off"), record(failed), LeaseState.FREE)
    assert seen.condition is not None
    assert (seen.condition.status, seen.condition.reason) == (
        ConditionStatus.FALSE,
        "AuthenticationFailed",
    )
    assert seen.observed_power_state is ObservedPowerState.UNKNOWN and seen.power_state_at is None


@pytest.mark.parametrize(
    ("phase", "lease"),
    [
        ("PoweringOn", LeaseState.FREE),
        ("Off", LeaseState.HELD_BY_ME),
        ("Ready", LeaseState.HELD_BY_OTHER),
    ],
)
def test_a_machine_an_action_drives_is_skipped_and_says_so(phase: str, lease: LeaseState) -> None:
    seen = healthjudge.assess(status(phase=phase), record(OK), lease)
    assert seen.record is not None
    assert (seen.record["result"], seen.record["reason"]) == ("Skipped", "ActionInProgress")
    assert seen.condition is None and seen.observed_power_state is None
    assert seen.power_state is ObservedPowerState.UNKNOWN


def test_the_runner_picks_its_machine_by_completion_index(tmp_path: Path) -> None:
    entries = [{"node": "a", "credentials": 1, "ca": None, "overlay": None, "playbook": "x.yml"}]
    (tmp_path / "machines.json").write_text(json.dumps(entries))
    env = {
        "LIGHTSOUT_MACHINES_DIR": str(tmp_path),
        "JOB_COMPLETION_INDEX": "0",
        "LIGHTSOUT_CREDENTIALS_DIR_0": "/etc/lightsout/credentials-0",
        "LIGHTSOUT_CREDENTIALS_DIR_1": "/etc/lightsout/credentials-1",
    }
    out, node = indexed.machine_env(env)
    assert node == "a"
    assert out["LIGHTSOUT_CREDENTIALS_DIR"] == "/etc/lightsout/credentials-1"
    assert "LIGHTSOUT_CREDENTIALS_DIR_0" not in out
    assert (out["LIGHTSOUT_EXTRAVARS"], out["LIGHTSOUT_PLAYBOOK"]) == (
        str(tmp_path / "0.json"),
        "x.yml",
    )
    with pytest.raises(ConfigError, match="no machine at index 1"):
        indexed.machine_env({**env, "JOB_COMPLETION_INDEX": "1"})


def test_a_first_check_pod_picks_its_machine_by_name(tmp_path: Path) -> None:
    entries = [{"node": name} for name in ("a", "b", "c")]
    (tmp_path / "machines.json").write_text(json.dumps(entries))
    env = {"LIGHTSOUT_MACHINES_DIR": str(tmp_path), "LIGHTSOUT_CHECK_ONLY": "c,b"}
    picked = [indexed.machine_env({**env, "JOB_COMPLETION_INDEX": i}) for i in ("0", "1")]
    assert [(node, out["LIGHTSOUT_EXTRAVARS"]) for out, node in picked] == [
        ("c", str(tmp_path / "2.json")),
        ("b", str(tmp_path / "1.json")),
    ]
    with pytest.raises(ConfigError, match="gone is no longer in the Group's machine list"):
        indexed.machine_env({**env, "LIGHTSOUT_CHECK_ONLY": "gone", "JOB_COMPLETION_INDEX": "0"})


def test_the_cli_words_each_machine_and_counts_the_missing() -> None:
    failed = {"result": "Failed", "message": "HTTP 401: no", "values": {"node": "b"}}
    pods = [pod(OK), pod(failed)]
    lines, healthy = healthcheck.report(pods, None, 3)
    assert lines == [
        "a: Healthy, power On",
        "b: Unhealthy, AuthenticationFailed: HTTP 401: no",
        "1 machine(s) of the Group left no result (their pods did not run)",
    ]
    assert not healthy
    assert healthcheck.report(pods, ["a"], 3) == (["a: Healthy, power On"], True)
    assert healthcheck.finished({}, pods, 2) and not healthcheck.finished({}, pods, 3)


def test_a_machine_left_out_for_a_missing_configmap_says_so_until_it_exists() -> None:
    missing = Unresolved(
        ReferenceReason.CONFIGMAP_NOT_FOUND, "playbook overlay ConfigMap lab/site not found"
    )
    nothing_new = healthjudge.assess(status(phase="Off"), None, LeaseState.FREE)
    out = healthjudge.not_checked(nothing_new, missing)
    assert out.condition is not None
    assert (out.condition.status, out.condition.reason) == (
        ConditionStatus.FALSE,
        "ConfigMapNotFound",
    )
    assert out.condition.message.startswith("playbook overlay ConfigMap lab/site not found")
    held = {"type": "Healthy", "status": "False", "reason": "ConfigMapNotFound"}
    back = healthjudge.included_again(nothing_new, status(conditions=[held]))
    assert back.condition is not None and back.condition.status is ConditionStatus.UNKNOWN
    # Once it is Unknown (or any check's reason), nothing more is written.
    unknown = {**held, "status": "Unknown", "reason": back.condition.reason}
    assert healthjudge.included_again(nothing_new, status(conditions=[unknown])).condition is None
