"""A Node's and a Group's `.status` as stored, read in one place: `node_status`, `group_status`.

The Node reconciler and its status writer, the health checks, the energy recount, the UPS and
solar surplus sensors, the autoscaler's port, the planner's snapshot, the state machine's
inputs and the trace recorder take their fields from these views, not from the raw object (the
Group handler's counts and the metrics' phase watch still read a field or two raw). A view
decodes each field on first use, once per view, and is tolerant as status must be: a field
missing or malformed (a person's edit, an older version's leftovers) reads as absent, never
raises. The parts with a record of their own are decoded by
it: `status.learned` by `state.learned.learned_from_status` (here only), `status.battery` and
`status.solarSurplus` by the API models (the latter in `state.series`, which a Group's
surplus series is made of). Two parts are handed on as the mappings they are,
because the records they decode into live above `state`: `energy` (an `Account`:
`planning.energy.status.account_from_status`) and `last_operation` (an `Operation`:
`actuation.inputs.operation_from_status`). `stored` is the whole status, for the merge patch
that compares what is wanted with what is stored (`actuation.inputs.status_patch`) and for the
planner's readings of a pass (`planning.machine.passes.Readings.status`).

The write side: a pass's readings (`learned`, `energy`, `lastHealthCheck`, `power`,
`inspected`) are encoded by `actuation.inputs.checked_status`, which the operator's status
writer (`execution.statuswriter`) and the replay's in-memory port (`actuation.memory`) share;
`status.learned` by `state.learned.learned_to_status`, `status.energy` by
`planning.energy.status.account_to_status`, `status.battery` and `status.solarSurplus` by
their API models.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from lightsout.models.battery import BatteryStatus
from lightsout.models.enums import ObservedPowerState, Phase
from lightsout.models.group import SolarSurplusStatus
from lightsout.state.learned import Learned, learned_from_status
from lightsout.state.parse import as_str, dig, parse_time
from lightsout.state.series import solar_surplus_of

Obj = Mapping[str, Any]


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _conditions(value: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(c for c in value if isinstance(c, Mapping))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _model[M: BaseModel](model: type[M], raw: object) -> tuple[M | None, str | None]:
    """`raw` as `model`: (None, None) when absent, (None, why) when unreadable."""
    if raw is None:
        return None, None
    try:
        return model.model_validate(raw), None
    except ValidationError as error:
        return None, str(error)


class _View:
    """The status of one object (`stored`: `{}` when it has none, or none that reads)."""

    def __init__(self, obj: Obj | None) -> None:
        self.stored: Mapping[str, Any] = _mapping(dig(obj, "status")) or {}

    @cached_property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        """`status.conditions`, each as stored (entries that are no object dropped)."""
        return _conditions(self.stored.get("conditions"))


class _Part:
    """A part of status handed on as the object it is (None: absent, or no object)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, view: _View, owner: type[_View] | None = None) -> Mapping[str, Any] | None:
        return _mapping(view.stored.get(self.key))


class NodeStatusView(_View):
    """A Node's status, field by field (see the module's docstring)."""

    energy = _Part("energy")
    """`status.energy`, for `planning.energy.status.account_from_status`."""
    last_operation = _Part("lastOperation")
    """`status.lastOperation`, for `actuation.inputs.operation_from_status`."""
    last_health_check = _Part("lastHealthCheck")
    inspected = _Part("inspected")
    clone = _Part("clone")

    @cached_property
    def phase(self) -> Phase | None:
        """None when not written (or not a word); a word that is no phase reads as Unknown."""
        raw = as_str(self.stored.get("phase"))
        if not raw:
            return None
        try:
            return Phase(raw)
        except ValueError:
            return Phase.UNKNOWN

    @cached_property
    def phase_since(self) -> datetime | None:
        return parse_time(self.stored.get("phaseSince"))

    @cached_property
    def provider_id(self) -> str | None:
        return as_str(self.stored.get("providerID")) or None

    @cached_property
    def reason(self) -> str | None:
        return as_str(self.stored.get("reason")) or None

    @cached_property
    def message(self) -> str:
        return str(self.stored.get("message") or "")

    @cached_property
    def observed_generation(self) -> int | None:
        return _int(self.stored.get("observedGeneration"))

    @cached_property
    def observed_power_state(self) -> ObservedPowerState | None:
        try:
            return ObservedPowerState(as_str(self.stored.get("observedPowerState")))
        except ValueError:
            return None

    @cached_property
    def intent_desired(self) -> str | None:
        """`status.intent.desired`: the desired power state the intent carries out."""
        return as_str(dig(self.stored, "intent", "desired")) or None

    @cached_property
    def intent_generation(self) -> int | None:
        return _int(dig(self.stored, "intent", "generation"))

    @cached_property
    def drift_corrections(self) -> tuple[datetime, ...]:
        raw = self.stored.get("driftCorrections")
        times = raw if isinstance(raw, list | tuple) else ()
        return tuple(t for t in map(parse_time, times) if t is not None)

    @cached_property
    def learned(self) -> Learned:
        """`status.learned` (`state.learned`: its one reader)."""
        return learned_from_status(self.stored.get("learned"))


class GroupStatusView(_View):
    """A Group's status, field by field (see the module's docstring)."""

    energy = _Part("energy")
    """`status.energy`, for `planning.energy.status.account_from_status`."""

    @cached_property
    def _battery(self) -> tuple[BatteryStatus | None, str | None]:
        return _model(BatteryStatus, self.stored.get("battery"))

    @property
    def battery(self) -> BatteryStatus | None:
        """`status.battery` (None: not written yet, or unreadable: `battery_problem`)."""
        return self._battery[0]

    @property
    def battery_problem(self) -> str | None:
        """Why `status.battery` does not read (None: it reads, or there is none)."""
        return self._battery[1]

    @cached_property
    def solar_surplus(self) -> SolarSurplusStatus | None:
        """`status.solarSurplus` (None: not written yet, or unreadable)."""
        return solar_surplus_of(self.stored.get("solarSurplus"))

    @cached_property
    def last_scale_up(self) -> datetime | None:
        return parse_time(dig(self.stored, "lastScaleUp", "time"))

    @cached_property
    def last_scale_down(self) -> datetime | None:
        return parse_time(dig(self.stored, "lastScaleDown", "time"))


def node_status(obj: Obj | None) -> NodeStatusView:
    """The status of a Lights-Out Node (an empty one for None)."""
    return NodeStatusView(obj)


def group_status(obj: Obj | None) -> GroupStatusView:
    """The status of a Group (an empty one for None)."""
    return GroupStatusView(obj)


__all__ = [
    "GroupStatusView",
    "NodeStatusView",
    "group_status",
    "node_status",
]
