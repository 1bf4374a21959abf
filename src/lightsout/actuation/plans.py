"""The one plan applier: the planner's `Plan` carried out through a `ScalePort`.

The operator's autoscaler handler (with `execution.scaling.KubeScale`, over the API) and the
replay (`lightsout.simulate`, in memory) both apply plans here:

- power actions set the machine's `spec.desiredPowerState`, conditional on the machine being
  unchanged since the plan's snapshot (a person's edit in between wins, and the planner plans
  again), with an event on the machine and on every pod it is for, and the Group's
  `lastScaleUp` / `lastScaleDown`;
- in dry-run (the Group's `spec.dryRun` or the operator's) the same events say "dry run", and
  nothing else changes;
- `Plan.unneeded_since` is kept as each machine's unneeded-since mark, so a restarted (or newly
  elected) planner keeps counting a machine's unneeded time;
- a pending pod no machine can host gets a Warning event explaining why, once per reason;
- a Group whose schedule window in force changes (one opens, a floor starts early, one
  closes) gets an event saying which window holds and until when, or that none does;
- a Group that names a price or carbon series gets the condition `PriceSeriesReady` (False,
  with a Warning event naming the ConfigMap, the key or the line, when one does not read);
- deferrable Jobs the plan releases are unsuspended (event `Released`), those it holds get
  their start in `lightsout.dev/start-at` and an event `Deferred` saying why and until when.

Plans repeat: the planner runs on every change, and the same decision comes back until the
cluster catches up. Events are therefore remembered per (object, message) and never posted
twice, and no mark is written that already has the value wanted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.actuation.port import ScalePort
from lightsout.models.enums import Autoscaler, ConditionStatus, ConditionType
from lightsout.planning.autoscaler.battery import HELD
from lightsout.planning.autoscaler.decisions import Plan, PowerOn, ScaleAction
from lightsout.planning.machine.common import set_condition
from lightsout.planning.machine.effects import Event, SetCondition
from lightsout.planning.types import EventType, ObservedPowerState
from lightsout.state.parse import format_time, parse_time
from lightsout.state.types import Group, ObjectKey, Snapshot

log = logging.getLogger(__name__)

#: A stored drain deadline is moved earlier only by more than this (the runtime a UPS
#: estimates wobbles from one reading to the next).
DRAIN_BY_SLACK = timedelta(seconds=10)
#: Pod notes that start like this are the planner saying no machine can take the pod.
_NO_MACHINE = ("no machine",)


@dataclass
class Applied:
    """What one `apply` did: patches that lost a race (the caller plans again) and counts."""

    conflicts: int = 0
    #: Each action and what came of it: "applied", "conflict" or "dry_run".
    outcomes: list[tuple[ScaleAction, str]] = field(default_factory=list)
    powered_on: list[str] = field(default_factory=list)
    powered_off: list[str] = field(default_factory=list)


@dataclass
class PlanApplier:
    """The one plan applier (the operator's and the replay's): carries a `Plan` out through a
    `ScalePort`; remembers which events it posted so a repeated plan posts nothing new."""

    dry_run: bool = False
    _posted: dict[tuple[str, ObjectKey], str] = field(default_factory=dict)
    #: The Groups' conditions this applier wrote, so an unchanged one is not written again.
    _conditions: dict[ObjectKey, SetCondition] = field(default_factory=dict)

    def apply(self, port: ScalePort, snapshot: Snapshot, plan: Plan, now: datetime) -> Applied:
        done = Applied()
        groups = {group.key: group for group in snapshot.groups}
        machines = {machine.key for machine in snapshot.machines}
        scaled: dict[tuple[ObjectKey, bool], list[ScaleAction]] = {}
        unrecorded = self._record_outages(port, snapshot, plan)
        for action in plan.actions:
            group = groups.get(action.group)
            # The planner never chooses these; this is the last line of defence, not policy.
            if group is None or action.machine not in machines or not _sized_here(action, group):
                log.warning("refusing %s of %s: not an autoscaled machine", action, action.machine)
                continue
            if action.group in unrecorded:
                # The outage is recorded before its first power-off, or nothing is done.
                done.conflicts += 1
                continue
            on = isinstance(action, PowerOn)
            if action.dry_run or self.dry_run:
                done.outcomes.append((action, "dry_run"))
                self._announce(
                    port, action, "dry run: would power on" if on else "dry run: would power off"
                )
                continue
            applied = self._power(port, action, done)
            done.outcomes.append((action, "applied" if applied else "conflict"))
            if applied:
                scaled.setdefault((action.group, on), []).append(action)
                self._announce(port, action, "powering on" if on else "powering off")
        for (group_key, up), actions in scaled.items():
            port.record_scale(group_key, up, actions, now)
        self._persist_unneeded(port, snapshot, plan)
        self._persist_drain_by(port, snapshot, plan)
        self._explain_pods(port, plan)
        self._announce_windows(port, snapshot, plan)
        self._release_jobs(port, snapshot, plan)
        self._announce_series(port, snapshot, plan, now)
        self._forget(snapshot)
        return done

    # ------------------------------------------------------------------ outages
    def _record_outages(self, port: ScalePort, snapshot: Snapshot, plan: Plan) -> set[ObjectKey]:
        """Write the outages the plan starts and clear those it ends; the Groups whose record
        could not be written (their outage actions wait for the next plan)."""
        if self.dry_run:
            return set()
        dry = {group.key for group in snapshot.groups if group.dry_run}
        failed = set()
        for key, outage in plan.outages.items():
            if key in dry:
                continue
            if not port.record_outage(key, outage):
                failed.add(key)
                continue
            restore = ", ".join(outage.restore) or "none"
            message = (
                f"on battery: powering machines off; restored when the mains are back: {restore}"
            )
            self._event(port, "Group", key, "OutageRecorded", message)
        for key in plan.outages_ended - dry:
            if port.record_outage(key, None):
                self._event(
                    port, "Group", key, "OutageOver", "the machines are back after the outage"
                )
        return failed

    # ------------------------------------------------------------------ power actions
    def _power(self, port: ScalePort, action: ScaleAction, done: Applied) -> bool:
        on = isinstance(action, PowerOn)
        if not port.set_desired(
            action.machine, ObservedPowerState.ON if on else ObservedPowerState.OFF
        ):
            # Someone (a person, the FSM's status write) changed it since the snapshot: the
            # change wakes the planner again, which decides on the new state.
            done.conflicts += 1
            log.info(
                "autoscaler: %s changed since the plan was made; planning again", action.machine
            )
            return False
        (done.powered_on if on else done.powered_off).append(str(action.machine))
        log.info("autoscaler: %s -> %s: %s", action.machine, "On" if on else "Off", action.reason)
        return True

    def _announce(self, port: ScalePort, action: ScaleAction, doing: str) -> None:
        """Say what happens (or, `doing` "dry run: ...", would) on the machine and its pods."""
        dry = doing.startswith("dry run")
        if isinstance(action, PowerOn):
            reason = "DryRunScaleUp" if dry else "ScaleUp"
            self._event(port, "Node", action.machine, reason, f"{doing}: {action.reason}")
            text = f"{doing} machine {action.machine.name} (group {action.group.name}) for this pod"
            for key in action.pods:
                self._event(port, "Pod", key, "DryRunScaleUp" if dry else "TriggeredScaleUp", text)
        else:
            reason = "DryRunScaleDown" if dry else "ScaleDown"
            self._event(port, "Node", action.machine, reason, f"{doing}: {action.reason}")

    # ------------------------------------------------------------------ unneeded time
    def _persist_unneeded(self, port: ScalePort, snapshot: Snapshot, plan: Plan) -> None:
        groups = {group.key: group for group in snapshot.groups}
        for machine in snapshot.machines:
            current = port.unneeded_mark(machine.key)
            since = plan.unneeded_since.get(machine.key)
            wanted = format_time(since) if since is not None else None
            if current == wanted:
                continue
            port.mark_unneeded(machine.key, wanted)
            group = groups.get(machine.group_key)
            if wanted is not None and current is None and group is not None:
                # A stable message (no running seconds), so a repeated plan posts it once.
                seconds = group.scale_down.unneeded_seconds
                wait = (
                    "one break-even time (scaleDown.unneededSeconds: auto)"
                    if seconds is None
                    else f"{seconds}s (scaleDown.unneededSeconds)"
                )
                self._event(
                    port,
                    "Node",
                    machine.key,
                    "Unneeded",
                    f"unneeded since {wanted}: no pending pod needs it and its pods fit "
                    f"elsewhere; powered off after {wait} unless it is needed again",
                )

    # ------------------------------------------------------------------ drain deadlines
    def _persist_drain_by(self, port: ScalePort, snapshot: Snapshot, plan: Plan) -> None:
        """Each machine's drain deadline as the plan says: written when missing or later than
        wanted (the runtime left only shrinks it), removed when the plan has none."""
        if not plan.decided or self.dry_run:
            return
        for machine in snapshot.machines:
            current = port.drain_mark(machine.key)
            wanted = plan.drain_by.get(machine.key)
            if wanted is None:
                if current is not None:
                    port.mark_drain_by(machine.key, None)
                continue
            stored = parse_time(current)
            if stored is None or stored > wanted + DRAIN_BY_SLACK:
                port.mark_drain_by(machine.key, format_time(wanted))
                self._event(
                    port,
                    "Node",
                    machine.key,
                    "DrainDeadline",
                    f"its UPS runs low: pods a PodDisruptionBudget still protects after "
                    f"{format_time(wanted)} are deleted, so the OS shuts down before the "
                    "battery is empty",
                    warning=True,
                )

    # ------------------------------------------------------------------ pods left waiting
    def _explain_pods(self, port: ScalePort, plan: Plan) -> None:
        for key, notes in plan.explanations.pods.items():
            text = "; ".join(notes)
            if text.startswith(_NO_MACHINE):
                self._event(port, "Pod", key, "NotTriggerScaleUp", text, warning=True)
            elif text.startswith(HELD):
                # A power-on held back by the Group's UPS (`planning.autoscaler.battery`).
                self._event(port, "Pod", key, "PowerOnHeld", text, warning=True)
            elif (machine := plan.explanations.coming.get(key)) is not None:
                # One event per pod and machine, not one per phase the machine passes through.
                message = f"waiting for machine {machine}, which is already coming up"
                self._event(port, "Pod", key, "WaitingForScaleUp", message)

    # ------------------------------------------------------------------ schedule windows
    def _announce_windows(self, port: ScalePort, snapshot: Snapshot, plan: Plan) -> None:
        if not plan.decided:
            return
        for group in snapshot.groups:
            note = plan.windows.get(group.key)
            if note is not None:
                self._event(port, "Group", group.key, "WindowInForce", f"in force: {note}")
            elif ("Group", group.key) in self._posted and group.windows:
                # Only after a window was announced: the Group's own limits hold again.
                message = (
                    f"no schedule window in force: the Group's own minNodes {group.min_nodes} "
                    f"and maxNodes {group.max_nodes} apply"
                )
                self._event(port, "Group", group.key, "WindowClosed", message)

    # ------------------------------------------------------------------ deferrable Jobs
    def _release_jobs(self, port: ScalePort, snapshot: Snapshot, plan: Plan) -> None:
        if not plan.decided:
            return
        for release in plan.releases:
            if self.dry_run:
                message = f"dry run: would release: {release.reason}"
                self._event(port, "Job", release.job, "DryRunRelease", message)
            elif port.release_job(release.job):
                log.info("autoscaler: Job %s %s", release.job, release.reason)
                self._event(port, "Job", release.job, "Released", release.reason)
        marks = {job.key: job.start_mark for job in snapshot.deferred}
        for key, wait in plan.waits.items():
            start = format_time(wait.start)
            if not self.dry_run and marks.get(key) != start:
                port.mark_job_start(key, start)
            self._event(port, "Job", key, "Deferred", wait.reason)

    # ------------------------------------------------------------------ price series
    def _announce_series(
        self, port: ScalePort, snapshot: Snapshot, plan: Plan, now: datetime
    ) -> None:
        """Each Group's `PriceSeriesReady`, written when it changes (and once per planner)."""
        if not plan.decided or self.dry_run:
            return
        for group in snapshot.groups:
            wanted = series_condition(group)
            if wanted is None or self._conditions.get(group.key) == wanted:
                continue
            if port.set_group_condition(group.key, wanted, now):
                self._conditions[group.key] = wanted
                ready = wanted.status is ConditionStatus.TRUE
                reason = "PriceSeriesReady" if ready else "PriceSeriesUnreadable"
                self._event(port, "Group", group.key, reason, wanted.message, warning=not ready)

    # ------------------------------------------------------------------ events, once each
    def _event(
        self,
        port: ScalePort,
        kind: str,
        key: ObjectKey,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None:
        uid = port.uid(kind, key)
        if uid is None:
            return
        remembered = f"{uid}|{reason}|{message}"
        if self._posted.get((kind, key)) == remembered:
            return
        try:
            port.post_event(
                kind,
                key,
                Event(EventType.WARNING if warning else EventType.NORMAL, reason, message),
            )
        except Exception:  # an event lost is not worth a failed plan
            log.exception("posting %s event on %s %s failed", reason, kind, key)
            return
        self._posted[(kind, key)] = remembered

    def _forget(self, snapshot: Snapshot) -> None:
        """Drop memories of objects that are gone, so the memory stays as big as the cluster."""
        alive = (
            {("Pod", pod.key) for pod in snapshot.pods}
            | {("Node", machine.key) for machine in snapshot.machines}
            | {("Group", group.key) for group in snapshot.groups}
            | {("Job", job.key) for job in snapshot.deferred}
        )
        for who in [w for w in self._posted if w not in alive]:
            del self._posted[who]


def series_condition(group: Group) -> SetCondition | None:
    """The Group's `PriceSeriesReady` (None: it names no series)."""
    electricity = group.electricity
    if electricity is None or (electricity.series is None and electricity.carbon is None):
        return None
    if group.series_problem is not None:
        message = (
            f"{group.series_problem}: energy is priced by the tariff, deferrable Jobs run at once"
        )
        return set_condition(ConditionType.PRICE_SERIES_READY, False, "Unreadable", message)
    read = [
        f"{what} from {format_time(found.first)} to {format_time(found.end)}"
        for what, found in (("prices", group.prices), ("carbon", group.carbon))
        if found is not None
    ]
    return set_condition(ConditionType.PRICE_SERIES_READY, True, "Read", "; ".join(read))


def _sized_here(action: ScaleAction, group: Group) -> bool:
    """The built-in planner sizes the Group, or the action is its battery policy's."""
    if action.outage:
        return group.battery is not None
    return group.autoscaler is Autoscaler.BUILTIN
