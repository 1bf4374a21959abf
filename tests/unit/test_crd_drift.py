"""The checked-in CRDs and docs/crds.md match the models, and the CRDs are well-formed.

`crds/*.yaml` and the generated part of docs/crds.md are produced from `lightsout.models`; when a
model changes without regenerating, these tests fail and say which command to run. The other
tests check what the API server would only reveal at install time: a structural schema, CEL
rules with messages and bounded inputs, every status field declared, the printer columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from lightsout.models.crd import crd_objects, render_crds
from lightsout.models.group import GroupStatus
from lightsout.models.node import NodeStatus
from lightsout.models.reference import BEGIN, END, render_reference, splice
from lightsout.models.schema import walk
from tests.e2e.bad_inputs import BAD_INPUTS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
CHART_CRDS = ROOT / "deploy" / "helm" / "lightsout" / "crds"
DOC = ROOT / "docs" / "crds.md"


def _schemas() -> dict[str, dict[str, Any]]:
    return {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in crd_objects()
    }


@pytest.mark.parametrize("directory", [CRDS, CHART_CRDS], ids=["crds", "chart"])
def test_checked_in_crds_match_the_models(directory: Path) -> None:
    rendered = render_crds()
    on_disk = {path.name: path.read_text() for path in directory.glob("*.yaml")}

    stale = sorted(
        name for name in rendered.keys() | on_disk.keys() if rendered.get(name) != on_disk.get(name)
    )

    assert not stale, (
        f"{directory.relative_to(ROOT)} is out of date with lightsout.models "
        f"({', '.join(stale)}): run `make crds`"
    )


def test_rendered_yaml_is_stable_and_loads_back() -> None:
    rendered = render_crds()

    assert rendered == render_crds()
    assert sorted(rendered) == ["groups.lightsout.dev.yaml", "nodes.lightsout.dev.yaml"]
    loaded = [yaml.safe_load(rendered[name]) for name in sorted(rendered)]
    assert loaded == crd_objects()


def test_docs_reference_matches_the_models() -> None:
    document = DOC.read_text()

    assert BEGIN in document and END in document
    assert splice(document, render_reference()) == document, (
        "docs/crds.md's field reference is out of date: run"
        " `python -m lightsout.models.reference docs/crds.md`"
    )


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[bad.id for bad in BAD_INPUTS])
def test_docs_list_every_bad_input(bad: Any) -> None:
    document = DOC.read_text().replace("\\|", "|")

    assert f"`{bad.path.name}`" in document
    for text in bad.expects:
        assert text in document, f"docs/crds.md does not show {text!r} for {bad.path.name}"


@pytest.mark.parametrize("kind", ["Group", "Node"])
def test_schema_is_structural(kind: str) -> None:
    for path, node in walk(_schemas()[kind], kind):
        for keyword in ("$ref", "anyOf", "allOf", "oneOf", "not", "nullable", "uniqueItems"):
            assert keyword not in node, f"{path}: {keyword} is not allowed here"
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed, f"{path}: every node of a structural schema needs a type"
        if node.get("type") == "object" and "properties" in node:
            assert "additionalProperties" not in node, path
        if "default" in node and node.get("type") == "object" and "properties" in node:
            assert node["default"] == {}, f"{path}: object defaults are {{}} by convention"


@pytest.mark.parametrize("kind", ["Group", "Node"])
def test_cel_rules_have_messages_and_bounded_inputs(kind: str) -> None:
    for path, node in walk(_schemas()[kind], kind):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message"), f"{path}: rule {rule['rule']!r} has no message"
            bound = {"string": "maxLength", "array": "maxItems"}.get(node.get("type", ""))
            if node.get("type") == "object" and "additionalProperties" in node:
                bound = "maxProperties"
            if node.get("x-kubernetes-int-or-string"):
                bound = "maxLength"
            if bound:
                assert bound in node, f"{path}: CEL reads it, so it needs {bound}"


def _fields(model: type[BaseModel]) -> set[str]:
    """Dotted camelCase paths of every field of `model`, nested models included."""
    out: set[str] = set()
    for name, info in model.model_fields.items():
        alias = info.alias or name
        out.add(alias)
        for inner in _nested_models(info.annotation):
            out.update(f"{alias}.{sub}" for sub in _fields(inner))
    return out


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()):
        found.extend(_nested_models(arg))
    return found


@pytest.mark.parametrize(("kind", "model"), [("Node", NodeStatus), ("Group", GroupStatus)])
def test_every_status_field_is_declared(kind: str, model: type[BaseModel]) -> None:
    declared = {
        path.removeprefix("status.").replace("[]", "")
        for path, _ in walk(_schemas()[kind]["properties"]["status"], "status")
    }

    missing = _fields(model) - declared

    assert not missing, f"status fields the API server would prune: {sorted(missing)}"


def test_names_columns_and_subresources() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in crd_objects()}
    for kind, short in (("Group", "lsg"), ("Node", "lsn")):
        spec = crds[kind]["spec"]
        assert spec["scope"] == "Namespaced"
        assert spec["names"]["shortNames"] == [short]
        assert spec["names"]["categories"] == ["lightsout"]
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}

    def columns(kind: str) -> list[tuple[str, str]]:
        version = crds[kind]["spec"]["versions"][0]
        return [
            (c["name"], c["jsonPath"])
            for c in version["additionalPrinterColumns"]
            if not c.get("priority")
        ]

    assert columns("Node") == [
        ("Group", ".spec.group"),
        ("Desired", ".spec.desiredPowerState"),
        ("Phase", ".status.phase"),
        ("Power", ".status.observedPowerState"),
        ("Health", ".status.lastHealthCheck.reason"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert columns("Group") == [
        ("Min", ".spec.minNodes"),
        ("Max", ".spec.maxNodes"),
        ("On", ".status.nodes.on"),
        ("Target", ".status.targetSize"),
        ("Autoscaler", ".spec.autoscaler"),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_every_cel_rule_has_a_bad_input() -> None:
    expected = {text for bad in BAD_INPUTS for text in bad.expects}
    messages = {
        rule["message"]
        for schema in _schemas().values()
        for _, node in walk(schema)
        for rule in node.get("x-kubernetes-validations", [])
    }

    untested = {m for m in messages if not any(" " in t and t in m for t in expected)}

    assert not untested, f"CEL rules no bad input exercises: {sorted(untested)}"
