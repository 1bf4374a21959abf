"""Operator start-up: kopf settings, identity and probes, and the process' one API client.
Called once by kopf at start.

`shared_api` makes the operator's one `lightsout.k8s.api.Api` (one connection pool, sized to
the reconcile workers plus `EXTRA_CONNECTIONS`) and keeps it on kopf's memo as `memo.api`; the
start-up handlers that need the API take it from there and hand it on (to the reconcilers, the
autoscaler, the externalgrpc server, the admission webhook). Whichever of them runs first makes
it: kopf runs start-up handlers in the order they were registered, which imports decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
from typing import Any

import kopf

from lightsout import API_GROUP
from lightsout.config import OperatorConfig
from lightsout.k8s.api import Api

#: Threads for kopf's own sync handlers (the probe); the reconcilers have their own pool.
KOPF_THREADS = 2
#: Connections for kopf's threads and the autoscaler, besides one per reconcile worker.
EXTRA_CONNECTIONS = 4
_SUCCEEDED = re.compile(r"Handler '[^']+' succeeded\.")


class _DropSuccesses(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and _SUCCEEDED.fullmatch(record.getMessage()))


_DROP_SUCCESSES = _DropSuccesses()


def quiet_handler_successes() -> None:
    """Leave kopf's "Handler '…' succeeded." lines out of the log (kept with --verbose).
    Every watch event runs a few handlers that only queue work, so these lines were 8 of 9 in
    the log while 1000 machines were first seen, and its logging a tenth of the CPU. Failures
    and retries are logged as before; what a pass does is logged by the operator itself."""
    logging.getLogger("kopf.objects").addFilter(_DROP_SUCCESSES)


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
    # While the API server is away (a control-plane node rebooting, etcd restarting) every
    # watch retries its request with these pauses, then starts over with a fresh list; kopf's
    # default grows to 21 s, so a watch could notice the return that late. Capped at 5 s: the
    # watches are back within seconds (one try per watch per 5 s meanwhile, no storm).
    settings.networking.error_backoffs = (1, 2, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5)
    # Every handler is async except the probe: machines are reconciled by a fixed pool of
    # workers (handlers/node.py), not by a thread per machine.
    settings.execution.max_workers = KOPF_THREADS
    memo.config = OperatorConfig.from_env()
    shared_api(memo)
    memo.started = dt.datetime.now(dt.UTC)


def shared_api(memo: kopf.Memo) -> Api:
    """The process' one API client, `memo.api`, made on the first call."""
    found: Api | None = getattr(memo, "api", None)
    if found is None:
        config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig.from_env()
        memo.api = found = Api(pool_size=config.workers + EXTRA_CONNECTIONS)
    return found


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel one of the operator's background tasks (kept on the memo) and wait for its end."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@kopf.on.probe(id="identity")
def probe_identity(memo: kopf.Memo, **_: Any) -> str:
    return str(memo.config.identity)
