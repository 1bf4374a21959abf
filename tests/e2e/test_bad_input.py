"""The API server refuses bad Groups and Nodes with a message a person understands.

Runs every manifest of tests/e2e/bad_inputs/ through `kubectl apply --validate=strict` against
the real control plane: the apply must fail, the refusal must contain each `# expect:` text, and
nothing may be left behind (an update refused by a transition rule leaves the object as it was).
The positive side: the shipped samples apply cleanly, `kubectl get lightsout` shows the printer
columns, the API server's defaults equal the models' defaults, and the status subresource keeps
every status field the models declare.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.models import (
    Action,
    Condition,
    ConditionStatus,
    ConditionType,
    Energy,
    EnergyPeriod,
    Group,
    GroupStatus,
    HealthCheckRecord,
    HealthCheckResult,
    Intent,
    LastOperation,
    Node,
    NodeCounts,
    NodeStatus,
    ObservedPowerState,
    OperationResult,
    Phase,
    PowerState,
    ScaleEvent,
)
from lightsout_lab import Cluster
from tests.e2e.bad_inputs import BAD_INPUTS, BadInput
from tests.harness.wait import get_json

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "deploy" / "samples"


def _samples() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[bad.id for bad in BAD_INPUTS])
def test_bad_input_is_refused(crds: Cluster, namespace: str, bad: BadInput) -> None:
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
    intent=Intent(desired=PowerState.ON, generation=1),
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
