"""Deferrable CronJob runs in the replay (`simulate.replay.deferred`): held by the operator's own
deferral and released through the port, priced by the trace's day-ahead series, never past a
deadline; and a trace's series and deferrable annotations checked before a replay, each problem
named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lightsout.simulate.analysis.report import render_text, summarise
from lightsout.simulate.replay.engine import Options, replay
from lightsout.simulate.traces.generate import household_deferrable
from lightsout.simulate.traces.trace import write
from lightsout.simulate.traces.validate import validate

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "electricity"


@pytest.fixture(scope="module")
def week() -> object:
    prices = (DATA / "de_lu_price_hourly.csv").read_text()
    carbon = (DATA / "de_carbon_intensity_hourly.csv").read_text()
    return household_deferrable(prices, carbon, weeks=1)


def test_held_runs_cost_less_than_at_once_and_miss_no_deadline(week: object) -> None:
    held = summarise(replay(week, Options(defer=True)))  # type: ignore[arg-type]
    at_once = summarise(replay(week, Options(defer=False)))  # type: ignore[arg-type]
    runs = held["deferred"]
    assert runs["runs"] == 15  # 7 backups, 7 photo indexes, 1 scrub
    assert runs["released"] == 15 and runs["deadlinesMissed"] == 0
    assert runs["meanDelayHours"] > 1  # they did wait
    assert at_once["deferred"] is None  # nothing held without the webhook
    assert held["electricity"]["cost"] < at_once["electricity"]["cost"]
    assert held["electricity"]["currency"] == "EUR"
    text = render_text(held)
    assert "deferrable runs: 15, released 15" in text and "deadlines missed 0" in text


def test_with_objective_carbon_the_held_runs_emit_less(week: object) -> None:
    clean = replace(
        week,  # type: ignore[type-var]
        machines=tuple(
            {
                **m,
                "spec": {
                    **m["spec"],
                    "electricity": {**m["spec"]["electricity"], "objective": "Carbon"},
                },
            }
            if m["kind"] == "Group"
            else m
            for m in week.machines  # type: ignore[attr-defined]
        ),
    )
    held = summarise(replay(clean, Options(defer=True)))
    at_once = summarise(replay(clean, Options(defer=False)))
    assert held["electricity"]["gCO2"] < at_once["electricity"]["gCO2"]


def test_a_traces_series_and_deferrable_annotations_are_checked(
    week: object, tmp_path: Path
) -> None:
    root = write(week, tmp_path / "ok")  # type: ignore[arg-type]
    assert validate(root) == []
    bad = write(week, tmp_path / "bad")  # type: ignore[arg-type]
    text = (bad / "configmaps.yaml").read_text()
    (bad / "configmaps.yaml").write_text(text.replace("2024-03-11T05:00:00Z", "yesterday", 1))
    crons = (bad / "cronjobs.yaml").read_text()
    assert "max-delay: 22h" in crons
    (bad / "cronjobs.yaml").write_text(crons.replace("max-delay: 22h", "max-delay: later"))
    said = [(p.obj, p.field, p.message) for p in validate(bad)]
    assert any(
        obj == "Group house"
        and field == "spec.electricity.series"
        and "key prices.csv: line 8: 'yesterday' is not an ISO 8601 time" in message
        for obj, field, message in said
    ), said
    assert any(
        obj == "CronJob media/photo-index"
        and field == "spec.jobTemplate.metadata.annotations.lightsout.dev/max-delay"
        and "'later' is not a duration" in message
        for obj, field, message in said
    ), said
