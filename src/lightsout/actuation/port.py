"""The port of execution: everything carrying out a decision or a plan reads and writes.

Two Protocols, written against by the one effect interpreter (`actuation.interpreter`) and the
one plan applier (`actuation.plans.PlanApplier`):

- `MachinePort`, one machine during one pass: its Lease, its clone's address, its core Node,
  its status, its action Jobs, its drain and its events;
- `ScalePort`, one plan's writes: a machine's `spec.desiredPowerState`, a Group's
  `lastScaleUp`/`lastScaleDown` and outage record, the unneeded-since mark, and events on
  machines and pods.

Two implementations of each: through the Kubernetes API (`execution.actuator.KubeMachine`,
`execution.scaling.KubeScale`), and in memory (`actuation.memory`), which the unit tests and
`lightsout simulate` drive. A new driver of the core (another replay, a dry-run mode) is a new
implementation of these, never a copy of the interpreter.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Protocol

from lightsout.models.battery import Outage
from lightsout.planning.autoscaler.decisions import ScaleAction
from lightsout.planning.machine.effects import Decision, DeleteJob, Event, SetCondition, StartJob
from lightsout.planning.types import DrainStatus, MachineState, ObservedPowerState
from lightsout.state.types import ObjectKey


class MachinePort(Protocol):
    """One machine, as one pass carries out its decision (`interpreter.carry_out`)."""

    @property
    def phase(self) -> str | None:
        """The phase its status holds before this pass writes (None: never written)."""

    @property
    def renew_lease_every(self) -> float | None:
        """Seconds between renewals of a held Lease (None: the Lease never expires)."""

    def acquire_lease(self, now: dt.datetime) -> bool:
        """Take or renew the machine's Lease; False when another holder has it."""

    def release_lease(self, now: dt.datetime) -> None: ...

    def allocate_address(self) -> str | None:
        """Lease a clone's address from its Group's pool; what is wrong when none is free."""

    def prepare_core_node(self) -> str | None:
        """Create or taint the core Node before power-on; what is wrong when it cannot."""

    def write_status(self, machine: MachineState, decision: Decision, now: dt.datetime) -> bool:
        """Persist the decision's status; False when the machine changed since it was read."""

    def settle(self, previous_phase: str | None, phase: str) -> None:
        """After a phase change: free what the machine held (its address, its join token)."""

    def post_event(self, event: Event) -> None: ...

    def start_job(self, effect: StartJob) -> None:
        """Create the action Job unless it exists (then it is adopted)."""

    def delete_job(self, effect: DeleteJob) -> None: ...

    def cordon(self, unschedulable: bool) -> None: ...

    def apply_metadata(self) -> None:
        """The wanted labels and taints on the core Node, its startup taint removed."""

    def drain(self, force: bool) -> DrainStatus:
        """One pass of evictions (`force`: deletions for what a PDB blocks): what is left, and
        what blocks."""

    def delete_core_node(self, unregistered_only: bool) -> None: ...

    def set_desired(self, state: ObservedPowerState) -> None:
        """`spec.desiredPowerState` (driftPolicy Adopt: the intent follows the machine)."""


class ScalePort(Protocol):
    """What applying one plan writes (`scaling.PlanApplier.apply`)."""

    def set_desired(self, machine: ObjectKey, state: ObservedPowerState) -> bool:
        """`spec.desiredPowerState` of a machine unchanged since the plan's snapshot; False
        when it changed (the change wakes the planner, which plans again)."""

    def record_scale(
        self, group: ObjectKey, up: bool, actions: Sequence[ScaleAction], now: dt.datetime
    ) -> None:
        """The Group's `status.lastScaleUp` (`up`) or `lastScaleDown`."""

    def record_outage(self, group: ObjectKey, outage: Outage | None) -> bool:
        """The Group's `status.battery.outage` (None clears it); False when it could not be
        written (then nothing is powered off for it)."""

    def drain_mark(self, machine: ObjectKey) -> str | None:
        """The machine's drain deadline as stored (None: none)."""

    def mark_drain_by(self, machine: ObjectKey, deadline: str | None) -> None:
        """Store the drain deadline (None removes it); the machine's pass reads it."""

    def unneeded_mark(self, machine: ObjectKey) -> str | None:
        """The machine's unneeded-since mark as stored (None: not marked)."""

    def mark_unneeded(self, machine: ObjectKey, since: str | None) -> None:
        """Store the mark (None removes it), so a restarted planner keeps counting."""

    def release_job(self, job: ObjectKey) -> bool:
        """Unsuspend a held deferrable Job (`spec.suspend: false`, its start mark removed);
        False when it could not be (it is gone, or the write failed: the next plan tries
        again)."""

    def mark_job_start(self, job: ObjectKey, start: str) -> None:
        """Store when a held Job will be released (its `lightsout.dev/start-at`)."""

    def set_group_condition(
        self, group: ObjectKey, condition: SetCondition, now: dt.datetime
    ) -> bool:
        """Merge one condition into the Group's `status.conditions`; False when it could not
        be written (the next plan tries again)."""

    def uid(self, kind: str, key: ObjectKey) -> str | None:
        """The uid of a machine (`kind` "Node"), a pod ("Pod"), a Group or a Job; None when it
        is not known (then nothing is said about it). A re-created object is another one."""

    def post_event(self, kind: str, key: ObjectKey, event: Event) -> None: ...
