"""The replay's UPS: a battery the fed machines drain while the trace's mains are out.

A trace's `ups` (`traces.trace.TraceUps`) feeds every Group with `spec.battery`. The battery
holds `capacityWh`; on battery it loses what the fed machines draw (each at its true draw in its
phase, as their energy is counted) divided by the inverter's efficiency, on mains it charges at
`rechargeWatts`. It is read as the operator reads a NUT server, every `pollSeconds` while it
matters (on battery, charging, or machines off for an outage): `ups.status` (`OL`/`OB`, `LB`
below `lowBatteryPercent`, `CHRG`/`DISCHRG`), `battery.charge`, `battery.runtime` at the
present load. Each reading becomes the Groups' `status.battery` through the operator's own
`planning.energy.mains.observe` and `worth_writing`, and the planner decides from that as it
does live (`planning.autoscaler.battery`).

Each outage's figures (`Outage`): the load and runtime when the mains failed, when the last fed
machine was off and how much of the battery was left then, the machines still powered when the
battery died (cut: the goal is none), and when the machines were back after the mains.
Between two readings the load is taken as it was at the first: the battery is counted to
within one poll.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightsout.planning.energy import mains
from lightsout.simulate.traces.trace import TraceUps

#: A full battery charges in this many hours when the trace gives no `rechargeWatts`.
RECHARGE_HOURS = 4.0
#: What the replay's UPS is called in the Groups' status.
SOURCE = "trace-ups"


@dataclass
class Outage:
    """One mains failure as the replay saw it (seconds since the trace's start)."""

    started: float
    ended: float | None = None
    load_watts: float = 0.0
    #: How long the battery would have lasted at the load when the mains failed.
    runtime_seconds: float | None = None
    stored_wh: float = 0.0
    all_off_at: float | None = None
    #: The share of the battery's energy at the failure still stored when all were off.
    left_share: float | None = None
    cut: list[str] = field(default_factory=list)
    restored_at: float | None = None


@dataclass
class SimUps:
    """The battery, its mains and its outages."""

    spec: TraceUps
    stored_wh: float
    counted_to: float = 0.0
    on_mains: bool = True
    dead: bool = False
    outages: list[Outage] = field(default_factory=list)

    @classmethod
    def full(cls, spec: TraceUps) -> SimUps:
        return cls(spec, stored_wh=spec.capacity_wh)

    @property
    def charge(self) -> float:
        return 100.0 * self.stored_wh / self.spec.capacity_wh

    @property
    def recharge_watts(self) -> float:
        return self.spec.recharge_watts or self.spec.capacity_wh / RECHARGE_HOURS

    def advance(self, now: float, load_watts: float) -> bool:
        """Count the battery up to `now` at `load_watts` (the load since the last count); True
        when it ran dry meanwhile under a load."""
        hours = max(0.0, now - self.counted_to) / 3600
        self.counted_to = now
        if self.on_mains:
            self.stored_wh = min(
                self.spec.capacity_wh, self.stored_wh + self.recharge_watts * hours
            )
            self.dead = False
            return False
        was_dead = self.dead
        self.stored_wh -= load_watts / self.spec.efficiency * hours
        if self.stored_wh <= 0:
            self.stored_wh, self.dead = 0.0, True
        return self.dead and not was_dead and load_watts > 0

    def runtime(self, load_watts: float) -> float | None:
        """Seconds left at `load_watts` (None: nothing drawn)."""
        if load_watts <= 0:
            return None
        return self.stored_wh * self.spec.efficiency / load_watts * 3600

    def reading(self, load_watts: float) -> mains.Reading:
        """What a NUT server would publish for this UPS now."""
        flags = ["OL", "CHRG"] if self.on_mains else ["OB", "DISCHRG"]
        if not self.on_mains and self.charge < self.spec.low_battery_percent:
            flags.append("LB")
        variables = {"ups.status": " ".join(flags), "battery.charge": f"{self.charge:.0f}"}
        runtime = self.runtime(load_watts)
        if runtime is not None:
            variables["battery.runtime"] = f"{runtime:.0f}"
        return mains.Reading(variables)

    def mains_change(self, now: float, on: bool, load_watts: float) -> None:
        self.advance(now, load_watts)
        if on == self.on_mains:
            return
        self.on_mains = on
        if on:
            if self.outages and self.outages[-1].ended is None:
                self.outages[-1].ended = now
            return
        self.outages.append(
            Outage(
                started=now,
                load_watts=load_watts,
                runtime_seconds=self.runtime(load_watts),
                stored_wh=self.stored_wh,
            )
        )

    def settles(self) -> bool:
        """Nothing more to read until the next mains change: on mains and full."""
        return self.on_mains and self.stored_wh >= self.spec.capacity_wh
