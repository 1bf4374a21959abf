"""The API server refuses bad Groups and Nodes with a message a person understands.

Runs every manifest of tests/e2e/bad_inputs/ through `kubectl apply --validate=strict` against
the real control plane: the apply must fail, the refusal must contain each `# expect:` text, and
nothing may be left behind (an update refused by a transition rule leaves the object as it was).
Those marked `# webhook: yes` (what CEL cannot check) are refused by the operator's Group
admission webhook, run here on the host as in the dev cluster, which lets the same windows
through once they no longer overlap.
The positive side: the shipped samples apply cleanly, `kubectl get lightsout` shows the printer
columns, the API server's defaults equal the models' defaults, and the status subresource keeps
every status field the models declare.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.models.common import Condition, Energy, EnergyPeriod
from lightsout.models.enums import (
    Action,
    ConditionStatus,
    ConditionType,
    DesiredPowerState,
    HealthCheckResult,
    ObservedPowerState,
    OperationResult,
    Phase,
)
from lightsout.models.group import Group, GroupStatus, NodeCounts, ScaleEvent
from lightsout.models.node import HealthCheckRecord, Intent, LastOperation, Node, NodeStatus
from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess, webhook_env
from lightsout_lab.process import free_port
from tests.e2e.bad_inputs import BAD_INPUTS, BadInput
from tests.harness.wait import get_json, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "deploy" / "samples"


def _samples() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


CEL_INPUTS = [bad for bad in BAD_INPUTS if not bad.webhook]
WEBHOOK_INPUTS = [bad for bad in BAD_INPUTS if bad.webhook]


@pytest.mark.parametrize("bad", CEL_INPUTS, ids=[bad.id for bad in CEL_INPUTS])
def test_bad_input_is_refused(crds: Cluster, namespace: str, bad: BadInput) -> None:
    _refused(crds, namespace, bad)


@pytest.fixture(scope="module")
def webhook_namespace(crds: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A namespace whose Groups the operator's Group webhook checks: the operator serves it on
    the host with the API server's own serving certificate and writes the configurations
    (LIGHTSOUT_WEBHOOK_URL), limited to this namespace."""
    name, port = f"t-webhook-{free_port()}", free_port()
    crds.kubectl("create", "namespace", name)
    proc = OperatorProcess(
        cluster=crds,
        namespaces=(name,),
        log_dir=tmp_path_factory.mktemp("webhook"),
        extra_env=webhook_env(crds, port, name),
    )
    proc.start()
    try:
        # The API server reads new webhook configurations a moment after they are written.
        (overlap,) = [bad for bad in WEBHOOK_INPUTS if "overlap" in bad.id]
        wait_for(
            lambda: "overlap" in _dry_run(crds, name, overlap),
            60,
            "the API server to call the Group webhook",
        )
        yield name
    finally:
        proc.stop()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            crds.kubectl("delete", kind, name, check=False)
        crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


#: The webhook's tests on one worker: they share the module's operator process serving it.
ON_THE_WEBHOOK = pytest.mark.xdist_group("group-webhook")


@ON_THE_WEBHOOK
@pytest.mark.parametrize("bad", WEBHOOK_INPUTS, ids=[bad.id for bad in WEBHOOK_INPUTS])
def test_bad_input_is_refused_by_the_group_webhook(
    crds: Cluster, webhook_namespace: str, bad: BadInput
) -> None:
    _refused(crds, webhook_namespace, bad)


@ON_THE_WEBHOOK
def test_group_webhook_admits_valid_windows_and_a_spec_it_did_not_change(
    crds: Cluster, webhook_namespace: str
) -> None:
    (overlap,) = [bad for bad in WEBHOOK_INPUTS if "overlap" in bad.id]
    group = json.loads(json.dumps(overlap.body))
    group["metadata"]["name"] = "windows-in-turn"
    # The same two windows, one after the other: admitted.
    group["spec"]["windows"][1]["schedule"] = "0 23 * * *"
    group["spec"]["windows"][1]["durationSeconds"] = 25200
    crds.kubectl("apply", "-n", webhook_namespace, "-f", "-", input=json.dumps(group))
    # A change that makes them overlap is.
    proc = crds.kubectl(
        "patch",
        "-n",
        webhook_namespace,
        "group.lightsout.dev/windows-in-turn",
        "--type=json",
        "-p",
        '[{"op": "replace", "path": "/spec/windows/1/schedule", "value": "0 22 * * *"}]',
        check=False,
    )
    assert proc.returncode != 0 and "windows evening and late overlap" in proc.stderr, proc.stderr


def _dry_run(crds: Cluster, namespace: str, bad: BadInput) -> str:
    proc = crds.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(bad.path), check=False
    )
    return proc.stderr


def _refused(crds: Cluster, namespace: str, bad: BadInput) -> None:
    before = None
    if bad.given is not None:
        crds.kubectl("apply", "--validate=strict", "-n", namespace, "-f", str(bad.given))
        before = get_json(crds, bad.resource, bad.name, "-n", namespace)

    proc = crds.kubectl(
        "apply", "--validate=strict", "-n", namespace, "-f", str(bad.path), check=False
    )

    assert proc.returncode != 0, f"{bad.path.name} was accepted:\n{proc.stdout}"
    for text in bad.expects:
        assert text in proc.stderr, f"{bad.path.name}: {text!r} not in the refusal:\n{proc.stderr}"
    after = get_json(crds, bad.resource, bad.name, "-n", namespace)
    if before is None:
        assert after is None, f"{bad.path.name}: the object exists after the refusal"
    else:
        assert after["spec"] == before["spec"]
        assert after["metadata"]["generation"] == before["metadata"]["generation"]


def _apply_samples(cluster: Cluster, namespace: str) -> None:
    proc = cluster.kubectl("apply", "--validate=strict", "-n", namespace, "-f", str(SAMPLES))
    assert proc.stderr.strip() == "", proc.stderr


def _rows(table: str) -> dict[str, list[str]]:
    """`kubectl get` output as header line -> the lines under it, per block."""
    blocks: dict[str, list[str]] = {}
    header = ""
    for line in table.splitlines():
        if not line.strip():
            header = ""
        elif not header:
            header = " ".join(line.split())
            blocks[header] = []
        else:
            blocks[header].append(" ".join(line.split()))
    return blocks


def test_samples_apply_and_show_printer_columns(crds: Cluster, namespace: str) -> None:
    _apply_samples(crds, namespace)

    blocks = _rows(crds.kubectl("get", "lightsout", "-n", namespace).stdout)

    assert set(blocks) == {
        "NAME MIN MAX ON TARGET AUTOSCALER AGE",
        "NAME GROUP DESIRED PHASE POWER HEALTH AGE",
    }
    groups = blocks["NAME MIN MAX ON TARGET AUTOSCALER AGE"]
    assert [row.split()[:4] for row in groups] == [
        ["group.lightsout.dev/homelab", "0", "3", "builtin"]
    ]
    nodes = blocks["NAME GROUP DESIRED PHASE POWER HEALTH AGE"]
    assert [row.split()[:3] for row in nodes] == [
        ["node.lightsout.dev/big-box", "homelab", "On"],
        ["node.lightsout.dev/mid-box", "homelab", "Off"],
        ["node.lightsout.dev/small-box", "homelab", "Off"],
    ]
    # Short names and field selectors work as documented.
    on = crds.kubectl(
        "get", "lsn", "-n", namespace, "--field-selector", "spec.desiredPowerState=On", "-o", "name"
    )
    assert on.stdout.split() == ["node.lightsout.dev/big-box"]
    assert crds.kubectl("get", "lsg", "-n", namespace, "-o", "name").stdout.split() == [
        "group.lightsout.dev/homelab"
    ]


def test_server_defaults_match_model_defaults(crds: Cluster, namespace: str) -> None:
    _apply_samples(crds, namespace)

    for doc in _samples():
        if doc["kind"] not in ("Node", "Group"):
            continue
        model = Node if doc["kind"] == "Node" else Group
        stored = get_json(
            crds, f"{doc['kind'].lower()}s.lightsout.dev", doc["metadata"]["name"], "-n", namespace
        )
        assert stored["spec"] == model.model_validate(doc).spec.to_dict(), doc["metadata"]["name"]


NOW = datetime(2025, 5, 1, 10, 0, tzinfo=UTC)


def _condition(kind: ConditionType) -> Condition:
    return Condition(
        type=kind,
        status=ConditionStatus.TRUE,
        reason="Observed",
        message="seen by the test",
        last_transition_time=NOW,
        observed_generation=1,
    )


# Every field of the energy checkpoint, the day's and the month's amounts included.
ENERGY = Energy(
    counted_to=NOW,
    since=NOW,
    used_watt_hours=12.5,
    saved_watt_hours=30.25,
    used_cost=0.004,
    saved_cost=0.009,
    watts=180.0,
    saving_watts=0.0,
    price_per_kwh=0.3,
    currency="EUR",
    today=EnergyPeriod(start=NOW, used_watt_hours=12.5, saved_watt_hours=30.25),
    month=EnergyPeriod(start=NOW, used_watt_hours=12.5, saved_watt_hours=30.25),
)
FULL_NODE_STATUS = NodeStatus(
    phase=Phase.READY,
    observed_power_state=ObservedPowerState.ON,
    conditions=[_condition(ConditionType.REGISTERED), _condition(ConditionType.HEALTHY)],
    last_operation=LastOperation(
        action=Action.STARTUP,
        intent=1,
        job="lo-big-box-startup-g1-a1",
        attempt=1,
        started=NOW,
        finished=NOW,
        result=OperationResult.SUCCEEDED,
        failed_task="none",
        message="powered on",
        values={"powerState": "On", "nested": {"watts": 180}},
    ),
    provider_id="lightsout://ns/big-box",
    observed_generation=1,
    intent=Intent(desired=DesiredPowerState.ON, generation=1),
    phase_since=NOW,
    reason="Registered",
    message="core Node is Ready",
    attempts=1,
    energy=ENERGY,
    drift_corrections=[NOW],
    last_health_check=HealthCheckRecord(
        time=NOW,
        result=HealthCheckResult.HEALTHY,
        reason="Healthy",
        message="the controller answered: power On",
        power_state=ObservedPowerState.ON,
        job="check-1a2b3c",
    ),
)
FULL_GROUP_STATUS = GroupStatus(
    energy=ENERGY,
    nodes=NodeCounts(total=3, on=1, off=2, transitioning=0, failed=0),
    target_size=1,
    conditions=[_condition(ConditionType.READY)],
    last_scale_up=ScaleEvent(time=NOW, reason="2 pods pending", nodes=["big-box"]),
    last_scale_down=ScaleEvent(time=NOW, reason="idle", nodes=["mid-box", "small-box"]),
    observed_generation=1,
    message="1 of 3 machines on",
)


def test_status_subresource_keeps_every_status_field(crds: Cluster, namespace: str) -> None:
    _apply_samples(crds, namespace)
    cases = [
        ("nodes.lightsout.dev", "big-box", FULL_NODE_STATUS.to_dict()),
        ("groups.lightsout.dev", "homelab", FULL_GROUP_STATUS.to_dict()),
    ]
    for resource, name, status in cases:
        crds.kubectl(
            "patch", resource, name, "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        assert get_json(crds, resource, name, "-n", namespace)["status"] == status

    blocks = _rows(crds.kubectl("get", "lightsout", "-n", namespace).stdout)
    assert blocks["NAME GROUP DESIRED PHASE POWER HEALTH AGE"][0].split()[:6] == [
        "node.lightsout.dev/big-box", "homelab", "On", "Ready", "On", "Healthy",
    ]  # fmt: skip
    assert blocks["NAME MIN MAX ON TARGET AUTOSCALER AGE"][0].split()[:6] == [
        "group.lightsout.dev/homelab", "0", "3", "1", "1", "builtin",
    ]  # fmt: skip
