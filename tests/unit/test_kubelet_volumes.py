"""The stand-in kubelet's volumes: what a pod's container finds mounted, and why a pod waits,
in the words a real kubelet's FailedMount event uses (the operator reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from lightsout.execution.results import MISSING_VOLUME_SOURCE
from lightsout_lab.kubelet_volumes import (
    CONFIG_MAP,
    SECRET,
    Volumes,
    pod_volumes,
    write_volumes,
)

#: What exists in the pod's namespace: (kind, name) → keys.
OBJECTS: dict[tuple[str, str], dict[str, bytes]] = {
    (SECRET, "bmc"): {"username": b"admin", "password": b"pw"},
    (CONFIG_MAP, "site"): {"site.yml": b"- hosts: all\n"},
}


def fetch(kind: str, name: str) -> Mapping[str, bytes] | None:
    return OBJECTS.get((kind, name))


def mounted(*volumes: dict[str, Any]) -> Volumes:
    """The volumes of a pod whose one container mounts each of `volumes` at /v/NAME."""
    pod = {"spec": {"volumes": list(volumes)}}
    container = {
        "volumeMounts": [{"name": v["name"], "mountPath": f"/v/{v['name']}"} for v in volumes]
    }
    return pod_volumes(pod, container, fetch)


def secret(name: str, **source: Any) -> dict[str, Any]:
    return {"name": "credentials", "secret": {"secretName": name, **source}}


def config_map(name: str, **source: Any) -> dict[str, Any]:
    return {"name": "overlay", "configMap": {"name": name, **source}}


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        (secret("bmc-2"), 'secret "bmc-2" not found'),
        (config_map("gone"), 'configmap "gone" not found'),
        (
            secret("bmc", items=[{"key": "token", "path": "token"}]),
            "references non-existent secret key: token",
        ),
        (
            config_map("site", items=[{"key": "other.yml", "path": "other.yml"}]),
            "configmap references non-existent config key: other.yml",
        ),
    ],
)
def test_a_missing_object_or_key_is_a_failed_mount_in_the_kubelets_words(
    volume: dict[str, Any], message: str
) -> None:
    found = mounted(volume)
    assert found.failures == (
        f'MountVolume.SetUp failed for volume "{volume["name"]}" : {message}',
    )
    assert volume["name"] not in found.files


def test_the_operator_reads_a_missing_object_or_key_from_the_event() -> None:
    (gone,) = mounted(secret("bmc-2")).failures
    assert MISSING_VOLUME_SOURCE.search(gone)
    (keyless,) = mounted(secret("bmc", items=[{"key": "token", "path": "t"}])).failures
    assert MISSING_VOLUME_SOURCE.search(keyless)
    (no_config_key,) = mounted(config_map("site", items=[{"key": "a", "path": "a"}])).failures
    assert MISSING_VOLUME_SOURCE.search(no_config_key)


def test_optional_sources_mount_empty_and_leave_out_missing_keys() -> None:
    found = mounted(
        secret("bmc-2", optional=True),
        config_map(
            "site",
            optional=True,
            items=[{"key": "site.yml", "path": "a.yml"}, {"key": "gone", "path": "b.yml"}],
        ),
    )
    assert found.failures == ()
    assert found.files == {"credentials": {}, "overlay": {"a.yml": b"- hosts: all\n"}}


def test_every_volume_that_cannot_be_mounted_has_its_own_failure() -> None:
    found = mounted(secret("bmc-2"), config_map("site"), {"name": "tmp", "emptyDir": {}})
    assert found.failures == (
        'MountVolume.SetUp failed for volume "credentials" : secret "bmc-2" not found',
    )
    assert found.files == {"overlay": {"site.yml": b"- hosts: all\n"}, "tmp": {}}
    assert mounted(secret("bmc-2"), config_map("gone")).failures == (
        'MountVolume.SetUp failed for volume "credentials" : secret "bmc-2" not found',
        'MountVolume.SetUp failed for volume "overlay" : configmap "gone" not found',
    )


def test_a_projected_volume_reports_its_missing_sources_together() -> None:
    def join(*sources: dict[str, Any]) -> dict[str, Any]:
        return {"name": "join", "projected": {"sources": list(sources)}}

    token = {"secret": {"name": "bmc", "items": [{"key": "password", "path": "k3s-token"}]}}
    account = {"serviceAccountToken": {"path": "token"}}
    assert mounted(join(token, account)).files == {"join": {"k3s-token": b"pw"}}
    (one,) = mounted(join(token, {"secret": {"name": "lost"}})).failures
    assert one == 'MountVolume.SetUp failed for volume "join" : secret "lost" not found'
    (both,) = mounted(join({"secret": {"name": "lost"}}, {"configMap": {"name": "gone"}})).failures
    assert both.endswith(': [secret "lost" not found, configmap "gone" not found]')


def test_a_volume_no_container_mounts_is_not_read() -> None:
    pod = {"spec": {"volumes": [secret("bmc-2")]}}
    assert pod_volumes(pod, {"volumeMounts": []}, fetch) == Volumes({})


def test_files_land_under_each_mount_path_and_its_sub_path(tmp_path: Path) -> None:
    container = {
        "volumeMounts": [
            {"name": "credentials", "mountPath": "/etc/creds"},
            {"name": "credentials", "mountPath": "/etc/pw", "subPath": "password"},
        ]
    }
    pod = {"spec": {"volumes": [secret("bmc")]}}
    mounts = write_volumes(container, pod_volumes(pod, container, fetch), tmp_path)
    assert Path(mounts["/etc/creds"], "username").read_bytes() == b"admin"
    assert Path(mounts["/etc/pw"]).read_bytes() == b"pw"
