"""Deterministic, DNS-safe names and label values for the objects Lights-Out creates.

Used by `jobs` and `leases`: the same machine, action, intent and attempt must always map to the
same name (that is what makes "create unless it exists" idempotent), and every name must be
accepted by the API server however long or odd the Node's name is.
"""

from __future__ import annotations

import hashlib
import re

#: Jobs become the value of their pods' `batch.kubernetes.io/job-name` label, so a Job name is
#: held to the label limit (63) rather than the DNS subdomain limit (253).
DNS_LABEL_MAX = 63
HASH_LENGTH = 8

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_LABEL_CHAR = re.compile(r"[^a-z0-9-]+")


def stable_hash(text: str, length: int = HASH_LENGTH) -> str:
    """A short hex digest of `text`, identical across processes and Python versions."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def is_dns_label(text: str) -> bool:
    return len(text) <= DNS_LABEL_MAX and _DNS_LABEL.match(text) is not None


def is_label_value(text: str) -> bool:
    return len(text) <= DNS_LABEL_MAX and _LABEL_VALUE.match(text) is not None


def dns_label(prefix: str, middle: str, suffix: str = "") -> str:
    """`prefix + middle + suffix` as a DNS-1123 label.

    When that is too long or `middle` has characters a label cannot hold (dots in a Node name,
    upper case), `middle` is cleaned and cut and a hash of the whole original is appended, so
    two different inputs never shorten to the same name. `prefix` and `suffix` are kept intact
    and must themselves be label-safe.
    """
    candidate = f"{prefix}{middle}{suffix}"
    if is_dns_label(candidate):
        return candidate
    digest = stable_hash(candidate)
    budget = DNS_LABEL_MAX - len(prefix) - len(suffix) - len(digest) - 1
    if budget < 0:
        raise ValueError(f"no room for a name between {prefix!r} and {suffix!r}")
    cleaned = _NOT_LABEL_CHAR.sub("-", middle.lower()).strip("-")[:budget].strip("-")
    name = f"{prefix}{cleaned}-{digest}{suffix}" if cleaned else f"{prefix}{digest}{suffix}"
    if not is_dns_label(name):
        raise ValueError(f"cannot build a DNS label from {prefix!r} and {suffix!r}")
    return name


def label_value(text: str) -> str:
    """`text` as a label value (≤ 63 characters), cut and hashed when it does not fit."""
    if is_label_value(text):
        return text
    digest = stable_hash(text)
    head = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[: DNS_LABEL_MAX - len(digest) - 1]
    head = head.strip("-_.")
    value = f"{head}-{digest}" if head else digest
    if not is_label_value(value):
        raise ValueError(f"cannot build a label value from {text!r}")
    return value
