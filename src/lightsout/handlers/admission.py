"""The operator's admission webhooks, served by kopf (`kopf.WebhookServer`) when
`LIGHTSOUT_WEBHOOK_ADDRESS` is set.

The core-Node one (`@kopf.on.mutate`): a kubelet's own labels and taints reach the Node made
before power-on; what it does is `execution.actuator.kubelet_registering` with the rules of
`execution.registration`. The API server calls it for every Node CREATE (the
MutatingWebhookConfiguration built by `registration.mutating_webhook_configuration`:
failurePolicy Ignore, a short timeout, sideEffects NoneOnDryRun). Only a Node named like the
core Node of a machine in the caches is acted on; a dry run never is, nor a Node created with
the startup taint already (the operator's own, `actuator.prepare_core_node`).

The Group one (`@kopf.on.validate`, `group_admitted`): a Group's CREATE or spec UPDATE that the
Group model refuses is refused, each problem with its field; it is what CRD CEL cannot check,
a window schedule that does not parse as a CronJob's (`0 22-6 * * *`) and windows open at once
(`registration.validating_webhook_configuration`: failurePolicy Ignore, only the watched
namespaces).

The deferrable-Jobs one (`@kopf.on.mutate`, `deferrable_job_admitted`): a Job that may wait
for cheap hours (`lightsout.dev/finish-by` or `/max-delay`, no Kueue queue) is created suspended
and marked `lightsout.dev/deferred`, as Kueue admits its Jobs, until the planner releases it;
what it does is `state.admission.held_patch`. The API server calls it for Job CREATEs in the
watched namespaces without a managed-by label, those the planner watches, so never the
operator's own (the second webhook of the same MutatingWebhookConfiguration,
`registration.jobs_webhook`: failurePolicy Ignore, so a down operator lets a Job run at once and
it never misses its deadline). A dry run is answered the same: it shows what a create does.

With `LIGHTSOUT_WEBHOOK_URL` set (the dev cluster, where the operator runs on the host) the
operator writes both configurations itself at start-up, with the URL and the caBundle;
otherwise the installer owns them (the Helm chart: deploy/helm/lightsout/templates/webhook.yaml,
behind a Service). kopf's own managed configurations are not used: they fix timeoutSeconds at
30 s, which a kubelet would wait at each registration try while the operator hangs.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import kopf
from pydantic import ValidationError

from lightsout.actuation import inputs
from lightsout.actuation.nodeops import has_startup_taint
from lightsout.config import OperatorConfig
from lightsout.execution import actuator, registration
from lightsout.handlers.lifecycle import shared_api
from lightsout.models.group import GroupSpec
from lightsout.state.admission import held_patch

log = logging.getLogger(__name__)

#: The handler ids, and so the URL paths kopf's server routes to them (`/core-nodes`).
WEBHOOK_ID = "core-nodes"
GROUPS_WEBHOOK_ID = "groups"
JOBS_WEBHOOK_ID = "deferrable-jobs"


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    # An empty host listens on every interface, as the metrics address does (in a pod).
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104


def client_config(config: OperatorConfig, handler: str = WEBHOOK_ID) -> dict[str, str]:
    """How the API server reaches the webhook: the URL (with the handler's path) and the CA it
    checks the certificate with."""
    ca = Path(config.webhook_tls_ca or config.webhook_tls_cert or "").read_bytes()
    return {
        "url": f"{(config.webhook_url or '').rstrip('/')}/{handler}",
        "caBundle": base64.b64encode(ca).decode("ascii"),
    }


async def _not_served(_: Any) -> AsyncIterator[Any]:
    """kopf refuses to start with an admission handler and no server: this one never listens
    (the webhook is off, and no configuration sends anything here)."""
    await asyncio.Event().wait()
    yield {}  # pragma: no cover - never reached


@kopf.on.startup()
async def start_webhook(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig.from_env()
    if not config.webhook_address:
        settings.admission.server = cast(Any, _not_served)
        return
    if not (config.webhook_tls_cert and config.webhook_tls_key):
        raise kopf.PermanentError(
            "LIGHTSOUT_WEBHOOK_ADDRESS needs LIGHTSOUT_WEBHOOK_TLS_CERT and _KEY: the API server "
            "only calls webhooks over HTTPS"
        )
    host, port = _host_port(config.webhook_address)
    settings.admission.server = kopf.WebhookServer(
        addr=host,
        port=port,
        certfile=config.webhook_tls_cert,
        pkeyfile=config.webhook_tls_key,
        cafile=config.webhook_tls_ca,
    )
    if config.webhook_url:
        # One name for both: they are objects of two kinds.
        for body in (
            registration.mutating_webhook_configuration(
                config.webhook_configuration,
                client_config(config),
                timeout_seconds=config.webhook_timeout_seconds,
                jobs_client_config=client_config(config, JOBS_WEBHOOK_ID),
                namespaces=config.watched_namespaces,
            ),
            registration.validating_webhook_configuration(
                config.webhook_configuration,
                client_config(config, GROUPS_WEBHOOK_ID),
                timeout_seconds=config.webhook_timeout_seconds,
                namespaces=config.watched_namespaces,
            ),
        ):
            await asyncio.to_thread(shared_api(memo).put_webhook_configuration, body)
            log.info("wrote %s %s", body["kind"], config.webhook_configuration)


@kopf.on.mutate(
    "",
    "v1",
    "nodes",
    id=WEBHOOK_ID,
    operations=["CREATE"],
    side_effects=True,
    ignore_failures=True,
)
async def core_node_registering(
    body: kopf.Body, dryrun: bool, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    if dryrun:  # sideEffects NoneOnDryRun: nothing changes for a dry run, not even the object
        return
    reconcilers = getattr(memo, "reconcilers", None)
    if reconcilers is None:  # the caches are not filled yet: as without the webhook
        return
    if has_startup_taint(body):  # the operator's own Node, made before power-on
        return
    name = str(body.get("metadata", {}).get("name") or "")
    caches = reconcilers.caches
    refs = caches.machines_on(name)
    machine = caches.machine(*refs[0]) if refs else None
    if machine is None:
        return
    try:
        spec = inputs.node_spec(machine)
        group = caches.group(refs[0][0], spec.group)
        group_spec = None if group is None else inputs.group_spec(group)
    except inputs.InvalidSpecError as error:  # as without the webhook
        log.warning("%s: core Node %s registers as its kubelet asks", error, name)
        return
    ctx = actuator.KubeMachine(reconcilers.api, machine, spec, group_spec, reconcilers.config)
    mutation = await asyncio.to_thread(ctx.kubelet_registering, dict(body))
    if mutation is not None:
        patch["metadata"] = {"labels": mutation[0]}
        patch["spec"] = {"taints": mutation[1]}


@kopf.on.mutate(
    "batch",
    "v1",
    "jobs",
    id=JOBS_WEBHOOK_ID,
    operations=["CREATE"],
    side_effects=False,
    ignore_failures=True,
)
async def deferrable_job_admitted(
    body: kopf.Body, dryrun: bool, patch: kopf.Patch, **_: Any
) -> None:
    """Create a deferrable Job suspended and marked deferred (the planner releases it)."""
    held = held_patch(body)
    if held is not None:
        patch.update(held)
        if dryrun:
            return
        meta = body.get("metadata", {})
        # A Job made with generateName has no name yet at admission: its prefix is logged.
        name = meta.get("name") or meta.get("generateName") or "?"
        log.info("Job %s/%s held for cheap hours", meta.get("namespace") or "", name)


def spec_refusal(spec: Any) -> str | None:
    """Why the Group model refuses `spec`, each problem with its field
    (`spec.windows: windows evening and late overlap: ...`); None when it accepts it."""
    try:
        GroupSpec.model_validate(spec if spec is not None else {})
    except ValidationError as error:
        problems = error.errors()[:3]
        return "; ".join(
            f"{_field_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in problems
        )
    return None


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


@kopf.on.validate(
    "lightsout.dev",
    "v1alpha1",
    "groups",
    id=GROUPS_WEBHOOK_ID,
    operations=["CREATE", "UPDATE"],
    side_effects=False,
    ignore_failures=True,
)
async def group_admitted(body: kopf.Body, **kwargs: Any) -> None:
    """Refuse a Group whose spec the model refuses: what the CRD's CEL cannot check (a window
    schedule's full parse, overlapping windows). An UPDATE that leaves the spec as it was
    (kopf's own finalizer, labels) is let through, so a Group refused by a newer model can
    still be edited back or deleted."""
    spec, old = body.get("spec"), kwargs.get("old")  # kopf's WebhookFn does not declare old
    if old is not None and old.get("spec") == spec:
        return
    why = spec_refusal(spec)
    if why is not None:
        raise kopf.AdmissionError(why, code=422)
