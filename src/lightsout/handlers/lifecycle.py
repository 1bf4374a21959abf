"""Operator start-up: kopf settings, identity and probes. Called once by kopf at start."""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf

from lightsout import API_GROUP
from lightsout.config import OperatorConfig
from lightsout.k8s import api

#: Threads for kopf's own sync handlers (the probe); the reconcilers have their own pool.
KOPF_THREADS = 2
#: Connections for kopf's threads and the autoscaler, besides one per reconcile worker.
EXTRA_CONNECTIONS = 4


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Status is the source of truth; kopf's own bookkeeping goes to annotations in our group.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.posting.level = 20  # INFO and above become Kubernetes events
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    # Every handler is async except the probe: machines are reconciled by a fixed pool of
    # workers (handlers/node.py), not by a thread per machine.
    settings.execution.max_workers = KOPF_THREADS
    memo.config = config = OperatorConfig.from_env()
    api.configure_pool(config.workers + EXTRA_CONNECTIONS)
    memo.started = dt.datetime.now(dt.UTC)


@kopf.on.probe(id="identity")
def probe_identity(memo: kopf.Memo, **_: Any) -> str:
    return str(memo.config.identity)
