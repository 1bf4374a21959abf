"""The base class of every Lights-Out API model and the helpers that attach CEL rules to them.

Every spec/status model inherits `ApiModel`: snake_case attributes, camelCase aliases, attribute
docstrings as the field descriptions the CRD generator (`lightsout.models.schema`) copies into the
OpenAPI schema, unknown fields refused (the API server refuses them too under strict field
validation). A cross-field invariant is declared once as a `Rule`: its CEL text goes into the
CRD's `x-kubernetes-validations`, and the model's own validator raises `RuleViolationError` with the
same message, so Python callers and the API server refuse the same objects with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of the spec and status models: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        extra="forbid",
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server stores it: aliases, JSON types, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class RuleReason(StrEnum):
    """How the API server labels a failed rule in its refusal (the rule's `reason`)."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"
    DUPLICATE = "FieldValueDuplicate"


@dataclass(frozen=True)
class Rule:
    """One CEL validation rule with the message a person reads when the API server refuses.

    `field_path` (e.g. `.vmid`) makes the refusal name the offending field rather than the
    object that carries the rule. A rule mentioning `oldSelf` is a transition rule: it is only
    checked on update, so the Python validators cannot mirror it.
    """

    cel: str
    message: str
    field_path: str | None = None
    reason: RuleReason = RuleReason.INVALID
    #: A CEL expression for the message, so the refusal can quote the refused value (for an
    #: int-or-string field the API server's own `Invalid value:` shows only `""`); `message`
    #: stays as the fallback and as the Python validators' text.
    message_expression: str | None = None

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason is not RuleReason.INVALID:
            out["reason"] = self.reason.value
        return out

    def check(self, ok: bool) -> None:
        """Raise `RuleViolationError` unless `ok`: the Python twin of the CEL rule."""
        if not ok:
            raise RuleViolationError(self)


class RuleViolationError(ValueError):
    """A model validator found an object its CEL rule would refuse."""

    def __init__(self, rule: Rule) -> None:
        super().__init__(rule.message)
        self.rule = rule


def rules(*items: Rule) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules, for `model_config` or `Field(...)`."""
    return {"x-kubernetes-validations": [rule.to_schema() for rule in items]}


def default_empty[T](factory: Callable[[], T], **extra: Any) -> Any:
    """A sub-object that defaults to all its own defaults, in Python and in the CRD (`{}`).

    The API server only defaults a field whose parent object exists, so an omitted
    `scaleDown` must itself default to `{}` for `scaleDown.unneededSeconds` to appear.
    """
    schema_extra: dict[str, Any] = {"default": {}}
    schema_extra.update(extra.pop("json_schema_extra", {}))
    return Field(default_factory=factory, json_schema_extra=schema_extra, **extra)
