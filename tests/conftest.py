"""Shared fixtures: the real local control plane, the CRDs, a namespace per test, the operator.

The control plane is session-scoped: started once (tens of seconds), torn down at the end even
when tests fail. Set LIGHTSOUT_TEST_CLUSTER_DIR to reuse a cluster started with
`lightsout dev-cluster up --dir DIR` while iterating.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from lightsout.devcluster import Cluster
from lightsout.devcluster.kubelet import RUNNER_LABEL, KubeletAgent
from lightsout.devcluster.operator import OperatorProcess

ROOT = Path(__file__).resolve().parents[1]
CRD_NAMES = ("groups.lightsout.dev", "nodes.lightsout.dev")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test carries its tier marker, so `-m unit` / `-m e2e` select whole directories.
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        tier = parts[0] if len(parts) > 1 else ""
        if tier in {"unit", "e2e", "molecule"} and tier not in item.keywords:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reuse = os.environ.get("LIGHTSOUT_TEST_CLUSTER_DIR")
    if reuse:
        existing = Cluster.load(Path(reuse))
        if not existing.running():
            pytest.fail(f"LIGHTSOUT_TEST_CLUSTER_DIR={reuse} names a cluster that is not running")
        yield existing
        return
    started = Cluster(directory=tmp_path_factory.mktemp("cluster")).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in CRD_NAMES)
    )
    return cluster


@pytest.fixture
def namespace(crds: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    crds.kubectl("create", "namespace", name)
    yield name
    crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def kube_api(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def runner(
    kube_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletAgent]:
    """The `lightsout-runner` node whose pods (action Jobs) run as local subprocesses."""
    agent = KubeletAgent(
        api=kube_api, image_env=RUNNER_IMAGE_ENV, log_dir=tmp_path_factory.mktemp("runner-pods")
    ).start()
    yield agent
    agent.stop()


#: What the runner image's environment would be: this venv's python, the repo's playbooks.
RUNNER_IMAGE_ENV = {
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin",
    "LIGHTSOUT_PLAYBOOK_DIR": str(ROOT / "playbooks"),
    "LIGHTSOUT_ROLES_DIR": str(ROOT / "roles"),
}
#: Operator settings that send action Jobs to the runner node.
JOB_PLACEMENT_ENV = {
    "LIGHTSOUT_JOB_NODE_SELECTOR": f"{RUNNER_LABEL}=true",
    "LIGHTSOUT_JOB_TOLERATIONS": RUNNER_LABEL,
}


@pytest.fixture
def operator(
    crds: Cluster, namespace: str, tmp_path: Path, runner: KubeletAgent
) -> Iterator[OperatorProcess]:
    """The operator as a real `lightsout run` process watching the test's namespace."""
    proc = OperatorProcess(
        cluster=crds, namespaces=(namespace,), log_dir=tmp_path, extra_env=JOB_PLACEMENT_ENV
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
