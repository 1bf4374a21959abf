"""The stand-in kubelet (`lightsout_lab.kubelet`) against the lab's API server: a pod whose
volume cannot be mounted is handled as a real kubelet handles it, so that every test of that
path through the stand-in means what it says.

A pod whose Secret does not exist stays Pending with its container in ContainerCreating, one
`FailedMount` Warning event on it (kubelet, the node) counts the retries, and the pod runs with
the Secret's content as soon as the Secret is created; an optional volume that does not exist
never holds it back. A pod deleted while it waits is let go. And the operator, its action Job's
Secret deleted before the stand-in mounts it, fails the attempt naming the Secret from that
event alone, as under the real kubelet (tests/e2e/mount_support.py, run by both).
tests/unit/test_kubelet_volumes.py has every message the stand-in posts.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from lightsout_lab import Cluster
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, RUNNER_LABEL, KubeletAgent
from tests.e2e.mount_support import secret_gone_before_the_mount
from tests.harness.wait import wait_for

pytestmark = pytest.mark.e2e

#: Copies the mounted password to the termination message: what the pod found is in its status.
#: (Paths in env values, not in the code: the stand-in maps those to its pod's directory.)
COPY = "import os, shutil; shutil.copy(os.environ['SRC'], os.environ['DST'])"


def pod_with_secret(node: str, name: str, secret: dict[str, Any]) -> dict[str, Any]:
    """A pod bound to the stand-in's node that mounts `secret` as its credentials and an
    optional ConfigMap that never exists."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"key": RUNNER_LABEL, "operator": "Exists"}],
            "containers": [
                {
                    "name": "runner",
                    "image": "runner",
                    "command": ["python3", "-c", COPY],
                    "env": [
                        {"name": "SRC", "value": "/etc/creds/password"},
                        {"name": "DST", "value": "/dev/termination-log"},
                    ],
                    "volumeMounts": [
                        {"name": "credentials", "mountPath": "/etc/creds"},
                        {"name": "extra", "mountPath": "/etc/extra"},
                    ],
                }
            ],
            "volumes": [
                {"name": "credentials", "secret": secret},
                {"name": "extra", "configMap": {"name": f"absent-{name}", "optional": True}},
            ],
        },
    }


def failed_mounts(core: client.CoreV1Api, namespace: str, pod: str) -> list[Any]:
    found = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod},reason=FailedMount"
    )
    return list(found.items)


def waiting(core: client.CoreV1Api, namespace: str, pod: str) -> client.V1Pod | None:
    """The pod while it is Pending with its container in ContainerCreating, else None."""
    found = core.read_namespaced_pod(pod, namespace)
    statuses = found.status.container_statuses or []
    state = statuses[0].state.waiting if statuses else None
    creating = found.status.phase == "Pending" and state and state.reason == "ContainerCreating"
    return found if creating else None


def test_a_pod_waits_in_container_creating_for_its_secret_then_runs(
    runner: KubeletAgent, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    name, secret = f"waits-{uuid.uuid4().hex[:6]}", "bmc-later"
    core.create_namespaced_pod(
        namespace, pod_with_secret(runner.node_name, name, {"secretName": secret})
    )

    # Retried and counted on the one event, as a real kubelet's recorder aggregates them.
    (event,) = wait_for(
        lambda: [e for e in failed_mounts(core, namespace, name) if (e.count or 0) >= 2],
        60,
        f"a FailedMount event on {name} counted up by a retry",
    )
    assert len(failed_mounts(core, namespace, name)) == 1
    assert event.type == "Warning"
    assert event.message == (
        f'MountVolume.SetUp failed for volume "credentials" : secret "{secret}" not found'
    )
    assert (event.source.component, event.source.host) == ("kubelet", runner.node_name)
    assert (event.reporting_component, event.reporting_instance) == ("kubelet", runner.node_name)
    assert event.involved_object.kind == "Pod"
    pending = waiting(core, namespace, name)
    assert pending is not None, "the pod left ContainerCreating while its Secret is missing"
    ready = {c.type: c for c in pending.status.conditions}["Ready"]
    assert (ready.status, ready.reason) == ("False", "ContainersNotReady")
    assert f"{namespace}/{name}" in runner.waiting_for_volumes()

    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": secret}, "stringData": {"username": "admin", "password": "s3cret"}},
    )
    done = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase == "Succeeded" and p,
        60,
        f"{name} to run once its Secret exists",
    )
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (0, "s3cret")
    assert f"{namespace}/{name}" not in runner.waiting_for_volumes()


def test_a_pod_deleted_while_it_waits_for_a_missing_key_is_let_go(
    runner: KubeletAgent, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "bmc"}, "stringData": {"username": "admin"}}
    )
    name = f"keyless-{uuid.uuid4().hex[:6]}"
    items = [{"key": "password", "path": "password"}]
    core.create_namespaced_pod(
        namespace, pod_with_secret(runner.node_name, name, {"secretName": "bmc", "items": items})
    )
    (event,) = wait_for(
        lambda: failed_mounts(core, namespace, name),
        60,
        f"a FailedMount event on {name}",
    )
    assert event.message == (
        'MountVolume.SetUp failed for volume "credentials" : '
        "references non-existent secret key: password"
    )
    assert waiting(core, namespace, name) is not None

    core.delete_namespaced_pod(name, namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, 60, f"{name} to be removed by the stand-in kubelet")
    wait_for(
        lambda: f"{namespace}/{name}" not in runner.waiting_for_volumes(),
        30,
        f"the stand-in kubelet to stop retrying the mount of {name}",
    )


def test_the_operator_names_the_secret_from_the_stand_ins_failed_mount(
    crds: Cluster,
    namespace: str,
    runner: KubeletAgent,
    kube_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    with secret_gone_before_the_mount(
        crds, namespace, kube_api, tmp_path, runner.node_name, JOB_PLACEMENT_ENV
    ) as gone:
        print(
            f"\nstartup attempt Failed {gone.took:.1f}s after the stand-in took the pod: "
            f"{gone.failed['message']}"
        )
