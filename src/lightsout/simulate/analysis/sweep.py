"""`lightsout simulate TRACE --sweep KNOB[=V1,V2,...]`: one policy knob over a range of values,
energy against waiting, side by side with the reactive baseline.

Called by `lightsout.cli`. A knob is a real Group setting (`KNOBS`): each point replays the
whole trace with that setting added to the `--set` overrides (`engine.Options.overrides`, the
path a single `lightsout simulate --set ...` takes) and is summarised by `report.summarise`
against the one always-on reference, so a point is exactly what that single replay reports.

Which point is the *knee*: the sweep's non-dominated points (no other point has both less
energy and a shorter other-pods p95 wait), ordered by energy; each figure is scaled to 0..1
over them, and the knee is the point farthest below the chord joining the two ends (the
lowest-energy point and the shortest-wait one), on the side of the corner of least energy and
shortest wait. It needs three such points and one below the chord; a front that bends away
from that corner has no point that is a compromise, and no knee.

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

from lightsout.models.enums import SelectionPolicy
from lightsout.models.group import DEFAULT_BREAK_EVEN_MULTIPLE, GroupSpec
from lightsout.simulate.analysis import report
from lightsout.simulate.replay.engine import Options, Policy, replay
from lightsout.simulate.traces.trace import Trace


class SweepError(ValueError):
    """A `--sweep` that names no knob, or a value the Group setting refuses: one line."""


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
    )
}


@dataclass(frozen=True)
class Sweep:
    knob: Knob
    #: As the user typed them (and as the table prints them).
    values: tuple[str, ...]

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
    try:
        GroupSpec.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        raise SweepError(f"{knob.name}={value}: {first['msg']}") from None


@dataclass(frozen=True)
class Point:
    """One value of the knob and the replay's figures (`report.summarise`)."""

    value: str
    summary: Mapping[str, Any]

    @property
    def kwh(self) -> float:
        return float(self.summary["energy"]["usedKWh"])

    @property
    def p95(self) -> float:
        """Other pods' p95 wait, seconds (0 when no pod started)."""
        return float(self.summary["waits"]["other"]["p95Seconds"] or 0.0)


def run(trace: Trace, sweep: Sweep, base: Options) -> tuple[list[Point], dict[str, Any]]:
    """Replay `trace` once per value (with `base`'s overrides, then the knob's) and once as the
    reactive baseline; every summary against one always-on reference."""
    points: list[Point] = []
    reference: report.AlwaysOn | None = None
    for value in sweep.values:
        options = replace(base, overrides=(*base.overrides, sweep.setting(value)))
        result = replay(trace, options)
        if reference is None:
            reference = report.always_on_reference(result)
        points.append(Point(value, report.summarise(result, reference)))
    reactive = Options(policy=Policy.REACTIVE, scoring=base.scoring, overrides=base.overrides)
    baseline = report.summarise(replay(trace, reactive), reference)
    return points, baseline


def front(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both energy and p95 wait, by energy."""
    return sorted(
        (
            p
            for p in points
            if not any(
                (q.kwh <= p.kwh and q.p95 <= p.p95) and (q.kwh < p.kwh or q.p95 < p.p95)
                for q in points
            )
        ),
        key=lambda p: (p.kwh, p.p95),
    )


def knee(points: Sequence[Point]) -> Point | None:
    """The front's point farthest below the chord between its two ends, towards the corner of
    least energy and shortest wait, energy and p95 each scaled to 0..1 over the front; None
    when the front has fewer than three distinct points or none lies below the chord (the
    front bends away from that corner: no point between the ends is a compromise)."""
    frontier = front(points)
    if len({(p.kwh, p.p95) for p in frontier}) < 3:
        return None
    # Distinct non-dominated points: energy rises strictly as the wait falls, so scaled, the
    # ends are (0, 1) and (1, 0) and the chord is x + y = 1.
    low_e, high_e = frontier[0].kwh, frontier[-1].kwh
    low_w, high_w = frontier[-1].p95, frontier[0].p95

    def below(p: Point) -> float:
        x = (p.kwh - low_e) / (high_e - low_e)
        y = (p.p95 - low_w) / (high_w - low_w)
        return (1 - x - y) / math.sqrt(2)

    best = max(frontier[1:-1], key=below)
    return best if below(best) > 0 else None


def _knee_note(points: Sequence[Point], found: Point | None) -> str | None:
    """Why there is no knee, for a person; None when there is one."""
    ends = front(points)
    if found is not None or not ends:
        return None
    values = ", ".join(p.value for p in ends)
    if len({(p.kwh, p.p95) for p in ends}) < 3:
        return (
            f"no knee: the non-dominated points ({values}) are fewer than three distinct ones; "
            f"{ends[0].value} has the least energy at the shortest p95 among them"
        )
    return (
        f"no knee: the non-dominated points ({values}) bend away from the corner of least "
        "energy and shortest p95; none lies below the chord between the ends"
    )


def _row(summary: Mapping[str, Any]) -> dict[str, Any]:
    other, cronjob = summary["waits"]["other"], summary["waits"]["cronjob"]
    return {
        "usedKWh": summary["energy"]["usedKWh"],
        "otherWaitP50Seconds": other["p50Seconds"],
        "otherWaitP95Seconds": other["p95Seconds"],
        "cronjobWaitP95Seconds": cronjob["p95Seconds"],
        "latePowerOns": other["forPowerOn"]["pastBoot"],
        "powerOns": sum(m["powerOns"] for m in summary["machines"]),
    }


def as_json(sweep: Sweep, points: Sequence[Point], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """What `-o json` prints: one row per point, the baseline's row, the knee and default."""
    found = knee(points)
    return {
        "trace": points[0].summary["trace"] if points else None,
        "knob": sweep.knob.name,
        "setting": f"spec.{sweep.knob.path}",
        "default": sweep.knob.default,
        "knee": None if found is None else found.value,
        "kneeRule": (
            "the non-dominated point (energy, other pods' p95 wait) farthest below the chord "
            "between the front's ends, each figure scaled to 0..1 over the front"
        ),
        "kneeNote": _knee_note(points, found),
        "front": [p.value for p in front(points)],
        "points": [
            {"value": p.value, "isDefault": sweep.is_default(p.value), **_row(p.summary)}
            for p in points
        ],
        "baseline": {"policy": Policy.REACTIVE.value, **_row(baseline)},
    }


def render_text(document: Mapping[str, Any]) -> str:
    """The table a person reads: a row per value, then the reactive baseline."""
    knob = KNOBS[document["knob"]]
    head = (
        f"trace {document['trace']}: sweep of {document['setting']} ({knob.meaning}); "
        f"default {document['default']}, knee {document['knee'] or 'none'}"
    )
    columns = ("value", "kWh", "other p50 s", "other p95 s", "CronJob p95 s", "late", "power-ons")
    rows: list[tuple[str, ...]] = []
    for entry in [*document["points"], {"value": "reactive baseline", **document["baseline"]}]:
        marks = [
            word
            for word, hit in (
                ("default", entry.get("isDefault", False)),
                ("knee", entry["value"] == document["knee"]),
            )
            if hit
        ]
        label = entry["value"] + (f" ({', '.join(marks)})" if marks else "")
        rows.append(
            (
                label,
                f"{entry['usedKWh']:.2f}",
                _seconds(entry["otherWaitP50Seconds"]),
                _seconds(entry["otherWaitP95Seconds"]),
                _seconds(entry["cronjobWaitP95Seconds"]),
                str(entry["latePowerOns"]),
                str(entry["powerOns"]),
            )
        )
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [head]
    lines.extend(  # the heading, then the rows: the first column to the left, figures right
        "  ".join(
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in (columns, *rows)
    )
    if document["kneeNote"]:
        lines.append(document["kneeNote"])
    lines.append(
        "late: other pods that waited for a power-on past their machine's power-on and boot "
        f"+ {report.BOOT_SLACK_SECONDS:.0f} s; knee: {document['kneeRule']}"
    )
    return "\n".join(lines) + "\n"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
