"""Installed the way README says: its install block, run as it stands, on the real node.

README's "Installing (Helm)" block (images loaded into containerd with `ctr`, the namespace
labelled for the restricted Pod Security Standard, `helm install` from the chart directory) runs
in bash against the local control plane, `homelab` replaced by the test's namespace. The node is
lightsout_lab.realnode (the kubelet built with the control plane, containerd, runc): the
operator runs as the chart's Deployment from the operator image, with in-cluster config and its
ServiceAccount's token only, and powers a Redfish machine of sushy-tools On and Off with Jobs in
the runner image. The chart's core-Node admission webhook is served by the operator's pods
behind its Service: a Node POSTed for the machine (as its kubelet registering would) while the
core Node made before power-on waits, carrying a label of its own, ends with that label merged
into the core Node. Both operator pods are deleted while the startup Job runs; the Deployment's
new pods follow that Job to its end. README's "Upgrading" block runs while the shutdown Job
runs, on a copy of the chart as a next release would ship it (new image tags, a label added to
the CRDs): a rolling update to the new operator image, the CRDs updated in place, the machine's
spec and status kept, the same Job followed to Off. One install, one On/Off cycle: the real
node is costly.

The authorizer's answers for the chart's accounts are proven in test_chart_install.py; here they
are asked only for the accounts the pods actually ran as.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.execution.results import parse_job_outcome
from lightsout.planning.types import STARTUP_TAINT_KEY, JobPhase, PowerState
from lightsout_lab import Cluster
from lightsout_lab.binaries import find_binaries, find_helm
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.realnode import ImageArchive, RealNode, build_images
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.conftest import (
    PATIENCE,
    can,
    patch_desired,
    post_existing_node,
    running_job,
    status,
    wait_phase,
)
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The release and its namespace, as README names them.
RELEASE = "lightsout"
HOME = "lightsout-system"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
#: What a parent make exports to the commands it runs.
MAKE_VARIABLES = frozenset({"MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"})
#: Where a projected ServiceAccount token would be mounted.
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The webhook's serving certificate, the chart's only Secret mounted in the operator's pods.
WEBHOOK_TLS = f"{RELEASE}-webhook-tls"
#: What the machine's kubelet would set itself (--node-labels).
KUBELET_LABEL = ("example.com/kubelet-says", "hello")
CHART = "deploy/helm/lightsout"
#: The next release's image tag, and what its CRDs carry that this release's do not.
NEXT_TAG = "0.0.0-next"
NEXT_LABEL = ("lightsout.dev/test-release", "next")


def readme_block(heading: str) -> str:
    """The first bash block under README's `heading` (a whole heading line)."""
    section = README.read_text().split(f"\n{heading}\n", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def next_release(chart: Path, images: dict[str, ImageArchive], node: RealNode) -> dict[str, str]:
    """A copy of the chart at `chart` as a next release would ship it: its image tags moved on
    (the same images, tagged anew in the real node's containerd) and a label added to each CRD;
    returns the new image references."""
    shutil.copytree(ROOT / CHART, chart)
    values = chart / "values.yaml"
    old = {name: image.tag.rsplit(":", 1)[1] for name, image in images.items()}
    assert len(set(old.values())) == 1, old
    (tag,) = set(old.values())
    assert values.read_text().count(f'tag: "{tag}"') == len(old)
    values.write_text(values.read_text().replace(f'tag: "{tag}"', f'tag: "{NEXT_TAG}"'))
    for crd in (chart / "crds").glob("*.yaml"):
        body = yaml.safe_load(crd.read_text())
        body["metadata"].setdefault("labels", {})[NEXT_LABEL[0]] = NEXT_LABEL[1]
        crd.write_text(yaml.safe_dump(body, sort_keys=False))
    refs = {}
    for name, image in images.items():
        refs[name] = f"{image.tag.rsplit(':', 1)[0]}:{NEXT_TAG}"
        node.ctr("images", "tag", "--force", image.tag, refs[name])
    return refs


@pytest.fixture(scope="module")
def images() -> dict[str, ImageArchive]:
    return build_images()


@pytest.fixture(scope="module")
def real_node(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The real node with nothing but its pause image: README's commands load the others."""
    started = time.monotonic()
    node = RealNode(cluster=cluster, directory=tmp_path_factory.mktemp("real-node")).start()
    print(
        f"\nreal node: started in {time.monotonic() - started:.1f}s, "
        f"Node Ready {node.ready_seconds:.1f}s after the kubelet started"
    )
    yield node
    node.stop()


@pytest.fixture
def uninstall(crds: Cluster) -> Iterator[None]:
    """Whatever README's block made is removed afterwards."""
    yield
    subprocess.run(
        [str(find_helm()), "--kubeconfig", str(crds.kubeconfig), "uninstall", RELEASE, "-n", HOME],
        capture_output=True,
        check=False,
    )
    crds.kubectl("delete", "namespace", HOME, "--wait=false", check=False)


def run_readme(cluster: Cluster, node: RealNode, script: str) -> subprocess.CompletedProcess[str]:
    """A README block in bash, from the checkout, with this cluster's kubectl and helm on PATH
    and the real node's containerd as `ctr`'s default."""
    tools = f"{find_helm().parent}:{find_binaries()}:{os.environ['PATH']}"
    # A person's shell: not the variables of the `make test` this may run under (with
    # MAKELEVEL set, README's `make images` would print "Entering directory" lines into the
    # pipe that reads image archives).
    inherited = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    env = {
        **inherited,
        "PATH": tools,
        "KUBECONFIG": str(cluster.kubeconfig),
        "CONTAINERD_ADDRESS": str(node.socket),
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get_json(cluster, "pods", "-n", HOME, "-l", SELECTOR)["items"]
    return pods


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def replaced(cluster: Cluster, old: set[str]) -> list[dict[str, Any]] | None:
    """The operator's pods once there are two again, both new and Ready."""
    pods = operator_pods(cluster)
    fresh = [p for p in pods if ready(p) and p["metadata"]["name"] not in old]
    return pods if len(pods) == len(fresh) == 2 else None


def check_operator_pod(pod: dict[str, Any], node: RealNode, image: str) -> None:
    """A Ready container of the operator image on the real node, whose only credential is the
    chart's ServiceAccount token (no kubeconfig; the only Secret its webhook's serving
    certificate)."""
    spec = pod["spec"]
    assert ready(pod), pod["status"]
    assert spec["nodeName"] == node.node_name
    assert spec["serviceAccountName"] == RELEASE
    assert not spec.get("hostNetwork")
    (container,) = spec["containers"]
    assert container["image"] == image  # (status may name another tag of the same image)
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://")
    assert "KUBECONFIG" not in {e["name"] for e in container.get("env", [])}
    secrets = [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v]
    assert secrets == [WEBHOOK_TLS]
    (projected,) = [v for v in spec["volumes"] if "projected" in v]
    sources = projected["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in sources)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[TOKEN_PATH] == projected["name"]


def check_action_pod(
    cluster: Cluster, namespace: str, job_name: str, node: RealNode, image: str
) -> PowerState | None:
    """The Job's one pod ran the runner image on the real node, locked down and token-less;
    returns the power state its termination message reports."""
    job = get_json(cluster, "job", job_name, "-n", namespace)
    (pod,) = get_json(cluster, "pods", "-n", namespace, "-l", f"job-name={job_name}")["items"]
    spec = pod["spec"]
    assert spec["nodeName"] == node.node_name
    assert spec["hostNetwork"] is True  # jobs.hostNetwork: sushy-tools is on 127.0.0.1
    assert spec["serviceAccountName"] == f"{RELEASE}-runner"
    assert spec["automountServiceAccountToken"] is False
    assert not [v for v in spec["volumes"] if "projected" in v]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert TOKEN_PATH not in {m["mountPath"] for m in container["volumeMounts"]}
    # The image the Job asked for (its status may name another tag of the same image: the
    # upgrade tags the images anew).
    assert container["image"] == image
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://")
    assert status["state"]["terminated"]["message"], "the result is in the termination message"
    outcome = parse_job_outcome(job, [pod])
    assert outcome.state is JobPhase.SUCCEEDED, outcome
    return outcome.power_state


def check_webhook_merges_kubelet_labels(cluster: Cluster, namespace: str, name: str) -> None:
    """The core Node made before power-on (startup taint) is there while the startup Job runs:
    a Node POSTed for it with a label of its own, as its kubelet would, is refused
    AlreadyExists after the chart's webhook, in an operator pod, merged the label in."""
    (configuration,) = [
        c
        for c in get_json(cluster, "mutatingwebhookconfigurations")["items"]
        if c["metadata"]["name"] == f"{RELEASE}-core-nodes"
    ]
    service = configuration["webhooks"][0]["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == (HOME, f"{RELEASE}-webhook")
    node = get_json(cluster, "node", name)
    assert node and STARTUP_TAINT_KEY in str(node["spec"].get("taints")), node
    assert KUBELET_LABEL[0] not in node["metadata"]["labels"]
    post_existing_node(cluster, name, dict([KUBELET_LABEL]))
    # Admission ran before the refusal: the label is there when the POST returns.
    labels = get_json(cluster, "node", name)["metadata"]["labels"]
    assert labels.get(KUBELET_LABEL[0]) == KUBELET_LABEL[1], labels
    reasons = [e["reason"] for e in events_for(cluster, namespace, name)]
    assert "KubeletMetadataMerged" in reasons, reasons


def test_readme_install_runs_the_operator_in_cluster_and_powers_a_machine_on_and_off(
    crds: Cluster,
    namespace: str,
    real_node: RealNode,
    images: dict[str, ImageArchive],
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    sim: MachineSimulator,
    uninstall: None,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    fleet.apply(
        crds, namespace, [*fleet.bmc_secrets(bmc), fleet.group(), fleet.redfish_node(machine, bmc)]
    )
    install = readme_block("## Installing (Helm)").replace("homelab", namespace)
    installed = run_readme(crds, real_node, install)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    install_seconds = time.monotonic() - started
    assert set(real_node.image_refs()) >= {i.tag for i in images.values()}
    first = operator_pods(crds)
    assert len(first) == 2
    for pod in first:
        check_operator_pod(pod, real_node, images["operator"].tag)
    # The operator, in the cluster, has found the machine.
    wait_phase(crds, namespace, machine.name, "Off")

    # --- On, with every operator pod deleted while the startup Job runs.
    patch_desired(crds, namespace, machine.name, "On")
    job = wait_for(lambda: running_job(crds, namespace, machine.name), PATIENCE, "a running Job")
    check_webhook_merges_kubelet_labels(crds, namespace, machine.name)
    crds.kubectl("delete", "pod", "-n", HOME, "-l", SELECTOR, timeout=180)
    still_running = (get_json(crds, "job", job, "-n", namespace)["status"].get("active") or 0) > 0
    old = {p["metadata"]["name"] for p in first}
    replacements = wait_for(
        lambda: replaced(crds, old), PATIENCE, "the Deployment's two new operator pods to be Ready"
    )
    for pod in replacements:
        check_operator_pod(pod, real_node, images["operator"].tag)
    on = wait_phase(crds, namespace, machine.name, "Ready")
    assert on["lastOperation"]["job"] == job, "the new pods followed the same Job"
    jobs = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={machine.name}")
    assert [j["metadata"]["name"] for j in jobs["items"]] == [job]
    assert check_action_pod(crds, namespace, job, real_node, images["runner"].tag) is (
        PowerState.ON
    )
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
    assert bmc.power_state(machine.uuid) == "On"

    # --- Off, with README's upgrade run while the shutdown Job runs: new images, CRDs in place.
    patch_desired(crds, namespace, machine.name, "Off")
    shutdown = wait_for(
        lambda: (job_ := running_job(crds, namespace, machine.name)) != job and job_,
        PATIENCE,
        "a running shutdown Job",
    )
    kept = status(crds, namespace, machine.name)
    chart = tmp_path / "next" / "lightsout"
    refs = next_release(chart, images, real_node)
    upgrade = readme_block("### Upgrading").replace(CHART, str(chart))
    upgraded = run_readme(crds, real_node, upgrade)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    old = {p["metadata"]["name"] for p in replacements}
    rolled = wait_for(
        lambda: replaced(crds, old), PATIENCE, "the upgraded Deployment's two pods to be Ready"
    )
    for pod in rolled:
        check_operator_pod(pod, real_node, refs["operator"])
    for crd in ("groups.lightsout.dev", "nodes.lightsout.dev"):
        labels = get_json(crds, "crd", crd)["metadata"].get("labels") or {}
        assert labels.get(NEXT_LABEL[0]) == NEXT_LABEL[1], (crd, labels)
    off = wait_phase(crds, namespace, machine.name, "Off")
    assert (off["lastOperation"]["action"], off["lastOperation"]["result"]) == (
        "shutdown",
        "Succeeded",
    )
    assert off["lastOperation"]["job"] == shutdown, "the upgraded pods followed the same Job"
    assert set(kept) <= set(off), f"status lost {sorted(set(kept) - set(off))} in the upgrade"
    spec = get_json(crds, "lsn", machine.name, "-n", namespace)["spec"]
    assert spec["driver"]["redfish"]["systemId"] == machine.uuid, "spec kept"
    assert check_action_pod(crds, namespace, shutdown, real_node, images["runner"].tag) is (
        PowerState.OFF
    )
    assert bmc.power_state(machine.uuid) == "Off"
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_OFF) == 1

    # The accounts the pods ran as: the operator's reads no Secret, the Jobs' lists nothing.
    operator = f"{HOME}:{RELEASE}"
    assert not can(crds, operator, "get", "secrets", "-n", namespace)
    assert not can(crds, operator, "list", "secrets", "--all-namespaces")
    assert not can(crds, f"{namespace}:{RELEASE}-runner", "list", "pods", "-n", namespace)
    print(
        f"\nREADME install: operator pods Ready {install_seconds:.1f}s after it began; "
        f"startup Job {job} still running when the old operator pods were gone: "
        f"{still_running}; On/Off cycle done {time.monotonic() - started:.1f}s after install "
        "began; power-on and power-off orders seen by the BMC: 1 each; README's upgrade ran "
        f"while the shutdown Job {shutdown} ran, which the upgraded pods followed to its end"
    )
