"""Installed the way README says, then upgraded the way README says, on the real node.

README's "Installing (Helm)" block (images loaded into containerd with `ctr`, the namespace
labelled for the restricted Pod Security Standard, `helm install` from the chart directory) runs
in bash against the local control plane, `homelab` replaced by the test's namespace and the
chart by the previous release's (tools/images/previous-release: its chart and images, built
from that commit by `make images`). The node is lightsout_lab.realnode (the kubelet built with
the control plane, containerd, runc): the operator runs as the chart's Deployment from the
operator image, with in-cluster config and its ServiceAccount's token only, and powers Redfish
machines of sushy-tools On and Off with Jobs in the runner image. The chart's core-Node
admission webhook is served by the operator's pods behind its Service: a Node POSTed for a
machine (as its kubelet registering would) while the core Node made before power-on waits,
carrying a label of its own, ends with that label merged into the core Node. Both operator pods
are deleted while the first startup Job runs; the Deployment's new pods follow that Job to its
end. README's "Upgrading" block then takes the release to this checkout's chart and images (a
CRD schema and operator code of their own) while one machine is held Draining by a
PodDisruptionBudget and two others boot: the CRDs served with the new fields, a rolling update
to the new operator image, every stored object's spec and status kept, and every machine ends
where it was asked to be with one power order per intent. One install, one upgrade: the real
node is costly.

The authorizer's answers for the chart's accounts are proven in test_chart_install.py; here they
are asked only for the accounts the pods actually ran as.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from lightsout.execution.results import parse_job_outcome
from lightsout.planning.types import STARTUP_TAINT_KEY, JobPhase, ObservedPowerState
from lightsout_lab import Cluster
from lightsout_lab.binaries import find_binaries, find_helm
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.realnode import ImageArchive, RealNode, build_images
from lightsout_lab.sushy import POWER_OFF, POWER_ON, FakeSystem, SushyEmulator
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
from tests.harness.previous_release import (
    PreviousRelease,
    added_fields,
    build_previous_release,
    lost,
    schema_fields,
)
from tests.harness.wait import get_json, reasons_until, says_ready, wait_for
from tests.harness.workload import web_deployment, web_pdb

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
CRDS = ("groups.lightsout.dev", "nodes.lightsout.dev")


def readme_block(heading: str) -> str:
    """The first bash block under README's `heading` (a whole heading line)."""
    section = README.read_text().split(f"\n{heading}\n", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def images() -> dict[str, ImageArchive]:
    return build_images()


@pytest.fixture(scope="module")
def previous() -> PreviousRelease:
    return build_previous_release()


@pytest.fixture
def machines(namespace: str) -> list[fleet.MachineDef]:
    """Three machines: the first is powered On at install, then Off through the upgrade; the
    other two boot through it."""
    return [
        fleet.MachineDef(name=f"box{i}-{namespace}", uuid=str(uuid.uuid4()), cpu="8")
        for i in range(3)
    ]


@pytest.fixture
def bmc(machines: list[fleet.MachineDef]) -> Iterator[SushyEmulator]:
    systems = [FakeSystem(uuid=m.uuid, name=m.name, power_state="Off") for m in machines]
    with SushyEmulator(systems) as emulator:
        yield emulator


@pytest.fixture
def sim(
    kube_api: client.ApiClient,
    cluster: Cluster,
    bmc: SushyEmulator,
    machines: list[fleet.MachineDef],
    namespace: str,
) -> Iterator[MachineSimulator]:
    simulator = fleet.simulator(kube_api, bmc, machines, namespace)
    yield simulator
    simulator.stop()
    for m in machines:
        cluster.kubectl("delete", "node", m.name, "--ignore-not-found", "--wait=false")


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


def replaced(cluster: Cluster, old: set[str]) -> list[dict[str, Any]] | None:
    """The operator's pods once there are two again, both new and Ready."""
    pods = operator_pods(cluster)
    fresh = [p for p in pods if says_ready(p) and p["metadata"]["name"] not in old]
    return pods if len(pods) == len(fresh) == 2 else None


def check_operator_pod(pod: dict[str, Any], node: RealNode, image: str) -> None:
    """A Ready container of the operator image on the real node, whose only credential is the
    chart's ServiceAccount token (no kubeconfig; the only Secret its webhook's serving
    certificate)."""
    spec = pod["spec"]
    assert says_ready(pod), pod["status"]
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
) -> ObservedPowerState | None:
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
    # previous release's runner and this checkout's are alike when its sources did not change).
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
    reasons_until(cluster, namespace, name, "KubeletMetadataMerged")


def chart_fields(chart: Path) -> dict[str, dict[str, set[str]]]:
    """The property paths of each CRD in a chart's crds/, by CRD and version."""
    found = {}
    for path in sorted((chart / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        found[crd["metadata"]["name"]] = schema_fields(crd)
    return found


def served_fields(cluster: Cluster) -> dict[str, dict[str, set[str]]]:
    """The property paths of each of Lights-Out's CRDs as the API server serves them."""
    return {crd: schema_fields(get_json(cluster, "crd", crd)) for crd in CRDS}


def stored(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """The spec and status of every Group and Node of the namespace, by kind and name."""
    found = {}
    for kind in ("groups.lightsout.dev", "nodes.lightsout.dev"):
        for obj in get_json(cluster, kind, "-n", namespace)["items"]:
            found[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    return found


def drain_blocked(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The machine's Draining condition once a PodDisruptionBudget holds its drain."""
    s = status(cluster, namespace, name)
    conditions: list[dict[str, Any]] = s.get("conditions", [])
    for c in conditions:
        if c["type"] == "Draining" and c["reason"] == "DrainBlocked" and s["phase"] == "Draining":
            return c
    return None


def startup_job(cluster: Cluster, namespace: str, name: str) -> str:
    """The machine's startup Job, once its pod runs."""
    return wait_for(
        lambda: running_job(cluster, namespace, name), PATIENCE, f"{name}'s startup Job"
    )


def image_id(pod: dict[str, Any]) -> str:
    """The digest of the image the pod's one container runs."""
    (container,) = pod["status"]["containerStatuses"]
    return str(container["imageID"])


def test_readme_install_then_upgrade_while_machines_boot_and_drain(
    crds: Cluster,
    namespace: str,
    real_node: RealNode,
    images: dict[str, ImageArchive],
    previous: PreviousRelease,
    bmc: SushyEmulator,
    machines: list[fleet.MachineDef],
    sim: MachineSimulator,
    uninstall: None,
) -> None:
    started = time.monotonic()
    first_box, *booting = machines
    box = first_box.name
    # The upgrade brings a CRD schema of its own (fields the previous release did not have).
    new_fields = added_fields(chart_fields(previous.chart), chart_fields(ROOT / CHART))
    assert new_fields, "this checkout's CRDs declare nothing the previous release's did not"
    # The previous release's CRDs, as its install made them (the cluster has this checkout's).
    crds.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(previous.chart / "crds"))
    crds.wait_established(CRDS)
    fleet.apply(
        crds,
        namespace,
        [*fleet.bmc_secrets(bmc), fleet.group(), *(fleet.redfish_node(m, bmc) for m in machines)],
    )
    old_tags = {name: image.tag for name, image in previous.images.items()}
    new_tags = {name: image.tag for name, image in images.items()}
    assert not set(old_tags.values()) & set(new_tags.values()), (old_tags, new_tags)
    real_node.import_images(image.path for image in previous.images.values())
    install = (
        readme_block("## Installing (Helm)")
        .replace("homelab", namespace)
        .replace(CHART, str(previous.chart))
    )
    installed = run_readme(crds, real_node, install)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    install_seconds = time.monotonic() - started
    assert set(real_node.image_refs()) >= {*old_tags.values(), *new_tags.values()}
    first = operator_pods(crds)
    assert len(first) == 2
    for pod in first:
        check_operator_pod(pod, real_node, old_tags["operator"])
    assert added_fields(served_fields(crds), chart_fields(ROOT / CHART)) == new_fields, (
        "the previous release's CRDs are served"
    )
    # The operator, in the cluster, has found the machines.
    for m in machines:
        wait_phase(crds, namespace, m.name, "Off")

    # --- On, with every operator pod deleted while the startup Job runs.
    patch_desired(crds, namespace, box, "On")
    job = wait_for(lambda: running_job(crds, namespace, box), PATIENCE, "a running Job")
    check_webhook_merges_kubelet_labels(crds, namespace, box)
    crds.kubectl("delete", "pod", "-n", HOME, "-l", SELECTOR, timeout=180)
    still_running = (get_json(crds, "job", job, "-n", namespace)["status"].get("active") or 0) > 0
    old = {p["metadata"]["name"] for p in first}
    replacements = wait_for(
        lambda: replaced(crds, old), PATIENCE, "the Deployment's two new operator pods to be Ready"
    )
    for pod in replacements:
        check_operator_pod(pod, real_node, old_tags["operator"])
    on = wait_phase(crds, namespace, box, "Ready")
    assert on["lastOperation"]["job"] == job, "the new pods followed the same Job"
    assert (
        check_action_pod(crds, namespace, job, real_node, old_tags["runner"])
        is ObservedPowerState.ON
    )

    # --- A workload on the machine whose PodDisruptionBudget holds its drain.
    fleet.apply(crds, namespace, [web_deployment({"cpu": "100m"}), web_pdb(2)])

    def web_running() -> list[str] | None:
        pods = get_json(crds, "pods", "-n", namespace, "-l", "app=web")["items"]
        running = [p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == 2 else None

    assert set(wait_for(web_running, PATIENCE, "two web pods running")) == {box}

    # --- The first machine Off (held Draining), the two others On (startup Jobs running).
    patch_desired(crds, namespace, box, "Off")
    wait_for(lambda: drain_blocked(crds, namespace, box), PATIENCE, "the PDB to hold the drain")
    for m in booting:
        patch_desired(crds, namespace, m.name, "On")
    startups = {m.name: startup_job(crds, namespace, m.name) for m in booting}
    kept = stored(crds, namespace)

    # --- README's upgrade, to this checkout's chart and images.
    upgraded = run_readme(crds, real_node, readme_block("### Upgrading"))
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    in_flight = [
        name
        for name, startup in startups.items()
        if (get_json(crds, "job", startup, "-n", namespace)["status"].get("active") or 0) > 0
    ]
    old = {p["metadata"]["name"] for p in replacements}
    rolled = wait_for(
        lambda: replaced(crds, old), PATIENCE, "the upgraded Deployment's two pods to be Ready"
    )
    for pod in rolled:
        check_operator_pod(pod, real_node, new_tags["operator"])
    assert {image_id(p) for p in rolled}.isdisjoint({image_id(p) for p in replacements}), (
        "the operator's image changed"
    )
    # The CRDs serve this checkout's schema, its new fields among them.
    served = served_fields(crds)
    assert not added_fields(served, chart_fields(ROOT / CHART)), "a field is not served"
    # Every stored object kept its spec and every status field it had.
    after = stored(crds, namespace)
    assert set(after) == set(kept)
    for key, obj in kept.items():
        assert not lost(obj["spec"], after[key]["spec"], "spec"), f"{key}: spec changed"
        gone = set(obj.get("status") or {}) - set(after[key].get("status") or {})
        assert not gone, f"{key}: status lost {sorted(gone)} in the upgrade"
    assert drain_blocked(crds, namespace, box), "still held Draining by the PDB"

    # --- The PDB goes: the upgraded operator finishes the drain and powers the machine Off.
    crds.kubectl("delete", "pdb", "web", "-n", namespace)
    off = wait_phase(crds, namespace, box, "Off")
    assert (off["lastOperation"]["action"], off["lastOperation"]["result"]) == (
        "shutdown",
        "Succeeded",
    )
    shutdown = off["lastOperation"]["job"]
    assert check_action_pod(crds, namespace, shutdown, real_node, new_tags["runner"]) is (
        ObservedPowerState.OFF
    )
    for name, startup in startups.items():
        ready_ = wait_phase(crds, namespace, name, "Ready")
        assert ready_["lastOperation"]["job"] == startup, f"{name}: the same startup Job"
        assert check_action_pod(crds, namespace, startup, real_node, old_tags["runner"]) is (
            ObservedPowerState.ON
        )

    # Every machine where it was asked to be, with one power order per intent and one Job each.
    expected = {box: ("Off", 1, 1, 2)} | {m.name: ("On", 1, 0, 1) for m in booting}
    for m in machines:
        state, ons, offs, jobs = expected[m.name]
        assert bmc.power_state(m.uuid) == state, m.name
        assert bmc.count_power_requests(m.uuid, reset_types=POWER_ON) == ons, m.name
        assert bmc.count_power_requests(m.uuid, reset_types=POWER_OFF) == offs, m.name
        made = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={m.name}")
        assert len(made["items"]) == jobs, (m.name, [j["metadata"]["name"] for j in made["items"]])

    # The accounts the pods ran as: the operator's reads no Secret, the Jobs' lists nothing.
    operator = f"{HOME}:{RELEASE}"
    assert not can(crds, operator, "get", "secrets", "-n", namespace)
    assert not can(crds, operator, "list", "secrets", "--all-namespaces")
    assert not can(crds, f"{namespace}:{RELEASE}-runner", "list", "pods", "-n", namespace)
    print(
        f"\nREADME install of the previous release: operator pods Ready {install_seconds:.1f}s "
        f"after it began; startup Job {job} still running when the old operator pods were "
        f"gone: {still_running}; upgrade to this checkout ran with {box} Draining and "
        f"{len(startups)} startup Jobs running ({len(in_flight)} still running when "
        f"`helm upgrade --wait` returned); CRD fields added: {len(new_fields)}; all done "
        f"{time.monotonic() - started:.1f}s after install began; power orders seen by the BMC: "
        "1 per intent"
    )
