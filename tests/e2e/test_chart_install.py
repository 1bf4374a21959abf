"""`helm install` of deploy/helm/lightsout into the real control plane: the API server admits
everything (the operator's pods under the restricted Pod Security Standard, enforced on the
namespace) and its authorizer gives the operator exactly the rights the chart means to give.

The operator's pods are not run here (that needs the real node and the images, the install
issue's next step): this proves what the API server decides about the chart.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightsout_lab import Cluster
from lightsout_lab.binaries import find_helm
from tests.e2e.conftest import can
from tests.harness.wait import get_json, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "lightsout"


@pytest.fixture
def release(crds: Cluster, namespace: str) -> Iterator[str]:
    """The chart installed in a namespace of its own, managing the test's namespace."""
    home = f"lo-{uuid.uuid4().hex[:6]}"
    crds.kubectl("create", "namespace", home)
    crds.kubectl("label", "namespace", home, "pod-security.kubernetes.io/enforce=restricted")
    helm = str(find_helm())
    env = crds.env()
    base = [helm, "--kubeconfig", str(crds.kubeconfig), "--namespace", home]
    watch = f"watchNamespaces={{{namespace}}}"
    installed = subprocess.run(
        [*base, "install", home, str(CHART), "--skip-crds", "--wait=false", "--set", watch],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    try:
        yield home
    finally:
        subprocess.run([*base, "uninstall", home], env=env, check=False, capture_output=True)
        crds.kubectl("delete", "namespace", home, "--wait=false", check=False)


def test_operator_gets_its_rights_in_watched_namespaces_only(
    crds: Cluster, namespace: str, release: str
) -> None:
    operator = f"{release}:{release}"
    assert can(crds, operator, "patch", "nodes.lightsout.dev", "-n", namespace)
    assert can(
        crds, operator, "patch", "nodes.lightsout.dev", "--subresource=status", "-n", namespace
    )
    assert can(crds, operator, "create", "jobs", "-n", namespace)
    assert can(crds, operator, "create", "leases", "-n", release), "the leader Lease"
    assert can(crds, operator, "create", "pods", "--subresource=eviction", "-n", "default"), (
        "drains"
    )
    assert can(crds, operator, "patch", "nodes")
    # A drain past the deadline a low UPS battery sets deletes what a budget still protects
    # (docs/ups.md): on any machine's pods, so cluster-wide.
    assert can(crds, operator, "delete", "pods", "-n", "default")
    # Which Secrets and ConfigMaps exist (and their key names) in the namespaces it manages:
    # a machine whose Secret is missing is held back before any Job (issue 19).
    for verb in ("list", "watch"):
        assert can(crds, operator, verb, "secrets", "-n", namespace)
        assert can(crds, operator, verb, "configmaps", "-n", namespace)
    # Not a namespace it manages; no Secret read by name; no Secret outside its namespaces.
    assert not can(crds, operator, "list", "nodes.lightsout.dev", "-n", "default")
    assert not can(crds, operator, "create", "jobs", "-n", "default")
    assert not can(crds, operator, "get", "secrets", "-n", namespace)
    assert not can(crds, operator, "list", "secrets", "-n", "default")
    assert not can(crds, operator, "list", "secrets", "--all-namespaces")
    assert not can(crds, operator, "create", "pods", "-n", namespace)
    assert not can(
        crds, operator, "patch", "nodes.lightsout.dev", "--subresource=status", "-n", "default"
    )


def test_webhook_certificate_is_kept_across_upgrades(
    crds: Cluster, namespace: str, release: str
) -> None:
    """Every replica mounts the Secret and the API server checks them with the caBundle: an
    upgrade must keep the certificate the chart made at install (`lookup`), not make another."""

    def tls() -> tuple[dict[str, str], str]:
        secret = get_json(crds, "secret", f"{release}-webhook-tls", "-n", release)
        configuration = get_json(crds, "mutatingwebhookconfiguration", f"{release}-core-nodes")
        return secret["data"], configuration["webhooks"][0]["clientConfig"]["caBundle"]

    installed, ca_bundle = tls()
    assert installed["ca.crt"] == ca_bundle
    upgraded = subprocess.run(
        [
            *(str(find_helm()), "--kubeconfig", str(crds.kubeconfig), "--namespace", release),
            *("upgrade", release, str(CHART), "--reuse-values", "--wait=false"),
        ],
        capture_output=True,
        text=True,
        env=crds.env(),
        check=False,
    )
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert tls() == (installed, ca_bundle)


def test_action_jobs_account_can_do_nothing(crds: Cluster, namespace: str, release: str) -> None:
    runner = f"{namespace}:{release}-runner"
    account = json.loads(
        crds.kubectl(
            "get", "serviceaccount", f"{release}-runner", "-n", namespace, "-o", "json"
        ).stdout
    )
    assert account["automountServiceAccountToken"] is False
    for verb, what in [("list", "pods"), ("get", "secrets"), ("list", "nodes.lightsout.dev")]:
        assert not can(crds, runner, verb, what, "-n", namespace), (verb, what)


def test_operator_pods_are_admitted_under_the_restricted_standard(
    crds: Cluster, release: str
) -> None:
    def pods() -> list[dict[str, object]] | None:
        listed = json.loads(crds.kubectl("get", "pods", "-n", release, "-o", "json").stdout)
        return listed["items"] if len(listed["items"]) == 2 else None

    admitted = wait_for(pods, 60, "the Deployment's two pods to be admitted")
    assert all(p["spec"]["serviceAccountName"] == release for p in admitted)  # type: ignore[index]
    events = crds.kubectl("get", "events", "-n", release, "-o", "json").stdout
    assert "violates PodSecurity" not in events
