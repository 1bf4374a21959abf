"""The built-in autoscaler's planner: `plan(snapshot, now) -> Plan`. Pure; no I/O, no clock.

The autoscaler handler calls it whenever a watched pod, node or Lights-Out object changes
(event-driven, no polling loop), with a `Snapshot` from `lightsout.state.snapshot_from` and the
current time, then applies the returned actions (`spec.desiredPowerState`, unless dry-run),
persists `Plan.unneeded_since` and emits the explanations as events; `lightsout plan` prints the
same `Plan` without applying it.

In order:

1. No decision on an incomplete snapshot: a missing pod list looks like an idle cluster.
   Expected pods (CronJob runs) within their lead time join the pending pods
   (`prewarm.due`), so their capacity is powered on before they exist; they form classes of
   their own (one per due moment), since a machine Ready before they are due serves them.
2. Pending Unschedulable pods (DaemonSet pods aside: they target one node) are grouped by their
   scheduling requirements and placed on capacity that exists or is coming
   (`absorb.absorb`), then on a set of powered-off machines (`scaleup.choose`); what is left
   gets an explanation naming each machine's reason (`explain.Explainer`).
3. Groups below minNodes are topped up with their cheapest machines (`scaleup.top_up`); a
   schedule window in force sets a Group's minNodes/maxNodes first (`windows.effective`), a
   floor from one boot before it opens.
4. Unneeded Ready machines are found and, past their timers (`auto`: one break-even time), powered
   off unless a wear limit or announced demand soon enough keeps them on (`scaledown`).
5. Suspended deferrable Jobs are released now, or told when they will be, at the start that
   costs least by their machines' tariffs (`planning.autoscaler.deferral`), their machines
   being those step 2's selection would power on for their pods; released, their pods are
   pending pods of a later plan.
6. Groups whose UPS runs on battery, or whose machines are off for an outage that is over,
   get what `planning.autoscaler.battery` decides: no power-on, tiers powered off, restores.

Each step returns what it decided and changes none of its inputs: `plan` hands the cluster with
the pods placed so far, the pods still unplaced and the room left to the next step.

Only machines of Groups whose `autoscaler` is `builtin`, with `spec.autoscaling.enabled`, are
ever acted on; every other machine still counts as the capacity it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from lightsout.models.enums import Autoscaler
from lightsout.planning.autoscaler.absorb import absorb
from lightsout.planning.autoscaler.battery import on_battery
from lightsout.planning.autoscaler.cluster import (
    Availability,
    Cluster,
    PodClass,
    build_cluster,
    pod_weights,
    since_verdict,
)
from lightsout.planning.autoscaler.decisions import (
    Explanations,
    Plan,
    PowerOff,
    PowerOn,
    ScaleAction,
)
from lightsout.planning.autoscaler.deferral import defer
from lightsout.planning.autoscaler.explain import Explainer, listed
from lightsout.planning.autoscaler.prewarm import Lead, due, lead_times
from lightsout.planning.autoscaler.scaledown import Upcoming, scale_down
from lightsout.planning.autoscaler.scaleup import Chosen, choose, eligible_classes, room_of, top_up
from lightsout.planning.autoscaler.windows import effective
from lightsout.planning.policy import EnergyModel, describe
from lightsout.state.types import ExpectedPod, ObjectKey, Pod, SchedulingRequirements, Snapshot

WAITING_FOR_SYNC = "waiting for every watch to sync: no decision on a partial view of the cluster"


def plan(snapshot: Snapshot, now: datetime) -> Plan:
    """Decide which machines to power on and off, and explain every decision and non-decision."""
    if not snapshot.complete:
        groups = {group.key: (WAITING_FOR_SYNC,) for group in snapshot.groups}
        return Plan(
            explanations=Explanations(groups=groups),
            unneeded_since=dict(snapshot.unneeded_since),
            decided=False,
            summary=WAITING_FOR_SYNC,
        )
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)  # API times are aware; a naive clock is taken as UTC
    if any(group.windows for group in snapshot.groups):
        # Schedule windows in force set the Group's limits for this plan
        # (`planning.autoscaler.windows`).
        limited = tuple(effective(g, snapshot.machines, now) for g in snapshot.groups)
        snapshot = replace(snapshot, groups=limited)
    leads = lead_times(snapshot)
    upcoming = [
        Upcoming(e, leads[e.key].seconds, leads[e.key].longest_seconds) for e in snapshot.expected
    ]
    expected = due(snapshot, now, leads)
    if expected:
        # CronJob runs about to start count as pending pods (see `planning.autoscaler.prewarm`).
        snapshot = replace(snapshot, pods=(*snapshot.pods, *expected))
    cluster = build_cluster(snapshot, now)
    energy = EnergyModel.of(snapshot.machines, snapshot.groups)

    made_pending = {pod.key for pod in expected}
    announced = {e.key: e.at for e in snapshot.expected if e.key in made_pending}  # when due
    classes, pod_notes = _classes(cluster, announced)
    room: Mapping[ObjectKey, int] = room_of(cluster)
    absorbed = absorb(cluster, classes, room, announced)
    cluster = absorbed.cluster
    pod_notes.update(absorbed.notes)
    choice = choose(cluster, eligible_classes(cluster, absorbed.classes), room, energy)
    minimum = top_up(cluster, choice.chosen, choice.room, energy)
    room = minimum.room  # what this plan's power-ons leave

    actions: list[ScaleAction] = []
    machine_notes: dict[ObjectKey, list[str]] = defaultdict(list)
    runs = {e.key: (e, leads[e.key]) for e in snapshot.expected}
    for entry in choice.chosen:
        power_on = _power_on(entry, runs, now)
        actions.append(power_on)
        note = f"powering on machine {power_on.machine.name} for it"
        pod_notes.update((key, note) for key in power_on.pods)
    for info, reason in minimum.machines:
        assert info.group is not None
        actions.append(PowerOn(info.key, info.group.key, reason, (), info.group.dry_run))
    for action in actions:
        machine_notes[action.machine].append(f"powering on: {action.reason}")

    planned = {action.machine: action.group for action in actions}
    explainer = Explainer(cluster, room, planned)
    blocked = 0
    for cls in choice.classes:
        if cls.pods:
            text = explainer.why_not(cls)
            blocked += len(cls.pods)
            pod_notes.update((pod.key, text) for pod in cls.pods)

    scaling_up = set(planned.values())
    down = scale_down(
        cluster,
        energy,
        snapshot.disruption_budgets,
        snapshot.unneeded_since,
        scaling_up,
        upcoming=upcoming,
    )
    actions.extend(down.actions)
    for key, note in down.notes.items():
        machine_notes[key].append(note)
    for key, note in _machine_states(cluster, machine_notes.keys(), explainer, room).items():
        machine_notes[key].append(note)

    placed = sum(len(entry.pods) for entry in choice.chosen)
    summary = (
        f"{len(actions) - len(down.actions)} power-on(s), {len(down.actions)} power-off(s); "
        f"{len(cluster.pending)} pending pod(s): {len(absorbed.notes)} expected on existing or "
        f"incoming capacity, {placed} on machines being powered on, {blocked} without capacity"
    )
    made = Plan(
        windows={g.key: g.window_note for g in snapshot.groups if g.window_note},
        actions=tuple(actions),
        explanations=Explanations(
            groups=_group_notes(cluster, actions, explainer, room),
            machines={key: tuple(notes) for key, notes in machine_notes.items()},
            pods={
                key: (note, absorbed.late[key]) if key in absorbed.late else (note,)
                for key, note in pod_notes.items()
            },
            coming=absorbed.coming,
        ),
        unneeded_since=down.unneeded_since,
        holds=down.holds,
        summary=summary,
    )
    # The Groups' UPSes last: on battery, they overrule what the pods alone call for.
    return on_battery(snapshot, _with_deferral(snapshot, made, now), now)


def _with_deferral(snapshot: Snapshot, made: Plan, now: datetime) -> Plan:
    """`made` with the deferrable Jobs to release now and those held, said in the summary."""
    if not snapshot.deferred:
        return made
    deferral = defer(snapshot, now)
    summary = (
        f"{made.summary}; {len(deferral.releases)} deferrable Job(s) released, "
        f"{len(deferral.waits)} held for cheaper hours"
    )
    return replace(made, releases=deferral.releases, waits=deferral.waits, summary=summary)


def _classes(
    cluster: Cluster, announced: Mapping[ObjectKey, datetime]
) -> tuple[list[PodClass], dict[ObjectKey, str]]:
    """Pending pods grouped by scheduling requirements and, for pods announced for later (CronJob
    runs, `announced`), the moment they are due; oldest verdict first within a class, heaviest
    class first; and a note for each pending DaemonSet pod, left out of them."""
    by_req: dict[tuple[SchedulingRequirements, datetime | None], list[Pod]] = {}
    notes: dict[ObjectKey, str] = {}
    for pod in cluster.pending:
        if pod.daemonset:
            notes[pod.key] = "a DaemonSet pod targets one node; it never calls for a new machine"
            continue
        by_req.setdefault((pod.scheduling, announced.get(pod.key)), []).append(pod)
    now = cluster.now
    capacities = [b.view.allocatable.as_dict() for b in cluster.ready_bins]
    capacities += [i.view.allocatable.as_dict() for i in cluster.infos if i.view is not None]
    classes = pod_weights(
        (
            PodClass(i, req, tuple(sorted(pods, key=lambda p: (-since_verdict(p, now), p.key))))
            for i, ((req, _), pods) in enumerate(by_req.items())
        ),
        capacities,
    )
    classes.sort(key=lambda c: (-c.weight, c.pods[0].key))
    return classes, notes


def _power_on(
    entry: Chosen,
    announced: Mapping[ObjectKey, tuple[ExpectedPod, Lead]],
    now: datetime,
) -> PowerOn:
    info = entry.bin.info
    assert info is not None and info.group is not None
    keys = tuple(pod.key for pod in entry.pods)
    reason = (
        f"{len(keys)} pending pod(s) need it ({listed(keys)}); {describe(entry.fill, len(keys))}"
    )
    runs = [announced[key] for key in keys if key in announced]
    if runs:
        # Say why a machine comes on before any pod exists: a CronJob's run is announced.
        expected, lead = min(runs, key=lambda run: run[0].at)
        due_in = (expected.at - now).total_seconds()
        reason = (
            f"pre-warming for the CronJob run {expected.key} due at "
            f"{expected.at.astimezone(UTC):%H:%M:%SZ} (in {due_in:.0f}s, {lead.describe()}); "
            f"{reason}"
        )
    if entry.quiet:
        # Its Group is quiet now: say why it is woken all the same (no other Group's machine
        # could be powered on for these pods, and why each was not).
        reason = f"{entry.quiet}; {reason}"
    return PowerOn(info.key, info.group.key, reason, keys, info.group.dry_run)


def _machine_states(
    cluster: Cluster,
    mentioned: Collection[ObjectKey],
    explainer: Explainer,
    room: Mapping[ObjectKey, int],
) -> dict[ObjectKey, str]:
    """A line for every machine the plan does not otherwise mention."""
    notes: dict[ObjectKey, str] = {}
    for info in cluster.infos:
        if info.key in mentioned:
            continue
        group = info.group
        if info.machine.unresolved and info.availability is Availability.UNAVAILABLE:
            notes[info.key] = info.state  # names the missing Group, Secret, ...
        elif group is None:
            notes[info.key] = f"group {info.machine.group} not found: not autoscaled"
        elif group.autoscaler is not Autoscaler.BUILTIN:
            notes[info.key] = f"group {group.key.name} is sized by {group.autoscaler}"
        elif not info.machine.autoscaling_enabled:
            notes[info.key] = f"pinned (autoscaling.enabled=false): {info.state}"
        elif info.view is None:
            notes[info.key] = (
                "capacity unknown: set spec.resources (or let a health check inspect it) "
                "to autoscale it"
            )
        elif info.availability is not Availability.OFF:
            notes[info.key] = info.state
        elif room.get(group.key, 0) <= 0:
            notes[info.key] = f"off: {explainer.group_limit(group.key)}"
        else:
            notes[info.key] = "off: no pending pod needs it"
    return notes


def _group_notes(
    cluster: Cluster,
    actions: Sequence[ScaleAction],
    explainer: Explainer,
    room: Mapping[ObjectKey, int],
) -> dict[ObjectKey, tuple[str, ...]]:
    counts: dict[ObjectKey, dict[Availability, int]] = defaultdict(lambda: defaultdict(int))
    for info in cluster.infos:
        counts[info.machine.group_key][info.availability] += 1
    out: dict[ObjectKey, tuple[str, ...]] = {}
    for key, group in sorted(cluster.groups.items()):
        c = counts[key]
        lines = [
            f"{group.autoscaler}, {group.selection_policy}: {c[Availability.READY]} ready, "
            f"{c[Availability.COMING]} powering on, {c[Availability.GOING]} powering off, "
            f"{c[Availability.OFF]} off, {c[Availability.FAILED]} failed "
            f"(minNodes {group.min_nodes}, maxNodes {group.max_nodes})"
        ]
        if group.autoscaler is not Autoscaler.BUILTIN:
            lines.append(f"sized by {group.autoscaler}: the built-in planner leaves it alone")
            out[key] = tuple(lines)
            continue
        if group.window_note:
            lines.append(f"in force: {group.window_note}")
        if group.dry_run:
            lines.append("dryRun: the actions below are planned, not applied")
        ons = [a.machine.name for a in actions if isinstance(a, PowerOn) and a.group == key]
        offs = [a.machine.name for a in actions if isinstance(a, PowerOff) and a.group == key]
        if ons:
            lines.append(f"powering on {', '.join(ons)}")
        if offs:
            lines.append(f"powering off {', '.join(offs)}")
        active = cluster.active.get(key, 0)
        if active + len(ons) < group.min_nodes:
            lines.append(
                f"below minNodes ({active + len(ons)} of {group.min_nodes} on or coming): "
                "no further machine may be powered on now"
            )
        if active > group.max_nodes:
            lines.append(f"above maxNodes ({active} on): no power-on until it is back under")
        elif room.get(key, 0) <= 0:
            lines.append(f"no further power-on now: {explainer.group_limit(key)}")
        out[key] = tuple(lines)
    return out


__all__ = ["WAITING_FOR_SYNC", "plan"]
