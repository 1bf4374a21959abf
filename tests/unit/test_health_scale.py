"""A Group's health check at the size of a whole fleet, proven without a cluster.

The real kubelet runs a check of a few more machines than the Job runs at once
(tests/e2e/test_real_kubelet.py): pods in more than one wave, every result landing. What only
size could break is proven here, on the code the pods and the operator run: the CronJob built
for 60 and 100 machines, the termination message of the worst result a pod can write (written
by the runner's own `main`, Ansible replaced by the events it would send, read back by
`health.pod_record` after the kubelet's 4 KiB cut), and that 60 machines' results could never
have shared one message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ansible_runner
import pytest

from lightsout.config import OperatorConfig
from lightsout.execution import health
from lightsout.execution.jobs import CONTAINER_NAME
from lightsout.execution.results import TERMINATION_MESSAGE_LIMIT
from lightsout.planning.machine import healthjudge
from lightsout.planning.types import LeaseState
from lightsout.runner import main as runner_main
from lightsout.state.status import node_status
from lightsout.text import MARK
from tests.unit.test_health import build, redfish

ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig(identity="me", runner_image="runner:1")
#: The longest name of a Kubernetes object (a DNS-1123 subdomain of 253 characters).
LONGEST_NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
#: The longest endpoint a Node's spec accepts (HttpsUrl: 2048 characters).
LONGEST_ENDPOINT = "https://bmc.example/" + "p" * (2048 - len("https://bmc.example/"))
#: A BMC's answer that costs the most per character once written as JSON: quotes,
#: backslashes, control characters (6 bytes each), and 4-byte UTF-8.
NASTY = '"\\\n\t\x01\x1f🔥é' * 400
#: The same on one line (Ansible's error lines are read line by line).
NASTY_LINE = NASTY.replace("\n", " ")

Events = Callable[[Mapping[str, Any]], tuple[list[dict[str, Any]], str, int]]


def group() -> dict[str, Any]:
    return {
        "metadata": {"name": "lab", "namespace": "ns", "uid": "g-uid"},
        "spec": {"healthCheck": {"schedule": "0 * * * *"}},
    }


def machine(name: str, endpoint: str = "https://10.0.0.1", **spec: Any) -> dict[str, Any]:
    return redfish(name, "bmc", endpoint=endpoint, ca="bmc-ca", **spec)


def job_spec(objects: health.HealthObjects) -> dict[str, Any]:
    spec: dict[str, Any] = objects.cronjob["spec"]["jobTemplate"]["spec"]
    return spec


def test_the_groups_parallelism_sets_the_waves_of_a_run_and_of_a_first_check() -> None:
    names = [f"m{i}" for i in range(5)]
    small = group()
    small["spec"]["healthCheck"]["parallelism"] = 2
    objects = build(small, [machine(n) for n in names])
    assert job_spec(objects)["parallelism"] == 2
    first = health.first_check_job(objects.cronjob, objects.spec_hash, names[:3])
    assert (first["spec"]["completions"], first["spec"]["parallelism"]) == (3, 2)
    one = health.first_check_job(objects.cronjob, objects.spec_hash, names[:1])
    assert (one["spec"]["completions"], one["spec"]["parallelism"]) == (1, 1)


@pytest.mark.parametrize("count", [60, 100])
def test_a_fleet_is_checked_by_one_indexed_job_with_a_pod_per_machine(count: int) -> None:
    names = [f"m{i:03d}" for i in range(count)]
    objects = build(group(), [machine(n) for n in reversed(names)])
    job = job_spec(objects)
    assert (job["completionMode"], job["completions"]) == ("Indexed", count)
    # At most the Group's parallelism (8 by default) at once, so a fleet is checked in waves
    # within one deadline.
    assert job["parallelism"] == 8 < count
    assert job["activeDeadlineSeconds"] == health.DEADLINE_SECONDS
    # One pod that cannot run is retried once, and never stops the other machines' checks.
    assert (job["backoffLimitPerIndex"], job.get("backoffLimit")) == (1, None)
    # Entry N of the list, with its own extravars N.json, is what the pod of index N checks.
    data = objects.configmap["data"]
    entries = json.loads(data[health.MACHINES_FILE])
    assert [e["node"] for e in entries] == names
    for index, name in enumerate(names):
        assert json.loads(data[f"{index}.json"])["lightsout_node"]["name"] == name
    # The machines share one Secret: one volume, not one per machine.
    volumes = job["template"]["spec"]["volumes"]
    assert sorted(v["secret"]["secretName"] for v in volumes if "secret" in v) == [
        "bmc",
        "bmc-ca",
    ]


def test_the_machine_list_of_a_hundred_longest_machines_fits_a_configmap() -> None:
    """A ConfigMap holds at most 1 MiB; a CronJob, like any object, 1.5 MiB in etcd."""
    members = [
        machine(f"{i:03d}{LONGEST_NAME[3:]}", LONGEST_ENDPOINT, kubernetesNodeName=LONGEST_NAME)
        for i in range(100)
    ]
    objects = build(group(), members)
    assert job_spec(objects)["completions"] == 100
    assert sum(len(v.encode()) for v in objects.configmap["data"].values()) < 1024 * 1024
    assert len(json.dumps(objects.cronjob).encode()) < 1536 * 1024


# ---------------------------------------------------------------- the runner of one pod
def fake_ansible(monkeypatch: pytest.MonkeyPatch, events: Events) -> list[Mapping[str, Any]]:
    """ansible_runner.run replaced: `events(extravars)` says what the playbook run sends."""
    seen: list[Mapping[str, Any]] = []

    def run(*, extravars: Mapping[str, Any], event_handler: Any, **_: Any) -> SimpleNamespace:
        seen.append(extravars)
        sent, status, rc = events(extravars)
        for event in sent:
            event_handler(event)
        return SimpleNamespace(status=status, rc=rc)

    monkeypatch.setattr(ansible_runner, "run", run)
    return seen


def stats(**values: Any) -> dict[str, Any]:
    """The event of `playbooks/tasks/report.yml`'s set_stats."""
    return {"event": "playbook_on_stats", "event_data": {"artifact_data": {"lightsout": values}}}


def failed(task: str, role: str, message: str) -> dict[str, Any]:
    data = {"task": task, "role": role, "res": {"msg": message}}
    return {"event": "runner_on_failed", "event_data": data}


def mounted(objects: health.HealthObjects, tmp_path: Path) -> dict[str, str]:
    """The pod's environment as the CronJob sets it, every mount a directory under tmp_path."""
    container = job_spec(objects)["template"]["spec"]["containers"][0]
    assert container["name"] == CONTAINER_NAME
    env = {e["name"]: e["value"] for e in container["env"]}
    machines = tmp_path / "machines"
    machines.mkdir()
    for key, text in objects.configmap["data"].items():
        (machines / key).write_text(text)
    env["LIGHTSOUT_MACHINES_DIR"] = str(machines)
    for key, path in list(env.items()):
        if key.startswith(("LIGHTSOUT_CREDENTIALS_DIR_", "LIGHTSOUT_CA_DIR_")):
            directory = tmp_path / Path(path).name
            directory.mkdir()
            (directory / "username").write_text("admin")
            (directory / "password").write_text("s3cret-pass")
            (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
            env[key] = str(directory)
        elif key.startswith("LIGHTSOUT_OVERLAY_DIR_"):
            env[key] = str(tmp_path / Path(path).name)
    env["LIGHTSOUT_PLAYBOOK_DIR"] = str(ROOT / "playbooks")
    env["LIGHTSOUT_ROLES_DIR"] = str(ROOT / "roles")
    env["LIGHTSOUT_WORK_DIR"] = str(tmp_path / "work")
    return env


def run_pod(env: Mapping[str, str], index: int, tmp_path: Path) -> str:
    """What the pod of completion `index` writes to its termination-message file."""
    result = tmp_path / f"termination-log-{index}"
    code = runner_main.main(
        {**env, "JOB_COMPLETION_INDEX": str(index), "LIGHTSOUT_RESULT_PATH": str(result)}
    )
    # A finding is not a failed pod: every pod that wrote its machine's result exits 0.
    assert code == 0
    return result.read_text(encoding="utf-8")


def kubelet_pod(written: str, name: str = "check-1-0-x") -> dict[str, Any]:
    """The finished pod as the kubelet reports it: it keeps the LAST 4096 bytes of the file
    (`tail.ReadAtMost`), so a longer result would lose its head and no longer be JSON."""
    kept = written.encode()[-TERMINATION_MESSAGE_LIMIT:].decode(errors="replace")
    terminated = {"message": kept, "startedAt": "2026-01-01T10:00:00Z", "exitCode": 0}
    return {
        "metadata": {
            "name": name,
            "labels": {"batch.kubernetes.io/job-name": "check-1", health.LABEL_GROUP: "lab"},
        },
        "status": {
            "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}]
        },
    }


def land(written: str) -> tuple[str, dict[str, Any]]:
    found = health.pod_record(kubelet_pod(written))
    assert found is not None, written
    return found


_BMC_FAILURE = f"GET system on {LONGEST_ENDPOINT} failed: HTTP 500: {NASTY}"
_TASK = "Read the power state of the system the Node names " + "x" * 400

#: The longest results a health-check pod writes: (what the playbook run sends, its status, rc).
WORST: dict[str, Events] = {
    # The driver role's own failure: "<request> on <endpoint> failed: <the BMC's words>".
    "bmc-failure": lambda _: (
        [failed(_TASK, "redfish_power", _BMC_FAILURE), stats(driver="redfish")],
        "failed",
        2,
    ),
    # Only characters that JSON escapes into six bytes each.
    "control-characters": lambda _: ([failed(_TASK, "", "\x01" * 9000)], "failed", 2),
    # Ansible's own error lines (a syntax error in an overlay playbook fails before any task).
    "ansible-errors": lambda _: (
        [{"event": "verbose", "stdout": f"ERROR! {NASTY_LINE}\n" * 5}],
        "failed",
        4,
    ),
    # A site playbook reporting more values than a termination message holds.
    "oversized-values": lambda _: (
        [stats(power_state="On", driver="redfish", changed=False, inventory="v" * 9000)],
        "successful",
        0,
    ),
}


@pytest.mark.parametrize("case", sorted(WORST))
def test_the_worst_result_of_a_pod_fits_its_termination_message_and_lands(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [machine("a-first"), machine(LONGEST_NAME, LONGEST_ENDPOINT)]
    objects = build(group(), members)
    seen = fake_ansible(monkeypatch, WORST[case])
    written = run_pod(mounted(objects, tmp_path), 1, tmp_path)
    assert seen[0]["lightsout_node"]["name"] == LONGEST_NAME  # index 1: the longest machine
    print(f"{case}: {len(written.encode())} bytes")
    assert len(written.encode()) <= TERMINATION_MESSAGE_LIMIT
    node, record = land(written)
    # Filed under its own machine, with a result and both ends of a message cut in the middle.
    assert node == LONGEST_NAME
    assert record["result"] in {"Succeeded", "Failed"}
    assert len(record["message"]) > 1 and MARK in record["message"]
    assessed = healthjudge.assess(
        node_status({"status": {"phase": "Off"}}), record, LeaseState.FREE
    )
    assert assessed.record is not None and assessed.condition is not None


def test_a_long_site_playbook_name_and_a_runner_error_fit_and_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    playbook = "h" * (253 - len(".yml")) + ".yml"
    overlay = dict(playbooks={"configMapName": "site", "healthcheck": playbook})
    objects = build(group(), [machine(LONGEST_NAME, **overlay)])
    env = mounted(objects, tmp_path)
    (Path(env["LIGHTSOUT_OVERLAY_DIR_0"])).mkdir()
    (Path(env["LIGHTSOUT_OVERLAY_DIR_0"]) / playbook).write_text("---\n")
    fake_ansible(
        monkeypatch,
        lambda _: (
            [stats(power_state="Unknown", driver="redfish", changed=False)],
            "successful",
            0,
        ),
    )
    written = run_pod(env, 0, tmp_path)
    assert len(written.encode()) <= TERMINATION_MESSAGE_LIMIT
    node, record = land(written)
    assert (node, record["result"], record["powerState"]) == (LONGEST_NAME, "Succeeded", "Unknown")
    assert record["message"].startswith(f"{playbook} succeeded")

    def explode(**_: Any) -> SimpleNamespace:
        raise RuntimeError(NASTY)

    monkeypatch.setattr(ansible_runner, "run", explode)
    written = run_pod(env, 0, tmp_path)
    assert len(written.encode()) <= TERMINATION_MESSAGE_LIMIT
    node, record = land(written)
    assert (node, record["result"]) == (LONGEST_NAME, "Failed")
    assert record["message"].startswith("runner error: RuntimeError: ")


SIXTY = 60


def test_sixty_machines_results_land_each_under_its_own_name_and_would_not_fit_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pod writes only its own machine's result: all 60 land, and together they are more
    than a single termination message could have carried."""
    names = [f"m{i:02d}" for i in range(SIXTY)]
    # Every third machine On: each must get its own system's state, not a neighbour's.
    power = {name: "On" if i % 3 == 0 else "Off" for i, name in enumerate(names)}
    objects = build(group(), [machine(n) for n in names])

    def bmc(extravars: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str, int]:
        state = power[extravars["lightsout_node"]["name"]]
        return [stats(power_state=state, driver="redfish", changed=False)], "successful", 0

    fake_ansible(monkeypatch, bmc)
    env = mounted(objects, tmp_path)
    written = [run_pod(env, index, tmp_path) for index in range(job_spec(objects)["completions"])]
    sizes = [len(text.encode()) for text in written]
    landed = dict(land(text) for text in written)
    assert {name: record["powerState"] for name, record in landed.items()} == power
    assert max(sizes) <= TERMINATION_MESSAGE_LIMIT
    print(f"{SIXTY} results: {min(sizes)}-{max(sizes)} bytes each, {sum(sizes)} in all")
    assert sum(sizes) > TERMINATION_MESSAGE_LIMIT
