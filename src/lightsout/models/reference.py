"""Render the field reference of docs/crds.md from the generated CRD schemas.

One Markdown table per kind and part (spec, status) listing every field with its type, default,
limits and description, then the CEL rules with their messages. `update_document(path)` replaces
the text between the markers in docs/crds.md; a unit test fails when the document drifts.
Run: `python -m lightsout.models.reference docs/crds.md`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lightsout.models.crd import crd_objects
from lightsout.models.schema import walk

BEGIN = "<!-- BEGIN GENERATED REFERENCE (python -m lightsout.models.reference docs/crds.md) -->"
END = "<!-- END GENERATED REFERENCE -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return f"`{_cell(text)}`" if text != "" else '`""`'


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "quantity (int or string)"
    kind = node.get("type", "any")
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    if kind == "array":
        return f"list of {_type(node['items'])}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    if kind == "object" and node.get("x-kubernetes-preserve-unknown-fields"):
        return "free-form object"
    if "format" in node:
        return f"{kind} ({node['format']})"
    return str(kind)


def _limits(node: dict[str, Any]) -> str:
    parts = []
    for key, label in (
        ("minimum", ">="),
        ("maximum", "<="),
        ("minLength", "length >="),
        ("maxLength", "length <="),
        ("maxItems", "items <="),
        ("maxProperties", "entries <="),
    ):
        if key in node:
            parts.append(f"{label} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern {_code(node['pattern'])}")
    if node.get("x-kubernetes-list-type") == "map":
        parts.append("keyed by " + ", ".join(node["x-kubernetes-list-map-keys"]))
    return "; ".join(parts)


def _table(schema: dict[str, Any], root: str) -> list[str]:
    lines = [
        "| Field | Type | Default | Required | Limits | Description |",
        "|---|---|---|---|---|---|",
    ]
    nodes = walk(schema, root)
    required = {path: set(node.get("required", [])) for path, node in nodes}
    for path, node in nodes[1:]:
        parent, _, name = path.rpartition(".")
        is_required = name in required.get(parent, set())
        default = _code(node["default"]) if "default" in node else ""
        lines.append(
            f"| `{path}` | {_type(node)} | {default} | {'yes' if is_required else ''} "
            f"| {_limits(node)} | {_cell(node.get('description', ''))} |"
        )
    return lines


def _rules(schema: dict[str, Any], root: str) -> list[str]:
    lines = ["| Where | Rule (CEL) | Message |", "|---|---|---|"]
    for path, node in walk(schema, root):
        for rule in node.get("x-kubernetes-validations", []):
            where = path + rule.get("fieldPath", "")
            message = rule["message"]
            if rule.get("messageExpression"):
                message += " (the refusal quotes the refused value first)"
            lines.append(f"| `{where}` | {_code(rule['rule'])} | {_cell(message)} |")
    return lines


def render_reference() -> str:
    """The generated part of docs/crds.md."""
    out: list[str] = []
    for crd in crd_objects():
        kind = crd["spec"]["names"]["kind"]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        out += [f"### {kind}", "", " ".join(schema["description"].split()), ""]
        for part in ("spec", "status"):
            out += [f"#### {kind} `{part}`", "", *_table(schema["properties"][part], part), ""]
        out += [f"#### {kind} rules", "", *_rules(schema["properties"]["spec"], "spec"), ""]
    return "\n".join(out)


def splice(document: str, generated: str) -> str:
    """`document` with the text between the markers replaced by `generated`."""
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError("the document lacks the generated-reference markers")
    return f"{head}{BEGIN}\n\n{generated}\n{END}{tail}"


def update_document(path: Path) -> bool:
    """Rewrite the generated part of `path`; True when it changed."""
    old = path.read_text()
    new = splice(old, render_reference())
    if new != old:
        path.write_text(new)
    return new != old


if __name__ == "__main__":  # pragma: no cover - a developer's command
    for argument in sys.argv[1:]:
        update_document(Path(argument))
