"""Why a pending pod gets no machine: one line naming each machine's reason.

`lightsout.planning.autoscaler.autoscale.plan` calls `why_not` for every class of pods left without
capacity after scale-up. Machines that could never host the pod (too small, wrong labels,
untolerated taints) and machines that could but may not be powered on now (pinned, group at
maxNodes, too many power-ons in flight, scale-up window) are told apart: when none could ever
host it the line starts "no machine could ever host this pod", which is the message a person
needs to go and fix the pod or the machines. Machines sharing a reason are listed together.
Whether an off machine may be powered on, and the alternatives a quiet window leaves the pod
(named in its machines' reason), are `planning.autoscaler.startable`'s, as scale-up decided them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping

from lightsout.planning.autoscaler.cluster import (
    Availability,
    Bin,
    Cluster,
    MachineInfo,
    PodClass,
    count_fit,
)
from lightsout.planning.autoscaler.scaleup import room_of
from lightsout.planning.autoscaler.scheduling import shortfalls
from lightsout.planning.autoscaler.startable import (
    NAMES_SHOWN,
    alternatives,
    group_limit,
    listed,
    not_startable,
)
from lightsout.state.types import Group, ObjectKey


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
        #: The room scale-up decided with (`scaleup.eligible_classes`), before this plan's
        #: power-ons; and per class, the machines a quiet window left it.
        self._decided = room_of(cluster)
        self._alternatives: dict[int, list[str]] = {}

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
        why = not_startable(info)
        if why is not None:
            return why
        assert group is not None  # managed
        if info.key in self.chosen:
            return "being powered on for other pods"
        quiet = self._quiet(cls, group) if group.key not in cls.eligible else None
        if quiet is not None:
            return quiet
        if group.key not in cls.eligible:
            return (
                f"pods wait {group.scale_up.stabilization_seconds}s before group "
                f"{group.key.name} scales up (scaleUp.stabilizationWindowSeconds)"
            )
        if self.room.get(group.key, 0) <= 0:
            return self.group_limit(group.key)
        return "off, not needed by the machines chosen"

    def _quiet(self, cls: PodClass, group: Group) -> str | None:
        """How `group`'s quiet window holds it back from `cls`: always when strict, else by the
        machines of other Groups that can be powered on for it instead (None: it does not)."""
        if not group.quiet:
            return None
        if group.quiet == "strict":
            return f"{group.window_note}: no power-on for any pending pod"
        names = self._alternatives.get(cls.id)
        if names is None:
            found = alternatives(self.cluster, self._decided, cls)
            names = self._alternatives[cls.id] = [info.key.name for info in found]
        if not names:
            return None
        return (
            f"{group.window_note}: no power-on for pods another Group can host "
            f"({listed(names)} can be powered on for them)"
        )

    def group_limit(self, key: ObjectKey) -> str:
        """Why a Group may start no further power-on now, this plan's power-ons counted."""
        return group_limit(self.cluster, key, self.planned.get(key, 0))


__all__ = ["NAMES_SHOWN", "Explainer", "listed"]
