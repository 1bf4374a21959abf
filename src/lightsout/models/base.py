"""The base class of every Lights-Out API model and the helpers that attach CEL rules to them.

Every spec/status model inherits `ApiModel`: snake_case attributes, camelCase aliases, attribute
docstrings as the field descriptions the CRD generator (`lightsout.models.schema`) copies into the
OpenAPI schema, unknown fields refused (the API server refuses them too under strict field
validation). An invariant is declared once as a `Rule`: its CEL text goes into the CRD's
`x-kubernetes-validations`, and its Python twin (`Rule.test`) raises `RuleViolationError` with the
same message, so Python callers and the API server refuse the same objects with the same words. A
model lists its cross-field rules in `cel_rules`; a constrained type carries its rule as
`Annotated` metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, core_schema


class RuleReason(StrEnum):
    """How the API server labels a failed rule in its refusal (the rule's `reason`)."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"


@dataclass(frozen=True)
class Rule:
    """One CEL validation rule with the message a person reads when the API server refuses.

    `field_path` (e.g. `.vmid`) makes the refusal name the offending field rather than the
    object that carries the rule. `test` is the Python twin: true when the object (or value)
    that is `self` in the CEL passes. A rule mentioning `oldSelf` is a transition rule: it is
    only checked on update, so it has no twin. As `Annotated` metadata a rule validates the
    value and puts its CEL into the type's schema.
    """

    cel: str
    message: str
    field_path: str | None = None
    reason: RuleReason = RuleReason.INVALID
    #: A CEL expression for the message, so the refusal can quote the refused value (for an
    #: int-or-string field the API server's own `Invalid value:` shows only `""`); `message`
    #: stays as the fallback and as the Python validators' text.
    message_expression: str | None = None
    test: Callable[[Any], object] | None = None

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason is not RuleReason.INVALID:
            out["reason"] = self.reason.value
        return out

    def check(self, ok: object) -> None:
        """Raise `RuleViolationError` unless `ok`: the Python twin of the CEL rule."""
        if not ok:
            raise RuleViolationError(self)

    def _validate(self, value: Any) -> Any:
        if self.test is not None:
            self.check(self.test(value))
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        out: dict[str, Any] = handler(schema)
        out[_VALIDATIONS] = [*out.get(_VALIDATIONS, []), self.to_schema()]
        return out


class RuleViolationError(ValueError):
    """A model validator found an object its CEL rule would refuse."""

    def __init__(self, rule: Rule) -> None:
        super().__init__(rule.message)
        self.rule = rule


_VALIDATIONS = "x-kubernetes-validations"


def rules(*items: Rule) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules: a model's `cel_rules`, or a `Field(...)`'s."""
    return {_VALIDATIONS: [rule.to_schema() for rule in items]}


def _model_rules(schema: dict[str, Any], model: type[Any]) -> None:
    if model.cel_rules:
        schema.update(rules(*model.cel_rules))


class ApiModel(BaseModel):
    """Base of the spec and status models: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        extra="forbid",
        json_schema_extra=_model_rules,
    )

    #: Rules across the model's fields: their CEL goes on the model's schema, their twins run
    #: once the fields are valid.
    cel_rules: ClassVar[tuple[Rule, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server stores it: aliases, JSON types, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        for rule in self.cel_rules:
            rule._validate(self)
        return self


def default_empty[T](factory: Callable[[], T], **extra: Any) -> Any:
    """A sub-object that defaults to all its own defaults, in Python and in the CRD (`{}`).

    The API server only defaults a field whose parent object exists, so an omitted
    `scaleDown` must itself default to `{}` for `scaleDown.unneededSeconds` to appear.
    """
    schema_extra: dict[str, Any] = {"default": {}}
    schema_extra.update(extra.pop("json_schema_extra", {}))
    return Field(default_factory=factory, json_schema_extra=schema_extra, **extra)
