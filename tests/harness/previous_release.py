"""The previous release of Lights-Out, for the upgrade test: its images and chart, and the
fields a CRD schema declares.

`make images-previous` (tools/images/build.sh --previous) builds both images of the commit named in
tools/images/previous-release from that commit's sources and Dockerfiles, and copies its chart
with those images' tags as its defaults; `build_previous_release` runs the same script (nothing
to do when the cache holds them) and reads what it prints. `schema_fields` lists the property
paths of a CRD's openAPIV3Schema, to compare the previous release's CRDs with this checkout's
and with what the API server serves, `added_fields` what one declares and the other not, and
`lost` what an object held before an upgrade and no longer holds.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightsout_lab.realnode import ImageArchive

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "images" / "build.sh"


@dataclass(frozen=True)
class PreviousRelease:
    images: dict[str, ImageArchive]
    #: The release's chart directory (its values name the images' tags).
    chart: Path


def build_previous_release() -> PreviousRelease:
    """Build (or find in the cache) the previous release's images and chart."""
    proc = subprocess.run(
        ["bash", str(BUILD), "--previous"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"build.sh --previous failed:\n{proc.stderr[-4000:]}")
    images: dict[str, ImageArchive] = {}
    chart: Path | None = None
    for line in proc.stdout.splitlines():
        name, tag, path = line.split()
        if name == "chart":
            chart = Path(path)
        else:
            images[name] = ImageArchive(name, tag, Path(path))
    if chart is None or set(images) != {"operator", "runner"}:
        raise RuntimeError(f"build.sh --previous printed:\n{proc.stdout}")
    return PreviousRelease(images=images, chart=chart)


def schema_fields(crd: Mapping[str, Any]) -> dict[str, set[str]]:
    """Each served version of a CRD and the dotted paths of every property its schema declares
    (`[]` for a list's items, `{}` for a map's values)."""
    return {
        version["name"]: set(_paths(version["schema"]["openAPIV3Schema"], ""))
        for version in crd["spec"]["versions"]
        if version.get("served")
    }


def added_fields(
    old: dict[str, dict[str, set[str]]], new: dict[str, dict[str, set[str]]]
) -> set[str]:
    """`crd version path` of every property `new` declares and `old` does not."""
    return {
        f"{crd} {version} {path}"
        for crd, versions in new.items()
        for version, paths in versions.items()
        for path in paths - old.get(crd, {}).get(version, set())
    }


def lost(before: Any, after: Any, path: str = "") -> list[str]:
    """Paths of what `before` holds and `after` lacks or holds otherwise (what `after` adds,
    such as a new field's default, is no loss)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            found
            for key, value in before.items()
            for found in (
                lost(value, after[key], f"{path}.{key}") if key in after else [f"{path}.{key}"]
            )
        ]
    return [] if before == after else [path or "."]


def _paths(schema: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        yield path
        yield from _paths(sub, path)
    if isinstance(schema.get("items"), Mapping):
        yield from _paths(schema["items"], f"{prefix}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _paths(schema["additionalProperties"], f"{prefix}{{}}")
