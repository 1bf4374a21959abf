"""The gRPC server cluster-autoscaler talks to: the CloudProvider service plus grpc.health.v1.

`start(settings, cluster)` binds `settings.address` and serves on its own thread pool (never on
kopf's event loop: a slow API read must not stall the operator's handlers). Transport security:

- mTLS (the default and the only secure mode): the server's certificate and key and the CA that
  signed the clients' certificates, all read from files (a mounted Secret); a client without a
  certificate from that CA is refused during the handshake.
- plaintext only when `settings.insecure` is set explicitly; with neither, start refuses.

The health service (grpc.health.v1) reports SERVING for "" and for the CloudProvider service,
NOT_SERVING once `stop` begins. It is served beside CloudProvider and, when
`settings.health_address` is set, alone on that plaintext port too: a kubelet's gRPC probe
speaks no TLS, and whether the server is up is no secret.
Called by `lightsout.handlers.externalgrpc` at operator start-up and clean-up.
"""

from __future__ import annotations

import logging
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lightsout.grpc.cluster import Cluster
from lightsout.grpc.protos import externalgrpc_pb2, externalgrpc_pb2_grpc
from lightsout.grpc.servicer import CloudProviderServicer

log = logging.getLogger(__name__)

SERVICE = externalgrpc_pb2.DESCRIPTOR.services_by_name["CloudProvider"].full_name


class ConfigError(ValueError):
    """The settings name no usable transport (neither TLS files nor an explicit plaintext)."""


@dataclass(frozen=True)
class Settings:
    address: str
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    insecure: bool = False
    #: A plaintext port serving only grpc.health.v1 (for kubelet probes); None: none.
    health_address: str | None = None
    workers: int = 8


@dataclass
class Running:
    server: grpc.Server
    health: health.HealthServicer
    port: int
    health_server: grpc.Server | None = None
    health_port: int | None = None

    def stop(self, grace: float = 5.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait(grace + 1)
        if self.health_server is not None:
            self.health_server.stop(0).wait(1)


def credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """mTLS credentials from the files, None for plaintext (only when asked explicitly)."""
    files = (settings.cert_file, settings.key_file, settings.client_ca_file)
    if all(files):
        cert, key, ca = (Path(f).read_bytes() for f in files if f)
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )
    if any(files):
        raise ConfigError(
            "mTLS needs the certificate, the key and the client CA: "
            "LIGHTSOUT_GRPC_TLS_CERT, LIGHTSOUT_GRPC_TLS_KEY, LIGHTSOUT_GRPC_TLS_CLIENT_CA"
        )
    if settings.insecure:
        return None
    raise ConfigError(
        "the gRPC server needs mTLS files, or LIGHTSOUT_GRPC_INSECURE=true for plaintext"
    )


def start(settings: Settings, cluster: Cluster) -> Running:
    creds = credentials(settings)
    server = grpc.server(futures.ThreadPoolExecutor(settings.workers, "lightsout-grpc"))
    # The generated glue has no type hints (grpcio-tools writes .pyi only for messages).
    externalgrpc_pb2_grpc.add_CloudProviderServicer_to_server(  # type: ignore[no-untyped-call]
        CloudProviderServicer(cluster), server
    )
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = (
        server.add_secure_port(settings.address, creds)
        if creds is not None
        else server.add_insecure_port(settings.address)
    )
    if port == 0:
        raise ConfigError(f"cannot listen on {settings.address}")
    server.start()
    health_server, health_port = None, None
    if settings.health_address:
        health_server = grpc.server(futures.ThreadPoolExecutor(2, "lightsout-grpc-health"))
        health_pb2_grpc.add_HealthServicer_to_server(checker, health_server)
        health_port = health_server.add_insecure_port(settings.health_address)
        if health_port == 0:
            server.stop(0)
            raise ConfigError(f"cannot listen on {settings.health_address}")
        health_server.start()
    for name in ("", SERVICE):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "externalgrpc server on %s (port %d, %s)",
        settings.address,
        port,
        "mTLS" if creds is not None else "plaintext",
    )
    return Running(
        server=server,
        health=checker,
        port=port,
        health_server=health_server,
        health_port=health_port,
    )
