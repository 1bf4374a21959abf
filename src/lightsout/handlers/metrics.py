"""Serves `/metrics` and feeds the machine figures from the Node watch.

At start-up the Prometheus endpoint is opened on `LIGHTSOUT_METRICS_ADDRESS` (a port that cannot
be bound is logged, never fatal: the operator's work matters more than its figures); every Node
event is handed to the `MachineTracker`, which does no API call.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import kopf
from prometheus_client import REGISTRY, start_http_server

from lightsout import API_GROUP, API_VERSION
from lightsout.config import OperatorConfig
from lightsout.metrics.energy import MachineCollector
from lightsout.metrics.machines import MachineTracker, PhaseCollector

log = logging.getLogger(__name__)
TRACKER = MachineTracker()


@kopf.on.startup()
def serve_metrics(memo: kopf.Memo, **_: Any) -> None:
    config = getattr(memo, "config", None) or OperatorConfig.from_env()
    address = config.metrics_address
    if not address:
        return
    host, _sep, port = address.rpartition(":")
    REGISTRY.register(PhaseCollector(TRACKER))
    REGISTRY.register(MachineCollector(TRACKER))
    try:
        start_http_server(int(port), addr=host or "0.0.0.0")  # noqa: S104  (the pod's port)
    except (OSError, ValueError) as exc:
        log.error("metrics endpoint %s could not be opened: %s", address, exc)
        return
    log.info("metrics served at http://%s/metrics", address)


@kopf.on.event(API_GROUP, API_VERSION, "nodes")
def machine_seen(
    event: kopf.RawEvent, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    if event.get("type") == "DELETED":
        TRACKER.forget(namespace or "", name)
    else:
        TRACKER.observe(body, dt.datetime.now(dt.UTC))
