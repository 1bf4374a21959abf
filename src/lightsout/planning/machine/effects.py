"""Effects and the `Decision` a machine's pass returns (`fsm.decide`, completed by
`passes.pass_decision` with what the pass read beside it).

An effect is a frozen description of one idempotent side effect. The one effect interpreter
(`actuation.interpreter.carry_out`) carries a decision out through a `MachinePort` (the
operator's, over the Kubernetes API, or the replay's in memory). The contract it keeps:

1. The decision's status fields (phase, phaseSince, reason, message, lastOperation, and what the
   pass read: health, learned figures, energy) are written first, then the effects are applied
   in order. Writing the operation before creating its Job means a crash between the two leaves
   a status that names the Job, and the next decision recreates it under the same
   deterministic name instead of inventing a new attempt.
2. A step that fails (`AcquireLease` losing a race, a status write that conflicts) stops the
   pass, which is retried: every effect is idempotent and the next decision is recomputed from
   fresh observations, so stopping half-way is safe.
3. `StartJob` means "create this Job unless it exists": an AlreadyExists answer is success
   (the Job is adopted), never a reason to create another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightsout.planning.types import (
    Action,
    ConditionStatus,
    ConditionType,
    EventType,
    Learned,
    ObservedPowerState,
    Operation,
    Phase,
)


@dataclass(frozen=True)
class StartJob:
    """Create the action Job `lo-<node>-<action>-g<generation>-a<attempt>` if absent."""

    action: Action
    generation: int
    attempt: int
    #: For the power-off that follows a `cut_pending` one: what showed the OS went down (the
    #: Job's `lightsout_os_down.evidence`), and, when the power is cut without that proof
    #: because the driver's `force` is set, the seconds the OS was given (else 0).
    os_down_evidence: str = ""
    os_down_forced_after: int = 0


@dataclass(frozen=True)
class DeleteJob:
    """Delete that Job with `propagationPolicy: Foreground`; a missing Job is fine.

    Foreground keeps the Job visible until its pods are gone, which is what stops the FSM from
    starting the next power action while a cancelled pod could still be running.
    """

    action: Action
    generation: int
    attempt: int


@dataclass(frozen=True)
class Cordon:
    """Mark the core Node unschedulable."""


@dataclass(frozen=True)
class Uncordon:
    """Mark the core Node schedulable."""


@dataclass(frozen=True)
class ApplyNodeMetadata:
    """Apply the machine's (and its Group's) labels and taints to the core Node, and remove the
    operator's startup taint from it."""


@dataclass(frozen=True)
class PrepareCoreNode:
    """Before an on-action's Job: create the core Node with the wanted labels and taints plus
    the startup taint (`STARTUP_TAINT_KEY`), or give an existing one the same.

    The caller carries it out before writing status; when it fails the machine is not powered
    on (`fsm.core_node_failed` gives the decision that records why).
    """


@dataclass(frozen=True)
class Drain:
    """Evict the core Node's pods through the Eviction API (PDBs honoured), one pass; with
    `force` (past a drain deadline the battery set), delete the pods a PDB still protects,
    each with its own grace period."""

    force: bool = False


@dataclass(frozen=True)
class DeleteCoreNode:
    """Delete the core `v1/Node` object; with `unregistered_only`, only while no kubelet has
    registered it (read again just before, and deleted on that read's resourceVersion), so a
    kubelet that registers in the meantime keeps its Node."""

    unregistered_only: bool = False


@dataclass(frozen=True)
class SetDesiredPowerState:
    """Patch the Node resource's `spec.desiredPowerState` (driftPolicy Adopt: the intent
    follows the power state a person gave the machine)."""

    state: ObservedPowerState


@dataclass(frozen=True)
class AcquireLease:
    """Acquire the machine's Lease, or renew it when already held by this operator."""


@dataclass(frozen=True)
class ReleaseLease:
    """Release the machine's Lease if this operator holds it."""


@dataclass(frozen=True)
class Requeue:
    """Reconcile again after this many seconds even if nothing changes."""

    after_seconds: float


@dataclass(frozen=True)
class SetCondition:
    """Set one status condition (merged by type; transition time changes with status)."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class Event:
    """Post a Kubernetes Event on the Node resource."""

    type: EventType
    reason: str
    message: str


Effect = (
    StartJob
    | DeleteJob
    | Cordon
    | Uncordon
    | ApplyNodeMetadata
    | PrepareCoreNode
    | Drain
    | DeleteCoreNode
    | SetDesiredPowerState
    | AcquireLease
    | ReleaseLease
    | Requeue
    | SetCondition
    | Event
)


@dataclass(frozen=True)
class Decision:
    """The next status of a machine and the effects that get it there."""

    phase: Phase
    reason: str
    message: str
    effects: tuple[Effect, ...] = ()
    #: `status.lastOperation` to persist (the previous one when nothing changed).
    operation: Operation | None = None
    #: `status.phaseSince`: `now` when the phase changed, else the previous value.
    phase_since: datetime | None = None
    #: `status.observedPowerState` to write, None to leave it unchanged.
    observed_power_state: ObservedPowerState | None = None
    #: `status.lastHealthCheck` to write (a new health-check result), None to leave it.
    health_check: Mapping[str, Any] | None = None
    #: `status.learned` to write when this transition taught something, None to leave it.
    learned: Learned | None = None
    #: `status.power` / `status.inspected` a new health check reported, None to leave them.
    measured: Mapping[str, Any] | None = None
    #: `status.driftCorrections` to write, None to leave it.
    drift_corrections: tuple[datetime, ...] | None = None
    #: `status.energy` to write (the account checkpointed at a new rate), None to leave it.
    energy: Mapping[str, Any] | None = None

    @property
    def requeue_after(self) -> float | None:
        return next((e.after_seconds for e in self.effects if isinstance(e, Requeue)), None)

    @property
    def attempts(self) -> int:
        """`status.attempts`: attempts made for the current operation's intent."""
        return self.operation.attempt if self.operation is not None else 0
