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

Where the Group's price changes over time (a time-of-use tariff, a price series; with
`objective: Carbon`, its carbon series: `planning.energy.weight`), the break-even is weighed by
it (`priced_break_even`). Counted from the moment the machine became unneeded, t, it is the
time T over which idling costs what the cycle does (times `breakEvenMultiple`),
`(idle - off) * integral of price over [t, t+T] = (shutdown + boot) * (idle - off) * price(t)`:
the watts cancel again, the prices do not. The cycle is priced at the price at t: its boot
comes when the machine is next needed, which nobody knows, so it is taken at the price of the
decision, as a flat price would have it too. Idling through dearer hours ahead pays the cycle
back sooner (a shorter wait), through cheaper ones later (a longer wait); an hour at a price
at or below 0 pays nothing back. The price's steps are followed `HORIZON` ahead (past a
series' end, at the price after it: the tariff's, or the last carbon intensity), the price
then held. With one price at every hour, a price not above 0 at t, or a carbon series that
does not cover t, the figure is the plain one above. A power cycle between two announced
runs (pre-warming, `scaledown._announced`) spans a known gap: the cycle then draws in the very
hours staying on would, and the price cannot change which of the two is cheaper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from lightsout.planning.energy.weight import Weight
from lightsout.planning.learning import DAY
from lightsout.planning.policy import EnergyModel
from lightsout.state.parse import format_time
from lightsout.state.types import Group, Machine

#: What `auto` waits before a machine's durations are learned (cluster-autoscaler's default).
UNLEARNED_SECONDS = 600
#: How far ahead a priced break-even follows the price's steps; the price then holds.
HORIZON = timedelta(hours=24)


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


@dataclass(frozen=True, slots=True)
class Priced:
    """A break-even weighed by the price in force from the moment a machine became unneeded."""

    seconds: float
    weight: Weight
    #: The price (or carbon intensity) at that moment.
    now: float
    #: The first price that differs within the break-even, and from when (None: none does).
    then: tuple[datetime, float] | None

    def describe(self, plain: float) -> str:
        """How the price moved the break-even from `plain`, the figure at one price."""
        unit = f"{self.weight.unit}/kWh"
        text = f"priced: {_figure(self.now, self.weight)} {unit} now"
        if self.then is not None:
            moment, value = self.then
            text += f", {_figure(value, self.weight)} {unit} from {format_time(moment)}"
        if math.isinf(self.seconds):
            text += f", never paid back within {HORIZON.total_seconds() / 3600:.0f} h"
        return f"{text} ({plain:.0f}s at one price)"


def priced_break_even(seconds: float, weight: Weight, start: datetime) -> Priced | None:
    """The time from `start` over which idling at `weight`'s price in force costs what
    `seconds` of it at the price at `start` does (`seconds`: the cycle, a break-even at one
    price); None when that price is unknown or not above 0."""
    first = weight.at(start)
    if first is None or first <= 0:
        return None
    horizon = start + HORIZON
    # What is left to pay back, in seconds of idling at the price at `start`.
    left, at, value = seconds, start, first
    then: tuple[datetime, float] | None = None
    while True:
        change = weight.next_change(at)
        until = change if change is not None and change < horizon else None
        span = math.inf if until is None else (until - at).total_seconds()
        rate = max(value, 0.0) / first
        if rate > 0 and span * rate >= left:
            # At the price of `start` exactly `left` more: a flat price gives `seconds` back.
            more = left if value == first else left / rate
            return Priced((at - start).total_seconds() + more, weight, first, then)
        if until is None:
            return Priced(math.inf, weight, first, then)
        left -= span * rate
        at = until
        # Past the end of a carbon series, its last value holds.
        value = next_value if (next_value := weight.at(at)) is not None else value
        if then is None and value != first:
            then = (at, value)


def _figure(value: float, weight: Weight) -> str:
    return f"{value:.0f}" if weight.by_carbon else f"{value:.4g}"


def unneeded_seconds(
    machine: Machine, group: Group, energy: EnergyModel, since: datetime | None = None
) -> tuple[float, str]:
    """How long `machine` must be unneeded before it is powered off, and where that comes
    from (for explanations). With `since`, the moment it became unneeded, `auto` weighs the
    break-even by the Group's price from then (`priced_break_even`)."""
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
    wait = _settled(even * multiple)
    if shutdown is None:
        source = (
            f"auto: break-even, learned boot {boot:.0f}s + shutdown not timed yet, "
            f"taken as the boot {boot:.0f}s{times}"
        )
    else:
        source = f"auto: break-even, learned boot {boot:.0f}s + shutdown {shutdown:.0f}s{times}"
    weight = Weight.of(group)
    if since is None or weight is None or not weight.varies:
        return wait, source
    priced = priced_break_even(wait, weight, since)
    if priced is None or (seconds := _settled(priced.seconds)) == wait:
        return wait, source
    return seconds, f"{source}, {priced.describe(wait)}"


def _settled(seconds: float) -> float:
    """`seconds` up to the next whole millisecond, float noise dropped first: the deadline
    `since + wait` is a datetime, whole microseconds, and a wait a hair above it
    (90 x 1.3 = 117.00000000000001) would still hold the machine at that deadline with no later
    one to wake the planner for."""
    if math.isinf(seconds):
        return seconds
    return math.ceil(round(seconds * 1000, 6)) / 1000


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


__all__ = [
    "HORIZON",
    "UNLEARNED_SECONDS",
    "Priced",
    "break_even_seconds",
    "priced_break_even",
    "unneeded_seconds",
    "wear_hold",
]
