"""Pure decisions of the proxmox_vm role: tags, free VM ids, and which host gets a clone.

Used as Jinja filters by roles/proxmox_vm (tasks/clone.yml, find.yml) and unit-tested in
tests/unit/test_proxmox_placement.py. No I/O and no Ansible import: the inputs are the lists
the community.proxmox modules return (``proxmox_vm_info``'s ``proxmox_vms``, the role's
``proxmox_vm_hosts_info``'s ``proxmox_hosts``), so a decision can be replayed from a log.

Placement: among the allowed, online hosts that have the memory the clone needs, the one
with the most free memory; hosts within ``tie_mib`` of the best count as equal, and among
those the host with the fewest VMs carrying the group's tag wins (so one group's machines
spread out), then the most free memory, then the name (a stable answer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
_TAG_SPLIT = re.compile(r"[;,\s]+")


def vm_tags(value: Any) -> list[str]:
    """The tags of a VM (or a tags string) as a sorted list without duplicates, lower case.

    Proxmox stores ``a;b`` but accepts ``,`` and spaces on input; some versions return
    what was sent, so every separator is accepted here.
    """
    raw = value.get("tags", "") if isinstance(value, Mapping) else value
    if isinstance(raw, (list, tuple)):
        raw = ";".join(str(item) for item in raw)
    return sorted({tag.lower() for tag in _TAG_SPLIT.split(str(raw or "")) if tag})


def tagged(vms: Iterable[Mapping[str, Any]], tags: Sequence[str]) -> list[dict[str, Any]]:
    """The QEMU VMs carrying every tag of ``tags`` (empty tags are ignored), by vmid."""
    wanted = {str(tag).lower() for tag in tags if tag}
    found = [
        dict(vm) for vm in vms if vm.get("type", "qemu") == "qemu" and wanted.issubset(vm_tags(vm))
    ]
    return sorted(found, key=lambda vm: int(vm.get("vmid", 0)))


def free_vmids(
    guests: Iterable[Mapping[str, Any]], lower: int, upper: int, count: int
) -> list[int]:
    """The ``count`` lowest ids in ``[lower, upper]`` no guest (VM or container) uses."""
    used = {int(guest["vmid"]) for guest in guests if "vmid" in guest}
    out: list[int] = []
    for vmid in range(int(lower), int(upper) + 1):
        if vmid not in used:
            out.append(vmid)
            if len(out) >= int(count):
                break
    return out


@dataclass(frozen=True)
class HostView:
    """One host as the placement sees it."""

    name: str
    online: bool
    free_bytes: int
    group_vms: int

    @property
    def free_mib(self) -> int:
        return self.free_bytes // MIB

    def describe(self) -> str:
        if not self.online:
            return f"{self.name}: offline"
        return f"{self.name}: {self.free_mib} MiB free, {self.group_vms} VMs of the group"


@dataclass(frozen=True)
class Placement:
    """The chosen host (None when no host fits) and why."""

    host: str | None
    reason: str
    ranking: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "reason": self.reason, "ranking": list(self.ranking)}


def host_views(
    hosts: Iterable[Mapping[str, Any]], vms: Iterable[Mapping[str, Any]], group_tag: str
) -> list[HostView]:
    """Each host with its free memory and how many VMs of the group it runs."""
    group = group_tag.lower()
    per_host: dict[str, int] = {}
    if group:
        for vm in tagged(vms, [group]):
            node = str(vm.get("node", ""))
            per_host[node] = per_host.get(node, 0) + 1
    views = []
    for host in hosts:
        name = str(host.get("node") or host.get("name") or "")
        if not name:
            continue
        online = str(host.get("status", "online")) == "online"
        free = int(host.get("maxmem") or 0) - int(host.get("mem") or 0) if online else 0
        views.append(HostView(name, online, max(free, 0), per_host.get(name, 0)))
    return sorted(views, key=lambda view: view.name)


def place(
    hosts: Iterable[Mapping[str, Any]],
    vms: Iterable[Mapping[str, Any]],
    *,
    allowed: Sequence[str] = (),
    group_tag: str = "",
    need_mib: int = 0,
    tie_mib: int = 1024,
) -> Placement:
    """Choose the host for a clone (see the module docstring for the rule)."""
    views = host_views(hosts, vms, group_tag)
    known = {view.name for view in views}
    allowed_set = {str(name) for name in allowed if name}
    pool = [view for view in views if not allowed_set or view.name in allowed_set]
    missing = sorted(allowed_set - known)
    online = [view for view in pool if view.online]
    fits = [view for view in online if view.free_bytes >= int(need_mib) * MIB]
    if not fits:
        scope = f"allowed hosts {sorted(allowed_set)}" if allowed_set else "the cluster's hosts"
        details = [view.describe() for view in pool]
        details += [f"{name}: not in the cluster" for name in missing]
        if not online:
            why = f"no online host among {scope}"
        else:
            why = f"no host among {scope} has the {int(need_mib)} MiB the clone needs free"
        return Placement(None, f"{why} ({'; '.join(details) or 'no hosts'})", ())
    best_free = max(view.free_bytes for view in fits)
    margin = max(int(tie_mib), 0) * MIB
    near = [view for view in fits if view.free_bytes >= best_free - margin]
    ranked = sorted(near, key=lambda view: (view.group_vms, -view.free_bytes, view.name))
    rest = sorted(
        (view for view in fits if view not in near), key=lambda view: (-view.free_bytes, view.name)
    )
    order = tuple(view.name for view in ranked + rest)
    chosen = ranked[0]
    reason = f"{chosen.describe()} (candidates: {'; '.join(view.describe() for view in fits)})"
    return Placement(chosen.name, reason, order)


def _place_filter(  # noqa: PLR0917 - Jinja passes filter arguments by position
    hosts: Iterable[Mapping[str, Any]],
    vms: Iterable[Mapping[str, Any]],
    allowed: Sequence[str] = (),
    group_tag: str = "",
    need_mib: int = 0,
    tie_mib: int = 1024,
) -> dict[str, Any]:
    return place(
        hosts, vms, allowed=allowed, group_tag=group_tag, need_mib=need_mib, tie_mib=tie_mib
    ).as_dict()


class FilterModule:
    """The Jinja filters: proxmox_vm_tags, _tagged, _free_vmids, _place."""

    def filters(self) -> dict[str, Any]:
        return {
            "proxmox_vm_tags": vm_tags,
            "proxmox_vm_tagged": tagged,
            "proxmox_vm_free_vmids": free_vmids,
            "proxmox_vm_place": _place_filter,
        }
