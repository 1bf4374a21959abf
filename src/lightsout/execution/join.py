"""Short-lived join credentials for Ephemeral Proxmox clones (`spec.driver.proxmox.join`).

Called by the actuator when it creates a provision Job (`issue`, `job_extravars`) and by the
reconcile pass when a machine's phase changes (`settle`). A clone cloned from a generic
template does not know how to join the cluster: the provision Job writes it a cloud-init
NoCloud ISO (roles/proxmox_vm/tasks/cloud_init.yml) from what this module gives it.

Per provision attempt the operator issues (flavor kubeadm, and template; a k3s agent joins with
the token of the user's Secret, which the Job mounts beside the join Secret, see `join_sources`):

- a kubeadm bootstrap token: the `bootstrap.kubernetes.io/token` Secret in kube-system that the
  API server's bootstrap-token authenticator reads (the clone authenticates as
  `system:bootstrap:<id>` in `system:bootstrappers:kubeadm:default-node-token`, the group
  kubeadm's RBAC lets create and auto-approve kubelet client CSRs). It expires after the
  provision Job's deadline plus the boot timeout, so a clone that never joins leaves a token
  nobody can use, and the token cleaner removes it;
- a join Secret in the machine's namespace with the token, the cluster CA and the API endpoint,
  mounted read-only into the provision Job (a pod cannot mount a kube-system Secret).

Both are deleted as soon as the machine is Ready, Failed or Off. The token value never leaves
these two Secrets and the Job's Secret volume: not in extravars, status, events or logs.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import string
from collections.abc import Mapping
from typing import Any

from lightsout.execution.naming import dns_label, label_value
from lightsout.k8s.api import Api
from lightsout.models.drivers import CloudInitJoin
from lightsout.models.enums import JoinFlavor
from lightsout.models.node import NodeSpec
from lightsout.planning.types import Phase

log = logging.getLogger(__name__)

TOKEN_NAMESPACE = "kube-system"  # noqa: S105 - a namespace name
TOKEN_TYPE = "bootstrap.kubernetes.io/token"  # noqa: S105 - a Secret type, not a secret
#: The group kubeadm's RBAC binds to CSR creation and auto-approval of kubelet client CSRs.
JOIN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
LABEL_MACHINE = "lightsout.dev/join-for"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: Phases after which a clone no longer needs its credentials.
SETTLED = frozenset({Phase.READY, Phase.FAILED, Phase.OFF})
#: Bootstrap token format (k8s.io/cluster-bootstrap): [a-z0-9]{6}.[a-z0-9]{16}.
_TOKEN_CHARS = string.ascii_lowercase + string.digits

Obj = Mapping[str, Any]


def join_sources(spec: NodeSpec) -> tuple[dict[str, Any], ...]:
    """The user's objects the flavor needs beside the join Secret, as projected volume sources:
    the k3s token as `k3s-token`, the user-data template as `user-data.j2` (their values are
    read by the Job only, never by the operator)."""
    join = spec.clone_join
    if join is None:
        return ()
    # The model holds each flavor to its own reference (and no other).
    if (k3s := join.k3s_token_secret_ref) is not None:
        items = [{"key": k3s.key, "path": "k3s-token"}]
        return ({"secret": {"name": k3s.name, "items": items}},)
    if (template := join.user_data_template_ref) is not None:
        items = [{"key": template.key, "path": "user-data.j2"}]
        return ({"configMap": {"name": template.name, "items": items}},)
    return ()


def join_secret_name(machine: str) -> str:
    return dns_label("lightsout-join-", machine)


def _labels(namespace: str, name: str) -> dict[str, str]:
    """Labels of the machine's join Secrets: `revoke` finds them by the first."""
    return {LABEL_MACHINE: label_value(f"{namespace}.{name}"), LABEL_MANAGED_BY: "lightsout"}


def new_token() -> tuple[str, str]:
    """A fresh (token id, token secret) pair in the bootstrap token format."""
    pick = secrets.choice
    return "".join(pick(_TOKEN_CHARS) for _ in range(6)), "".join(
        pick(_TOKEN_CHARS) for _ in range(16)
    )


def token_secret(
    namespace: str, name: str, token_id: str, token: str, expires: dt.datetime
) -> dict[str, Any]:
    """The kube-system Secret the API server's bootstrap-token authenticator reads."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_TYPE,
        "metadata": {
            "name": f"bootstrap-token-{token_id}",
            "namespace": TOKEN_NAMESPACE,
            "labels": _labels(namespace, name),
        },
        "stringData": {
            "description": f"Lights-Out: join token of {namespace}/{name}",
            "token-id": token_id,
            "token-secret": token,
            "expiration": expires.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": JOIN_GROUP,
        },
    }


def join_secret(node: Obj, join: CloudInitJoin, token: str | None, ca_pem: bytes) -> dict[str, Any]:
    """The Secret mounted into the provision Job: token (none for k3s, whose token is the
    user's), CA and API endpoint, owned by the Node."""
    meta = node["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": join_secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": _labels(meta["namespace"], meta["name"]),
            "ownerReferences": [
                {
                    "apiVersion": node.get("apiVersion", "lightsout.dev/v1alpha1"),
                    "kind": "Node",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                }
            ],
        },
        "stringData": {
            **({"token": token} if token is not None else {}),
            "ca.crt": ca_pem.decode(),
            "server": join.api_server_endpoint,
        },
    }


def issue(api: Api, node: Obj, spec: NodeSpec, now: dt.datetime) -> str | None:
    """Issue fresh join credentials for a provision; returns the join Secret's name.

    Earlier tokens of the machine (a previous attempt's) are deleted first: one live token per
    machine.
    """
    join = spec.clone_join
    if join is None:
        return None
    meta = node["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    boot = spec.power.boot_timeout_seconds
    # Valid through the provision Job's deadline (boot timeout + 120 s, see the actuator) and
    # then the boot timeout, which starts when the provision ends.
    expires = now + dt.timedelta(seconds=2 * boot + 120)
    revoke(api, namespace, name)
    if join.flavor is JoinFlavor.K3S:
        # The k3s agent joins with the cluster's token from the user's Secret: nothing to mint.
        body = join_secret(node, join, None, api.cluster_ca())
        api.create_secret(namespace, body)
        return str(body["metadata"]["name"])
    token_id, token = new_token()
    api.create_secret(TOKEN_NAMESPACE, token_secret(namespace, name, token_id, token, expires))
    body = join_secret(node, join, f"{token_id}.{token}", api.cluster_ca())
    api.create_secret(namespace, body)
    log.info("issued join token %s for %s/%s", token_id, namespace, name)
    return str(body["metadata"]["name"])


def revoke(api: Api, namespace: str, name: str) -> None:
    """Delete the machine's bootstrap tokens and join Secret (by label: the names are random)."""
    selector = f"{LABEL_MACHINE}={_labels(namespace, name)[LABEL_MACHINE]}"
    api.delete_secrets(TOKEN_NAMESPACE, selector)
    api.delete_secrets(namespace, selector)


def settle(api: Api, node: Obj, spec: NodeSpec, previous_phase: str | None, phase: str) -> None:
    """After a phase change into Ready, Failed or Off, the clone's credentials are deleted."""
    if previous_phase == phase or phase not in SETTLED or spec.clone_join is None:
        return
    meta = node["metadata"]
    revoke(api, meta["namespace"], meta["name"])
    log.info("deleted the join credentials of %s/%s (%s)", meta["namespace"], meta["name"], phase)


def job_extravars(
    spec: NodeSpec,
    labels: Mapping[str, str],
    taints: list[dict[str, str]],
    network: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the provision playbook writes into the cloud-init data besides the credentials;
    `network` is the static address from the Group's pool (execution/addresses), else DHCP."""
    join = spec.clone_join
    if join is None:
        return {}
    return {
        "lightsout_join": {
            "flavor": str(join.flavor),
            "hostname": spec.kubernetes_node_name,
            "labels": dict(labels),
            "taints": list(taints),
            "iso_storage": join.iso_storage,
            "ssh_authorized_keys": list(join.ssh_authorized_keys or []),
            **(network or {}),
        }
    }
