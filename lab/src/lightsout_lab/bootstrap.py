"""A booting clone joining the cluster the way `kubeadm join` does: from its cloud-init ISO.

Who uses it: the machine simulator (`lightsout_lab.machines`) for a machine whose ``cloud_init``
reader returns the NoCloud ISO attached to its Proxmox clone, the local control plane
(``lightsout_lab.cluster``: ``KUBEADM_RBAC``, what `kubeadm init` sets up so that bootstrap
tokens may ask for kubelet certificates), and the e2e tests of clones that join by themselves.

Nothing here is faked on the Kubernetes side: `join` reads the ISO (ISO 9660, via pycdlib),
finds the kubeadm JoinConfiguration and discovery kubeconfig cloud-init would write, and does the
kubelet's TLS bootstrap against the real API server:

1. authenticate with the bootstrap token (the API server's bootstrap-token authenticator maps it
   to ``system:bootstrap:<id>`` in ``system:bootstrappers:kubeadm:default-node-token``);
2. submit a kubelet client CSR (signer ``kubernetes.io/kube-apiserver-client-kubelet``,
   ``CN=system:node:<name>``, ``O=system:nodes``), which kube-controller-manager's csrapproving
   controller approves and its csrsigning controller signs;
3. register the Node with that certificate, already carrying the labels (``--node-labels``) and
   taints of the JoinConfiguration, as a kubelet would.

A wrong or expired token fails at step 1 with 401: `JoinError`.
"""

from __future__ import annotations

import base64
import io
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client import ApiException

JOIN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSR_TIMEOUT = 60.0

#: The RBAC `kubeadm init` creates for joining nodes (kubeadm's phases bootstrap-token
#: "kubelet-bootstrap", "node-autoapprove-bootstrap" and "node-autoapprove-certificate-rotation").
KUBEADM_RBAC: tuple[dict[str, Any], ...] = tuple(
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
    for name, role, group in (
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", JOIN_GROUP),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            JOIN_GROUP,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    )
)


class JoinError(RuntimeError):
    """The clone could not join (no ISO, bad cloud-init data, token refused, CSR not signed)."""


@dataclass(frozen=True)
class CloudInit:
    """The NoCloud files of an ISO (user-data, meta-data, network-config), parsed."""

    user_data: Mapping[str, Any]
    meta_data: Mapping[str, Any]
    network_config: Mapping[str, Any]
    files: Mapping[str, str] = field(default_factory=dict)

    def written(self, path: str) -> Any:
        """The parsed YAML of a `write_files` entry of user-data."""
        for entry in self.user_data.get("write_files") or []:
            if entry.get("path") == path:
                return yaml.safe_load(entry.get("content") or "")
        raise JoinError(f"user-data writes no {path}")


def read_iso(data: bytes) -> CloudInit:
    """Parse a NoCloud ISO: volume label `cidata`, files at its root (Rock Ridge names)."""
    import pycdlib

    iso = pycdlib.PyCdlib()
    try:
        iso.open_fp(io.BytesIO(data))
    except Exception as exc:
        raise JoinError(f"not an ISO 9660 image: {exc}") from exc
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        if label.lower() != "cidata":
            raise JoinError(f"volume label {label!r}: cloud-init's NoCloud looks for 'cidata'")
        files: dict[str, str] = {}
        for name in ("user-data", "meta-data", "network-config"):
            out = io.BytesIO()
            try:
                iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
            except Exception:  # noqa: S112 - an optional file (network-config) may be absent
                continue
            files[name] = out.getvalue().decode()
    finally:
        iso.close()
    if not files.get("user-data", "").startswith("#cloud-config"):
        raise JoinError("user-data is not a #cloud-config document")
    return CloudInit(
        user_data=yaml.safe_load(files["user-data"]) or {},
        meta_data=yaml.safe_load(files.get("meta-data", "")) or {},
        network_config=yaml.safe_load(files.get("network-config", "")) or {},
        files=files,
    )


@dataclass(frozen=True)
class JoinPlan:
    """What `kubeadm join --config` would use, read from the cloud-init data."""

    server: str
    ca_pem: bytes
    token: str
    node_name: str
    labels: Mapping[str, str]
    taints: list[dict[str, str]]


def join_plan(data: CloudInit) -> JoinPlan:
    config = data.written("/etc/kubernetes/kubeadm-join.yaml")
    if config.get("kind") != "JoinConfiguration":
        raise JoinError("/etc/kubernetes/kubeadm-join.yaml is not a JoinConfiguration")
    discovery = data.written(config["discovery"]["file"]["kubeConfigPath"])
    cluster = discovery["clusters"][0]["cluster"]
    registration = config.get("nodeRegistration") or {}
    args = {a["name"]: a["value"] for a in registration.get("kubeletExtraArgs") or []}
    labels = dict(
        item.split("=", 1) for item in str(args.get("node-labels", "")).split(",") if item
    )
    return JoinPlan(
        server=str(cluster["server"]),
        ca_pem=base64.b64decode(cluster["certificate-authority-data"]),
        token=str(config["discovery"]["tlsBootstrapToken"]),
        node_name=str(registration.get("name") or data.user_data.get("hostname")),
        labels=labels,
        taints=list(registration.get("taints") or []),
    )


@dataclass
class Joined:
    """A node's identity after the TLS bootstrap: an API client with its own certificate."""

    node_name: str
    api: client.ApiClient
    workdir: Path


def _client(server: str, ca_file: Path, **auth: Any) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server
    configuration.ssl_ca_cert = str(ca_file)
    for key, value in auth.items():
        setattr(configuration, key, value)
    return client.ApiClient(configuration)


def _refused(exc: ApiException) -> JoinError:
    return JoinError(f"the API server refused the bootstrap token: {exc.status} {exc.reason}")


def tls_bootstrap(plan: JoinPlan, timeout: float = CSR_TIMEOUT) -> Joined:
    """Steps 1 and 2: a signed kubelet client certificate obtained with the bootstrap token."""
    workdir = Path(tempfile.mkdtemp(prefix=f"join-{plan.node_name}-"))
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(plan.ca_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{plan.node_name}"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    bootstrap = _client(plan.server, ca_file, api_key={"authorization": f"Bearer {plan.token}"})
    certificates = client.CertificatesV1Api(bootstrap)
    name = f"node-csr-{plan.node_name}-{int(time.time() * 1000)}"
    body: Any = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": KUBELET_SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    }
    try:
        certificates.create_certificate_signing_request(body)
    except ApiException as exc:
        raise _refused(exc) from exc
    deadline = time.monotonic() + timeout
    cert_pem = b""
    while time.monotonic() < deadline:
        try:
            found = certificates.read_certificate_signing_request(name)
        except ApiException as exc:
            # The token can stop working between the create and this read: the API server's
            # authentication cache (10 s) let go of a revoked token meanwhile.
            raise _refused(exc) from exc
        conditions = [c.type for c in (found.status.conditions or [])] if found.status else []
        if "Denied" in conditions or "Failed" in conditions:
            raise JoinError(f"CSR {name} was {conditions}")
        if found.status and found.status.certificate:
            cert_pem = base64.b64decode(found.status.certificate)
            break
        time.sleep(0.3)
    else:
        raise JoinError(f"CSR {name} was not approved and signed within {timeout:.0f}s")
    (workdir / "kubelet.crt").write_bytes(cert_pem)
    (workdir / "kubelet.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    node_api = _client(
        plan.server,
        ca_file,
        cert_file=str(workdir / "kubelet.crt"),
        key_file=str(workdir / "kubelet.key"),
    )
    return Joined(node_name=plan.node_name, api=node_api, workdir=workdir)


def join(iso: bytes, *, timeout: float = CSR_TIMEOUT) -> tuple[Joined, JoinPlan]:
    """Read the ISO and do the TLS bootstrap; the caller registers the Node with `api`."""
    plan = join_plan(read_iso(iso))
    return tls_bootstrap(plan, timeout), plan
