"""An action Job of Lights-Out run by a real kubelet, containerd and runc, in the runner image.

Also a Group's health check of a few more machines than its Job runs at once (one Indexed Job,
one pod per machine, in more than one wave): every machine's own result lands in its status.

The Job is the operator's own (lightsout.execution.jobs.build_action_job: non-root, read-only
root, no service account token, credentials as a Secret volume, result through the termination
message) and its result is read the way the operator reads it (execution.results). The node is
lightsout_lab.realnode: the kubelet built with the control plane, Debian's containerd, the
runner image from `make images` imported into it. The runner powers on a Redfish machine of
sushy-tools on 127.0.0.1, reached through hostNetwork.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from kubernetes import client

from lightsout.execution.health import DEADLINE_SECONDS
from lightsout.execution.jobs import (
    CREDENTIALS_DIR,
    LABEL_NODE,
    RUN_AS_USER,
    JobRequest,
    build_action_job,
    build_extravars_configmap,
)
from lightsout.execution.results import TERMINATION_MESSAGE_LIMIT, parse_job_outcome
from lightsout.planning.types import Action, JobPhase, ObservedPowerState
from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.realnode import (
    PLACEMENT,
    PLACEMENT_ENV,
    ImageArchive,
    RealNode,
    build_images,
)
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.mount_support import SECRET, secret_gone_before_the_mount
from tests.e2e.test_health_check import CRONJOB, GROUP, SCHEDULE, health, run_check, wait_checked
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, holds, reasons_until, wait_for
from tests.harness.watching import Recorder

pytestmark = pytest.mark.e2e

MACHINE = "box-1"


@pytest.fixture(scope="module")
def images() -> dict[str, ImageArchive]:
    """`make images`: both images (instant when the cache is warm)."""
    return build_images()


@pytest.fixture(scope="module")
def runner_image(images: dict[str, ImageArchive]) -> tuple[str, Path]:
    return images["runner"].tag, images["runner"].path


@pytest.fixture(scope="module")
def real_node(
    cluster: Cluster, images: dict[str, ImageArchive], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealNode]:
    started = time.monotonic()
    node = RealNode(
        cluster=cluster,
        directory=tmp_path_factory.mktemp("real-node"),
        images=[image.path for image in images.values()],
    ).start()
    print(
        f"\nreal node: started in {time.monotonic() - started:.1f}s (containerd, images "
        f"imported), Node Ready {node.ready_seconds:.1f}s after the kubelet started"
    )
    yield node
    node.stop()


def _machine(cluster: Cluster, namespace: str, bmc: SushyEmulator, system: str) -> str:
    """The Lights-Out Node resource the Job belongs to (its owner); returns its uid."""
    manifest = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": MACHINE, "namespace": namespace},
        "spec": {
            "desiredPowerState": "Off",
            "group": "lab",
            "kubernetesNodeName": MACHINE,
            "driver": {
                "redfish": {
                    "endpoint": bmc.endpoint,
                    "systemId": system,
                    "credentialsSecretRef": {"name": "bmc"},
                }
            },
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    uid: str = get_json(cluster, "lsn", MACHINE, "-n", namespace)["metadata"]["uid"]
    return uid


def _credentials_secret(cluster: Cluster, namespace: str, bmc: SushyEmulator) -> None:
    cluster.kubectl(
        "create",
        "secret",
        "generic",
        "bmc",
        "-n",
        namespace,
        f"--from-literal=username={bmc.username}",
        f"--from-literal=password={bmc.password}",
        f"--from-file=ca.crt={bmc.ca_path}",
    )


def _finished(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    job = get_json(cluster, "job", name, "-n", namespace)
    conditions = (job or {}).get("status", {}).get("conditions", [])
    done = any(c["type"] in {"Complete", "Failed"} and c["status"] == "True" for c in conditions)
    return job if done else None


def test_startup_job_runs_in_the_runner_image_under_a_real_kubelet(
    cluster: Cluster, namespace: str, real_node: RealNode, runner_image: tuple[str, Path]
) -> None:
    system = FakeSystem(uuid=str(uuid.uuid4()), name=MACHINE, power_state="Off")
    with SushyEmulator([system]) as bmc:
        _credentials_secret(cluster, namespace, bmc)
        request = JobRequest(
            node_name=MACHINE,
            namespace=namespace,
            node_uid=_machine(cluster, namespace, bmc, system.uuid),
            generation=1,
            attempt=1,
            action=Action.STARTUP,
            image=runner_image[0],
            image_pull_policy="Never",  # imported into containerd; there is no registry
            extravars={
                "lightsout_node": {"name": MACHINE, "namespace": namespace},
                "lightsout_driver": "redfish",
                "lightsout_redfish": {
                    "endpoint": bmc.endpoint,
                    "system_id": system.uuid,
                    "validate_certs": True,
                    "boot_override": "None",
                    "graceful_timeout": 20,
                    "transition_timeout": 60,
                    "poll_interval": 1,
                },
            },
            credentials_secret="bmc",
            # sushy-tools listens on the host's 127.0.0.1.
            host_network=True,
            **PLACEMENT,
        )
        job_spec = build_action_job(request)
        assert bmc.password not in json.dumps(job_spec)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(build_extravars_configmap(request)))
        cluster.kubectl("apply", "-f", "-", input=json.dumps(job_spec))
        name = job_spec["metadata"]["name"]
        started = time.monotonic()
        job = wait_for(lambda: _finished(cluster, namespace, name), 300, f"Job {name} to finish")
        took = time.monotonic() - started
        pods = get_json(cluster, "pods", "-n", namespace, "-l", f"job-name={name}")["items"]

        # The operator's reading of the Job: succeeded, the machine is On, and it changed.
        outcome = parse_job_outcome(job, pods)
        assert outcome.state is JobPhase.SUCCEEDED, (outcome, _explain(real_node, pods))
        assert outcome.power_state is ObservedPowerState.ON
        assert dict(outcome.values) == {"power_state": "On", "driver": "redfish", "changed": True}
        # The BMC saw exactly one power-on order, and the machine is on.
        assert bmc.count_power_requests(system.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests(system.uuid) == 1
        assert bmc.power_state(system.uuid) == "On"

    # It ran as a container of the runner image on the real node, not as a host process.
    (pod,) = pods
    assert pod["spec"]["nodeName"] == real_node.node_name
    node = get_json(cluster, "node", real_node.node_name)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] == runner_image[0]
    assert status["imageID"].startswith("sha256:")
    assert status["containerID"].startswith("containerd://")
    # What runc was told to run (the OCI spec containerd wrote), not only what was asked for.
    spec = _oci_spec(real_node, status["containerID"].removeprefix("containerd://"))
    assert spec["process"]["user"]["uid"] == RUN_AS_USER
    assert spec["root"].get("readonly") is True
    assert not spec["process"]["capabilities"].get("effective")
    mounts = {m["destination"]: m for m in spec["mounts"]}
    assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts
    assert "ro" in mounts[CREDENTIALS_DIR]["options"]
    assert "/dev/termination-log" in mounts
    # The runner's output, as the kubelet stored it and as `kubectl logs` (`lightsout logs`)
    # gets it: the API server asks the kubelet at the Node's one address, 127.0.0.1.
    logs = real_node.container_log(namespace, pod["metadata"]["name"])
    assert "startup" in logs
    assert bmc.password not in logs
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    served = cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"]).stdout
    lines = served.splitlines()  # the CRI log file holds them behind a time and stream prefix
    assert lines and all(line in logs for line in lines) and "startup" in served, served
    print(
        f"startup Job {name}: Complete {took:.1f}s after creation; "
        f"termination message {len(status['state']['terminated']['message'])} bytes; "
        f"power-on orders seen by the BMC: 1"
    )


def test_operator_image_runs_as_a_locked_down_pod(
    cluster: Cluster, namespace: str, real_node: RealNode, images: dict[str, ImageArchive]
) -> None:
    """The operator image starts under the real kubelet as its non-root user, read-only, with
    no token, and its `lightsout` prints the CRDs this checkout generates."""
    operator = images["operator"]
    assert set(real_node.image_refs()) >= {operator.tag, images["runner"].tag}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-crds", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": PLACEMENT["node_selector"],
            "tolerations": PLACEMENT["tolerations"],
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "operator",
                    "image": operator.tag,
                    "imagePullPolicy": "Never",
                    "args": ["crds"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    done = wait_for(
        lambda: _phase_done(cluster, namespace, "operator-crds"), 180, "the operator pod to end"
    )
    assert done["status"]["phase"] == "Succeeded", _explain(real_node, [done])
    (status,) = done["status"]["containerStatuses"]
    spec = _oci_spec(real_node, status["containerID"].removeprefix("containerd://"))
    assert spec["process"]["user"]["uid"] == 10001  # the image's USER, not root
    assert spec["root"].get("readonly") is True
    printed = _log_text(real_node.container_log(namespace, "operator-crds"))
    expected = subprocess.run(
        [str(Path(sys.executable).parent / "lightsout"), "crds"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == expected


#: A runner image no node has and no registry serves (nothing listens on port 9): its pull
#: fails at once, as it does for a mistyped image or an air-gapped node.
ABSENT_IMAGE = "127.0.0.1:9/lightsout/runner:absent"


def test_action_job_whose_pod_cannot_start_is_a_failed_attempt_naming_the_cause(
    crds: Cluster,
    namespace: str,
    real_node: RealNode,
    runner_image: tuple[str, Path],
    kube_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    """Issue 19, part 2: the operator's startup Job lands on the real node with an image that
    cannot be pulled. The attempt fails as soon as the kubelet says so (the Job's deadline is
    bootTimeoutSeconds + 120 s = 3120 s, far beyond this test's wait), the status names the
    cause, the Job is deleted and no power order reaches the BMC.

    Then the same with the runner image, for a credentials Secret that existed when the
    references were checked and is gone when the pod mounts it (`FailedMount`, which a real
    kubelet posts only as an event); recreating it lets the machine reach Ready."""
    _image_cannot_be_pulled(crds, namespace, tmp_path)
    _secret_gone_before_the_mount(crds, namespace, real_node, runner_image[0], kube_api, tmp_path)


def _image_cannot_be_pulled(crds: Cluster, namespace: str, tmp_path: Path) -> None:
    system = FakeSystem(uuid=str(uuid.uuid4()), name=MACHINE, power_state="Off")
    operator = OperatorProcess(
        cluster=crds,
        namespaces=(namespace,),
        log_dir=tmp_path,
        extra_env={**PLACEMENT_ENV, "LIGHTSOUT_RUNNER_IMAGE": ABSENT_IMAGE},
    )
    with SushyEmulator([system]) as bmc:
        _credentials_secret(crds, namespace, bmc)
        crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(fleet.group("lab")))
        _machine(crds, namespace, bmc, system.uuid)
        spec = {"maxRetries": 0, "power": {"bootTimeoutSeconds": 3000}, "desiredPowerState": "On"}
        patch = json.dumps({"spec": spec})
        operator.start()
        try:
            crds.kubectl("patch", "lsn", MACHINE, "-n", namespace, "--type=merge", "-p", patch)
            started = time.monotonic()
            failed = wait_for(
                lambda: (s := _status(crds, namespace)).get("phase") == "Failed" and s,
                240,
                "the attempt whose pod cannot start to fail",
            )
            took = time.monotonic() - started
            op = failed["lastOperation"]
            assert op["result"] == "Failed" and op["attempt"] == 1
            assert "its pod cannot start: ErrImagePull" in op["message"] or (
                "its pod cannot start: ImagePullBackOff" in op["message"]
            ), op["message"]
            assert ABSENT_IMAGE in op["message"], op["message"]
            wait_for(
                lambda: get_json(crds, "job", op["job"], "-n", namespace) is None,
                120,
                f"the Job {op['job']} to be deleted",
            )
            reasons_until(crds, namespace, MACHINE, "PodStartFailed")
            assert bmc.power_requests(system.uuid) == []
        finally:
            operator.stop()
    print(f"\nstartup attempt Failed {took:.1f}s after the patch: {op['message']}")


def _secret_gone_before_the_mount(
    crds: Cluster,
    namespace: str,
    real_node: RealNode,
    image: str,
    kube_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    """The failed first attempt of tests/e2e/mount_support.py on the real node, then the
    retry: held back by the reference check until the Secret exists again, then Ready."""
    env = {
        **PLACEMENT_ENV,
        "LIGHTSOUT_RUNNER_IMAGE": image,
        "LIGHTSOUT_JOB_HOST_NETWORK": "true",  # sushy-tools listens on the host's 127.0.0.1
    }
    with secret_gone_before_the_mount(
        crds, namespace, kube_api, tmp_path, real_node.node_name, env
    ) as gone:
        box, bmc = gone.box, gone.bmc
        # The retry (after the 30 s backoff) is held back by the reference check, not spent.
        held = wait_for(
            lambda: (
                (s := _status(crds, namespace, box.name)).get("reason") == "SecretNotFound" and s
            ),
            150,
            "the retry to wait for the Secret",
        )
        assert f"credentials Secret {namespace}/{SECRET} not found" in held["message"]
        fleet.apply(crds, namespace, [gone.credentials])
        ready = wait_for(
            lambda: (s := _status(crds, namespace, box.name)).get("phase") == "Ready" and s,
            240,
            "the machine to reach Ready once its Secret exists again",
        )
        assert ready["lastOperation"]["attempt"] == 2
        assert bmc.count_power_requests(box.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests(box.uuid) == 1
    print(
        f"\nFailedMount: startup attempt Failed {gone.took:.1f}s after the node took the pod: "
        f"{gone.failed['message']}\nthen held: {held['message']}\nReady on attempt 2, 1 power-on"
    )


#: The cluster-wide rows: the credentials Secret, or the CA Secret, named by the Node does
#: not exist. A cluster-wide operator lists no Secrets, so only the kubelet finds out.
MISSING = {"nosecret": "credentials", "noca": "ca"}
#: Attempts of each row: maxRetries 1.
ATTEMPTS = 2
#: How long a Failed machine is watched for a Job or a phase change after it gave up (the
#: flap of issue 31 re-created the Job within a second).
STAYS_FAILED = 20.0


def test_cluster_wide_missing_secret_ends_failed_after_its_attempts_and_starts_nothing_more(
    crds: Cluster,
    namespace: str,
    real_node: RealNode,
    runner_image: tuple[str, Path],
    kube_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    """Issue 31: `lightsout run` without `-n` (no Secret pre-check), a Node whose credentials
    Secret does not exist and one whose CA Secret does not exist. The real kubelet cannot
    mount either (FailedMount): each attempt fails naming the Secret, its Job is deleted, and
    after the last attempt the machine stays Failed: exactly maxRetries + 1 Jobs created in
    all, none after Failed, no power order, one RetriesExhausted event, and no core Node left
    of a machine that never booted."""
    boxes = {
        row: fleet.MachineDef(name=f"{row}-{namespace}", uuid=str(uuid.uuid4())) for row in MISSING
    }
    operator = OperatorProcess(
        cluster=crds,
        namespaces=(),
        log_dir=tmp_path,
        identity="operator-wide",
        extra_env={
            **PLACEMENT_ENV,
            "LIGHTSOUT_RUNNER_IMAGE": runner_image[0],
            "LIGHTSOUT_JOB_HOST_NETWORK": "true",
        },
    )
    systems = [
        FakeSystem(uuid=box.uuid, name=box.name, power_state="Off") for box in boxes.values()
    ]
    jobs = client.BatchV1Api(kube_api).list_namespaced_job
    with SushyEmulator(systems) as bmc, Recorder(jobs, namespace=namespace) as created:
        credentials, _ = fleet.bmc_secrets(bmc, "bmc-noca")
        _, ca = fleet.bmc_secrets(bmc, "bmc-nosecret")
        present = [fleet.group("lab"), credentials, ca]  # absent: bmc-nosecret, bmc-noca-ca
        machines = [
            fleet.redfish_node(
                box,
                bmc,
                group_name="lab",
                secret_name=f"bmc-{row}",
                desired="On",
                maxRetries=ATTEMPTS - 1,
                power={"onWatts": 60, "bootTimeoutSeconds": 3000},
            )
            for row, box in boxes.items()
        ]
        operator.start()
        try:
            fleet.apply(crds, namespace, [*present, *machines])
            failed = {row: _gives_up(crds, namespace, box.name) for row, box in boxes.items()}
            gave_up = time.monotonic()
            counts: dict[str, int] = {}
            holds(
                lambda: all(
                    _status(crds, namespace, box.name).get("phase") == "Failed"
                    for box in boxes.values()
                ),
                gave_up + STAYS_FAILED,
                "every machine to stay Failed",
            )
            for row, box in boxes.items():
                status = failed[row]
                secret = f"bmc-{row}" if MISSING[row] == "credentials" else f"bmc-{row}-ca"
                assert status["reason"] == "RetriesExhausted", status
                assert f'secret "{secret}" not found' in status["message"], status["message"]
                assert status["message"].endswith(f"(gave up after {ATTEMPTS} attempts)")
                assert status["lastOperation"]["attempt"] == ATTEMPTS
                mine = [
                    obj
                    for _, _, obj in created.events
                    if obj["metadata"]["labels"].get(LABEL_NODE) == box.name
                ]
                made = {obj["metadata"]["uid"]: obj["metadata"]["name"] for obj in mine}
                counts[row] = len(made)
                assert len(made) == ATTEMPTS, sorted(made.values())
                after = [
                    t
                    for t, kind, obj in created.events
                    if kind == "ADDED"
                    and t > gave_up
                    and obj["metadata"]["labels"].get(LABEL_NODE) == box.name
                ]
                assert after == []
                exhausted = [
                    e
                    for e in events_for(crds, namespace, box.name)
                    if e["reason"] == "RetriesExhausted"
                ]
                assert len(exhausted) == 1 and exhausted[0].get("count", 1) == 1, exhausted
                assert bmc.power_requests(box.uuid) == []
                # Made before power-on, never registered by a kubelet: gone with the failure.
                assert get_json(crds, "node", box.name) is None
                assert "no kubelet registered" in status["message"]
        finally:
            operator.stop()
    for row in MISSING:
        print(f"\n{row}: {counts[row]} Jobs, Failed: {failed[row]['message']}")


def _gives_up(crds: Cluster, namespace: str, name: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        found = _status(crds, namespace, name)
        return found if found.get("phase") == "Failed" else None

    return wait_for(failed, 240, f"{name} to give up after {ATTEMPTS} attempts")


#: Check pods the health-check test's Group runs at once (`healthCheck.parallelism`; 8 by
#: default), and its machines: more than that, so the pods run in more than one wave; all read
#: from one sushy-tools (one process, one port: lean for CI). What only a whole fleet's size
#: could break (60 and 100 machines: one completion each, the worst termination message,
#: results no single message could carry) is proven without a cluster in
#: tests/unit/test_health_scale.py.
PARALLELISM = 2
MACHINES = PARALLELISM + 2


def test_health_check_in_more_than_one_wave_lands_every_result(
    crds: Cluster, namespace: str, real_node: RealNode, tmp_path: Path
) -> None:
    machines = [fleet.MachineDef(name=f"m{i:02d}", uuid=str(uuid.uuid4())) for i in range(MACHINES)]
    # Every third machine On: each Node must show its own system's state, not a neighbour's.
    power: dict[str, Literal["On", "Off"]] = {
        m.name: "On" if i % 3 == 0 else "Off" for i, m in enumerate(machines)
    }
    systems = [FakeSystem(uuid=m.uuid, name=m.name, power_state=power[m.name]) for m in machines]
    operator = OperatorProcess(
        cluster=crds,
        namespaces=(namespace,),
        log_dir=tmp_path,
        # The health pods reach sushy-tools on 127.0.0.1 from the host network.
        extra_env={**PLACEMENT_ENV, "LIGHTSOUT_JOB_HOST_NETWORK": "1"},
    )
    with SushyEmulator(systems) as bmc:
        fleet.apply(
            crds,
            namespace,
            [
                *fleet.bmc_secrets(bmc),
                fleet.group(
                    GROUP,
                    maxNodes=MACHINES,
                    healthCheck={"schedule": SCHEDULE, "parallelism": PARALLELISM},
                ),
                *(fleet.redfish_node(m, bmc) for m in machines),
            ],
        )
        operator.start()
        try:
            cron = wait_for(
                lambda: (
                    (cron := get_json(crds, "cronjob", CRONJOB, "-n", namespace))
                    and cron["spec"]["jobTemplate"]["spec"]["completions"] == MACHINES
                    and cron
                ),
                120,
                f"the CronJob to cover the {MACHINES} machines",
            )
            assert cron["spec"]["jobTemplate"]["spec"]["parallelism"] == PARALLELISM
            # New machines are checked at once, each once, whatever Jobs their arrival made.
            wait_for(
                lambda: all(
                    (item.get("status") or {}).get("lastHealthCheck")
                    for item in get_json(crds, "lsn", "-n", namespace)["items"]
                ),
                DEADLINE_SECONDS,
                "the first check of every new machine",
            )
            firsts = get_json(crds, "jobs", "-n", namespace)["items"]
            assert sum(j["spec"]["completions"] for j in firsts) == MACHINES
            started = time.monotonic()
            job = run_check(crds, namespace)
            # Bounded by the Job's own deadline: PARALLELISM pods at a time on one real node.
            checked = wait_checked(crds, namespace, list(power), job, DEADLINE_SECONDS)
            seconds = time.monotonic() - started
            pods = get_json(crds, "pods", "-n", namespace, "-l", f"job-name={job}")["items"]
        finally:
            operator.stop()
        ran = [
            c["state"]["terminated"]
            for pod in pods
            for c in pod["status"]["containerStatuses"]
            if c["state"].get("terminated")
        ]
        sizes = [len(t["message"].encode()) for t in ran]
        print(
            f"\n{MACHINES} machines: every result landed {seconds:.0f}s after the run was "
            f"created; {len(pods)} pods on {sorted({p['spec']['nodeName'] for p in pods})}, "
            f"termination messages {min(sizes)}-{max(sizes)} bytes each"
        )
        print(crds.kubectl("get", "lsn", "-n", namespace, "-o", "wide").stdout[:1500])
        assert {n: s["lastHealthCheck"]["powerState"] for n, s in checked.items()} == power
        for name, machine in checked.items():
            assert health(machine) == ("True", "Healthy", power[name]), name
        assert {p["spec"]["nodeName"] for p in pods} == {real_node.node_name}
        indexes = {
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
        }
        assert indexes == {str(i) for i in range(MACHINES)}  # a pod per machine
        # More than one wave: a pod of the Job started only once another had finished (both in
        # whole seconds; at most PARALLELISM run at once).
        assert max(t["startedAt"] for t in ran) >= min(t["finishedAt"] for t in ran)
        assert max(sizes) <= TERMINATION_MESSAGE_LIMIT
        assert bmc.power_requests() == []  # a check sends no order


def _status(cluster: Cluster, namespace: str, name: str = MACHINE) -> dict[str, Any]:
    found: dict[str, Any] = (get_json(cluster, "lsn", name, "-n", namespace) or {}).get(
        "status"
    ) or {}
    return found


def _phase_done(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod = get_json(cluster, "pod", name, "-n", namespace)
    phase = (pod or {}).get("status", {}).get("phase")
    return pod if phase in {"Succeeded", "Failed"} else None


def _log_text(cri_log: str) -> str:
    """The text of a CRI log file (`<time> <stream> <F|P> <text>` per line)."""
    out = []
    for line in cri_log.splitlines():
        _, _, tag, text = line.split(" ", 3)
        out.append(text + ("\n" if tag == "F" else ""))
    return "".join(out)


def _oci_spec(node: RealNode, container_id: str) -> dict[str, Any]:
    info = json.loads(node.ctr("containers", "info", container_id))
    spec: dict[str, Any] = info["Spec"]
    return spec


def _explain(node: RealNode, pods: list[dict[str, Any]]) -> str:
    statuses = [p.get("status") for p in pods]
    return f"pods: {json.dumps(statuses)[:3000]}\nkubelet log:\n{node.log_tail('kubelet')}"
