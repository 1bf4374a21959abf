"""Starts and stops the externalgrpc server (cluster-autoscaler's cloud provider) with the
operator, when `LIGHTSOUT_GRPC_ADDRESS` is set. kopf calls these once at start-up and clean-up;
the server itself lives in `lightsout.grpc.server`. Its snapshots get the Node reconciler's
caches of Secret and ConfigMap key names, so cluster-autoscaler is never offered a machine whose
references do not resolve.

A server that cannot start (no TLS files and no explicit plaintext, a port in use) stops the
operator at start-up with the reason, rather than leaving cluster-autoscaler without a provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf

from lightsout.config import OperatorConfig
from lightsout.grpc import server
from lightsout.grpc.cluster import ApiCluster, Contents
from lightsout.handlers.autoscale import KEY_NAMES, key_name_entries
from lightsout.handlers.lifecycle import shared_api

#: Seconds an RPC waits for the event loop to copy the caches.
CONTENTS_TIMEOUT = 10.0


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


def cached_contents(indexes: Mapping[str, Any]) -> Contents:
    """The Node reconciler's caches of Secret and ConfigMap key names, copied on the event loop
    (kopf changes its indexes there) for an RPC running in a server thread."""
    loop = asyncio.get_running_loop()

    async def copy() -> Mapping[str, list[dict[str, Any]]]:
        return key_name_entries(indexes)

    def contents() -> Mapping[str, list[dict[str, Any]]]:
        return asyncio.run_coroutine_threadsafe(copy(), loop).result(CONTENTS_TIMEOUT)

    return contents


@kopf.on.startup()
async def start_externalgrpc(memo: kopf.Memo, **kwargs: Any) -> None:
    config = getattr(memo, "config", None) or OperatorConfig.from_env()
    settings = settings_of(config)
    memo.externalgrpc = None
    if settings is None:
        return
    try:
        # kopf hands every index to start-up handlers as a keyword argument named by its id.
        contents = cached_contents({i: kwargs[i] for i in KEY_NAMES.values() if i in kwargs})
        cluster = ApiCluster(shared_api(memo), config.watched_namespaces, contents)
        memo.externalgrpc = await asyncio.to_thread(server.start, settings, cluster)
    except (server.ConfigError, OSError, RuntimeError) as exc:
        raise kopf.PermanentError(f"externalgrpc server not started: {exc}") from exc


@kopf.on.cleanup()
async def stop_externalgrpc(memo: kopf.Memo, **_: Any) -> None:
    running: server.Running | None = getattr(memo, "externalgrpc", None)
    if running is not None:
        await asyncio.to_thread(running.stop)
