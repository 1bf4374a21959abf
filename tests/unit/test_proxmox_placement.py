"""Host and id choice for Proxmox clones: roles/proxmox_vm/filter_plugins/proxmox_placement.py.

The plugin is pure Python (no Ansible import), loaded here from its file as Ansible loads it.
Inputs are shaped like community.proxmox's answers: hosts from /cluster/resources?type=node,
VMs from proxmox_vm_info.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "roles" / "proxmox_vm" / "filter_plugins" / "proxmox_placement.py"
GIB = 1024**3


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proxmox_placement", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


placement = _load()


def host(
    name: str, free_gib: float, *, total_gib: int = 64, status: str = "online"
) -> dict[str, Any]:
    if status != "online":
        return {"node": name, "status": status}
    return {
        "node": name,
        "status": status,
        "maxmem": total_gib * GIB,
        "mem": int((total_gib - free_gib) * GIB),
    }


def vm(vmid: int, node: str, tags: str = "", kind: str = "qemu", **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"vmid": vmid, "node": node, "type": kind, "name": f"vm-{vmid}", **more}
    if tags:
        out["tags"] = tags
    return out


# ------------------------------------------------------------------------------------- tags


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("lightsout;k8s", ["k8s", "lightsout"]),
        ("LightsOut,k8s k8s", ["k8s", "lightsout"]),
        ("", []),
        (None, []),
        (["b", "a", "a"], ["a", "b"]),
        ({"tags": "x;y", "vmid": 1}, ["x", "y"]),
        ({"vmid": 1}, []),
    ],
)
def test_tags_accept_every_separator_proxmox_uses(value: Any, expected: list[str]) -> None:
    assert placement.vm_tags(value) == expected


def test_tagged_needs_every_tag_and_skips_containers() -> None:
    vms = [
        vm(301, "pve1", "lightsout;lightsout-node.ns.a"),
        vm(300, "pve2", "lightsout,lightsout-node.ns.a,k8s"),
        vm(302, "pve1", "lightsout-node.ns.a"),  # no managed tag: not ours
        vm(303, "pve1", "lightsout;lightsout-node.ns.a", kind="lxc"),
    ]
    found = placement.tagged(vms, ["lightsout", "lightsout-node.ns.a"])
    assert [v["vmid"] for v in found] == [300, 301]


# --------------------------------------------------------------------------------- free ids


def test_free_ids_are_the_lowest_unused_in_the_range() -> None:
    guests = [vm(200, "pve1"), vm(201, "pve1", kind="lxc"), vm(203, "pve2")]
    assert placement.free_vmids(guests, 200, 210, 3) == [202, 204, 205]


def test_free_ids_stop_at_the_upper_bound() -> None:
    guests = [vm(200, "pve1"), vm(202, "pve1")]
    assert placement.free_vmids(guests, 200, 202, 3) == [201]
    assert placement.free_vmids([*guests, vm(201, "pve1")], 200, 202, 3) == []


# -------------------------------------------------------------------------------- placement


def test_the_host_with_the_most_free_memory_wins() -> None:
    chosen = placement.place([host("pve1", 8), host("pve2", 20), host("pve3", 12)], [])
    assert chosen.host == "pve2"
    assert chosen.ranking == ("pve2", "pve3", "pve1")


def test_a_tie_goes_to_the_host_with_fewer_vms_of_the_group() -> None:
    vms = [
        vm(150, "pve1", "lightsout;lightsout-group.homelab"),
        vm(151, "pve1", "lightsout;lightsout-group.homelab"),
        vm(152, "pve2", "lightsout;lightsout-group.homelab"),
        vm(153, "pve3", "lightsout;lightsout-group.other"),
    ]
    hosts = [host("pve1", 16), host("pve2", 16), host("pve3", 16)]
    chosen = placement.place(hosts, vms, group_tag="lightsout-group.homelab")
    assert chosen.host == "pve3"
    assert chosen.ranking == ("pve3", "pve2", "pve1")


def test_free_memory_within_the_tie_margin_counts_as_equal() -> None:
    vms = [vm(150, "pve1", "lightsout-group.g")]
    hosts = [host("pve1", 16.5), host("pve2", 16)]
    assert placement.place(hosts, vms, group_tag="lightsout-group.g", tie_mib=1024).host == "pve2"
    # With no margin, the 0.5 GiB more on pve1 decides.
    assert placement.place(hosts, vms, group_tag="lightsout-group.g", tie_mib=0).host == "pve1"


def test_clearly_more_free_memory_beats_spreading() -> None:
    vms = [vm(150, "pve1", "lightsout-group.g"), vm(151, "pve1", "lightsout-group.g")]
    chosen = placement.place(
        [host("pve1", 40), host("pve2", 8)], vms, group_tag="lightsout-group.g"
    )
    assert chosen.host == "pve1"


def test_an_exact_tie_is_broken_by_name() -> None:
    assert placement.place([host("pve2", 16), host("pve1", 16)], []).host == "pve1"


def test_only_allowed_online_hosts_with_enough_memory_are_candidates() -> None:
    hosts = [
        host("pve1", 60, status="offline"),
        host("pve2", 2),
        host("pve3", 8),
        host("pve4", 50),
    ]
    chosen = placement.place(hosts, [], allowed=["pve1", "pve2", "pve3"], need_mib=4096)
    assert chosen.host == "pve3"
    assert chosen.ranking == ("pve3",)


def test_no_candidate_explains_why() -> None:
    hosts = [host("pve1", 60, status="offline"), host("pve2", 2)]
    offline = placement.place(hosts, [], allowed=["pve1", "pve9"])
    assert offline.host is None
    assert "no online host among allowed hosts ['pve1', 'pve9']" in offline.reason
    assert "pve1: offline" in offline.reason
    assert "pve9: not in the cluster" in offline.reason

    small = placement.place(hosts, [], need_mib=4096)
    assert small.host is None
    assert "has the 4096 MiB the clone needs free" in small.reason
    assert "pve2: 2048 MiB free" in small.reason


def test_the_filter_returns_plain_data() -> None:
    filters = placement.FilterModule().filters()
    assert set(filters) == {
        "proxmox_vm_tags",
        "proxmox_vm_tagged",
        "proxmox_vm_free_vmids",
        "proxmox_vm_place",
    }
    out = filters["proxmox_vm_place"]([host("pve1", 4)], [], [], "", 0, 1024)
    assert out == {"host": "pve1", "reason": out["reason"], "ranking": ["pve1"]}
    assert out["reason"].startswith("pve1: 4096 MiB free")
