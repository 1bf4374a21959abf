"""A Group's battery policy (`spec.battery`) and what the operator reads of its UPS
(`status.battery`).

A Group names the UPS that feeds its machines (a Network UPS Tools server: host, port, UPS
name; or Home Assistant's entities of it: status, charge, runtime, load) and its tier: `Shed`
Groups are drained and powered off as soon as the mains fail, `Hold` Groups once the battery
falls below `holdUntil`, `Last` Groups once every other Group on the same UPS is off. The
operator polls the UPS (`execution.ups`) and writes each reading into the Group's status;
the planner (`planning.autoscaler.battery`) decides from that status, so a restarted operator
carries on where the last one stopped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from lightsout.models.base import ApiModel, Rule, default_empty
from lightsout.models.drivers import SensorEntity
from lightsout.models.enums import BatteryTier, Mains
from lightsout.models.homeassistant import HomeAssistantApi
from lightsout.models.types import DnsSubdomain, Host, ShortText

#: A UPS name as upsd.conf's sections spell it (`[lab]`).
UpsName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
]
Percent = Annotated[int, Field(ge=0, le=100)]


class NutSource(ApiModel):
    """A UPS served by a Network UPS Tools server (`upsd`), read as `upsc ups@host:port` does."""

    host: Host
    """The upsd host (a name or an address)."""
    port: int = Field(default=3493, ge=1, le=65535)
    """upsd's TCP port."""
    ups: UpsName
    """The UPS's name on that server (`upsc -l host` lists them). upsd serves its variables
    to anyone who can connect, and Lights-Out only reads them (it never sends FSD or an
    instant command: upsmon and the UPS do the rest), so no credentials are needed."""


class HomeAssistantSource(HomeAssistantApi):
    """A UPS as Home Assistant's entities show it (its NUT integration's sensors, or any
    sensors holding the same values), read through its REST API (`GET /api/states/<entity>`)
    with a long-lived access token."""

    status_entity: SensorEntity
    """The sensor whose state is the UPS's status flags as NUT's `ups.status` has them
    (`OL`, `OB DISCHRG`, `OB LB`), e.g. `sensor.rack_status_data` (the NUT integration's
    "Status data", not its "Status" text)."""
    charge_entity: SensorEntity | None = None
    """The battery's charge in %, e.g. `sensor.rack_battery_charge`."""
    runtime_entity: SensorEntity | None = None
    """The runtime left, e.g. `sensor.rack_battery_runtime` (disabled by default in Home
    Assistant: enable it first); read in its `unit_of_measurement` (s, min, h or d)."""
    load_entity: SensorEntity | None = None
    """The UPS's load in %, e.g. `sensor.rack_load`."""


ONE_SOURCE = Rule(
    cel="has(self.nut) != has(self.homeAssistant)",
    message="exactly one of nut or homeAssistant must be set",
    test=lambda source: (source.nut is None) != (source.home_assistant is None),
)


class PowerSource(ApiModel):
    """Where the UPS's state comes from: exactly one of `nut` or `homeAssistant`."""

    cel_rules = (ONE_SOURCE,)

    nut: NutSource | None = None
    """A Network UPS Tools server."""
    home_assistant: HomeAssistantSource | None = None
    """Home Assistant's entities of the UPS."""

    @property
    def name(self) -> str:
        """What the UPS is called in status and events, and what Groups sharing it name
        alike: `ups@host:port` for NUT (as `upsc` names it), `<statusEntity>@host:port` for
        Home Assistant."""
        if self.nut is not None:
            return f"{self.nut.ups}@{self.nut.host}:{self.nut.port}"
        assert self.home_assistant is not None  # ONE_SOURCE
        return f"{self.home_assistant.status_entity}@{self.home_assistant.address}"


ONE_LIMIT = Rule(
    cel="has(self.runtimeSeconds) || has(self.chargePercent)",
    message="holdUntil needs runtimeSeconds or chargePercent",
    test=lambda hold: hold.runtime_seconds is not None or hold.charge_percent is not None,
)


class HoldUntil(ApiModel):
    """A `Hold` Group's machines are powered off once either figure falls below its value."""

    cel_rules = (ONE_LIMIT,)

    runtime_seconds: int | None = Field(default=None, ge=0, le=86_400)
    """The UPS's estimated runtime left (`battery.runtime`)."""
    charge_percent: Percent | None = None
    """The battery's charge (`battery.charge`)."""


class Restore(ApiModel):
    """When machines come back after an outage."""

    stable_seconds: int = Field(default=60, ge=0, le=3600)
    """How long the mains must have been back, without a break, first."""
    charge_percent: Percent = 50
    """The battery's charge needed first (the next outage may come soon)."""


class BatteryPolicy(ApiModel):
    """What the Group's machines do while their UPS runs on battery."""

    source: PowerSource
    """The UPS that feeds the Group's machines."""
    tier: BatteryTier = BatteryTier.HOLD
    """Shed (off at once), Hold (off below holdUntil, or at low battery) or Last (off after
    every other Group on the same UPS)."""
    hold_until: HoldUntil | None = None
    """For Hold: the runtime or charge below which its machines are powered off; without it,
    they stay on until the battery is low."""
    essential: bool = False
    """Keep minNodes machines on while on battery (powered on for it if need be), until the
    battery is low. Otherwise nothing of the Group is powered on while on battery."""
    on_battery_seconds: int = Field(default=10, ge=0, le=600)
    """How long the UPS must have been on battery before any machine is powered off: mains
    that flap for a moment (a brownout) power nothing off. Low battery acts at once."""
    shutdown_margin_seconds: int = Field(default=120, ge=0, le=3600)
    """Spare time on top of the shutdowns' own: every machine on the UPS is shut down once the
    runtime left falls below the time its remaining shutdowns need plus this."""
    restore: Restore = default_empty(Restore)
    """When machines powered off for the outage come back."""
    poll_seconds: int = Field(default=5, ge=1, le=300)
    """How often the UPS is read."""


class Outage(ApiModel):
    """An outage the Group's machines were powered off for, recorded before the first
    power-off, so a restarted operator knows what to bring back."""

    since: datetime
    """When the operator first powered a machine off for it."""
    restore: list[DnsSubdomain] = Field(
        default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """The machines that were desired On then: powered on again when the mains are back."""


class BatteryStatus(ApiModel):
    """The Group's UPS as last read, and the outage in progress."""

    source: ShortText | None = None
    """The UPS read (`ups@host:port`, or `<statusEntity>@host:port` through Home
    Assistant)."""
    mains: Mains = Mains.UNKNOWN
    """Online, OnBattery, LowBattery or Unknown (unreadable)."""
    mains_since: datetime | None = None
    """When the mains reached that state (Unknown: the last reading's state is kept)."""
    ups_status: ShortText | None = None
    """The UPS's `ups.status` flags (`OB DISCHRG`)."""
    charge_percent: float | None = Field(default=None, ge=0, le=100)
    """`battery.charge`."""
    runtime_seconds: int | None = Field(default=None, ge=0)
    """`battery.runtime`: the UPS's own estimate of the time left on battery."""
    load_percent: float | None = Field(default=None, ge=0)
    """`ups.load`."""
    observed_at: datetime | None = None
    """When it was last read successfully."""
    error: ShortText | None = None
    """Why the last read failed (unset after a good one)."""
    outage: Outage | None = None
    """The outage the Group's machines were powered off for, until they are back."""
