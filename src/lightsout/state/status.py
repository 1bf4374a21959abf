"""A Node's and a Group's `.status`: read in one place (`node_status`, `group_status`), and a
machine's place in its state machine written in one place (`machine_status`).

Every reader of our Nodes' and Groups' status (the operator, the planner, the replay, the
metrics, the `lightsout` commands) takes its fields from these views. A view decodes each field
on first use, once, and is tolerant as status must be: a field missing or malformed (a person's
edit, an older version's leftovers) reads as absent, never raises. `learned` is decoded by
`state.learned` (here only), `battery`, `power` and `solarSurplus` by the API models; `energy`,
`last_operation` and `last_health_check` are handed on as mappings to the codecs of their
records, which live above `state` (`planning.energy.status`, `planning.types`,
`planning.machine.healthjudge`). `stored` is the whole status, for the merge patch
(`actuation.inputs.status_patch`).

Written: `machine_status` by the operator's status writer (`execution.statuswriter`) and the
replay's Nodes alike; what a pass's readings add (`energy`, `lastHealthCheck`, `power`,
`inspected`) by `actuation.inputs.checked_status`; `energy` by
`planning.energy.status.account_to_status`, `battery` and `solarSurplus` by their API models.
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
from lightsout.models.node import MeasuredPower
from lightsout.state.learned import Learned, learned_from_status, learned_to_status
from lightsout.state.parse import as_enum, as_int, as_str, dig, format_time, parse_time
from lightsout.state.series import solar_surplus_of
from lightsout.text import clip_middle

Obj = Mapping[str, Any]


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _conditions(value: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(c for c in value if isinstance(c, Mapping))


def _model[M: BaseModel](model: type[M], raw: object) -> tuple[M | None, str | None]:
    """`raw` as `model`: (None, None) when absent, (None, why) when unreadable."""
    if raw is None:
        return None, None
    try:
        return model.model_validate(raw), None
    except ValidationError as error:
        return None, str(error)


class _Part:
    """A part of status handed on as the object it is (None: absent, or no object)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, view: _View, owner: type[_View] | None = None) -> Mapping[str, Any] | None:
        return _mapping(view.stored.get(self.key))


class _View:
    """The status of one object (`stored`: `{}` when it has none, or none that reads)."""

    energy = _Part("energy")
    """`status.energy`, for `planning.energy.status.account_from_status`."""

    def __init__(self, obj: Obj | None) -> None:
        self.stored: Mapping[str, Any] = _mapping(dig(obj, "status")) or {}

    @cached_property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        """`status.conditions`, each as stored (entries that are no object dropped)."""
        return _conditions(self.stored.get("conditions"))

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        """The condition of type `kind`, as stored (None: not set)."""
        return next((c for c in self.conditions if c.get("type") == kind), None)

    @cached_property
    def currency(self) -> str | None:
        """`status.energy.currency`: what the energy's costs are counted in."""
        return as_str(dig(self.stored, "energy", "currency")) or None


class NodeStatusView(_View):
    """A Node's status, field by field (see the module's docstring)."""

    last_operation = _Part("lastOperation")
    """`status.lastOperation`, for `planning.types.operation_from_status`."""
    last_health_check = _Part("lastHealthCheck")
    """`status.lastHealthCheck`, for `planning.machine.healthjudge`."""
    inspected = _Part("inspected")
    clone = _Part("clone")

    @cached_property
    def phase(self) -> Phase | None:
        """None when not written (or not a word); a word that is no phase reads as Unknown."""
        raw = as_str(self.stored.get("phase"))
        return as_enum(Phase, raw, Phase.UNKNOWN) if raw else None

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
        return as_int(self.stored.get("observedGeneration"))

    @cached_property
    def observed_power_state(self) -> ObservedPowerState | None:
        return as_enum(ObservedPowerState, as_str(self.stored.get("observedPowerState")), None)

    @cached_property
    def intent_desired(self) -> str | None:
        """`status.intent.desired`: the desired power state the intent carries out."""
        return as_str(dig(self.stored, "intent", "desired")) or None

    @cached_property
    def intent_generation(self) -> int | None:
        return as_int(dig(self.stored, "intent", "generation"))

    @cached_property
    def drift_corrections(self) -> tuple[datetime, ...]:
        raw = self.stored.get("driftCorrections")
        times = raw if isinstance(raw, list | tuple) else ()
        return tuple(t for t in map(parse_time, times) if t is not None)

    @cached_property
    def learned(self) -> Learned:
        """`status.learned` (`state.learned`: its one reader)."""
        return learned_from_status(self.stored.get("learned"))

    @cached_property
    def power(self) -> MeasuredPower | None:
        """`status.power`: the draw a health check last measured (None: none, or unreadable)."""
        return _model(MeasuredPower, self.stored.get("power"))[0]


class GroupStatusView(_View):
    """A Group's status, field by field (see the module's docstring)."""

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
    def target_size(self) -> int | None:
        """`status.targetSize`: how many of its machines should be on."""
        return as_int(self.stored.get("targetSize"))

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


def machine_status(
    phase: Phase,
    since: datetime | None,
    intent: tuple[str, int],
    *,
    reason: str | None,
    message: str,
    learned: Learned | None = None,
) -> dict[str, Any]:
    """A machine's place in its state machine as status holds it: the phase and since when,
    why (`message` clipped in the middle: its end says what to do), the intent (the desired
    power state and the generation it is carried out for) and, when given, `learned`."""
    out: dict[str, Any] = {
        "phase": str(phase),
        "phaseSince": since and format_time(since),
        "reason": reason,
        "message": clip_middle(message),
        "intent": {"desired": str(intent[0]), "generation": intent[1]},
    }
    if learned is not None:
        out["learned"] = learned_to_status(learned)
    return out


__all__ = [
    "GroupStatusView",
    "NodeStatusView",
    "group_status",
    "machine_status",
    "node_status",
]
