"""`--set` settings on a trace's Group manifests: what `lightsout simulate --set` changes.

`apply_overrides` is how the replay reads each Group (`replay.machines.read_machines`), how
`lightsout trace validate`/`lightsout simulate` check a trace with its settings applied
(`validate`), and how the CLI refuses a setting that could change nothing before any trace is
read. Values are read as YAML the way `kubectl` reads them (`yamlfile`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from lightsout.simulate.traces import yamlfile


def apply_overrides(manifest: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of a Group manifest with `spec.a.b=value` settings (values read as YAML)."""
    out = copy.deepcopy(dict(manifest))
    for setting in overrides:
        path, sep, raw = setting.partition("=")
        if not sep or not path:
            raise ValueError(f"--set {setting!r}: expected PATH=VALUE")
        parts = path.split(".")
        if parts[0] == "group":
            parts = parts[1:]
        if len(parts) < 2 or parts[0] != "spec":
            # Anywhere else it would change nothing the replay reads, without a word.
            raise ValueError(
                f"--set {setting!r}: a Group setting is under spec "
                "(e.g. spec.scaleDown.unneededSeconds=300)"
            )
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ValueError(f"--set {setting!r}: {part} is not an object")
        try:
            target[parts[-1]] = yamlfile.load(raw)
        except yamlfile.YAMLError as error:
            problem = str(getattr(error, "problem", None) or "not YAML")
            raise ValueError(f"--set {setting!r}: the value is not YAML ({problem})") from None
    return out
