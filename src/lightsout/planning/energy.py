"""Energy accounting: how much a machine drew, and how much powering it off saved.

Pure arithmetic over a machine's declared draw (`spec.power`: off / idle / on watts) and the
time it spent powered on or off. Used by whatever checkpoints the figures into a Node's and a
Group's status and exports them as metrics (the observability issue), and by the replay
simulator; it has no clock of its own: every call is handed `now`.

The model, stated once:

- A powered machine draws `idle + (on - idle) * u`, `u` its requested-cpu utilisation (0..1).
  Transitional phases (powering on, booting, draining, powering off, provisioning) count as
  powered: the machine is running while they last.
- A machine that is off draws its standby `off` watts (BMC, wake-on-LAN NIC).
- Saved energy is measured against the same machine left on all the time: while it is on, the
  baseline draws what it draws (the load runs either way), so nothing is saved; while it is
  off, the baseline would have idled, so `idle - off` is saved for every hour off.

A ledger is advanced from the time it was last counted to (`counted_to`) at the state in force
over that interval, so a restart that reloads the ledger from status loses nothing: the gap
while the operator was away is counted at the last state it recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from lightsout.models.enums import Phase
from lightsout.planning.policy import DEFAULT_WATTS

_SECONDS_PER_HOUR = 3600.0
_UNPOWERED = frozenset({Phase.OFF})


@dataclass(frozen=True, slots=True)
class Draw:
    """A machine's draw in watts, with the gaps of its declared profile filled in."""

    off: float
    idle: float
    on: float

    @classmethod
    def declared(cls, on: float | None, idle: float | None, off: float | None) -> Draw:
        """Fill what the spec leaves out: idle defaults to on (and on to idle), off to zero."""
        idle_w = idle if idle is not None else on
        on_w = on if on is not None else idle_w
        if idle_w is None or on_w is None:
            # Nothing declared: the planner's default draw for a machine of unknown profile.
            idle_w = on_w = DEFAULT_WATTS
        off_w = off if off is not None else 0.0
        # The API server refuses off > idle > on; clamp anyway so garbage never goes negative.
        idle_w = min(idle_w, on_w)
        return cls(off=min(off_w, idle_w), idle=idle_w, on=on_w)

    def watts(self, powered: bool, cpu_utilisation: float = 0.0) -> float:
        """What the machine draws in that state."""
        if not powered:
            return self.off
        share = min(max(cpu_utilisation, 0.0), 1.0)
        return self.idle + (self.on - self.idle) * share

    def saving_watts(self, powered: bool) -> float:
        """What being in that state saves against idling all the time."""
        return 0.0 if powered else self.idle - self.off


def is_powered(phase: Phase | None) -> bool:
    """Whether a machine in this phase is drawing running power.

    Failed and Unknown count as powered: the machine's real state is not known, and assuming it
    runs never overstates the savings.
    """
    return phase not in _UNPOWERED


@dataclass(frozen=True, slots=True)
class Ledger:
    """Energy counted for one machine (or summed for a Group) up to `counted_to`."""

    counted_to: datetime
    used_wh: float = 0.0
    saved_wh: float = 0.0

    def advance(
        self, now: datetime, draw: Draw, powered: bool, cpu_utilisation: float = 0.0
    ) -> Ledger:
        """Count the interval since `counted_to` at this state. A clock that went backwards
        counts nothing and keeps the later checkpoint."""
        seconds = (now - self.counted_to).total_seconds()
        if seconds <= 0:
            return self
        hours = seconds / _SECONDS_PER_HOUR
        return replace(
            self,
            counted_to=now,
            used_wh=self.used_wh + draw.watts(powered, cpu_utilisation) * hours,
            saved_wh=self.saved_wh + draw.saving_watts(powered) * hours,
        )


def cost(watt_hours: float, price_per_kwh: float) -> float:
    """The price of that energy, in the Group's currency."""
    return watt_hours / 1000.0 * price_per_kwh


def total(ledgers: Iterable[Ledger], counted_to: datetime) -> Ledger:
    """A Group's figures: the sum of its machines' ledgers, stamped with the Group's time."""
    used = saved = 0.0
    for ledger in ledgers:
        used += ledger.used_wh
        saved += ledger.saved_wh
    return Ledger(counted_to=counted_to, used_wh=used, saved_wh=saved)
