"""The pydantic models read the shipped samples, apply the documented defaults and refuse what the
API server refuses, with the same words."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from lightsout.models.crd import crd_objects
from lightsout.models.drivers import ProxmoxDriver, RedfishDriver
from lightsout.models.enums import (
    Autoscaler,
    BootOverride,
    DesiredPowerState,
    DriftPolicy,
    ProxmoxMode,
    SelectionPolicy,
)
from lightsout.models.group import Group, GroupSpec
from lightsout.models.node import Node, NodeSpec
from lightsout.models.schema import walk
from lightsout.models.types import parse_quantity
from tests.e2e.bad_inputs import BAD_INPUTS, BadInput

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "samples"
REDFISH = {
    "endpoint": "https://127.0.0.1:8443",
    "systemId": "2f0c2d3a-6a53-4b8e-9d0b-6d1a6f1c0a01",
    "credentialsSecretRef": {"name": "bmc-credentials"},
}
MINIMAL_NODE = {"group": "homelab", "kubernetesNodeName": "box", "driver": {"redfish": REDFISH}}


def _sample_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


SAMPLE_OBJECTS = [doc for doc in _sample_docs() if doc["kind"] in ("Node", "Group")]


def _model(doc: dict[str, Any]) -> type[Node] | type[Group]:
    return Node if doc["kind"] == "Node" else Group


def test_samples_cover_a_group_three_nodes_and_their_secret() -> None:
    kinds = sorted((doc["kind"], doc["metadata"]["name"]) for doc in _sample_docs())

    assert kinds == [
        ("Group", "homelab"),
        ("Node", "big-box"),
        ("Node", "mid-box"),
        ("Node", "small-box"),
        ("Secret", "bmc-credentials"),
    ]


@pytest.mark.parametrize("doc", SAMPLE_OBJECTS, ids=lambda d: d["metadata"]["name"])
def test_samples_round_trip(doc: dict[str, Any]) -> None:
    model = _model(doc).model_validate(doc)

    assert model.model_dump(mode="json", exclude_unset=True) == doc
    assert type(model).model_validate(model.to_dict()) == model


def test_sample_nodes_differ_in_size_and_draw() -> None:
    nodes = {
        d["metadata"]["name"]: Node.model_validate(d) for d in SAMPLE_OBJECTS if d["kind"] == "Node"
    }

    big, mid, small = nodes["big-box"].spec, nodes["mid-box"].spec, nodes["small-box"].spec
    assert big.desired_power_state is DesiredPowerState.ON
    assert big.resources is not None and mid.resources is not None and small.resources is not None
    cpus = [parse_quantity(n.resources.cpu) for n in (big, mid, small) if n.resources]
    assert cpus == [32, 16, 4]
    assert parse_quantity(big.resources.memory) == 128 * 2**30
    assert [n.power.on_watts for n in (big, mid, small)] == [180, 110, 35]
    assert all(n.driver.kind == "redfish" for n in (big, mid, small))


def test_node_defaults() -> None:
    spec = NodeSpec.model_validate(MINIMAL_NODE)

    assert spec.desired_power_state is DesiredPowerState.OFF
    redfish = spec.driver.config
    assert isinstance(redfish, RedfishDriver)
    assert redfish.credentials_secret_ref.username_key == "username"
    assert redfish.credentials_secret_ref.password_key == "password"
    assert redfish.tls.insecure_skip_verify is False
    assert redfish.boot_override is BootOverride.NONE
    assert redfish.graceful_shutdown_seconds == 120
    assert (spec.power.boot_timeout_seconds, spec.power.shutdown_timeout_seconds) == (600, 300)
    assert spec.autoscaling.enabled is True
    assert spec.node_removal_policy is None  # the Group's choice (default Delete)
    assert spec.max_retries == 3
    assert spec.provider_id is None


def test_group_defaults() -> None:
    spec = Group.model_validate({"metadata": {"name": "g"}}).spec

    assert (spec.min_nodes, spec.max_nodes) == (0, 10)
    assert spec.autoscaler is Autoscaler.BUILTIN
    assert spec.dry_run is False
    assert (
        spec.scale_up.stabilization_window_seconds,
        spec.scale_up.max_concurrent_operations,
    ) == (
        0,
        2,
    )
    down = spec.scale_down
    assert (down.enabled, down.unneeded_seconds, down.utilization_threshold) == (True, "auto", 0.5)
    assert (down.stabilization_window_seconds, down.max_concurrent_operations) == (300, 1)
    assert spec.selection_policy is SelectionPolicy.LOWEST_ENERGY
    assert spec.health_check.schedule == "0 * * * *"
    assert spec.health_check.drift_policy is DriftPolicy.REPORT


def test_driver_block_defaults() -> None:
    wol = NodeSpec.model_validate(
        {
            **MINIMAL_NODE,
            "driver": {
                "wol": {
                    "macAddress": "52:54:00:12:34:56",
                    "ssh": {"host": "box", "user": "ops", "privateKeySecretRef": {"name": "k"}},
                }
            },
        }
    ).driver
    assert wol.kind == "wol"
    assert wol.wol is not None
    assert (wol.wol.broadcast_address, wol.wol.port, wol.wol.ssh.port) == ("255.255.255.255", 9, 22)
    assert wol.wol.ssh.private_key_secret_ref.key == "ssh-privatekey"

    ipmi = NodeSpec.model_validate(
        {
            **MINIMAL_NODE,
            "driver": {"ipmi": {"host": "10.0.0.2", "credentialsSecretRef": {"name": "b"}}},
        }
    ).driver.ipmi
    assert ipmi is not None
    assert (ipmi.port, ipmi.cipher_suite) == (623, 3)

    proxmox = ProxmoxDriver.model_validate(
        {
            "endpoint": "https://pve:8006",
            "node": "pve",
            "credentialsSecretRef": {"name": "p"},
            "vmid": 105,
        }
    )
    assert proxmox.mode is ProxmoxMode.PERSISTENT
    assert proxmox.tls.ca_secret_ref is None


def test_snake_case_names_and_camel_case_aliases_both_work() -> None:
    by_alias = GroupSpec.model_validate({"minNodes": 1, "scaleDown": {"unneededSeconds": 60}})
    by_name = GroupSpec(min_nodes=1, scale_down={"unneeded_seconds": 60})

    assert by_alias == by_name
    assert by_name.to_dict()["scaleDown"]["unneededSeconds"] == 60
    assert ProxmoxDriver.model_fields["memory_mib"].alias == "memoryMiB"
    assert NodeSpec.model_fields["provider_id"].alias == "providerID"


def _cel_messages() -> set[str]:
    return {
        rule["message"]
        for crd in crd_objects()
        for _, node in walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        for rule in node.get("x-kubernetes-validations", [])
    }


@pytest.mark.parametrize("bad", [b for b in BAD_INPUTS if b.given is None], ids=lambda b: b.id)
def test_models_refuse_what_the_api_server_refuses(bad: BadInput) -> None:
    model: type[BaseModel] = Node if bad.kind == "Node" else Group

    with pytest.raises(ValidationError) as caught:
        model.model_validate(bad.body)

    # Where the API server answers with a CEL rule's message, Python says the same words.
    said = " ".join(str(item["msg"]) for item in caught.value.errors())
    for text in bad.expects:
        if any(text in message for message in _cel_messages()):
            assert text in said, f"{bad.id}: {text!r} not in {said!r}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (4, Decimal(4)),
        ("500m", Decimal("0.5")),
        ("16Gi", Decimal(16 * 2**30)),
        ("1.5", Decimal("1.5")),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("+3", Decimal(3)),
    ],
)
def test_parse_quantity(value: int | str, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize("value", ["lots", "-1", "1.5.5", "16GB", ""])
def test_parse_quantity_refuses_garbage(value: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(value)
