"""The bad-input catalogue: invalid Group/Node manifests and what the API server must answer.

Each `NN-short-name.yaml` here holds one object and starts with comment lines:
`# expect: <text>` (one or more; every text must appear in the refusal), optionally
`# given: <file>` (a valid object under `given/` applied first, for rules checked on update
only), optionally `# webhook: yes` (refused by the operator's Group webhook, not by the CRD:
what CEL cannot check) and `# Why: <reason>`. Read by tests/e2e/test_bad_input.py (against the
API server) and by the unit tests (against the pydantic models and docs/crds.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BadInput:
    """One invalid manifest and the words its refusal must contain."""

    path: Path
    expects: tuple[str, ...]
    why: str
    given: Path | None
    body: dict[str, Any]
    #: Refused by the Group admission webhook (`handlers.admission`), so only with the operator.
    webhook: bool = False

    @property
    def id(self) -> str:
        return self.path.stem

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def resource(self) -> str:
        """The kubectl resource name, fully qualified to avoid core `nodes`."""
        return f"{self.kind.lower()}s.lightsout.dev"


def load(path: Path) -> BadInput:
    text = path.read_text()
    expects: list[str] = []
    given: Path | None = None
    why = ""
    webhook = False
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].strip().partition(": ")
        if key == "expect":
            expects.append(value)
        elif key == "given":
            given = HERE / "given" / value
        elif key == "Why":
            why = value
        elif key == "webhook":
            webhook = value == "yes"
    if not text.startswith("# expect: ") or not expects:
        raise ValueError(f"{path.name}: the first line must be '# expect: <text>'")
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    if len(documents) != 1 or documents[0].get("kind") not in ("Group", "Node"):
        raise ValueError(f"{path.name}: must hold exactly one Group or Node")
    return BadInput(
        path=path,
        expects=tuple(expects),
        why=why,
        given=given,
        body=documents[0],
        webhook=webhook,
    )


BAD_INPUTS: list[BadInput] = [load(path) for path in sorted(HERE.glob("[0-9][0-9]-*.yaml"))]
