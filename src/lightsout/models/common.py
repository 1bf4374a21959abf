"""Sub-objects used by both kinds or by several drivers: Secret references, TLS, taints, conditions,
energy accounting.

Shapes follow core Kubernetes where one exists (a taint is a core/v1 Taint, a condition is a
metav1.Condition) so users and tools recognise them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from lightsout.models.base import ApiModel, Rule, RuleReason
from lightsout.models.enums import ConditionStatus, TaintEffect
from lightsout.models.types import (
    LABEL_VALUE,
    QUALIFIED_NAME,
    DnsSubdomain,
    LongText,
    SecretKey,
)


class CredentialsSecretRef(ApiModel):
    """A Secret in the Node's namespace holding a user name and a password."""

    name: DnsSubdomain
    """Name of the Secret."""
    username_key: SecretKey = "username"
    """Key of the Secret holding the user name."""
    password_key: SecretKey = "password"  # noqa: S105 - the name of a key, not a password
    """Key of the Secret holding the password."""


class SecretKeyRef(ApiModel):
    """One key of a Secret in the Node's namespace."""

    name: DnsSubdomain
    """Name of the Secret."""
    key: SecretKey
    """Key within the Secret."""


class CaSecretRef(SecretKeyRef):
    """A Secret key holding the PEM CA bundle that signed the endpoint's certificate."""

    key: SecretKey = "ca.crt"
    """Key within the Secret holding the PEM bundle."""


TLS_EXCLUSIVE = Rule(
    cel="!(self.insecureSkipVerify && has(self.caSecretRef))",
    message="set either insecureSkipVerify or caSecretRef, not both",
    field_path=".caSecretRef",
    reason=RuleReason.FORBIDDEN,
    test=lambda tls: not (tls.insecure_skip_verify and tls.ca_secret_ref is not None),
)


class TLSConfig(ApiModel):
    """How the endpoint's TLS certificate is checked. By default against the system CAs."""

    cel_rules = (TLS_EXCLUSIVE,)

    insecure_skip_verify: bool = False
    """Accept any certificate (self-signed BMCs). The connection is still encrypted."""
    ca_secret_ref: CaSecretRef | None = None
    """Verify the certificate against this CA bundle instead of the system CAs."""


class Taint(ApiModel):
    """A taint put on the core Node when it registers, as in core/v1."""

    key: Annotated[str, StringConstraints(min_length=1, max_length=317, pattern=QUALIFIED_NAME)]
    """Taint key, a qualified name (`example.com/dedicated`)."""
    value: Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE)] | None = None
    """Taint value."""
    effect: TaintEffect
    """Effect on pods that do not tolerate the taint."""


Taints = Annotated[
    list[Taint],
    Field(
        max_length=32,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["key", "effect"],
        },
    ),
]

CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(ApiModel):
    """One aspect of the object's state, as in metav1.Condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316, pattern=CONDITION_TYPE)]
    """Condition type in CamelCase, see ConditionType (`Registered`, `Healthy`, ...)."""
    status: ConditionStatus
    """Whether the condition holds."""
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON)
    ]
    """Machine-readable CamelCase reason for the last transition."""
    message: LongText = ""
    """Human-readable details."""
    last_transition_time: datetime
    """When the status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed from."""


Conditions = Annotated[
    list[Condition],
    Field(
        max_length=16,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    ),
]


Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$", max_length=3)]
WattHours = Annotated[float, Field(ge=0)]


class EnergyAmounts(ApiModel):
    """Energy used and saved, and what each cost at the Group's electricity price."""

    used_watt_hours: WattHours = 0.0
    """Energy drawn, in Wh."""
    saved_watt_hours: WattHours = 0.0
    """Energy saved against the same machines left on idle all the time, in Wh."""
    used_cost: float = Field(default=0.0, ge=0)
    """Price of the energy used, in `currency`."""
    saved_cost: float = Field(default=0.0, ge=0)
    """Price of the energy saved, in `currency`."""


class EnergyPeriod(EnergyAmounts):
    """The amounts of one UTC day or month."""

    start: datetime
    """Start of the day (month), midnight UTC."""


class Energy(EnergyAmounts):
    """Energy accounting, checkpointed: the amounts counted up to `countedTo` (since `since`),
    and the rate in force from `countedTo` on, so the figures at any later time are these plus
    the rate times the time elapsed (what `lightsout status` and the metrics show)."""

    counted_to: datetime
    """Time the amounts are counted to."""
    since: datetime
    """When accounting started."""
    watts: float = Field(default=0.0, ge=0)
    """Draw in force since `countedTo`, in W (the phase's and the requested cpu's)."""
    saving_watts: float = Field(default=0.0, ge=0)
    """Saving in force since `countedTo`, in W (idle minus off watts while off)."""
    price_per_kwh: float = Field(default=0.0, ge=0, alias="pricePerKWh")
    """Electricity price in force since `countedTo`."""
    currency: Currency | None = None
    """Currency of the costs (the Group's `electricity.currency`)."""
    today: EnergyPeriod | None = None
    """Amounts of the UTC day of `countedTo`."""
    month: EnergyPeriod | None = None
    """Amounts of the UTC month of `countedTo`."""
