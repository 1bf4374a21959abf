"""When powering a machine off pays: its break-even time, and the unneeded time and wear limits
that follow from it.

Called by `planning.autoscaler.scaledown` (how long an unneeded machine waits, what holds it on),
`planning.autoscaler.wake` (the deadlines those give) and `planning.autoscaler.nodegroups` (the
unneeded time cluster-autoscaler is told for an `auto` Group).

A power cycle costs energy: while the machine shuts down and boots again it draws (the
operator's energy model, `planning.energy.account`, counts every phase but Off at idle or above),
and only the time in between is off. Over an idle gap of G seconds, staying on costs
`G * (idle - off)` above the standby draw; cycling costs `(shutdown + boot) * (idle - off)`.
The break-even time is the energy of one off/on cycle over the watts saved while off,
`(shutdown + boot) * (idle - off) / (idle - off)`: under this model the declared watts cancel
and it is the learned shutdown plus boot time. A machine whose idle draw is no more than its
standby draw never pays back a cycle (infinite break-even).

`scaleDown.unneededSeconds: auto` waits exactly one break-even time for demand nobody
announced: the ski-rental rule, never more than twice the energy an oracle would spend on the
gap (`scaleDown.breakEvenMultiple` scales it: more idling, fewer power cycles and waits, or
the reverse). A machine's boot is timed on its first power-on (`planning.learning`), its
shutdown only on its first power-off, which is the very decision `auto` is about: until then
the shutdown is taken to be as long as the learned boot (a shutdown, an OS halt, is rarely
longer than a boot, which adds firmware, OS start and the kubelet joining), so the estimate
errs towards idling and the waste against the true break-even stays bounded (at most twice
it, instead of ten times for a NUC that boots in a minute and waited the old flat 600 s).
Until the boot is timed too (a machine that was on before the operator), `auto` waits
`UNLEARNED_SECONDS`, the previous default.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from lightsout.planning.learning import DAY
from lightsout.planning.policy import EnergyModel
from lightsout.state.types import Group, Machine

#: What `auto` waits before a machine's durations are learned (cluster-autoscaler's default).
UNLEARNED_SECONDS = 600


def break_even_seconds(machine: Machine, energy: EnergyModel) -> float | None:
    """Idle seconds past which a power cycle saves energy; None until the boot is learned,
    infinity when being off saves nothing. An unlearned shutdown counts as long as the boot."""
    boot, shutdown = machine.learned_boot_seconds, machine.learned_shutdown_seconds
    if boot is None:
        return None
    if shutdown is None:
        shutdown = boot
    saved_watts = energy.watts(machine, 0.0)  # idle - off
    if saved_watts <= 0:
        return math.inf
    cycle_joules = (shutdown + boot) * saved_watts
    return cycle_joules / saved_watts


def unneeded_seconds(machine: Machine, group: Group, energy: EnergyModel) -> tuple[float, str]:
    """How long `machine` must be unneeded before it is powered off, and where that comes
    from (for explanations)."""
    fixed = group.scale_down.unneeded_seconds
    if fixed is not None:
        return float(fixed), "scaleDown.unneededSeconds"
    even = break_even_seconds(machine, energy)
    if even is None:
        return float(UNLEARNED_SECONDS), "auto: boot time not learned yet"
    if math.isinf(even):
        return even, "auto: idle draw not above standby, powering off saves nothing"
    boot, shutdown = machine.learned_boot_seconds, machine.learned_shutdown_seconds
    assert boot is not None
    multiple = group.scale_down.break_even_multiple
    times = "" if multiple == 1 else f" x breakEvenMultiple {multiple:g}"
    if shutdown is None:
        return even * multiple, (
            f"auto: break-even, learned boot {boot:.0f}s + shutdown not timed yet, "
            f"taken as the boot {boot:.0f}s{times}"
        )
    return even * multiple, (
        f"auto: break-even, learned boot {boot:.0f}s + shutdown {shutdown:.0f}s{times}"
    )


def wear_hold(machine: Machine, now: datetime) -> tuple[datetime, str] | None:
    """Until when a wear limit keeps `machine` on, and why; None when none does."""
    holds: list[tuple[datetime, str]] = []
    minimum = machine.minimum_on_seconds
    if minimum is not None and machine.phase_since is not None:
        until = machine.phase_since + timedelta(seconds=minimum)
        if until > now:
            on_for = int((now - machine.phase_since).total_seconds())
            holds.append((until, f"Ready for {on_for}s of minimumOnSeconds {minimum}"))
    limit = machine.max_power_cycles_per_day
    if limit is not None:
        recent = sorted(t for t in machine.power_ons if now - t < DAY)
        if len(recent) >= limit:
            # Powered off now, its next power-on would be one too many in the last 24 h: it
            # stays on until the oldest of them is a day old.
            until = recent[len(recent) - limit] + DAY
            holds.append(
                (until, f"powered on {len(recent)} times in 24 h (maxPowerCyclesPerDay {limit})")
            )
    if not holds:
        return None
    until = max(h[0] for h in holds)
    return until, "wear limit: " + "; ".join(h[1] for h in holds)


__all__ = ["UNLEARNED_SECONDS", "break_even_seconds", "unneeded_seconds", "wear_hold"]
