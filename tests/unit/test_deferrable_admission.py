"""The deferrable-Jobs admission webhook: which Job CREATEs are held (`state.admission`), the
webhook the operator writes for them (`execution.registration.jobs_webhook`, the second of the
MutatingWebhookConfiguration) and the chart's same webhook, and the kopf glue
(`handlers.admission.deferrable_job_admitted`, its id as the URL path)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf
import pytest

from lightsout.config import OperatorConfig
from lightsout.execution import registration
from lightsout.handlers import admission
from lightsout.state.admission import held_patch
from lightsout.state.types import DEFERRED, FINISH_BY, KUEUE_QUEUE, MAX_DELAY
from tests.unit.test_chart import granted, of_kind, render

pytestmark = pytest.mark.unit

HELD = {"spec": {"suspend": True}, "metadata": {"annotations": {DEFERRED: "true"}}}
MARKED = {"metadata": {"annotations": {DEFERRED: "true"}}}


def _job(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    suspend: bool | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "nightly", "namespace": "lab"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (_job({FINISH_BY: "2030-01-01T06:00:00Z"}), HELD),
        (_job({MAX_DELAY: "8h"}, {"app": "x"}), HELD),
        (_job({MAX_DELAY: "8h"}, suspend=False), HELD),
        # Suspended by its author: only marked, the planner governs it the same way.
        (_job({FINISH_BY: "2030-01-01T06:00:00Z"}, suspend=True), MARKED),
        # Kueue's: another admission controller holds it.
        (_job({MAX_DELAY: "8h"}, {KUEUE_QUEUE: "batch"}), None),
        (_job(), None),
        (_job({"other": "x"}, {"app": "x"}), None),
    ],
    ids=[
        "finish-by",
        "max-delay",
        "suspend-false",
        "already-suspended",
        "kueue",
        "no-metadata",
        "not-deferrable",
    ],
)
def test_held_patch_holds_only_a_deferrable_job_outside_kueue(
    job: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    assert held_patch(job) == expected


def _mutated(job: dict[str, Any], dryrun: bool = False) -> kopf.Patch:
    patch = kopf.Patch(body=kopf.Body(job))
    asyncio.run(admission.deferrable_job_admitted(body=kopf.Body(job), dryrun=dryrun, patch=patch))
    return patch


def test_the_handler_gives_kopf_the_json_patch_that_suspends_and_marks_the_job() -> None:
    marked = {"op": "add", "path": "/metadata/annotations/lightsout.dev~1deferred", "value": "true"}
    ops = _mutated(_job({MAX_DELAY: "90m"})).as_json_patch()
    assert sorted(ops, key=lambda op: op["path"]) == [
        marked,
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]
    assert _mutated(_job({MAX_DELAY: "90m"}, suspend=True)).as_json_patch() == [marked]
    # A dry run is answered as a create would be: nothing is stored either way.
    assert _mutated(_job({MAX_DELAY: "90m"}), dryrun=True).as_json_patch() == ops
    assert not _mutated(_job({MAX_DELAY: "90m"}, {KUEUE_QUEUE: "q"}))
    assert not _mutated(_job())


def test_the_handler_is_registered_for_job_creates_at_its_own_path() -> None:
    handlers = {h.id: h for h in kopf.get_default_registry()._webhooks.get_all_handlers()}
    handler = handlers[admission.JOBS_WEBHOOK_ID]
    assert (handler.selector.group, handler.selector.version) == ("batch", "v1")
    assert handler.selector.any_name == "jobs"
    assert handler.operations == ["CREATE"]
    assert handler.ignore_failures is True and handler.side_effects is False
    assert len({h.id for h in handlers.values()}) == len(handlers), "one path per handler"


def _jobs_hook(namespaces: tuple[str, ...] = ()) -> dict[str, Any]:
    body = registration.mutating_webhook_configuration(
        "lightsout-core-nodes",
        {"url": "https://127.0.0.1:9443/core-nodes"},
        timeout_seconds=5,
        jobs_client_config={"url": "https://127.0.0.1:9443/deferrable-jobs"},
        namespaces=namespaces,
    )
    core, jobs = body["webhooks"]
    assert core["name"] == "core-nodes.lightsout.dev", "the core-Node webhook stays first"
    assert "namespaceSelector" not in core, "Nodes are cluster-scoped"
    return dict(jobs)


def test_jobs_webhook_sends_job_creates_of_the_watched_namespaces_and_never_blocks_one() -> None:
    hook = _jobs_hook(("media", "lab"))
    assert hook["name"] == "jobs.lightsout.dev"
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/deferrable-jobs"}
    assert hook["rules"] == [
        {
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["jobs"],
            "scope": "Namespaced",
        }
    ]
    assert hook["failurePolicy"] == "Ignore", "a down operator lets the Job run at once"
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["lab", "media"]}
        ]
    }
    # Limited as the Group webhook is.
    (groups,) = registration.validating_webhook_configuration(
        "x", {}, timeout_seconds=5, namespaces=("media", "lab")
    )["webhooks"]
    assert hook["namespaceSelector"] == groups["namespaceSelector"]
    # The operator's own Jobs never wait; only those the planner watches (NOT_OURS) are held.
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": "app.kubernetes.io/managed-by", "operator": "DoesNotExist"}]
    }
    assert "namespaceSelector" not in _jobs_hook(), "every namespace when none is watched"


def test_the_operator_writes_the_jobs_webhook_with_its_handlers_path(tmp_path: Path) -> None:
    """LIGHTSOUT_WEBHOOK_URL: the configurations written at start-up send Job CREATEs of the
    watched namespaces to `/deferrable-jobs`."""
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    config = OperatorConfig(
        identity="t",
        watched_namespaces=("lab",),
        webhook_address="127.0.0.1:9443",
        webhook_tls_cert=str(ca),
        webhook_tls_key=str(ca),
        webhook_tls_ca=str(ca),
        webhook_url="https://127.0.0.1:9443/",
        webhook_timeout_seconds=7,
    )
    written: list[dict[str, Any]] = []

    class Api:
        def put_webhook_configuration(self, body: dict[str, Any]) -> None:
            written.append(body)

    memo = kopf.Memo()
    memo.config, memo.api = config, Api()
    asyncio.run(admission.start_webhook(settings=kopf.OperatorSettings(), memo=memo))
    (mutating,) = [b for b in written if b["kind"] == "MutatingWebhookConfiguration"]
    core, jobs = mutating["webhooks"]
    assert core["clientConfig"]["url"] == "https://127.0.0.1:9443/core-nodes"
    assert jobs["clientConfig"]["url"] == f"https://127.0.0.1:9443/{admission.JOBS_WEBHOOK_ID}"
    assert jobs["clientConfig"]["caBundle"] == core["clientConfig"]["caBundle"]
    assert jobs["namespaceSelector"]["matchExpressions"][0]["values"] == ["lab"]
    assert jobs["timeoutSeconds"] == 7


@pytest.mark.parametrize("namespaces", [(), ("media", "lab")], ids=["all", "two"])
def test_chart_renders_the_jobs_webhook_the_operator_writes(namespaces: tuple[str, ...]) -> None:
    sets = (f"watchNamespaces={{{','.join(namespaces)}}}",) if namespaces else ()
    docs = render(*sets)
    (configuration,) = of_kind(docs, "MutatingWebhookConfiguration")
    _core, hook = configuration["webhooks"]
    client_config = hook.pop("clientConfig")
    expected = registration.jobs_webhook({}, timeout_seconds=5, namespaces=namespaces)
    expected.pop("clientConfig")
    assert hook == expected
    assert client_config["service"] == {
        "name": "lo-webhook",
        "namespace": "lightsout-system",
        "path": f"/{admission.JOBS_WEBHOOK_ID}",
        "port": 443,
    }
    (secret,) = of_kind(docs, "Secret")
    assert client_config["caBundle"] == secret["data"]["ca.crt"]
    # Releasing a held Job patches it, where the operator's Jobs are made.
    assert ("batch", "jobs", "patch") in granted(docs)
