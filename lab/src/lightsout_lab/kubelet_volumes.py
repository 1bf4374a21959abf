"""The volumes of the stand-in kubelet's pods (`lightsout_lab.kubelet`), and why one cannot be
mounted, in a real kubelet's words.

`pod_volumes` reads what each volume the container mounts holds (Secret, ConfigMap, projected
Secret/ConfigMap sources; emptyDir and the rest of a projected volume are empty) through a
`Fetch` the agent gives it, and `write_volumes` lays the files out under the pod's working
directory. A real kubelet keeps a pod whose non-optional Secret or ConfigMap, or a key its
`items` name, does not exist in ContainerCreating and posts one `FailedMount` event per volume,
`MountVolume.SetUp failed for volume "credentials" : secret "bmc" not found`. The texts in
`Volumes.failures` are the kubelet's own (k8s.io/kubernetes pkg/volume/secret, configmap and
projected, v1.34: a missing object is the secret manager's NotFound, `secret "x" not found`),
because the operator reads them (`lightsout.execution.results.MISSING_VOLUME_SOURCE`). An
optional source that does not exist mounts empty, and its missing keys are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECRET = "secret"
CONFIG_MAP = "configmap"
#: The projected volume sources emulated: field of the source → what it reads.
_PROJECTED_KINDS = {"secret": SECRET, "configMap": CONFIG_MAP}

#: Reads a Secret (`SECRET`) or ConfigMap (`CONFIG_MAP`) of the pod's namespace by name: its
#: keys' contents, or None when it does not exist. Raises `VolumeError` when it cannot tell.
Fetch = Callable[[str, str], Mapping[str, bytes] | None]


class VolumeError(Exception):
    """Why one source of a volume cannot be set up now (the kubelet's error text)."""


@dataclass(frozen=True)
class Volumes:
    """What the container's volumes hold, or why some cannot be mounted yet."""

    #: Volume name → path inside the volume → content.
    files: Mapping[str, Mapping[str, bytes]]
    #: One `FailedMount` message per volume that cannot be mounted; the pod waits while any.
    failures: tuple[str, ...] = ()


def pod_volumes(pod: Mapping[str, Any], container: Mapping[str, Any], fetch: Fetch) -> Volumes:
    """The contents of every volume `container` mounts (as a kubelet, only those)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    files: dict[str, Mapping[str, bytes]] = {}
    failures: list[str] = []
    for name in dict.fromkeys(m["name"] for m in container.get("volumeMounts", [])):
        try:
            files[name] = _volume_files(volumes[name], fetch)
        except VolumeError as exc:
            failures.append(f'MountVolume.SetUp failed for volume "{name}" : {exc}')
    return Volumes(files, tuple(failures))


def write_volumes(container: Mapping[str, Any], volumes: Volumes, workdir: Path) -> dict[str, str]:
    """Write each mount's volume under workdir; return mountPath → local path."""
    mounts: dict[str, str] = {}
    for index, mount in enumerate(container.get("volumeMounts", [])):
        local = workdir / "volumes" / f"{index}-{mount['name']}"
        local.mkdir(parents=True)
        for rel, data in volumes.files[mount["name"]].items():
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        sub = mount.get("subPath")
        mounts[mount["mountPath"]] = str(local / sub) if sub else str(local)
    return mounts


def _volume_files(volume: Mapping[str, Any], fetch: Fetch) -> dict[str, bytes]:
    if "secret" in volume:
        source = volume["secret"]
        return _source_files(SECRET, source["secretName"], source, fetch)
    if "configMap" in volume:
        return _source_files(CONFIG_MAP, volume["configMap"]["name"], volume["configMap"], fetch)
    if "projected" in volume:
        return _projected_files(volume["projected"], fetch)
    if "emptyDir" in volume:
        return {}
    # Not a mount failure a kubelet would retry: a volume kind this stand-in does not emulate.
    raise RuntimeError(f"volume {volume['name']}: only configMap/secret/emptyDir/projected")


def _projected_files(projected: Mapping[str, Any], fetch: Fetch) -> dict[str, bytes]:
    """Every Secret and ConfigMap source in one directory; like the kubelet, every source is
    tried and the errors are reported together (one error alone, several as `[a, b]`).
    Service-account tokens are not emulated (action Jobs disable them)."""
    files: dict[str, bytes] = {}
    errors: list[str] = []
    for source in projected.get("sources", []):
        for field, kind in _PROJECTED_KINDS.items():
            if field in source:
                try:
                    files.update(_source_files(kind, source[field]["name"], source[field], fetch))
                except VolumeError as exc:
                    errors.append(str(exc))
    unique = list(dict.fromkeys(errors))
    if unique:
        raise VolumeError(unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]")
    return files


def _source_files(
    kind: str, name: str, source: Mapping[str, Any], fetch: Fetch
) -> dict[str, bytes]:
    optional = bool(source.get("optional"))
    data = fetch(kind, name)
    if data is None:
        if not optional:
            raise VolumeError(f'{kind} "{name}" not found')
        data = {}
    items = source.get("items")
    if not items:
        return dict(data)
    files: dict[str, bytes] = {}
    for item in items:
        if item["key"] in data:
            files[item["path"]] = data[item["key"]]
        elif not optional:
            raise VolumeError(_missing_key(kind, item["key"]))
    return files


def _missing_key(kind: str, key: str) -> str:
    if kind == SECRET:
        return f"references non-existent secret key: {key}"
    return f"configmap references non-existent config key: {key}"
