"""Shared fixtures: the real local control plane, the CRDs, a namespace per test, the operator.

The control plane is session-scoped: started once (tens of seconds), torn down at the end even
when tests fail. Set LIGHTSOUT_TEST_CLUSTER_DIR to reuse a cluster started with
`lightsout-lab dev-cluster up --dir DIR` while iterating.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent, runner_image_env
from lightsout_lab.operator_process import OperatorProcess
from tests.harness import cputime, tiers

ROOT = Path(__file__).resolve().parents[1]
CRD_NAMES = ("groups.lightsout.dev", "nodes.lightsout.dev")


def pytest_itemcollected(item: pytest.Item) -> None:
    # The real node's tests on one worker: the group is marked as each test is collected, so
    # it is there whatever order the collection hooks (pytest-xdist's reads it) run in.
    if tiers.REAL_NODE_FIXTURES & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.xdist_group(tiers.REAL_NODE_GROUP))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in exactly one tier (tests/harness/tiers.py): its folder's marker is added
    here, so `-m unit` / `-m e2e` / `-m molecule` select whole folders; a test outside a tier
    folder, or marked with another tier than its folder's, fails the collection. The longest
    tests go first (`tiers.weight`)."""
    wrong: list[str] = []
    for item in items:
        folder = _folder(item)
        # Markers, not keywords: the folder's name is a keyword of every test in it.
        marked = {m.name for m in item.iter_markers() if m.name in tiers.TIERS}
        problem = tiers.tier_problem(folder, marked)
        if problem:
            wrong.append(f"{item.nodeid}: {problem}")
        elif folder not in marked:
            item.add_marker(getattr(pytest.mark, folder))
    if wrong:
        raise pytest.UsageError("tests without exactly one tier:\n" + "\n".join(wrong))
    # Stable: within a weight, the files' own order (module fixtures are set up once).
    items.sort(
        key=lambda item: tiers.weight(_folder(item), bool(item.get_closest_marker("xdist_group")))
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    # In a pytest-xdist worker with `--dist loadgroup`, a grouped test's id carries its group
    # (`…@real-node`): that is how the scheduler keeps the group on one worker. Say so loudly
    # when it does not (a pytest that pytest-xdist cannot add the group to), rather than let
    # every worker start its own real node and wait on the host's lock.
    if not session.config.getoption("loadgroup", default=False):
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            "pytest-xdist did not add the group to these tests' ids (pytest "
            f"{pytest.__version__}; see pyproject.toml): {', '.join(lost[:3])}"
        )


def _folder(item: pytest.Item) -> str:
    """The test's folder under tests/ (its tier when the collection passed)."""
    parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 else ""


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
    cluster.wait_established(CRD_NAMES)
    return cluster


@pytest.fixture
def namespace(crds: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    crds.kubectl("create", "namespace", name)
    yield name
    crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def kube_api(cluster: Cluster) -> client.ApiClient:
    return cluster.api_client()


@pytest.fixture(scope="session")
def runner(
    kube_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletAgent]:
    """The `lightsout-runner` node whose pods (action Jobs) run as local subprocesses."""
    agent = KubeletAgent(
        api=kube_api,
        image_env=runner_image_env(ROOT),
        log_dir=tmp_path_factory.mktemp("runner-pods"),
    ).start()
    yield agent
    agent.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    # Each test's CPU, with LIGHTSOUT_TEST_CPU_LOG set (tests/harness/cputime.py).
    with cputime.logged(item.nodeid):
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "operator_env(**env): more settings of the test's operator")


@pytest.fixture
def operator(
    request: pytest.FixtureRequest,
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    runner: KubeletAgent,
) -> Iterator[OperatorProcess]:
    """The operator as a real `lightsout run` process watching the test's namespace
    (`@pytest.mark.operator_env(LIGHTSOUT_X="…")` adds settings)."""
    marker = request.node.get_closest_marker("operator_env")
    env = {**JOB_PLACEMENT_ENV, **(marker.kwargs if marker else {})}
    proc = OperatorProcess(cluster=crds, namespaces=(namespace,), log_dir=tmp_path, extra_env=env)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
