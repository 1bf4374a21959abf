"""Why a pending pod gets no machine: one line naming each machine's reason.

`lightsout.planning.autoscale.plan` calls `why_not` for every class of pods left without
capacity after scale-up. Machines that could never host the pod (too small, wrong labels,
untolerated taints) and machines that could but may not be powered on now (pinned, group at
maxNodes, too many power-ons in flight, scale-up window) are told apart: when none could ever
host it the line starts "no machine could ever host this pod", which is the message a person
needs to go and fix the pod or the machines. Machines sharing a reason are listed together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

from lightsout.models.enums import Autoscaler
from lightsout.planning.cluster import Availability, Bin, Cluster, MachineInfo, PodClass, count_fit
from lightsout.planning.scheduling import shortfalls
from lightsout.state.types import ObjectKey

#: Names listed per reason before "and N more".
NAMES_SHOWN = 3


class Explainer:
    """`why_not` for many classes over one cluster, with the per-machine checks cached."""

    def __init__(
        self,
        cluster: Cluster,
        room: Mapping[ObjectKey, int],
        chosen: Mapping[ObjectKey, ObjectKey],
    ) -> None:
        """`chosen` maps each machine this plan powers on to its Group."""
        self.cluster = cluster
        self.room = room
        self.chosen = chosen
        self.planned = Counter(chosen.values())
        self.bins: dict[str, Bin] = {b.name: b for b in cluster.ready_bins + cluster.coming_bins}
        self._never: dict[tuple[Hashable, ...], tuple[str, ...]] = {}

    def why_not(self, cls: PodClass) -> str:
        reasons: dict[str, list[str]] = {}
        possible = False
        for info in self.cluster.infos:
            never = self._never_reasons(cls, info)
            if never:
                reason = "; ".join(never)
            else:
                possible = True
                reason = self._not_now(cls, info)
            reasons.setdefault(reason, []).append(info.key.name)
        if not reasons:
            return "no machine could ever host this pod: there are no Lights-Out machines"
        # Machines are separated by " | " because one machine's reasons are joined by "; ".
        machines = " | ".join(
            f"{listed(names)}: {reason}"
            for reason, names in sorted(reasons.items(), key=lambda item: item[1][0])
        )
        if not possible:
            return f"no machine could ever host this pod: {machines}"
        return f"no machine can be powered on for it now: {machines}"

    def _never_reasons(self, cls: PodClass, info: MachineInfo) -> tuple[str, ...]:
        view = info.view
        if view is None:
            return ("capacity unknown (no spec.resources, none inspected, never registered)",)
        key = (cls.static_key, cls.demand, info.shape, view.allocatable, view.requested)
        found = self._never.get(key)
        if found is None:
            placement = self.cluster.placer.reasons(cls, info.shape, view)
            found = (*placement, *shortfalls(cls.req.requests, view.free.as_dict()))
            self._never[key] = found
        return found

    def _not_now(self, cls: PodClass, info: MachineInfo) -> str:
        """Why a machine that could host the pod does not get it now."""
        group = info.group
        match info.availability:
            case Availability.READY | Availability.COMING:
                target = self.bins.get(info.machine.kubernetes_node_name)
                if target is None:
                    return f"{info.state}, but its node is cordoned"
                if count_fit(cls.demand, target.free):
                    return f"{info.state} with room, but the scheduler already refused the pod"
                full = "; ".join(shortfalls(cls.req.requests, target.free))
                return f"{info.state}, no room left: {full}"
            case Availability.OFF:
                pass
            case _:
                return info.state
        if group is None:
            return f"group {info.machine.group} not found"
        if group.autoscaler is not Autoscaler.BUILTIN:
            return f"group {group.key.name} is sized by {group.autoscaler}"
        if not info.machine.autoscaling_enabled:
            return "pinned (autoscaling.enabled=false)"
        if info.key in self.chosen:
            return "being powered on for other pods"
        if group.key not in cls.eligible and group.quiet:
            whom = "any pending pod" if group.quiet == "strict" else "pods another Group can host"
            return f"{group.window_note}: no power-on for {whom}"
        if group.key not in cls.eligible:
            return (
                f"pods wait {group.scale_up.stabilization_seconds}s before group "
                f"{group.key.name} scales up (scaleUp.stabilizationWindowSeconds)"
            )
        if self.room.get(group.key, 0) <= 0:
            return self.group_limit(group.key)
        return "off, not needed by the machines chosen"

    def group_limit(self, key: ObjectKey) -> str:
        """Why a Group may start no further power-on now."""
        group = self.cluster.groups[key]
        planned = self.planned.get(key, 0)
        active = self.cluster.active.get(key, 0) + planned
        if active >= group.max_nodes:
            return f"group {key.name} at maxNodes ({active} of {group.max_nodes} on)"
        in_flight = self.cluster.coming.get(key, 0) + planned
        limit = group.scale_up.max_concurrent
        return (
            f"group {key.name} has {in_flight} power-on operations in flight "
            f"(scaleUp.maxConcurrentOperations {limit})"
        )


def listed(names: Sequence[object]) -> str:
    """The first `NAMES_SHOWN` names, then how many more there are."""
    shown = ", ".join(str(name) for name in names[:NAMES_SHOWN])
    return shown if len(names) <= NAMES_SHOWN else f"{shown} and {len(names) - NAMES_SHOWN} more"
