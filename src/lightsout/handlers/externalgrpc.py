"""Starts and stops the externalgrpc server (cluster-autoscaler's cloud provider) with the
operator, when `LIGHTSOUT_GRPC_ADDRESS` is set. kopf calls these once at start-up and clean-up;
the server itself lives in `lightsout.grpc.server`.

A server that cannot start (no TLS files and no explicit plaintext, a port in use) stops the
operator at start-up with the reason, rather than leaving cluster-autoscaler without a provider.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from lightsout.config import OperatorConfig
from lightsout.grpc import server
from lightsout.grpc.cluster import ApiCluster


def settings_of(config: OperatorConfig) -> server.Settings | None:
    if not config.grpc_address:
        return None
    return server.Settings(
        address=config.grpc_address,
        cert_file=config.grpc_tls_cert,
        key_file=config.grpc_tls_key,
        client_ca_file=config.grpc_tls_client_ca,
        insecure=config.grpc_insecure,
        health_address=config.grpc_health_address,
    )


@kopf.on.startup()
async def start_externalgrpc(memo: kopf.Memo, **_: Any) -> None:
    config = getattr(memo, "config", None) or OperatorConfig.from_env()
    settings = settings_of(config)
    memo.externalgrpc = None
    if settings is None:
        return
    try:
        cluster = ApiCluster(config.watched_namespaces)
        memo.externalgrpc = await asyncio.to_thread(server.start, settings, cluster)
    except (server.ConfigError, OSError, RuntimeError) as exc:
        raise kopf.PermanentError(f"externalgrpc server not started: {exc}") from exc


@kopf.on.cleanup()
async def stop_externalgrpc(memo: kopf.Memo, **_: Any) -> None:
    running: server.Running | None = getattr(memo, "externalgrpc", None)
    if running is not None:
        await asyncio.to_thread(running.stop)
