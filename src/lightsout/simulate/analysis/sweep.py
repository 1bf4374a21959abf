"""`lightsout simulate TRACE --sweep KNOB[=V1,V2,...]`: one policy knob over a range of values,
energy against waiting (or, for the deferral margin, cost against deadlines missed), side by
side with a baseline.

Called by `lightsout.cli`. A knob is a real Group setting (`KNOBS`): each point replays the
whole trace with that setting added to the `--set` overrides (`engine.Options.overrides`, the
path a single `lightsout simulate --set ...` takes) and is summarised by `report.summarise`
against the one always-on reference, so a point is exactly what that single replay reports.
Before any replay, the trace's Groups are read with each point's setting (a setting a Group
refuses is one line, `SweepError`), and a knob that could change nothing on the trace is
refused: `deferralMargin` needs a deferrable CronJob and a Group whose price (or, with
`objective: Carbon`, carbon intensity) changes by the hour.

The knobs and what each trades (`Axes`, less of each the better):
- `breakEvenMultiple`, `selectionPolicy`: energy against the other pods' p95 wait, beside the
  reactive baseline (cluster-autoscaler's defaults).
- `deferralMargin` (`spec.electricity.deferralMarginSeconds`): the electricity's cost (its
  grams of CO2 when the Groups' objective is Carbon) against the deferrable runs' deadlines
  missed, beside the same planner with the deferrable runs released at once (no deferral). A
  larger margin starts a held run earlier: it gives up late cheap hours for room against a
  slow boot or a long run. The deferrable runs' delay is printed but not traded: a run may wait
  as long as its annotation allows, so a shorter wait is worth nothing by itself.

When the trace has deferrable runs, every sweep's table and JSON add the cost, the grams of
CO2 (with a carbon series), and the deferrable runs' mean delay and deadlines missed.

Which point is the *knee*: the sweep's non-dominated points (no other point is at least as
good on both of the knob's figures and better on one), ordered by the first; each figure is
scaled to 0..1 over them, and the knee is the point farthest below the chord joining the two
ends, on the side of the corner where both are least. It needs three such points and one
below the chord; a front that bends away from that corner has no point that is a compromise,
and no knee. With deadlines missed a count that is often 0 at every margin, the deferral
margin's front is usually one point (the cheapest margin that misses as few as any): the table
then says so and names it, and shows no knee.

Left out as a knob: the pre-warm margin (`planning.autoscaler.prewarm.MARGIN`). It is not a Group
setting (one CronJob run may be taken by machines of several Groups, so which Group's margin would
set its lead time is a design question of its own), it only moves CronJob runs (not the other pods'
waits this sweep is about), and on the shipped weeks CronJob runs already wait 0 s at p95.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from lightsout.models.enums import DeferralObjective, SelectionPolicy
from lightsout.models.group import (
    DEFAULT_BREAK_EVEN_MULTIPLE,
    DEFAULT_DEFERRAL_MARGIN_SECONDS,
    GroupSpec,
)
from lightsout.planning.energy.weight import Weight
from lightsout.simulate.analysis import report
from lightsout.simulate.replay.engine import Options, Policy, replay
from lightsout.simulate.traces.trace import Trace
from lightsout.state import cron
from lightsout.state.types import Group, deferrable


class SweepError(ValueError):
    """A `--sweep` that names no knob, a value the Group setting refuses, or a knob the trace
    gives nothing to change: one line."""


@dataclass(frozen=True)
class Axes:
    """The two figures a knob trades, less of each the better: the front and the knee are
    taken over them."""

    #: The row's fields (`_row`) they are, for the JSON and the plot.
    x: str
    y: str
    #: As a person reads them: "energy", "shortest p95".
    x_word: str
    y_best: str
    #: The plot's axis labels.
    x_label: str
    y_label: str
    #: Read from a point's summary (`report.summarise`).
    x_of: Callable[[Mapping[str, Any]], float]
    y_of: Callable[[Mapping[str, Any]], float]

    @property
    def rule(self) -> str:
        return (
            f"the non-dominated point ({self.x_word}, {self.y_label.partition(',')[0]}) "
            "farthest below the chord between the front's ends, each figure scaled to 0..1 "
            "over the front"
        )


def _missed(summary: Mapping[str, Any]) -> float:
    deferred = summary.get("deferred")
    return float(deferred["deadlinesMissed"]) if deferred else 0.0


ENERGY_WAIT = Axes(
    x="usedKWh",
    y="otherWaitP95Seconds",
    x_word="energy",
    y_best="shortest p95",
    x_label="energy used, kWh",
    y_label="other pods' p95 wait, s",
    x_of=lambda s: float(s["energy"]["usedKWh"]),
    y_of=lambda s: float(s["waits"]["other"]["p95Seconds"] or 0.0),
)
COST_MISSED = Axes(
    x="cost",
    y="deadlinesMissed",
    x_word="cost",
    y_best="fewest deadlines missed",
    x_label="electricity cost",
    y_label="deferrable runs' deadlines missed",
    x_of=lambda s: float(s["electricity"]["cost"]),
    y_of=_missed,
)
CARBON_MISSED = replace(
    COST_MISSED,
    x="gCO2",
    x_word="gCO2",
    x_label="grams of CO2",
    x_of=lambda s: float(s["electricity"]["gCO2"] or 0.0),
)


@dataclass(frozen=True)
class Knob:
    """A Group setting the sweep can vary."""

    #: What `--sweep` calls it (the setting's own name).
    name: str
    #: Its path under the Group manifest's `spec`, for `--set`.
    path: str
    #: Values swept when `--sweep` names none.
    values: tuple[str, ...]
    #: The Group's default, as the sweep prints it.
    default: str
    #: What it means, for `--help` and the table's heading.
    meaning: str
    #: A value as the manifest takes it (YAML), from what the user typed.
    parse: Callable[[str], Any]
    #: What it trades (the Groups' objective may change it, `prepare`).
    axes: Axes = ENERGY_WAIT
    #: Whether it moves only deferrable Jobs: then the trace must have some, and a price that
    #: changes, and the baseline is the same planner releasing them at once.
    deferral: bool = False


def _seconds_value(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SweepError(f"not a whole number of seconds: {text!r}") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SweepError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise SweepError(f"not a finite number: {text!r}")
    return value


KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        Knob(
            name="breakEvenMultiple",
            path="scaleDown.breakEvenMultiple",
            values=("0.25", "0.5", "1", "1.5", "2", "3", "4", "6"),
            default=f"{DEFAULT_BREAK_EVEN_MULTIPLE:g}",
            meaning="scale-down unneeded time, in break-even times (unneededSeconds: auto)",
            parse=_number,
        ),
        Knob(
            name="selectionPolicy",
            path="selectionPolicy",
            values=tuple(p.value for p in SelectionPolicy),
            default=GroupSpec().selection_policy.value,
            meaning="how the planner chooses among machines that would all fit",
            parse=str,
        ),
        Knob(
            name="deferralMargin",
            path="electricity.deferralMarginSeconds",
            values=("0", "300", "600", "1800", "3600", "7200"),
            default=str(DEFAULT_DEFERRAL_MARGIN_SECONDS),
            meaning="seconds a held deferrable Job is to finish before its deadline",
            parse=_seconds_value,
            axes=COST_MISSED,
            deferral=True,
        ),
    )
}


@dataclass(frozen=True)
class Sweep:
    knob: Knob
    #: As the user typed them (and as the table prints them).
    values: tuple[str, ...]
    #: What the points trade: the knob's, or as `prepare` found it for the trace.
    axes: Axes | None = None

    @property
    def trade(self) -> Axes:
        return self.axes or self.knob.axes

    def is_default(self, value: str) -> bool:
        return bool(self.knob.parse(value) == self.knob.parse(self.knob.default))

    def setting(self, value: str) -> str:
        """The `--set` override of one point."""
        return f"spec.{self.knob.path}={value}"


def parse(text: str) -> Sweep:
    """`KNOB` or `KNOB=V1,V2,...`; every value checked by the Group model, as the API server
    would check it, so a bad one is refused before any replay."""
    name, has_values, listed = text.partition("=")
    knob = KNOBS.get(name.strip())
    if knob is None:
        raise SweepError(f"unknown knob {name.strip()!r} (knobs: {', '.join(KNOBS)})")
    values = tuple(v.strip() for v in listed.split(",")) if has_values else knob.values
    if not values or any(not v for v in values):
        raise SweepError(f"{knob.name}: an empty value in {listed!r} (give V1,V2,...)")
    if len(set(values)) != len(values):
        raise SweepError(f"{knob.name}: a value given twice in {listed!r}")
    for value in values:
        _check(knob, value)
    return Sweep(knob, values)


def _check(knob: Knob, value: str) -> None:
    try:
        parsed = knob.parse(value)
    except SweepError as error:
        raise SweepError(f"{knob.name}={value}: {error}") from None
    spec: dict[str, Any] = {}
    node = spec
    *parents, leaf = knob.path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = parsed
    if "electricity" in spec:  # the one field an electricity block needs, to check the knob's
        spec["electricity"].setdefault("pricePerKWh", 0.0)
    try:
        GroupSpec.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        raise SweepError(f"{knob.name}={value}: {first['msg']}") from None


def prepare(trace: Trace, sweep: Sweep, base: Options) -> Sweep:
    """`sweep` checked against `trace` before any replay, its axes as the trace's Groups make
    them; `SweepError` when a point's setting leaves a Group unread, or the knob moves only
    deferrable Jobs and the trace holds none or prices no hour differently."""
    checked = _deferral(trace, _groups(trace, base.overrides, sweep, None), sweep)
    for value in sweep.values:
        _groups(trace, (*base.overrides, sweep.setting(value)), sweep, value)
    return checked


def has_deferrable(trace: Trace) -> bool:
    """Whether the replay holds any of the trace's Jobs: a CronJob's runs or a pod line's Job
    that the admission webhook would leave suspended."""
    crons = (cron.read(c) for c in trace.cronjobs)
    return any(deferrable(c.job_annotations, c.job_labels) for c in crons) or any(
        p.owner_kind == "Job" and deferrable(p.job_annotations, p.job_labels) for p in trace.pods
    )


def _deferral(trace: Trace, groups: Sequence[Group], sweep: Sweep) -> Sweep:
    """`sweep`, its axes by the Groups' objective when its knob moves only deferrable Jobs;
    `SweepError` when the trace has none, or they would run at once whatever the setting."""
    if not sweep.knob.deferral:
        return sweep
    name = sweep.knob.name
    if not has_deferrable(trace):
        raise SweepError(
            f"{name}: trace {trace.name} has no deferrable Job (lightsout.dev/finish-by or "
            "lightsout.dev/max-delay on a CronJob's Job template or in a pod line's "
            "jobAnnotations): every margin would replay the same"
        )
    problem = next((g.series_problem for g in groups if g.series_problem), None)
    if problem is not None:
        raise SweepError(
            f"{name}: trace {trace.name}: {problem}: its deferrable Jobs run at once whatever "
            "the margin"
        )
    # Whether a deferrable Job of a Group could find a cheaper (or cleaner) hour.
    weights = [Weight.of(g) for g in groups]
    if not any(w is not None and w.varies for w in weights):
        raise SweepError(
            f"{name}: no Group of trace {trace.name} has an electricity price series or rates "
            "(or, with objective Carbon, a carbon series): its deferrable Jobs run at once "
            "whatever the margin"
        )
    objectives = {g.electricity.objective for g in groups if g.electricity is not None}
    carbon = objectives == {DeferralObjective.CARBON}
    return replace(sweep, axes=CARBON_MISSED if carbon else sweep.knob.axes)


def _groups(
    trace: Trace, overrides: Sequence[str], sweep: Sweep, value: str | None
) -> tuple[Group, ...]:
    """The trace's Groups with `overrides`, as the replay reads them; `SweepError` naming the
    first that does not read (at `value`, the point's)."""
    try:
        snapshot = trace.snapshot(overrides)
    except ValueError as error:
        raise SweepError(f"{sweep.knob.name}: {error}") from None
    if snapshot.problems:
        at = sweep.knob.name if value is None else f"{sweep.knob.name}={value}"
        raise SweepError(f"{at}: trace {trace.name}: {snapshot.problems[0]}")
    return snapshot.groups


@dataclass(frozen=True)
class Point:
    """One value of the knob and the replay's figures (`report.summarise`)."""

    value: str
    summary: Mapping[str, Any]

    @property
    def kwh(self) -> float:
        return ENERGY_WAIT.x_of(self.summary)

    def on(self, axes: Axes) -> tuple[float, float]:
        """Its two figures on `axes`."""
        return axes.x_of(self.summary), axes.y_of(self.summary)


def run(trace: Trace, sweep: Sweep, base: Options) -> tuple[list[Point], dict[str, Any]]:
    """Replay `trace` once per value (with `base`'s overrides, then the knob's) and once as the
    baseline: the reactive policy, or for a knob that moves only deferrable Jobs the same
    planner releasing them at once; every summary against one always-on reference.
    `SweepError` (before any replay) when the trace gives the knob nothing to change
    (`prepare`)."""
    prepare(trace, sweep, base)
    points: list[Point] = []
    reference: report.AlwaysOn | None = None
    for value in sweep.values:
        options = replace(base, overrides=(*base.overrides, sweep.setting(value)))
        result = replay(trace, options)
        if reference is None:
            reference = report.always_on_reference(result)
        points.append(Point(value, report.summarise(result, reference)))
    if sweep.knob.deferral:
        other = replace(base, defer=False)
    else:
        other = Options(policy=Policy.REACTIVE, scoring=base.scoring, overrides=base.overrides)
    baseline = report.summarise(replay(trace, other), reference)
    return points, baseline


def front(points: Sequence[Point], axes: Axes = ENERGY_WAIT) -> list[Point]:
    """The points no other point beats on both of `axes`' figures, by the first."""
    figures = {id(p): p.on(axes) for p in points}

    def beaten(p: Point) -> bool:
        (px, py) = figures[id(p)]
        return any(
            (qx <= px and qy <= py) and (qx < px or qy < py)
            for qx, qy in (figures[id(q)] for q in points)
        )

    return sorted((p for p in points if not beaten(p)), key=lambda p: figures[id(p)])


def knee(points: Sequence[Point], axes: Axes = ENERGY_WAIT) -> Point | None:
    """The front's point farthest below the chord between its two ends, towards the corner
    where both of `axes`' figures are least, each scaled to 0..1 over the front; None when the
    front has fewer than three distinct points or none lies below the chord (the front bends
    away from that corner: no point between the ends is a compromise)."""
    frontier = front(points, axes)
    if len({p.on(axes) for p in frontier}) < 3:
        return None
    # Distinct non-dominated points: the first figure rises strictly as the second falls, so
    # scaled, the ends are (0, 1) and (1, 0) and the chord is x + y = 1.
    (low_x, high_y), (high_x, low_y) = frontier[0].on(axes), frontier[-1].on(axes)

    def below(p: Point) -> float:
        px, py = p.on(axes)
        x = (px - low_x) / (high_x - low_x)
        y = (py - low_y) / (high_y - low_y)
        return (1 - x - y) / math.sqrt(2)

    best = max(frontier[1:-1], key=below)
    return best if below(best) > 0 else None


def _knee_note(points: Sequence[Point], found: Point | None, axes: Axes) -> str | None:
    """Why there is no knee, for a person; None when there is one."""
    ends = front(points, axes)
    if found is not None or not ends:
        return None
    values = ", ".join(p.value for p in ends)
    if len({p.on(axes) for p in ends}) < 3:
        return (
            f"no knee: the non-dominated points ({values}) are fewer than three distinct ones; "
            f"{ends[0].value} has the least {axes.x_word} at the {axes.y_best} among them"
        )
    return (
        f"no knee: the non-dominated points ({values}) bend away from the corner of least "
        f"{axes.x_word} and {axes.y_best}; none lies below the chord between the ends"
    )


def _row(summary: Mapping[str, Any]) -> dict[str, Any]:
    other, cronjob = summary["waits"]["other"], summary["waits"]["cronjob"]
    money, deferred = summary["electricity"], summary["deferred"]
    return {
        "usedKWh": summary["energy"]["usedKWh"],
        "otherWaitP50Seconds": other["p50Seconds"],
        "otherWaitP95Seconds": other["p95Seconds"],
        "cronjobWaitP95Seconds": cronjob["p95Seconds"],
        "latePowerOns": other["forPowerOn"]["pastBoot"],
        "powerOns": sum(m["powerOns"] for m in summary["machines"]),
        "cost": money["cost"],
        "gCO2": money["gCO2"],
        # The deferrable runs (None: the trace has none, or the baseline ran them at once).
        "deferredRuns": None if deferred is None else deferred["runs"],
        "deferredMeanDelayHours": None if deferred is None else deferred["meanDelayHours"],
        "deferredMaxDelayHours": None if deferred is None else deferred["maxDelayHours"],
        "deadlinesMissed": None if deferred is None else deferred["deadlinesMissed"],
    }


def as_json(sweep: Sweep, points: Sequence[Point], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """What `-o json` prints: one row per point, the baseline's row, the knee and default."""
    axes = sweep.trade
    found = knee(points, axes)
    if sweep.knob.deferral:
        base = {"policy": Policy.LIGHTSOUT.value, "defer": False}
        label = "released at once"
    else:
        base = {"policy": Policy.REACTIVE.value, "defer": True}
        label = "reactive baseline"
    return {
        "trace": points[0].summary["trace"] if points else None,
        "knob": sweep.knob.name,
        "setting": f"spec.{sweep.knob.path}",
        "default": sweep.knob.default,
        "currency": points[0].summary["electricity"]["currency"] if points else None,
        "axes": {"x": axes.x, "y": axes.y, "xLabel": axes.x_label, "yLabel": axes.y_label},
        "knee": None if found is None else found.value,
        "kneeRule": axes.rule,
        "kneeNote": _knee_note(points, found, axes),
        "front": [p.value for p in front(points, axes)],
        "points": [
            {"value": p.value, "isDefault": sweep.is_default(p.value), **_row(p.summary)}
            for p in points
        ],
        "baseline": {**base, "label": label, **_row(baseline)},
    }


def render_text(document: Mapping[str, Any]) -> str:
    """The table a person reads: a row per value, then the baseline; the cost, CO2 and the
    deferrable runs' columns when the trace has deferrable runs."""
    knob = KNOBS[document["knob"]]
    head = (
        f"trace {document['trace']}: sweep of {document['setting']} ({knob.meaning}); "
        f"default {document['default']}, knee {document['knee'] or 'none'}"
    )
    entries = [
        *document["points"],
        {"value": document["baseline"]["label"], **document["baseline"]},
    ]
    deferred = any(e["deferredRuns"] is not None for e in document["points"])
    grams = deferred and any(e["gCO2"] is not None for e in document["points"])
    currency = document.get("currency") or "cost"
    columns = ["value", "kWh", "other p50 s", "other p95 s", "CronJob p95 s", "late", "power-ons"]
    if deferred:
        columns += [currency, *(["kg CO2"] if grams else []), "delay mean h", "max h", "missed"]
    rows: list[tuple[str, ...]] = []
    for entry in entries:
        marks = [
            word
            for word, hit in (
                ("default", entry.get("isDefault", False)),
                ("knee", entry["value"] == document["knee"]),
            )
            if hit
        ]
        label = entry["value"] + (f" ({', '.join(marks)})" if marks else "")
        row = [
            label,
            f"{entry['usedKWh']:.2f}",
            _figure(entry["otherWaitP50Seconds"], 1, 0),
            _figure(entry["otherWaitP95Seconds"], 1, 0),
            _figure(entry["cronjobWaitP95Seconds"], 1, 0),
            str(entry["latePowerOns"]),
            str(entry["powerOns"]),
        ]
        if deferred:
            row.append(f"{entry['cost']:.4f}")
            if grams:
                row.append(_figure(entry["gCO2"], 1000, 3))
            row += [
                _figure(entry["deferredMeanDelayHours"], 1, 2),
                _figure(entry["deferredMaxDelayHours"], 1, 2),
                "-" if entry["deadlinesMissed"] is None else str(entry["deadlinesMissed"]),
            ]
        rows.append(tuple(row))
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [head]
    lines.extend(  # the heading, then the rows: the first column to the left, figures right
        "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in (tuple(columns), *rows)
    )
    if document["kneeNote"]:
        lines.append(document["kneeNote"])
    lines.append(
        "late: other pods that waited for a power-on past their machine's power-on and boot "
        f"+ {report.BOOT_SLACK_SECONDS:.0f} s; knee: {document['kneeRule']}"
    )
    if deferred:
        lines.append(
            "delay: a deferrable run's wait from its Job's creation to its release; missed: "
            "runs finished after their deadline, or not finished by one within the trace"
        )
    return "\n".join(lines) + "\n"


def _figure(value: float | None, per: float, digits: int) -> str:
    return "-" if value is None else f"{value / per:.{digits}f}"
