"""Join credentials of Ephemeral clones (execution/join.py): their shape and where they go.

The end-to-end proof (a clone joining with the token through the real API server) is
tests/e2e/test_proxmox_join.py; these check the pure builders quickly.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.execution import join
from lightsout.execution.jobs import JOIN_DIR, JobRequest, build_action_job
from lightsout.models.drivers import CloudInitJoin
from lightsout.models.node import NodeSpec
from lightsout.planning.types import Action

pytestmark = pytest.mark.unit


JOIN = CloudInitJoin(api_server_endpoint="10.0.0.10:6443")


def node(mode: str = "Ephemeral", with_join: bool = True) -> dict[str, Any]:
    proxmox: dict[str, Any] = {
        "endpoint": "https://pve:8006",
        "node": "pve1",
        "credentialsSecretRef": {"name": "pve"},
        "mode": mode,
        **({"template": {"vmid": 9000}} if mode == "Ephemeral" else {"vmid": 101}),
    }
    if with_join:
        proxmox["join"] = {"apiServerEndpoint": "10.0.0.10:6443"}
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "metadata": {"name": "burst-1", "namespace": "lab", "uid": "u-1"},
        "spec": {"group": "lab", "kubernetesNodeName": "burst-1", "driver": {"proxmox": proxmox}},
    }


def spec(machine: dict[str, Any]) -> NodeSpec:
    return inputs.node_spec(machine)


def provision_pod(**request: Any) -> dict[str, Any]:
    """The pod spec of burst-1's provision Job with its join Secret (and `request`)."""
    job = build_action_job(
        JobRequest(
            node_name="burst-1",
            namespace="lab",
            node_uid="u-1",
            generation=1,
            attempt=1,
            action=Action.PROVISION,
            image="runner:test",
            join_secret=join.join_secret_name("burst-1"),
            **request,
        )
    )
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_only_ephemeral_clones_with_join_get_credentials() -> None:
    assert spec(node()).clone_join == JOIN
    assert spec(node(mode="Persistent", with_join=False)).clone_join is None
    assert spec(node(with_join=False)).clone_join is None
    assert join.job_extravars(spec(node(with_join=False)), {}, []) == {}


def test_tokens_have_the_bootstrap_token_format_and_differ() -> None:
    pairs = {join.new_token() for _ in range(20)}
    assert len(pairs) == 20
    for token_id, secret in pairs:
        assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", f"{token_id}.{secret}")


def test_token_secret_is_what_the_bootstrap_authenticator_reads() -> None:
    expires = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    secret = join.token_secret("lab", "burst-1", "abcdef", "0123456789abcdef", expires)
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert secret["metadata"]["namespace"] == "kube-system"
    assert secret["metadata"]["name"] == "bootstrap-token-abcdef"
    data = secret["stringData"]
    assert data["expiration"] == "2030-01-02T03:04:05Z"
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert secret["metadata"]["labels"][join.LABEL_MACHINE] == "lab.burst-1"


def test_join_secret_is_owned_by_the_node_and_holds_no_label_value_secret() -> None:
    body = join.join_secret(node(), JOIN, "a.b", b"PEM")
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert body["stringData"] == {"token": "a.b", "ca.crt": "PEM", "server": "10.0.0.10:6443"}
    assert "a.b" not in str(body["metadata"])


def test_the_provision_job_mounts_the_join_secret_and_names_it_in_env_only() -> None:
    extravars = join.job_extravars(spec(node()), {"workload": "burst"}, [])
    pod = provision_pod(extravars=extravars)
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["join"] == {"name": "join", "mountPath": JOIN_DIR, "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["join"]["secret"]["secretName"] == "lightsout-join-burst-1"
    assert {"name": "LIGHTSOUT_JOIN_DIR", "value": JOIN_DIR} in container["env"]
    assert extravars["lightsout_join"]["labels"] == {"workload": "burst"}


@pytest.mark.parametrize(
    ("previous", "phase", "revoked"),
    [
        ("Booting", "Ready", True),
        ("Booting", "Failed", True),
        ("Deprovisioning", "Off", True),
        ("Ready", "Ready", False),
        ("Provisioning", "Booting", False),
    ],
)
def test_credentials_are_deleted_when_the_machine_settles(
    previous: str, phase: str, revoked: bool
) -> None:
    calls: list[tuple[str, str]] = []

    class Secrets:  # a stand-in for `Api`: only the deletions are wanted
        def delete_secrets(self, namespace: str, selector: str) -> None:
            calls.append((namespace, selector))

    join.settle(Secrets(), node(), spec(node()), previous, phase)
    selector = f"{join.LABEL_MACHINE}=lab.burst-1"
    assert calls == ([("kube-system", selector), ("lab", selector)] if revoked else [])


def flavored(flavor: str, **refs: Any) -> dict[str, Any]:
    machine = node()
    machine["spec"]["driver"]["proxmox"]["join"].update(flavor=flavor, **refs)
    return machine


def test_k3s_gets_the_users_token_secret_projected_beside_a_join_secret_without_token() -> None:
    machine = flavored("k3s", k3sTokenSecretRef={"name": "k3s", "key": "agent-token"})
    sources = join.join_sources(spec(machine))
    assert sources == (
        {"secret": {"name": "k3s", "items": [{"key": "agent-token", "path": "k3s-token"}]}},
    )
    body = join.join_secret(machine, JOIN, None, b"PEM")
    assert "token" not in body["stringData"]
    pod = provision_pod(join_sources=sources)
    volume = {v["name"]: v for v in pod["volumes"]}["join"]
    assert volume["projected"]["sources"] == [
        {"secret": {"name": "lightsout-join-burst-1"}},
        *sources,
    ]
    # Mounted where the runner's LIGHTSOUT_JOIN_DIR points, as without a flavor's sources.
    (runner,) = pod["containers"]
    env = {e["name"]: e["value"] for e in runner["env"]}
    mounts = {m["name"]: m["mountPath"] for m in runner["volumeMounts"]}
    assert mounts["join"] == env["LIGHTSOUT_JOIN_DIR"] == "/etc/lightsout/join"
    assert join.job_extravars(spec(machine), {}, [])["lightsout_join"]["flavor"] == "k3s"


def test_template_gets_the_users_configmap_as_user_data_j2() -> None:
    machine = flavored("template", userDataTemplateRef={"name": "ud"})
    assert join.join_sources(spec(machine)) == (
        {"configMap": {"name": "ud", "items": [{"key": "user-data", "path": "user-data.j2"}]}},
    )
    assert join.join_sources(spec(node())) == ()
