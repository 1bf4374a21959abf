"""The upgrade test's comparisons (tests/harness/previous_release.py) on this checkout's CRDs:
the fields a schema declares, what one release's CRDs add to another's, and what an object
held before an upgrade and lost after it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.previous_release import added_fields, lost, schema_fields

pytestmark = pytest.mark.unit

NODE_CRD = Path(__file__).resolve().parents[2] / "crds" / "nodes.lightsout.dev.yaml"


def node_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(NODE_CRD.read_text())
    return crd


def test_schema_fields_name_nested_list_and_map_properties() -> None:
    (fields,) = schema_fields(node_crd()).values()
    for path in ("spec.desiredPowerState", "spec.driver.redfish.systemId", "status.phase"):
        assert path in fields
    assert any("[]." in path for path in fields), "a list's items' properties"
    assert "spec.driver.redfish.nosuchfield" not in fields


def test_a_field_removed_from_a_copy_is_the_one_added_back() -> None:
    new = node_crd()
    old = copy.deepcopy(new)
    (version,) = old["spec"]["versions"]
    driver = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["driver"]
    del driver["properties"]["redfish"]["properties"]["systemId"]
    name, served = new["metadata"]["name"], version["name"]
    assert added_fields({name: schema_fields(old)}, {name: schema_fields(new)}) == {
        f"{name} {served} spec.driver.redfish.systemId"
    }
    assert not added_fields({name: schema_fields(new)}, {name: schema_fields(old)})


def test_lost_names_missing_and_changed_values_not_added_ones() -> None:
    before = {"resources": {"cpu": "8", "pods": 110}, "group": "homelab"}
    assert lost(before, {**before, "resources": {"cpu": "8", "pods": 110, "pinned": False}}) == []
    assert lost(before, {"resources": {"cpu": "4", "pods": 110}, "group": "homelab"}) == [
        ".resources.cpu"
    ]
    assert lost(before, {"resources": {"cpu": "8", "pods": 110}}) == [".group"]
