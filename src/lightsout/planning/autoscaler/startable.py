"""Whether a machine could be powered on now, for a class of pending pods or at all. Pure.

One decision, three callers, so "could be powered on" is written once:

- `scaleup.offers_of`, `scaleup.top_up` and `absorb.fresh_power_on` take their candidates from
  `not_startable`: Off (not Failed, on, booting or unresolved) and managed by the built-in
  autoscaler (`MachineInfo.managed`: a `builtin` Group, not pinned).
- `scaleup.eligible_classes` holds a Group in a quiet window back from a class only if another
  Group has a machine `could_power_on` accepts for it (`alternatives`).
- `explain.Explainer` names that machine when the quiet window holds its Group back, and
  `scaleup.choose` says why each other machine is not one when the quiet Group wakes
  (`quiet_wake`).

The Group's room is `scaleup.room_of` (maxNodes, scaleUp.maxConcurrentOperations), given as
`room`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from lightsout.models.enums import Autoscaler
from lightsout.planning.autoscaler.cluster import Availability, Cluster, MachineInfo, PodClass
from lightsout.planning.autoscaler.scheduling import shortfalls
from lightsout.state.types import Group, ObjectKey

#: Names listed per reason before "and N more".
NAMES_SHOWN = 3


def not_startable(info: MachineInfo) -> str | None:
    """Why the built-in autoscaler may not power `info` on, for any pod (its state when it is
    not Off: Failed, on, booting, unresolved; its Group missing or not `builtin`; pinned), or
    None when it may."""
    if info.availability is not Availability.OFF:
        return info.state
    if info.managed:
        return None
    group = info.group
    if group is None:
        return f"group {info.machine.group} not found"
    if group.autoscaler is not Autoscaler.BUILTIN:
        return f"group {group.key.name} is sized by {group.autoscaler}"
    return "pinned (autoscaling.enabled=false)"


def could_power_on(
    cluster: Cluster, room: Mapping[ObjectKey, int], cls: PodClass, info: MachineInfo
) -> str | None:
    """Why `info` could not be powered on now for the pods of `cls`, or None when it could: it
    is Off and managed (`not_startable`), its capacity is known, its Group has room and no
    quiet window open, and the pods may run on it and one fits it empty (allocatable less its
    DaemonSet pods, the room `scaleup.choose` fills)."""
    why = not_startable(info)
    if why is not None:
        return why
    group, view = info.group, info.view
    assert group is not None  # managed
    if view is None:
        return "capacity unknown"
    if room.get(group.key, 0) <= 0:
        return group_limit(cluster, group.key)
    if group.quiet:
        return f"group {group.key.name} is quiet too"
    reasons = cluster.placer.reasons(cls, info.shape, view)
    reasons += tuple(shortfalls(cls.req.requests, view.free.as_dict()))
    return "; ".join(reasons) or None


def alternatives(
    cluster: Cluster, room: Mapping[ObjectKey, int], cls: PodClass
) -> Iterator[MachineInfo]:
    """The machines `could_power_on` accepts for `cls`, in name order: none is in a quiet
    Group, so each is an alternative to any quiet Group's machines."""
    return (info for info in cluster.infos if could_power_on(cluster, room, cls, info) is None)


def quiet_wake(
    cluster: Cluster, room: Mapping[ObjectKey, int], group: Group, classes: Iterable[PodClass]
) -> str:
    """Why `group`'s quiet window lets it wake a machine for `classes`: no other Group's
    machine could be powered on for them, each for its reason."""
    reasons: dict[str, list[str]] = {}
    for cls in classes:
        for info in cluster.infos:
            if info.machine.group_key == group.key:
                continue
            why = could_power_on(cluster, room, cls, info) or "could be powered on"
            names = reasons.setdefault(why, [])
            if info.key.name not in names:
                names.append(info.key.name)
    others = " | ".join(f"{listed(names)}: {why}" for why, names in reasons.items())
    return (
        f"{group.window_note}: woken, no other Group's machine can be powered on for the pods"
        f" ({others or 'no other Group has machines'})"
    )


def group_limit(cluster: Cluster, key: ObjectKey, planned: int = 0) -> str:
    """Why a Group may start no further power-on now, `planned` power-ons of this plan counted."""
    group = cluster.groups[key]
    active = cluster.active.get(key, 0) + planned
    if active >= group.max_nodes:
        return f"group {key.name} at maxNodes ({active} of {group.max_nodes} on)"
    in_flight = cluster.coming.get(key, 0) + planned
    limit = group.scale_up.max_concurrent
    return (
        f"group {key.name} has {in_flight} power-on operations in flight "
        f"(scaleUp.maxConcurrentOperations {limit})"
    )


def listed(names: Sequence[object]) -> str:
    """The first `NAMES_SHOWN` names, then how many more there are."""
    shown = ", ".join(str(name) for name in names[:NAMES_SHOWN])
    return shown if len(names) <= NAMES_SHOWN else f"{shown} and {len(names) - NAMES_SHOWN} more"
