"""On battery: what the planner does while a Group's UPS runs on battery, and after. Pure.

Each Group with `spec.battery` names its UPS; the operator reads it and writes the reading
into the Group's `status.battery` (`execution.ups`), so this module decides from the snapshot
alone, the same in the operator and in a replay. `on_battery(snapshot, plan, now)` rewrites the
plan the autoscaler made without the UPS in mind:

1. **Nothing is powered on while on battery** for a fed Group (and not before its machines are
   back, after an outage), except to keep an `essential` Group at minNodes until the battery
   is low. Pending pods the plan would have powered a machine on for are told why they wait.
2. **Tiers.** Once the UPS has been on battery for `onBatterySeconds` (mains that flap for a
   moment power nothing off), `Shed` Groups' machines are powered off (drained first, as
   every power-off); `Hold` Groups' once the runtime or charge falls below `holdUntil`.
3. **Off before the battery is.** At low battery (`LB`, `FSD`), or once the runtime left is
   below the time the remaining shutdowns need (`needed_seconds`: each tier's slowest
   machine's learned shutdown, plus a drain, tier after tier, plus the Group's margin), every
   machine on the UPS is powered off, tier after tier: a `Last` Group once nothing of the
   other tiers is on.
4. **Back when the mains are.** A Group whose machines were powered off records, before the
   first power-off, which of them were desired On (`Outage`, in its status). Once the mains
   have been back for `restore.stableSeconds` and the charge is at `restore.chargePercent`,
   they are powered on again, `Last` Groups first, then `Hold`, then `Shed`, each Group
   `scaleUp.maxConcurrentOperations` at a time; the record is then cleared and autoscaling
   takes over again.

A UPS that cannot be read (`Unknown`) starts nothing new: no power-off, no restore, and no
power-on either when it was last seen on battery.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from lightsout.models.battery import BatteryPolicy, BatteryStatus, Outage
from lightsout.models.enums import BatteryTier, DesiredPowerState, Mains, Phase
from lightsout.planning.autoscaler.decisions import Plan, PowerOff, PowerOn, ScaleAction
from lightsout.state.types import Group, Machine, ObjectKey, Snapshot

#: Tiers in the order they are powered off (and, reversed, on).
TIER_ORDER = (BatteryTier.SHED, BatteryTier.HOLD, BatteryTier.LAST)
#: A machine's shutdown when none has been learned yet (seconds), and the drain before it.
DEFAULT_SHUTDOWN_SECONDS = 120
DRAIN_SECONDS = 60
#: Phases in which a machine draws from the UPS.
_POWERED = frozenset(
    {Phase.READY, Phase.POWERING_ON, Phase.BOOTING, Phase.DRAINING, Phase.POWERING_OFF}
)
_DOWN = frozenset({Phase.OFF, Phase.FAILED})
#: Core Node labels of a control-plane machine, and the operator's pods' label.
CONTROL_PLANE_ROLES = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
OPERATOR_LABEL = ("app.kubernetes.io/name", "lightsout")
#: How the note of a pending pod whose power-on the UPS holds back starts.
HELD = "waiting: "


@dataclass(frozen=True)
class Fed:
    """One Group fed by a UPS, with its machines."""

    group: Group
    policy: BatteryPolicy
    status: BatteryStatus
    machines: tuple[Machine, ...]

    @property
    def tier(self) -> BatteryTier:
        return self.policy.tier

    @property
    def powered(self) -> tuple[Machine, ...]:
        return tuple(m for m in self.machines if m.phase in _POWERED or m.phase is None)


@dataclass(frozen=True)
class Supply:
    """One UPS and the Groups it feeds, as their statuses read it."""

    source: str
    mains: Mains
    since: datetime | None
    charge: float | None
    runtime: int | None
    #: The last reading was on battery (kept while the UPS cannot be read).
    was_on_battery: bool
    fed: tuple[Fed, ...]
    #: Machines that host the operator or the control plane (`keystones`): off last of all.
    keystones: frozenset[ObjectKey] = frozenset()


@dataclass
class Decided:
    """What `on_battery` adds to a plan."""

    now: datetime
    actions: list[ScaleAction] = field(default_factory=list)
    outages: dict[ObjectKey, Outage] = field(default_factory=dict)
    ended: set[ObjectKey] = field(default_factory=set)
    groups: dict[ObjectKey, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: Groups whose power-ons wait, and why.
    held: dict[ObjectKey, str] = field(default_factory=dict)
    drain_by: dict[ObjectKey, datetime] = field(default_factory=dict)


def supplies(snapshot: Snapshot) -> tuple[Supply, ...]:
    """The UPSes the Groups name, each with the Groups it feeds (read, or not yet)."""
    by_group: dict[ObjectKey, list[Machine]] = defaultdict(list)
    for machine in snapshot.machines:
        by_group[machine.group_key].append(machine)
    fed: dict[str, list[Fed]] = defaultdict(list)
    for group in snapshot.groups:
        if group.battery is None:
            continue
        status = group.battery_status or BatteryStatus(source=source_name(group.battery))
        machines = tuple(sorted(by_group[group.key], key=lambda m: m.key))
        fed[source_name(group.battery)].append(Fed(group, group.battery, status, machines))
    if not fed:
        return ()  # no Group names a UPS: nothing to look up on a plan's hot path
    out = []
    held_up = keystones(snapshot)
    for source, groups in sorted(fed.items()):
        # Every Group of a UPS is written from the same reading; take the latest.
        latest = max(
            (f.status for f in groups),
            key=lambda s: (s.observed_at is not None, s.observed_at or datetime.min),
        )
        flags = set((latest.ups_status or "").split())
        out.append(
            Supply(
                source=source,
                mains=latest.mains,
                since=latest.mains_since,
                charge=latest.charge_percent,
                runtime=usable_runtime(latest.runtime_seconds),
                was_on_battery="OB" in flags or latest.mains is Mains.LOW_BATTERY,
                fed=tuple(groups),
                keystones=held_up,
            )
        )
    return tuple(out)


def keystones(snapshot: Snapshot) -> frozenset[ObjectKey]:
    """Machines whose core Node has a control-plane role or runs the operator's pod (the
    chart's `app.kubernetes.io/name: lightsout`): the cluster needs them to shut the rest down,
    so on battery they are never shed and go off last of all."""
    roles = {n.name for n in snapshot.nodes if any(r in n.labels for r in CONTROL_PLANE_ROLES)}
    operator = {
        p.node_name
        for p in snapshot.pods
        if p.node_name and not p.terminal and p.labels.get(OPERATOR_LABEL[0]) == OPERATOR_LABEL[1]
    }
    return frozenset(m.key for m in snapshot.machines if m.kubernetes_node_name in roles | operator)


def source_name(policy: BatteryPolicy) -> str:
    """`ups@host:port`, as `upsc` names a UPS (`<statusEntity>@host:port` through Home
    Assistant): Groups naming the same one share it."""
    return policy.source.name


def usable_runtime(runtime: int | None) -> int | None:
    """`battery.runtime` when it can be believed: drivers report 0, -1 or 65535 for "unknown"
    (NUT issues 731, 983, 1068); those are ignored and the charge and LB decide alone."""
    if runtime is None or runtime <= 0 or runtime >= 65535:
        return None
    return runtime


def shutdown_seconds(machine: Machine) -> float:
    """How long draining and powering off one machine takes: its learned shutdown, else a
    default, plus a drain."""
    learned = machine.learned_shutdown_seconds
    return (learned if learned is not None else DEFAULT_SHUTDOWN_SECONDS) + DRAIN_SECONDS


def needed_seconds(supply: Supply) -> float:
    """The time every machine still powered on this UPS needs to be off: tier after tier,
    Groups in a tier at once, each as slow as its slowest machine; plus the largest margin."""
    total = 0.0
    for tier in TIER_ORDER:
        slowest = [shutdown_seconds(m) for f in supply.fed if f.tier is tier for m in f.powered]
        total += max(slowest, default=0.0)
    margin = max((f.policy.shutdown_margin_seconds for f in supply.fed), default=0)
    return total + margin


def critical(supply: Supply) -> str | None:
    """Why every machine on the UPS must go off now (None: not yet)."""
    if supply.mains is Mains.LOW_BATTERY:
        return "the UPS reports low battery"
    if supply.mains is not Mains.ON_BATTERY or supply.runtime is None:
        return None
    needed = needed_seconds(supply)
    if supply.runtime < needed:
        return (
            f"{supply.runtime}s of battery left, below the {needed:.0f}s the remaining "
            "shutdowns need (with the margin)"
        )
    return None


def _hold_over(fed: Fed, supply: Supply) -> str | None:
    hold = fed.policy.hold_until
    if hold is None:
        return None
    runtime, charge = supply.runtime, supply.charge
    if hold.runtime_seconds is not None and runtime is not None and runtime < hold.runtime_seconds:
        return f"runtime {runtime}s is below holdUntil.runtimeSeconds"
    if hold.charge_percent is not None and charge is not None and charge < hold.charge_percent:
        return f"charge {charge:g}% is below holdUntil.chargePercent"
    return None


def _wanted_on(machine: Machine) -> bool:
    return machine.desired is DesiredPowerState.ON


def _off(fed: Fed, reason: str, keep: int, decided: Decided, spare: frozenset[ObjectKey]) -> None:
    """Power off the Group's machines still desired On, all but `keep` of them (the Ready
    ones kept first) and those in `spare`, recording the outage first."""
    on = [m for m in fed.machines if _wanted_on(m)]
    on.sort(key=lambda m: (m.phase is not Phase.READY, -m.priority, m.key))
    going = [m for m in on[keep:] if m.key not in spare]
    if not going:
        return
    if fed.status.outage is None:
        restore = sorted(m.key.name for m in on)
        decided.outages[fed.group.key] = Outage(since=decided.now, restore=restore)
    for machine in going:
        decided.actions.append(
            PowerOff(machine.key, fed.group.key, reason, fed.group.dry_run, outage=True)
        )
    decided.groups[fed.group.key].append(f"on battery: powering off {_names(going)} ({reason})")


def _names(machines: Iterable[Machine]) -> str:
    return ", ".join(m.key.name for m in machines)


def _while_on_battery(supply: Supply, now: datetime, decided: Decided) -> None:
    since = supply.since or now
    mains = "low battery" if supply.mains is Mains.LOW_BATTERY else "on battery"
    waiting = f"the mains failed ({supply.source} {mains} since {since:%H:%M:%S}Z)"
    urgent = critical(supply)
    for fed in supply.fed:
        essential = fed.policy.essential and urgent is None
        decided.held[fed.group.key] = (
            f"{waiting}: only minNodes of this essential Group are powered on"
            if essential
            else f"{waiting}: nothing of this Group is powered on until they are back"
        )
    if urgent is not None:
        # No time to wait for a PodDisruptionBudget past what the battery leaves: a drain
        # still blocked then deletes the pods (`Drain.force`) rather than let the UPS cut it.
        spare = 0.0 if supply.runtime is None else max(0.0, supply.runtime - needed_seconds(supply))
        deadline = now + timedelta(seconds=spare)
        for fed in supply.fed:
            for machine in fed.machines:
                if machine.phase not in _DOWN:
                    decided.drain_by[machine.key] = deadline
        # Tier after tier: a tier waits until nothing of the tiers before it draws power, and
        # the machines that host the operator or the control plane wait for all of them.
        reason = f"shutting down before the battery is empty: {urgent}"
        for tier in TIER_ORDER:
            tier_fed = [f for f in supply.fed if f.tier is tier]
            for fed in tier_fed:
                _off(fed, reason, 0, decided, supply.keystones)
            if any(m.key not in supply.keystones for f in tier_fed for m in f.powered):
                for later in supply.fed:
                    if TIER_ORDER.index(later.tier) > TIER_ORDER.index(tier):
                        decided.groups[later.group.key].append(
                            f"shutting down: waits for the {tier} tier's machines to be off"
                        )
                return
        last = f"{reason}; last of all: it hosts the operator or the control plane"
        for fed in supply.fed:
            _off(fed, last, 0, decided, frozenset())
        return
    if (now - since).total_seconds() < min(f.policy.on_battery_seconds for f in supply.fed):
        return  # mains flapping for a moment power nothing off
    for fed in supply.fed:
        keep = fed.group.min_nodes if fed.policy.essential else 0
        # A pinned machine (autoscaling.enabled false) is shed by nothing but low battery.
        pinned = frozenset(m.key for m in fed.machines if not m.autoscaling_enabled)
        kept_on = supply.keystones | pinned
        if fed.tier is BatteryTier.SHED:
            _off(fed, "on battery: the Shed tier goes off at once", keep, decided, kept_on)
        elif fed.tier is BatteryTier.HOLD and (why := _hold_over(fed, supply)) is not None:
            _off(fed, f"on battery: {why}", keep, decided, kept_on)


def _restore(supply: Supply, now: datetime, decided: Decided) -> None:
    outaged = [f for f in supply.fed if f.status.outage is not None]
    if not outaged:
        return
    since = supply.since or now
    stable = max(f.policy.restore.stable_seconds for f in outaged)
    charge = max(f.policy.restore.charge_percent for f in outaged)
    back = (now - since).total_seconds()
    if back < stable or supply.charge is None or supply.charge < charge:
        why = (
            f"the mains are back since {since:%H:%M:%S}Z; machines return after {stable}s "
            f"of mains and at {charge}% charge (now {back:.0f}s, "
            f"{'unknown' if supply.charge is None else f'{supply.charge:g}%'})"
        )
        for fed in supply.fed:
            decided.held[fed.group.key] = why
        return
    for tier in reversed(TIER_ORDER):
        tier_fed = [f for f in outaged if f.tier is tier]
        pending = False
        for fed in tier_fed:
            pending |= _bring_back(fed, decided)
        if pending:
            for later in outaged:
                if TIER_ORDER.index(later.tier) < TIER_ORDER.index(tier):
                    decided.held[later.group.key] = (
                        f"restoring after the outage: waits for the {tier} tier's machines"
                    )
            return


def _what_if(supply: Supply, decided: Decided) -> None:
    """What an outage now would do, on each Group's lines of `lightsout plan`."""
    runtime = "runtime unknown" if supply.runtime is None else f"{supply.runtime}s of runtime"
    charge = "charge unknown" if supply.charge is None else f"{supply.charge:g}% charge"
    head = f"if the mains failed now ({supply.source}: {charge}, {runtime}; the shutdowns need "
    head += f"{needed_seconds(supply):.0f}s with the margin): "
    for fed in supply.fed:
        on = [m for m in fed.machines if _wanted_on(m)]
        keep = min(len(on), fed.group.min_nodes) if fed.policy.essential else 0
        names = _names(on[keep:]) or "no machine"
        if fed.tier is BatteryTier.SHED:
            when = f"after {fed.policy.on_battery_seconds}s on battery"
        elif fed.tier is BatteryTier.HOLD and fed.policy.hold_until is not None:
            hold = fed.policy.hold_until
            limits = [
                f"runtime below {hold.runtime_seconds}s"
                if hold.runtime_seconds is not None
                else "",
                f"charge below {hold.charge_percent}%" if hold.charge_percent is not None else "",
            ]
            when = f"at {' or '.join(x for x in limits if x)}, or low battery"
        elif fed.tier is BatteryTier.HOLD:
            when = "at low battery"
        else:
            when = "at low battery, once the other tiers are off"
        kept = f"; {keep} kept on for minNodes (essential)" if keep else ""
        decided.groups[fed.group.key].append(f"{head}{fed.tier}: {names} off {when}{kept}")


def _bring_back(fed: Fed, decided: Decided) -> bool:
    """Power on the Group's recorded machines, maxConcurrentOperations at a time; True while
    some are not back yet (the record is cleared once all are)."""
    assert fed.status.outage is not None
    wanted = set(fed.status.outage.restore)
    mine = [m for m in fed.machines if m.key.name in wanted]
    coming = [m for m in mine if _wanted_on(m) and m.phase not in (Phase.READY, Phase.FAILED)]
    waiting = [m for m in mine if not _wanted_on(m) and m.phase in _DOWN]
    if not coming and not waiting:
        decided.ended.add(fed.group.key)
        decided.groups[fed.group.key].append("outage over: its machines are back")
        return False
    room = max(0, fed.group.scale_up.max_concurrent - len(coming))
    starting = sorted(waiting, key=lambda m: (-m.priority, m.key))[:room]
    for machine in starting:
        decided.actions.append(
            PowerOn(
                machine.key,
                fed.group.key,
                "the mains are back: restoring",
                dry_run=fed.group.dry_run,
                outage=True,
            )
        )
    if starting:
        decided.groups[fed.group.key].append(f"mains back: powering on {_names(starting)}")
    decided.held[fed.group.key] = "restoring after the outage: its machines come back first"
    return True


def held_power_ons(snapshot: Snapshot, now: datetime) -> Mapping[ObjectKey, str]:
    """Groups whose power-ons their UPS holds back now, and why: what `on_battery` drops from
    a plan, and what cluster-autoscaler's IncreaseSize is refused with (`grpc.servicer`)."""
    return _decided(snapshot, now).held


def on_battery(snapshot: Snapshot, plan: Plan, now: datetime) -> Plan:
    """The plan with what the Groups' UPSes call for (see the module's docstring)."""
    decided = _decided(snapshot, now)
    if not (decided.actions or decided.held or decided.outages or decided.ended or decided.groups):
        return plan if not decided.drain_by else replace(plan, drain_by=decided.drain_by)
    return _merged(snapshot, plan, decided)


def _decided(snapshot: Snapshot, now: datetime) -> Decided:
    decided = Decided(now)
    for supply in supplies(snapshot):
        if supply.mains in (Mains.ON_BATTERY, Mains.LOW_BATTERY):
            _while_on_battery(supply, now, decided)
        elif supply.mains is Mains.ONLINE:
            _restore(supply, now, decided)
            if not any(f.status.outage for f in supply.fed):
                _what_if(supply, decided)
        elif supply.was_on_battery:
            for fed in supply.fed:
                decided.held[fed.group.key] = (
                    f"{supply.source} cannot be read and was last seen on battery: "
                    "nothing of this Group is powered on until it is read again"
                )
    return decided


def _merged(snapshot: Snapshot, plan: Plan, decided: Decided) -> Plan:
    groups = {g.key: g for g in snapshot.groups}
    active = _active(snapshot)
    ours = {a.machine for a in decided.actions}
    kept: list[ScaleAction] = []
    pods = dict(plan.explanations.pods)
    for action in plan.actions:
        if action.machine in ours:
            continue
        held = decided.held.get(action.group)
        if isinstance(action, PowerOn) and held is not None:
            group = groups[action.group]
            essential = group.battery is not None and group.battery.essential
            if essential and not action.pods and active[action.group] < group.min_nodes:
                active[action.group] += 1
                kept.append(action)  # a minNodes top-up of an essential Group
                continue
            for pod in action.pods:
                pods[pod] = (f"{HELD}{held}",)
            continue
        kept.append(action)
    notes = {key: tuple(lines) for key, lines in plan.explanations.groups.items()}
    for key, lines in decided.groups.items():
        notes[key] = (*notes.get(key, ()), *lines)
    for key, why in decided.held.items():
        notes[key] = (*notes.get(key, ()), f"no power-on: {why}")
    explanations = replace(plan.explanations, pods=pods, groups=notes)
    actions = (*kept, *decided.actions)
    offs = sum(isinstance(a, PowerOff) for a in decided.actions)
    ons = len(decided.actions) - offs
    summary = f"{plan.summary}; battery: {offs} power-off(s), {ons} restore(s)"
    return replace(
        plan,
        actions=actions,
        explanations=explanations,
        summary=summary,
        outages=decided.outages,
        outages_ended=frozenset(decided.ended),
        drain_by=decided.drain_by,
    )


def _active(snapshot: Snapshot) -> dict[ObjectKey, int]:
    active: dict[ObjectKey, int] = defaultdict(int)
    for machine in snapshot.machines:
        if machine.desired is DesiredPowerState.ON and machine.phase not in _DOWN:
            active[machine.group_key] += 1
    return active


def deadlines(snapshot: Snapshot, now: datetime) -> list[datetime]:
    """Moments time alone changes what this module decides: the on-battery delay ending, the
    mains having been back long enough."""
    moments = []
    for supply in supplies(snapshot):
        if supply.since is None:
            continue
        if supply.mains is Mains.ON_BATTERY:
            wait = min(f.policy.on_battery_seconds for f in supply.fed)
        elif supply.mains is Mains.ONLINE and any(f.status.outage for f in supply.fed):
            wait = max(f.policy.restore.stable_seconds for f in supply.fed)
        else:
            continue
        moment = supply.since + timedelta(seconds=wait)
        if moment > now:
            moments.append(moment)
    return moments


__all__ = [
    "HELD",
    "Fed",
    "Supply",
    "critical",
    "deadlines",
    "held_power_ons",
    "keystones",
    "needed_seconds",
    "on_battery",
    "source_name",
    "supplies",
]
