"""A machine's core Node is never schedulable before it carries its labels and taints.

The operator creates the core Node before power-on with the Group's and the machine's labels
and taints plus its own startup taint `lightsout.dev/unregistered:NoSchedule`, and removes only
that taint once the machine is Ready. Proven with a real kubelet (lightsout_lab.realnode:
containerd + runc + the kubelet built with the control plane) started as the machine's own
kubelet when the Redfish emulator reports the machine On, with its own `--node-labels` and
`registerWithTaints` as a kubelet configured by hand would have; the operator serves its
core-Node admission webhook, so those end up on the Node as well, and a label a kubelet may not
set (posted to the API by hand, as a client other than a checked kubelet could) does not.
Action Jobs run on the stand-in runner as in every e2e test. A second, cheaper test has the API
server refuse the
Node (a ValidatingAdmissionPolicy): the machine must end Failed with the reason, and the BMC
must never have been told to power on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lightsout.planning.types import STARTUP_TAINT_KEY
from lightsout_lab import Cluster
from lightsout_lab.kubelet import KubeletAgent
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.realnode import PAUSE_IMAGE, RealNode
from lightsout_lab.sushy import POWER_ON, SushyEmulator
from tests.e2e.conftest import (
    patch_desired,
    post_existing_node,
    status,
    wait_phase,
    webhook_operator_process,
)
from tests.harness import fleet
from tests.harness.wait import events_until, get_json, says_ready, wait_for, warned
from tests.harness.watching import Recorder

pytestmark = pytest.mark.e2e

GROUP_TAINT = {"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}
GROUP_LABEL = ("example.com/pool", "gpu")
MACHINE_LABEL = ("example.com/rack", "r1")
#: What the machine's hand-configured kubelet sets itself.
KUBELET_LABEL = ("example.com/kubelet-says", "hello")
KUBELET_TAINT = {"key": "example.com/kubelet-taint", "value": "yes", "effect": "NoSchedule"}
#: Posted by hand while the Node waits for its kubelet: one label the webhook copies, two a
#: kubelet may not set (NodeRestriction) which it must not.
POSTED_LABEL = ("example.com/posted", "yes")
FORBIDDEN_LABELS = {"node-restriction.kubernetes.io/x": "1", "node-role.kubernetes.io/evil": ""}
DRY_RUN_LABEL = ("example.com/dry-run", "yes")


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"].get("labels") or {})


def _taints(node: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {k: t[k] for k in ("key", "value", "effect") if k in t}
        for t in node.get("spec", {}).get("taints") or []
    ]


def _pod(name: str, host: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": host},
            "tolerations": tolerations,
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }


@pytest.fixture
def kubelet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("machine-kubelet")


@pytest.fixture
def boot_on_power(
    crds: Cluster, bmc: SushyEmulator, machine: fleet.MachineDef, kubelet_dir: Path
) -> Iterator[Callable[[], RealNode]]:
    """The machine "boots" once its BMC says On: its own real kubelet starts and registers."""
    started: list[RealNode] = []

    def boot() -> RealNode:
        wait_for(lambda: bmc.power_state(machine.uuid) == "On", 300, "the BMC to report On")
        node = RealNode(
            cluster=crds,
            directory=kubelet_dir,
            node_name=machine.name,
            node_labels=dict([KUBELET_LABEL]),
            register_with_taints=[KUBELET_TAINT],
        )
        started.append(node)
        return node.start()

    yield boot
    for node in started:
        node.stop()


@pytest.fixture
def webhook_operator(
    crds: Cluster, namespace: str, tmp_path: Path, runner: KubeletAgent
) -> Iterator[OperatorProcess]:
    """The operator serving its core-Node webhook on the host (`webhook_operator_process`)."""
    with webhook_operator_process(crds, namespace, tmp_path) as proc:
        yield proc


def test_node_is_never_schedulable_before_its_labels_and_taints(
    crds: Cluster,
    namespace: str,
    kube_api: client.ApiClient,
    webhook_operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    boot_on_power: Callable[[], RealNode],
) -> None:
    core = client.CoreV1Api(kube_api)
    fleet.apply(
        crds,
        namespace,
        [
            *fleet.bmc_secrets(bmc),
            fleet.group(labels=dict([GROUP_LABEL]), taints=[GROUP_TAINT]),
            fleet.redfish_node(
                machine,
                bmc,
                labels=dict([MACHINE_LABEL]),
                power={"onWatts": 100, "bootTimeoutSeconds": 600},
            ),
        ],
    )
    wait_phase(crds, namespace, machine.name, "Off")
    assert get_json(crds, "node", machine.name) is None
    # Tolerates nothing and wants exactly this machine: it must never be bound there.
    pinned = _pod("pinned", machine.name, [])
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pinned))

    with (
        Recorder(core.list_node, machine.name) as node_watch,
        Recorder(core.list_namespaced_pod, "pinned", namespace=namespace) as pod_watch,
    ):
        patch_desired(crds, namespace, machine.name, "On")
        wait_for(
            lambda: (n := get_json(crds, "node", machine.name)) and STARTUP_TAINT_KEY in str(n),
            120,
            "the core Node made before power-on",
        )
        # Before the kubelet: a dry run (never acted on) and a client that is not a checked
        # kubelet, with labels a kubelet may not set (not copied) and one it may (copied).
        post_existing_node(crds, machine.name, dict([DRY_RUN_LABEL]), "--dry-run=server")
        post_existing_node(
            crds, machine.name, {**FORBIDDEN_LABELS, POSTED_LABEL[0]: POSTED_LABEL[1]}
        )
        kubelet = boot_on_power()
        print(f"\nmachine's kubelet Ready {kubelet.ready_seconds:.1f}s after it started")
        wait_phase(crds, namespace, machine.name, "Ready")
        node = wait_for(
            lambda: (
                (n := get_json(crds, "node", machine.name))
                and not any(t["key"] == STARTUP_TAINT_KEY for t in _taints(n))
                and n
            ),
            120,
            "the startup taint to be removed",
        )
        # A pod that tolerates the Group's taint lands there.
        welcome = _pod(
            "welcome",
            machine.name,
            [{**GROUP_TAINT, "operator": "Equal"}, {**KUBELET_TAINT, "operator": "Equal"}],
        )
        crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(welcome))
        running = wait_for(
            lambda: (
                (p := get_json(crds, "pod", "welcome", "-n", namespace))
                and p["status"].get("phase") == "Running"
                and p
            ),
            180,
            "the tolerating pod to run on the machine",
        )
        # The scheduler's verdict on an untolerating pod against the Node as it now is (Ready,
        # startup taint gone): refused for its taints. A pod that waited from before power-on
        # is not retried for a taint change that still leaves it untolerated (the
        # TaintToleration plugin's queueing hint), so the verdict is asked of a new one.
        late = _pod("late", machine.name, [])
        crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(late))
        refused = wait_for(
            lambda: next(
                (
                    c
                    for c in (get_json(crds, "pod", "late", "-n", namespace) or {})
                    .get("status", {})
                    .get("conditions")
                    or []
                    if c["type"] == "PodScheduled" and c["status"] == "False"
                ),
                None,
            ),
            120,
            "the scheduler to refuse an untolerating pod on the Ready machine",
        )
        pinned_now = get_json(crds, "pod", "pinned", "-n", namespace)
        late_now = get_json(crds, "pod", "late", "-n", namespace)

    # --- the Node: tainted and labelled from the first time anyone could see it
    seen = node_watch.objects()
    assert seen, "the Node watch saw nothing"
    first = seen[0]
    assert node_watch.events[0][1] == "ADDED"
    for obj in seen:
        assert _labels(obj).get(GROUP_LABEL[0]) == GROUP_LABEL[1], _labels(obj)
        assert _labels(obj).get(MACHINE_LABEL[0]) == MACHINE_LABEL[1], _labels(obj)
        assert GROUP_TAINT in _taints(obj), _taints(obj)
    assert {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"} in _taints(first)
    assert not says_ready(first) and not first.get("status", {}).get("nodeInfo", {}).get(
        "kubeletVersion"
    ), "the first Node seen must be the operator's, before the kubelet registered"
    # The startup taint stayed until the Node was Ready (the kubelet registered in between).
    registered = [o for o in seen if o.get("status", {}).get("nodeInfo", {}).get("kubeletVersion")]
    assert registered, "the kubelet never registered"
    untainted = [o for o in seen if not any(t["key"] == STARTUP_TAINT_KEY for t in _taints(o))]
    assert untainted and all(says_ready(o) for o in untainted)

    # --- now: the Group's taint remains, the startup taint is gone, the tolerating pod runs
    assert GROUP_TAINT in _taints(node)
    assert running["spec"]["nodeName"] == machine.name
    # --- the untolerating pod was never bound, from before power-on until the scheduler had
    # refused one on the Ready machine for its taints
    assert pod_watch.objects(), "the pod watch saw nothing"
    assert all(not o["spec"].get("nodeName") for o in pod_watch.objects())
    assert pinned_now is not None and not pinned_now["spec"].get("nodeName")
    assert refused["reason"] == "Unschedulable", refused
    assert "untolerated taint" in refused["message"], refused
    assert late_now is not None and not late_now["spec"].get("nodeName"), late_now

    # --- the kubelet found the Node: its own --node-labels and registerWithTaints reached it
    # through the webhook (docs: "The core Node before power-on"), beside the Group's.
    labels = _labels(node)
    assert labels.get("kubernetes.io/hostname") == machine.name
    assert labels.get(KUBELET_LABEL[0]) == KUBELET_LABEL[1], labels
    assert KUBELET_TAINT in _taints(node), _taints(node)
    assert labels.get(GROUP_LABEL[0]) == GROUP_LABEL[1]
    assert labels.get(MACHINE_LABEL[0]) == MACHINE_LABEL[1]
    # The hand-made POST: the allowed label copied, the forbidden ones not; the dry run not.
    assert labels.get(POSTED_LABEL[0]) == POSTED_LABEL[1], labels
    assert not set(FORBIDDEN_LABELS) & set(labels), labels
    assert DRY_RUN_LABEL[0] not in labels
    kubelet_seen = [o for o in seen if _labels(o).get(KUBELET_LABEL[0])]
    assert kubelet_seen and all(GROUP_TAINT in _taints(o) for o in kubelet_seen)

    expected = {
        "CoreNodeCreated",
        "PowerOnRequested",
        "KubeletMetadataMerged",
        "StartupTaintRemoved",
    }
    events = events_until(
        crds,
        namespace,
        machine.name,
        lambda events: expected <= {e["reason"] for e in events},
        f"events {sorted(expected)}",
    )
    reasons = [e["reason"] for e in events]
    # The operator's own CREATE of the Node passes through its webhook too: not acted on.
    assert "CoreNodeRegistering" not in reasons, reasons
    for event in events:
        if event["reason"] == "KubeletMetadataMerged":
            print(f"event KubeletMetadataMerged: {event['message']}")
    print(f"Node labels: {sorted(labels)}; taints: {_taints(node)}")
    print(
        f"Node watch: {len(seen)} events, the first {len(seen) - len(registered)} before the "
        f"kubelet registered, {len(untainted)} without the startup taint (all Ready); pod "
        f"'pinned' never bound ({len(pod_watch.objects())} watch event(s)); 'welcome' Running "
        f"on {machine.name}"
    )


@pytest.fixture
def refuse_node(crds: Cluster, machine: fleet.MachineDef) -> Iterator[str]:
    """A ValidatingAdmissionPolicy refusing to create this machine's core Node."""
    name = f"refuse-{machine.name}"
    message = f"no core Node {machine.name} in this test"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["nodes"],
                    }
                ]
            },
            "validations": [
                {"expression": f"object.metadata.name != '{machine.name}'", "message": message}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    for obj in (policy, binding):
        crds.kubectl("apply", "-f", "-", input=json.dumps(obj))
    probe = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": machine.name}}
    # The policy takes a moment to be in force: a server-side dry run goes through admission.
    wait_for(
        lambda: (
            crds.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
            ).returncode
            != 0
        ),
        60,
        "the admission policy to refuse the Node",
    )
    yield message
    crds.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
    crds.kubectl("delete", "validatingadmissionpolicy", name, check=False)


def test_a_refused_core_node_leaves_the_machine_failed_and_off(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    refuse_node: str,
) -> None:
    fleet.apply(
        crds,
        namespace,
        [*fleet.bmc_secrets(bmc), fleet.group(), fleet.redfish_node(machine, bmc, maxRetries=0)],
    )
    wait_phase(crds, namespace, machine.name, "Off")
    patch_desired(crds, namespace, machine.name, "On")

    failed = wait_phase(crds, namespace, machine.name, "Failed")

    assert refuse_node in failed["message"], failed["message"]
    assert "not powered on" in failed["message"]
    assert failed["lastOperation"]["result"] == "Failed"
    # No power command, no Job, no Node.
    assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 0
    assert bmc.power_state(machine.uuid) == "Off"
    # Action Jobs only: the Group's health-check CronJob may have run a check meanwhile.
    jobs = get_json(crds, "jobs", "-n", namespace, "-l", "lightsout.dev/attempt")["items"]
    assert jobs == []
    assert get_json(crds, "node", machine.name) is None
    warned(crds, namespace, machine.name, refuse_node, "CoreNodeFailed")
    assert status(crds, namespace, machine.name)["phase"] == "Failed"
