"""Constrained scalar types shared by the Node and Group models, and a pure quantity parser.

Each type carries its limits twice: as pydantic constraints/validators (Python refuses bad values)
and as OpenAPI/CEL schema (the API server refuses them). Bounded lengths matter beyond tidiness:
the API server estimates the worst-case cost of every CEL rule from `maxLength`/`maxItems` and
refuses a CRD whose rules could cost too much. `parse_quantity` is here so the pure planning
layer can compare capacities without importing the Kubernetes client.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, GetJsonSchemaHandler, StringConstraints
from pydantic_core import CoreSchema

from lightsout.models.base import Rule, RuleViolationError


@dataclass(frozen=True)
class SchemaExtra:
    """Annotated metadata merging extra keys into a type's JSON schema, wherever it is used.

    Kept as JSON text so the metadata stays hashable (pydantic hashes `X | None` unions).
    """

    json_text: str

    @classmethod
    def of(cls, **items: Any) -> SchemaExtra:
        return cls(json.dumps({key.replace("_", "-"): value for key, value in items.items()}))

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core_schema)
        schema.update(json.loads(self.json_text))
        return schema


# --------------------------------------------------------------------------------------- names
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
HOST = r"^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 - a pattern for key names

DNS_SUBDOMAIN_RULE = Rule(
    cel=f"self.matches(r'{DNS_SUBDOMAIN}')",
    message="must be a Kubernetes object name: lower-case letters, digits, '-' and '.',"
    " starting and ending with a letter or digit",
    test=re.compile(DNS_SUBDOMAIN).fullmatch,
)
DnsSubdomain = Annotated[str, StringConstraints(min_length=1, max_length=253), DNS_SUBDOMAIN_RULE]
"""A Kubernetes object name (DNS-1123 subdomain)."""
SecretKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=SECRET_KEY)]
Host = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=HOST)]
"""A host name or an IP address."""
Port = Annotated[int, Field(ge=1, le=65535)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
LongText = Annotated[str, StringConstraints(max_length=32768)]

LABEL_KEY_RULE = Rule(
    cel="self.all(k, k.matches(r'" + QUALIFIED_NAME + "'))",
    message="label keys must be qualified names such as 'example.com/role' or 'role'",
    test=lambda labels: all(re.fullmatch(QUALIFIED_NAME, key) for key in labels),
)
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE)]
LabelMap = Annotated[
    dict[Annotated[str, StringConstraints(max_length=317)], LabelValue],
    Field(max_length=64),
    LABEL_KEY_RULE,
]
"""Labels for the core Node: at most 64, keys qualified names, values up to 63 characters."""


# ------------------------------------------------------------------------------------- network
def _url_test(*schemes: str) -> Callable[[str], bool]:
    """Whether a value is a URL with one of `schemes` and a host (CEL's `isURL` and `url`)."""
    return lambda value: urlsplit(value).scheme in schemes and bool(urlsplit(value).hostname)


HTTPS_URL_RULE = Rule(
    cel="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",
    message="must be an https:// URL with a host, e.g. https://192.0.2.10:443",
    test=_url_test("https"),
)
URL_LENGTH = StringConstraints(min_length=1, max_length=2048)
HttpsUrl = Annotated[str, URL_LENGTH, HTTPS_URL_RULE]

HTTP_URL_RULE = Rule(
    cel="isURL(self) && url(self).getScheme() in ['http', 'https']"
    " && url(self).getHostname() != ''",
    message="must be an http:// or https:// URL with a host, e.g. http://192.0.2.40",
    test=_url_test("http", "https"),
)
#: For LAN devices that speak plain HTTP (smart plugs) as well as HTTPS.
HttpUrl = Annotated[str, URL_LENGTH, HTTP_URL_RULE]

#: A power draw in watts.
Watts = Annotated[float, Field(ge=0, le=100_000)]

MAC_PATTERN = r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$"
MAC_RULE = Rule(
    cel=f"self.matches(r'{MAC_PATTERN}')",
    message="must be a MAC address of six hex octets, e.g. 52:54:00:12:34:56",
    test=re.compile(MAC_PATTERN).fullmatch,
)
MacAddress = Annotated[str, StringConstraints(max_length=17), MAC_RULE]


def _check_ipv4(value: str) -> str:
    ipaddress.IPv4Address(value)
    return value


IPv4 = Annotated[
    str,
    StringConstraints(max_length=15),
    AfterValidator(_check_ipv4),
    SchemaExtra.of(format="ipv4"),
]


def _is_ipv4_cidr(value: str) -> bool:
    if "/" not in value:  # Python reads a bare address as a /32; CEL's isCIDR does not
        return False
    try:
        ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        return False
    return True


IPV4_CIDR_RULE = Rule(
    cel="isCIDR(self) && cidr(self).ip().family() == 4",
    message="must be an IPv4 network such as 192.168.50.0/24",
    test=_is_ipv4_cidr,
)
IPv4Cidr = Annotated[str, StringConstraints(max_length=18), IPV4_CIDR_RULE]
"""An IPv4 network in CIDR notation (host bits allowed: `192.168.50.10/24` is that /24)."""

# ---------------------------------------------------------------------------------- quantities
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
QUANTITY_RULE = Rule(
    cel="type(self) == int ? self >= 0 : isQuantity(self) && !self.startsWith('-')",
    message="must be a non-negative quantity such as 4, 500m, 16Gi or 1.5",
    message_expression=(
        "(type(self) == int ? string(self) : '\"' + self + '\"')"
        " + ': must be a non-negative quantity such as 4, 500m, 16Gi or 1.5'"
    ),
    test=lambda value: value >= 0 if isinstance(value, int) else _QUANTITY_RE.fullmatch(value),
)
Quantity = Annotated[
    int | str, SchemaExtra.of(x_kubernetes_int_or_string=True, maxLength=64), QUANTITY_RULE
]
"""A Kubernetes resource quantity, as an integer or a string (`8`, `500m`, `16Gi`)."""

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: int | str) -> Decimal:
    """A quantity as a Decimal in base units (cores, bytes): `parse_quantity("1536Mi")`."""
    if isinstance(value, int):
        return Decimal(value)
    text = value.strip().lstrip("+")
    match = re.match(r"^([0-9.]+)([eE][-+]?[0-9.]+)?([KMGTPE]i|[numkMGTPE])?$", text)
    if match is None or not _QUANTITY_RE.fullmatch(text):  # the parts' pattern is looser
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    result = Decimal(number + (exponent or ""))
    return result * _SUFFIXES[suffix or ""]


# ------------------------------------------------------------------------------------ schedule
CRON_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|hourly)|(\S+\s+){4}\S+)$"
CRON_RULE = Rule(
    cel=f"self.matches(r'{CRON_PATTERN}')",
    message="must be a cron schedule with five fields, e.g. '*/5 * * * *', or @hourly/@daily",
    test=re.compile(CRON_PATTERN).fullmatch,
)
CronSchedule = Annotated[str, StringConstraints(min_length=1, max_length=128), CRON_RULE]

PLAYBOOK_FILE = r"^[A-Za-z0-9][-A-Za-z0-9_.]*\.ya?ml$"
PlaybookFile = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=PLAYBOOK_FILE)
]
"""A playbook file name, i.e. a key of the playbooks ConfigMap (`startup.yml`)."""

__all__ = [
    "CronSchedule",
    "DnsSubdomain",
    "Host",
    "HttpUrl",
    "HttpsUrl",
    "IPv4",
    "IPv4Cidr",
    "LabelMap",
    "LabelValue",
    "LongText",
    "MacAddress",
    "Port",
    "Quantity",
    "RuleViolationError",
    "SchemaExtra",
    "SecretKey",
    "ShortText",
    "Watts",
    "parse_quantity",
]
