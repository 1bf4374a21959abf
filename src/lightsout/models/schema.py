"""Turn a pydantic model's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

pydantic emits JSON Schema 2020-12 with `$ref`s, `anyOf [X, null]` for optionals, titles and
numeric `exclusiveMinimum`; the API server wants a self-contained structural schema (every node
typed, no `$ref`, OpenAPI 3.0 keywords, `x-kubernetes-*` extensions). Called by
`lightsout.models.crd` and by the reference-doc generator; pure, no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

# Keywords that mean nothing to the API server or are not allowed in a structural schema.
# `propertyNames` (map key limits) is among them: map keys are checked by CEL rules instead.
_DROPPED = {
    "title",
    "examples",
    "$schema",
    "discriminator",
    "readOnly",
    "writeOnly",
    "propertyNames",
}
_VALIDATIONS = "x-kubernetes-validations"


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's schema (validation mode, camelCase names) as a structural OpenAPI schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = raw.pop("$defs", {})
    return _convert(raw, defs)


def _merged(inner: dict[str, Any], site: dict[str, Any]) -> dict[str, Any]:
    """`site` over `inner`, keeping the CEL rules of both (the inner type's first)."""
    rules = [*inner.get(_VALIDATIONS, []), *site.get(_VALIDATIONS, [])]
    merged = {key: value for key, value in {**inner, **site}.items() if key != _VALIDATIONS}
    return {**merged, _VALIDATIONS: rules} if rules else merged


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline `$ref` (alone or as a one-element allOf), letting the use site win on conflicts."""
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is None and len(node.get("allOf", [])) == 1:
        ref = node.pop("allOf")[0]["$ref"]
    if ref is None:
        return node
    return _merged(copy.deepcopy(defs[ref.rsplit("/", 1)[-1]]), node)


def _strip_null(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, {type: null}]` (an optional field) becomes X; an absent field is the null."""
    variants = node.get("anyOf")
    if not variants:
        return node
    kept = [v for v in variants if v.get("type") != "null"]
    if len(kept) == len(variants):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if rest.get("default", ...) is None:
        del rest["default"]
    if len(kept) == 1:
        return _merged(_resolve(kept[0], defs), rest)
    return {**rest, "anyOf": kept}


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _strip_null(_resolve(node, defs), defs)
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = _convert(value, defs)
            # `false` (extra="forbid") is implied: structural schemas prune unknown fields.
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "description":
            out[key] = " ".join(str(value).split())
        elif key == "anyOf" and node.get("x-kubernetes-int-or-string"):
            continue  # int-or-string is declared by the extension alone
        else:
            out[key] = copy.deepcopy(value)
    if "anyOf" in out:
        raise ValueError(f"cannot express a union in a structural schema: {out['anyOf']}")
    if out.get("type") == "object" and "properties" in out and "required" in out:
        out["required"] = [name for name in out["required"] if name in out["properties"]]
        if not out["required"]:
            del out["required"]
    return out


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every node of a structural schema with its dotted path (`spec.driver.redfish.endpoint`);
    map values appear as `<path>.*`, list items as `<path>[]`."""
    found = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        found.extend(walk(sub, f"{path}.{name}" if path else name))
    if isinstance(schema.get("items"), dict):
        found.extend(walk(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        found.extend(walk(schema["additionalProperties"], f"{path}.*"))
    return found
