"""Build the Node and Group CustomResourceDefinitions from the pydantic models, and render them.

The models are the single source of the API: this module wraps their structural schemas
(`lightsout.models.schema`) into `apiextensions.k8s.io/v1` CRDs with the status subresource,
printer columns, short names and categories, and renders deterministic YAML. `crds/*.yaml` are
its output (`lightsout crds --output crds`, `make crds`); a unit test fails when they drift.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from lightsout.models.group import Group, GroupSpec, GroupStatus
from lightsout.models.node import Node, NodeSpec, NodeStatus
from lightsout.models.schema import structural_schema

GROUP = "lightsout.dev"
VERSION = "v1alpha1"
CATEGORY = "lightsout"
HEADER = (
    "# Generated from the pydantic models in lightsout.models (lightsout.models.crd).\n"
    "# Do not edit: change the models and run `make crds`.\n"
)


def _column(
    name: str, json_path: str, kind: str = "string", description: str = "", priority: int = 0
) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": json_path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


AGE = _column("Age", ".metadata.creationTimestamp", "date")

NODE_COLUMNS = [
    _column("Group", ".spec.group", description="Group the machine belongs to"),
    _column("Desired", ".spec.desiredPowerState", description="Power state asked for"),
    _column("Phase", ".status.phase", description="Power life-cycle phase"),
    _column("Power", ".status.observedPowerState", description="Power state last observed"),
    _column(
        "Health",
        ".status.lastHealthCheck.reason",
        description="Reason of the last health check (Healthy, BMCUnreachable, ...)",
    ),
    _column(
        "Checked",
        ".status.lastHealthCheck.time",
        "date",
        description="When the machine was last health-checked",
        priority=1,
    ),
    _column(
        "Watts",
        ".status.power.watts",
        "number",
        "Draw last measured by the machine's controller",
        priority=1,
    ),
    _column("K8s-Node", ".spec.kubernetesNodeName", description="Core Node name", priority=1),
    _column("Reason", ".status.reason", description="Reason for the phase", priority=1),
    _column(
        "Boot-s",
        ".status.learned.bootSeconds",
        "integer",
        "Learned power-on to Ready time (median of the last power-ons)",
        priority=1,
    ),
    _column(
        "Shutdown-s",
        ".status.learned.shutdownSeconds",
        "integer",
        "Learned power-off time (median of the last power-offs)",
        priority=1,
    ),
    AGE,
]
GROUP_COLUMNS = [
    _column("Min", ".spec.minNodes", "integer", "Machines kept on at least"),
    _column("Max", ".spec.maxNodes", "integer", "Machines on at most"),
    _column("On", ".status.nodes.on", "integer", "Machines Ready"),
    _column("Target", ".status.targetSize", "integer", "Machines the autoscaler wants on"),
    _column("Autoscaler", ".spec.autoscaler", description="Who sizes the Group"),
    _column("Total", ".status.nodes.total", "integer", "Machines in the Group", priority=1),
    AGE,
]


def _crd(
    model: type[BaseModel],
    spec: type[BaseModel],
    status: type[BaseModel],
    short_name: str,
    columns: list[dict[str, Any]],
    *,
    selectable: list[str],
) -> dict[str, Any]:
    kind, plural = model.__name__, f"{model.__name__.lower()}s"
    spec_schema = structural_schema(spec)
    spec_required = model.model_fields["spec"].is_required()
    if not spec_required:
        spec_schema["default"] = {}
    schema: dict[str, Any] = {
        "type": "object",
        "description": " ".join((model.__doc__ or "").split()),
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "Versioned schema of this object: lightsout.dev/v1alpha1.",
            },
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": structural_schema(status),
        },
    }
    if spec_required:
        schema["required"] = ["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "lightsout",
                "app.kubernetes.io/part-of": "lightsout",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short_name],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "selectableFields": [{"jsonPath": path} for path in selectable],
                }
            ],
        },
    }


def crd_objects() -> list[dict[str, Any]]:
    """The Group and Node CRDs as plain dicts, Group first."""
    node_fields = [".spec.group", ".spec.kubernetesNodeName", ".spec.desiredPowerState"]
    return [
        _crd(Group, GroupSpec, GroupStatus, "lsg", GROUP_COLUMNS, selectable=[".spec.autoscaler"]),
        _crd(Node, NodeSpec, NodeStatus, "lsn", NODE_COLUMNS, selectable=node_fields),
    ]


LINE_LIMIT = 80


def _foldable(text: str) -> bool:
    """Whether `text` survives a folded block scalar whose lines we break at single spaces."""
    return (
        bool(text)
        and text == text.strip()
        and "  " not in text
        and not any(ch in text for ch in "\n\t\r\x85\u2028\u2029")
    )


class _Dumper(yaml.SafeDumper):
    """Block style with indented sequences; a string that would overflow 80 columns becomes a
    folded block scalar broken between words, so the files pass yamllint's default rules (a
    word longer than a line sits alone on its line) and diff well."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # noqa: ARG002
        super().increase_indent(flow, False)

    def choose_scalar_style(self) -> str:
        style: str = super().choose_scalar_style()
        event = self.event
        if not isinstance(event, yaml.ScalarEvent) or style not in ("", "'", '"'):
            return style
        quotes = 0 if style == "" else 2
        overflows = self.column + 1 + len(event.value) + quotes > LINE_LIMIT
        analysis = self.analysis
        if (
            overflows
            and not self.simple_key_context
            and not self.flow_level
            and analysis is not None
            and analysis.allow_block
            and _foldable(event.value)
        ):
            return ">"
        return style

    def write_folded(self, text: str) -> None:
        if not _foldable(text):
            super().write_folded(text)
            return
        self.write_indicator(">-", True)
        self.write_line_break()
        for index, word in enumerate(text.split(" ")):
            if index == 0 or self.column + 1 + len(word) > LINE_LIMIT:
                self.write_indent()
                data = word
            else:
                data = " " + word
            self.column += len(data)
            self.stream.write(data)
        self.write_line_break()


def to_yaml(obj: dict[str, Any]) -> str:
    """One object as a YAML document: keys sorted, 2-space indent, lines folded at 80."""
    body = yaml.dump(
        obj,
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        width=LINE_LIMIT,
        explicit_start=True,
    )
    return HEADER + body


def render_crds() -> dict[str, str]:
    """File name -> YAML text for every CRD (`groups.lightsout.dev.yaml`, ...)."""
    return {f"{obj['metadata']['name']}.yaml": to_yaml(obj) for obj in crd_objects()}
