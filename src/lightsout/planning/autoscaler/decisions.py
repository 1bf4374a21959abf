"""What the autoscaling planner returns: power actions, explanations, unneeded-since times.

`lightsout.planning.autoscaler.autoscale.plan` builds a `Plan`; the autoscaler handler applies its
actions (setting `spec.desiredPowerState`, unless `dry_run`), records
`Group.status.lastScaleUp/Down`, persists `unneeded_since`, and turns the explanations into events;
`lightsout plan` prints them. The replay also reads `holds`, why each Ready machine stays on, to
charge its idle time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from lightsout.models.battery import Outage
from lightsout.state.types import ObjectKey


@dataclass(frozen=True, slots=True)
class PowerOn:
    machine: ObjectKey
    group: ObjectKey
    reason: str
    #: The pending pods this machine is powered on for (empty when it is for minNodes).
    pods: tuple[ObjectKey, ...] = ()
    #: The Group is in dryRun: explain, but do not change desiredPowerState.
    dry_run: bool = False
    #: Brings a machine back after an outage (`planning.autoscaler.battery`): done whoever
    #: sizes the Group, as its battery policy says.
    outage: bool = False


@dataclass(frozen=True, slots=True)
class PowerOff:
    machine: ObjectKey
    group: ObjectKey
    reason: str
    dry_run: bool = False
    #: For an outage (`planning.autoscaler.battery`): done whoever sizes the Group.
    outage: bool = False


type ScaleAction = PowerOn | PowerOff


@dataclass(frozen=True)
class Release:
    """Release a suspended deferrable Job now (`planning.autoscaler.deferral`), and why."""

    job: ObjectKey
    reason: str


@dataclass(frozen=True)
class Wait:
    """A suspended deferrable Job stays so until `start`, and why, in words."""

    job: ObjectKey
    start: datetime
    reason: str


class Hold(StrEnum):
    """Why a Ready machine stays on this plan (its note says it in words)."""

    #: Pending pods, or announced runs made pending by pre-warming, are expected to run on it.
    PENDING = "pendingPods"
    #: Its pods are too many to move: utilisation at the threshold, a pod that cannot be
    #: disrupted or would not fit elsewhere, its node cordoned.
    BUSY = "busy"
    #: A Job's pod on it has run for less than scaleDown.jobGraceSeconds, and without the grace
    #: its pods would move to the other Ready nodes.
    JOB_GRACE = "jobGrace"
    #: Unneeded, but not yet for scaleDown.unneededSeconds (with `auto`, its break-even time).
    UNNEEDED_WAIT = "unneededWait"
    #: Unneeded, but the Group scaled up within its stabilisation window, or is scaling up.
    STABILISATION = "stabilisation"
    #: Unneeded, but powering it off would take its Group below minNodes.
    MIN_NODES = "minNodes"
    #: Unneeded, but its Group has scaleDown.maxConcurrentOperations power-offs in flight.
    IN_FLIGHT = "inFlight"
    #: Unneeded, but an announced run it would serve comes sooner than a power cycle pays.
    ANNOUNCED = "announcedRun"
    #: Unneeded, but a wear limit (minimumOnSeconds, maxPowerCyclesPerDay) holds it.
    WEAR = "wearLimit"
    #: Never powered off by the autoscaler (pinned, or its Group's scale-down disabled).
    PINNED = "pinned"


@dataclass(frozen=True)
class Explanations:
    """Why (or why not), per Group, per machine and per pending pod, in words a person reads."""

    groups: Mapping[ObjectKey, tuple[str, ...]] = field(default_factory=dict)
    machines: Mapping[ObjectKey, tuple[str, ...]] = field(default_factory=dict)
    pods: Mapping[ObjectKey, tuple[str, ...]] = field(default_factory=dict)
    #: Pending pods counted on a machine already coming up, and that machine's name: the
    #: operator tells such a pod what it waits for, the simulator judges its wait by it.
    coming: Mapping[ObjectKey, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    actions: tuple[ScaleAction, ...] = ()
    explanations: Explanations = field(default_factory=Explanations)
    #: When each machine found unneeded now was first found so; machines not listed are needed.
    #: The caller persists this and passes it back in the next snapshot.
    unneeded_since: Mapping[ObjectKey, datetime] = field(default_factory=dict)
    #: False when the planner refused to decide (the snapshot was incomplete).
    decided: bool = True
    summary: str = ""
    #: The schedule window in force per Group that has one (`planning.autoscaler.windows`),
    #: described: the plan applier says on the Group when it changes.
    windows: Mapping[ObjectKey, str] = field(default_factory=dict)
    #: Why each Ready machine of a builtin Group that this plan does not power off stays on
    #: (`planning.autoscaler.scaledown`); its note in `explanations.machines` says it in words.
    holds: Mapping[ObjectKey, Hold] = field(default_factory=dict)
    #: Outages to record in Groups' `status.battery.outage` before any action is applied
    #: (`planning.autoscaler.battery`), and Groups whose outage record is over.
    outages: Mapping[ObjectKey, Outage] = field(default_factory=dict)
    outages_ended: frozenset[ObjectKey] = frozenset()
    #: Drain deadlines of machines on a UPS about to run dry: past it, pods a PDB protects are
    #: deleted. Machines not listed have none (a mark left from before is removed).
    drain_by: Mapping[ObjectKey, datetime] = field(default_factory=dict)
    #: Deferrable Jobs to release now, and those that wait, until when and why
    #: (`planning.autoscaler.deferral`).
    releases: tuple[Release, ...] = ()
    waits: Mapping[ObjectKey, Wait] = field(default_factory=dict)

    @property
    def power_on(self) -> tuple[PowerOn, ...]:
        return tuple(a for a in self.actions if isinstance(a, PowerOn))

    @property
    def power_off(self) -> tuple[PowerOff, ...]:
        return tuple(a for a in self.actions if isinstance(a, PowerOff))


__all__ = [
    "Explanations",
    "Hold",
    "Plan",
    "PowerOff",
    "PowerOn",
    "Release",
    "ScaleAction",
    "Wait",
]
