"""Operator settings, read once from the environment (the Helm chart sets them).

| variable | default | meaning |
| --- | --- | --- |
| LIGHTSOUT_IDENTITY | hostname-pid | holder identity written into machine Leases |
| LIGHTSOUT_LEASE_NAMESPACE | the Node's namespace | where machine Leases live |
| LIGHTSOUT_LEASE_SECONDS | 15 | Lease duration; renewed every third of it while an action runs |
| LIGHTSOUT_RUNNER_IMAGE | ghcr.io/lightsout/runner:0.1.0 | image of action Jobs |
| LIGHTSOUT_JOB_NODE_SELECTOR | (none) | `k=v,k2=v2`: where action Jobs may run (always-on nodes) |
| LIGHTSOUT_JOB_TOLERATIONS | (none) | `key,key2`: taints (any value/effect) action Jobs tolerate |
| LIGHTSOUT_JOB_HOST_NETWORK | false | true: every action Job on its node's network (WoL's are) |
| LIGHTSOUT_JOB_TTL_SECONDS | 3600 | how long finished Jobs are kept for inspection |
| LIGHTSOUT_JOB_SERVICE_ACCOUNT | `default` | ServiceAccount of action Jobs (never a token) |
| LIGHTSOUT_NAMESPACE | see below | where the autoscaler's Lease `lightsout-autoscaler` lives |
| LIGHTSOUT_AUTOSCALER | true | false turns the built-in autoscaler off in this operator |
| LIGHTSOUT_AUTOSCALER_DRY_RUN | false | true: plan and post the events, change no machine |
| LIGHTSOUT_METRICS_ADDRESS | 0.0.0.0:8081 | `host:port` of Prometheus `/metrics`; empty: none |
| LIGHTSOUT_WATCHED_NAMESPACES | (all) | set by `lightsout run -n NS…`: what the gRPC server reads |
| LIGHTSOUT_GRPC_ADDRESS | (none: no server) | `host:port` of the externalgrpc server |
| LIGHTSOUT_GRPC_TLS_CERT | (none) | file: the server's certificate (PEM) |
| LIGHTSOUT_GRPC_TLS_KEY | (none) | file: its private key (PEM) |
| LIGHTSOUT_GRPC_TLS_CLIENT_CA | (none) | file: the CA clients' certificates must chain to (mTLS) |
| LIGHTSOUT_GRPC_HEALTH_ADDRESS | (none) | `host:port`: grpc.health.v1 only, plaintext (probes) |
| LIGHTSOUT_GRPC_INSECURE | false | true: plaintext when no TLS files are set (tests, loopback) |
| LIGHTSOUT_WEBHOOK_ADDRESS | (none: off) | `host:port`: serve the admission webhooks (HTTPS) |
| LIGHTSOUT_WEBHOOK_TLS_CERT | (none) | file: its certificate (PEM); required with the address |
| LIGHTSOUT_WEBHOOK_TLS_KEY | (none) | file: its private key (PEM) |
| LIGHTSOUT_WEBHOOK_TLS_CA | the certificate | file: the caBundle the API server checks it with |
| LIGHTSOUT_WEBHOOK_URL | (none) | set: the operator writes its webhook configurations |
| LIGHTSOUT_WEBHOOK_CONFIGURATION | lightsout-core-nodes | their name (Mutating- and Validating-) |
| LIGHTSOUT_WEBHOOK_TIMEOUT_SECONDS | 5 | its timeoutSeconds (1 to 30) |
| LIGHTSOUT_WORKERS | 4 | reconcile passes at once (machines, Groups), whatever the fleet size |

LIGHTSOUT_NAMESPACE defaults to POD_NAMESPACE, else the first namespace a namespaced operator
watches (`lightsout run -n NS`), else `default`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field


def _items(text: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated list."""
    return tuple(filter(None, (item.strip() for item in text.split(","))))


def _pairs(text: str) -> dict[str, str]:
    return {key: value for key, _, value in (item.partition("=") for item in _items(text))}


def _flag(text: str | None, *, default: bool) -> bool:
    if text is None or not text.strip():
        return default
    return text.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class OperatorConfig:
    identity: str
    lease_namespace: str | None = None
    lease_seconds: int = 15
    runner_image: str = "ghcr.io/lightsout/runner:0.1.0"
    job_node_selector: Mapping[str, str] = field(default_factory=dict)
    job_tolerations: tuple[str, ...] = ()
    job_ttl_seconds: int = 3600
    #: Every action Job on the host network (Wake-on-LAN Jobs always are).
    job_host_network: bool = False
    #: ServiceAccount action Jobs run as; the chart makes one with no rights.
    job_service_account: str | None = None
    #: The operator's own namespace (the autoscaler's leader Lease lives there).
    namespace: str = "default"
    autoscaler_enabled: bool = True
    autoscaler_dry_run: bool = False
    #: `host:port` of the Prometheus endpoint; empty: no endpoint.
    metrics_address: str = "0.0.0.0:8081"
    #: The namespaces `lightsout run -n` watches; empty: the whole cluster.
    watched_namespaces: tuple[str, ...] = ()
    #: The externalgrpc server (cluster-autoscaler's cloud provider); None: not started.
    grpc_address: str | None = None
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None
    grpc_tls_client_ca: str | None = None
    grpc_insecure: bool = False
    grpc_health_address: str | None = None
    #: Reconcile passes at once; the API connection pool is sized from it.
    workers: int = 4
    #: The core-Node admission webhook (`handlers.admission`); None: not served.
    webhook_address: str | None = None
    webhook_tls_cert: str | None = None
    webhook_tls_key: str | None = None
    webhook_tls_ca: str | None = None
    #: Set: the operator writes its Mutating- and ValidatingWebhookConfiguration (else the
    #: installer does).
    webhook_url: str | None = None
    webhook_configuration: str = "lightsout-core-nodes"
    webhook_timeout_seconds: int = 5

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        return cls(
            identity=env.get("LIGHTSOUT_IDENTITY") or f"{socket.gethostname()}-{os.getpid()}",
            lease_namespace=env.get("LIGHTSOUT_LEASE_NAMESPACE") or None,
            lease_seconds=int(env.get("LIGHTSOUT_LEASE_SECONDS", "15")),
            runner_image=env.get("LIGHTSOUT_RUNNER_IMAGE", cls.runner_image),
            job_node_selector=_pairs(env.get("LIGHTSOUT_JOB_NODE_SELECTOR", "")),
            job_tolerations=_items(env.get("LIGHTSOUT_JOB_TOLERATIONS", "")),
            job_ttl_seconds=int(env.get("LIGHTSOUT_JOB_TTL_SECONDS", "3600")),
            job_host_network=_flag(env.get("LIGHTSOUT_JOB_HOST_NETWORK"), default=False),
            job_service_account=env.get("LIGHTSOUT_JOB_SERVICE_ACCOUNT") or None,
            namespace=env.get("LIGHTSOUT_NAMESPACE") or env.get("POD_NAMESPACE") or "default",
            autoscaler_enabled=_flag(env.get("LIGHTSOUT_AUTOSCALER"), default=True),
            autoscaler_dry_run=_flag(env.get("LIGHTSOUT_AUTOSCALER_DRY_RUN"), default=False),
            metrics_address=env.get("LIGHTSOUT_METRICS_ADDRESS", cls.metrics_address).strip(),
            watched_namespaces=_items(env.get("LIGHTSOUT_WATCHED_NAMESPACES", "")),
            grpc_address=env.get("LIGHTSOUT_GRPC_ADDRESS") or None,
            grpc_tls_cert=env.get("LIGHTSOUT_GRPC_TLS_CERT") or None,
            grpc_tls_key=env.get("LIGHTSOUT_GRPC_TLS_KEY") or None,
            grpc_tls_client_ca=env.get("LIGHTSOUT_GRPC_TLS_CLIENT_CA") or None,
            grpc_insecure=_flag(env.get("LIGHTSOUT_GRPC_INSECURE"), default=False),
            grpc_health_address=env.get("LIGHTSOUT_GRPC_HEALTH_ADDRESS") or None,
            workers=max(1, int(env.get("LIGHTSOUT_WORKERS") or "4")),
            webhook_address=env.get("LIGHTSOUT_WEBHOOK_ADDRESS") or None,
            webhook_tls_cert=env.get("LIGHTSOUT_WEBHOOK_TLS_CERT") or None,
            webhook_tls_key=env.get("LIGHTSOUT_WEBHOOK_TLS_KEY") or None,
            webhook_tls_ca=env.get("LIGHTSOUT_WEBHOOK_TLS_CA") or None,
            webhook_url=env.get("LIGHTSOUT_WEBHOOK_URL") or None,
            webhook_configuration=env.get("LIGHTSOUT_WEBHOOK_CONFIGURATION")
            or cls.webhook_configuration,
            webhook_timeout_seconds=min(
                30, max(1, int(env.get("LIGHTSOUT_WEBHOOK_TIMEOUT_SECONDS") or "5"))
            ),
        )
