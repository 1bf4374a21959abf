"""Removes credential values from anything the runner reports (pure, plus one file reader).

Called by `lightsout.runner.main` on the result's message, failed task and values, and by the
logger on every log line. Ansible already masks `no_log` parameters; this is the second belt:
whatever a playbook or a BMC echoes back, a value read from the credentials Secret never
leaves the Job.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MASK = "***"
#: Lines of a multi-line secret (a key, a certificate) shorter than this are not masked alone.
MIN_LINE = 8


def secret_variants(value: str) -> set[str]:
    """The forms in which `value` may show up in text: raw, stripped, JSON- and URL-escaped.

    Lines of a multi-line value are included too (an error may quote one line of a key).
    """
    variants: set[str] = set()
    if not value.strip():
        return variants  # masking whitespace would mangle every message
    for form in {value, value.strip()}:  # neither is empty, nor is any form of them
        variants.add(form)
        variants.add(json.dumps(form)[1:-1])
        variants.add(urllib.parse.quote(form, safe=""))
        variants.add(urllib.parse.quote_plus(form))
    for raw_line in value.splitlines():
        line = raw_line.strip()
        if len(line) >= MIN_LINE:
            variants.add(line)
    return variants


def read_secret_dir(path: Path) -> list[str]:
    """Values of the files in a mounted Secret (skipping Kubernetes' `..data` internals).

    A missing directory yields nothing: some drivers need no credentials.
    """
    values: list[str] = []
    try:
        entries = sorted(path.iterdir())
    except OSError:
        return values
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_file():
                values.append(entry.read_bytes().decode("utf-8", errors="replace"))
        except OSError:
            continue
    return values


@dataclass(frozen=True)
class Redactor:
    """Replaces every known secret form with `***`, longest first."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def from_values(cls, values: Iterable[str]) -> Redactor:
        forms: set[str] = set()
        for value in values:
            forms |= secret_variants(value)
        return cls(tuple(sorted(forms, key=lambda s: (-len(s), s))))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def obj(self, value: Any) -> Any:
        """Redact strings anywhere in JSON-like data (dict keys too); other types unchanged."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.obj(k): self.obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.obj(v) for v in value]
        return value
