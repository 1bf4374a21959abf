"""Operator start-up: kopf settings, identity and probes. Called once by kopf at start."""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf

from lightsout import API_GROUP
from lightsout.config import OperatorConfig

#: Machines (one daemon thread each) plus room for every other sync handler.
MAX_WORKERS = 1000


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
    # Every machine's reconcile loop is a sync daemon holding one executor thread for good; the
    # default pool (cpu count + 4 threads) would leave no thread for any other handler once a
    # cluster has that many machines, and every watch would silently stall. Threads are only
    # started when needed, so a high ceiling costs nothing.
    settings.execution.max_workers = MAX_WORKERS
    memo.config = OperatorConfig.from_env()
    memo.started = dt.datetime.now(dt.UTC)


@kopf.on.probe(id="identity")
def probe_identity(memo: kopf.Memo, **_: Any) -> str:
    return str(memo.config.identity)
