"""Group schedule windows (`spec.windows`, `planning.autoscaler.windows`): a floor is powered on one
learned boot (plus the pre-warming margin) before its window opens, so its machine is Ready at
the opening, and powers off once the window has closed and it is unneeded; a ceiling caps the
power-ons while its window is open; the model refuses a bad schedule, an unknown time zone and
overlapping windows, naming the field.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from lightsout.actuation.memory import MemoryScale
from lightsout.actuation.plans import PlanApplier
from lightsout.commands import status
from lightsout.handlers.admission import spec_refusal
from lightsout.models.group import WINDOW_CRON_PATTERN, GroupSpec
from lightsout.models.schedule import ScheduleError, parse
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.prewarm import MARGIN
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.simulate.replay.engine import replay
from tests.unit import test_simulate as sim
from tests.unit.test_autoscale_objects import at, group, machine, ons, pod, pod_note, snap

pytestmark = pytest.mark.unit

NUC_BOOT = 93
#: T0 is 12:00 UTC; the window opens ten minutes later.
OPENS_IN = 600
LEAD = NUC_BOOT + MARGIN.total_seconds()


def evening(**limits: Any) -> dict[str, Any]:
    return {
        "name": "evening",
        "schedule": "10 12 * * *",
        "durationSeconds": 3600,
        "timeZone": "UTC",
        **limits,
    }


def household(*windows: dict[str, Any]) -> list[Any]:
    return [
        group(windows=list(windows), scaleUp={"maxConcurrentOperations": 10}),
        machine("nuc-1", "4", "16Gi", learned={"bootSeconds": NUC_BOOT}),
        machine("nuc-2", "4", "16Gi", learned={"bootSeconds": NUC_BOOT}),
        machine("nuc-3", "4", "16Gi", learned={"bootSeconds": NUC_BOOT}),
    ]


def test_a_floor_powers_on_one_learned_boot_before_its_window_opens() -> None:
    objects = household(evening(minNodes=1))
    early = plan(snap(*objects), at(OPENS_IN - LEAD - 1))
    assert ons(early) == []
    # The planner is woken exactly when the floor's machine must start to be Ready at 12:10.
    wake = next_wake(snap(*objects), early, at(OPENS_IN - LEAD - 1))
    assert wake == at(OPENS_IN - LEAD)
    due = plan(snap(*objects), at(OPENS_IN - LEAD))
    assert len(ons(due)) == 1
    (action,) = due.actions
    assert action.reason.startswith("window evening (12:10-13:10 UTC): minNodes 1 until 13:10")
    assert "before it opens at 12:10" in action.reason
    group_lines = " ".join(next(iter(due.explanations.groups.values())))
    assert "in force: window evening" in group_lines


def test_a_floor_starts_one_boot_of_the_slowest_machine_it_needs_early_not_of_the_groups() -> None:
    """A slow, hungry tower in the Group is not what a floor of 1 powers on (the NUC is, by
    lowest energy), so it does not make the floor start 300 s early; a floor of 2 needs it."""
    tower = machine("tower", "8", "32Gi", watts=(120, 60, 3), learned={"bootSeconds": 300})
    nuc = machine("nuc", "4", "16Gi", watts=(30, 10, 1), learned={"bootSeconds": NUC_BOOT})

    def household_of(floor: int) -> list[Any]:
        return [group(windows=[evening(minNodes=floor)]), nuc, tower]

    assert ons(plan(snap(*household_of(1)), at(OPENS_IN - 300 - 15))) == []
    assert ons(plan(snap(*household_of(1)), at(OPENS_IN - LEAD - 1))) == []
    assert ons(plan(snap(*household_of(1)), at(OPENS_IN - LEAD))) == ["nuc"]
    assert sorted(ons(plan(snap(*household_of(2)), at(OPENS_IN - 300 - 15)))) == ["nuc", "tower"]


def test_the_group_is_told_when_its_floor_starts_early_opens_and_closes() -> None:
    port, applier = MemoryScale(machines={}), PlanApplier(dry_run=True)
    moments = [OPENS_IN - LEAD - 1, OPENS_IN - LEAD, OPENS_IN, OPENS_IN + 1800, OPENS_IN + 3600]
    for seconds in (*moments, OPENS_IN + 3700):
        snapshot = snap(*household(evening(minNodes=1)))
        applier.apply(port, snapshot, plan(snapshot, at(seconds)), at(seconds))

    said = [(kind, e.reason, e.message) for kind, _, e in port.events]
    assert [(kind, reason) for kind, reason, _ in said] == [
        ("Group", "WindowInForce"),  # the floor, early
        ("Group", "WindowInForce"),  # open
        ("Group", "WindowClosed"),
    ]
    assert said[0][2].startswith("in force: window evening (12:10-13:10 UTC): minNodes 1")
    assert f"powered on {LEAD:.0f}s before it opens at 12:10" in said[0][2]
    assert said[1][2] == "in force: window evening (12:10-13:10 UTC): minNodes 1 until 13:10"
    assert said[2][2] == (
        "no schedule window in force: the Group's own minNodes 0 and maxNodes 10 apply"
    )


def test_days_from_to_is_the_same_window_as_its_cron_form_and_runs_past_midnight() -> None:
    night = {"name": "night", "days": ["sun", "fri"], "from": "22:30", "to": "07:00"}
    (window,) = GroupSpec.model_validate({"windows": [{**night, "quiet": True}]}).windows or []

    times = window.times()

    assert (times.schedule, times.duration_seconds) == ("30 22 * * sun,fri", 8 * 3600 + 1800)
    friday = datetime(2026, 11, 27, 23, 0, tzinfo=UTC)  # a Friday, 23:00
    assert times.open_at(friday) == datetime(2026, 11, 27, 22, 30, tzinfo=UTC)
    assert times.open_at(friday + timedelta(hours=7, minutes=59)) is not None  # Sat 06:59
    assert times.open_at(friday + timedelta(hours=8)) is None  # Saturday 07:00: closed
    assert times.open_at(friday + timedelta(days=1)) is None  # no window on Saturday night


@pytest.mark.parametrize(
    ("window", "words"),
    [
        ({"schedule": "0 22 * * *", "durationSeconds": 600, "days": ["mon"]}, "either schedule"),
        ({"days": ["mon"], "from": "22:00"}, "either schedule"),
        ({"days": ["mon"], "from": "07:00", "to": "07:00"}, "from and to must differ"),
        ({"days": ["mon"], "from": "7:00", "to": "08:00"}, "at least 5 characters"),
    ],
)
def test_a_window_in_neither_or_both_forms_is_refused(window: dict[str, Any], words: str) -> None:
    error = _refusal([{"name": "night", "quiet": True, **window}])
    assert words in str(error)


def test_a_floor_no_longer_holds_once_its_window_has_closed() -> None:
    objects = household(evening(minNodes=1))
    inside = plan(snap(*objects), at(OPENS_IN + 1800))
    assert len(ons(inside)) == 1
    after = plan(snap(*objects), at(OPENS_IN + 3600))
    assert ons(after) == []
    wake = next_wake(snap(*objects), inside, at(OPENS_IN + 1800))
    assert wake == at(OPENS_IN + 3600)  # woken when it closes


def test_a_ceiling_caps_power_ons_while_its_window_is_open() -> None:
    pods = [pod(f"job-{i}", "3", "1Gi") for i in range(3)]
    objects = [*household(evening(maxNodes=1)), *pods]
    assert len(ons(plan(snap(*objects), at(0)))) == 3  # before it opens: maxNodes 10
    capped = plan(snap(*objects), at(OPENS_IN + 60))
    assert len(ons(capped)) == 1


def _refusal(windows: list[dict[str, Any]]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        GroupSpec.model_validate({"windows": windows})
    return caught.value


def test_overlapping_windows_are_refused_naming_the_field() -> None:
    late = {**evening(maxNodes=2), "name": "late", "schedule": "0 13 * * *"}
    error = _refusal([evening(minNodes=1), late])
    (detail,) = error.errors()
    assert detail["loc"] == ("windows",)
    assert "windows evening and late overlap" in detail["msg"]
    # Back to back is not overlapping.
    GroupSpec.model_validate(
        {"windows": [evening(minNodes=1), {**late, "schedule": "10 13 * * *"}]}
    )


@pytest.mark.parametrize(
    ("field", "value", "loc", "words"),
    [
        ("schedule", "0 25 * * *", "schedule", "must be a cron schedule whose fields are in"),
        ("schedule", "0 18 * * 7", "schedule", "must be a cron schedule whose fields are in"),
        ("schedule", "0 22-6 * * *", "schedule", "not a valid cron schedule"),
        ("timeZone", "Mars/Olympus", "timeZone", "unknown time zone"),
    ],
)
def test_a_bad_schedule_or_time_zone_is_refused_naming_the_field(
    field: str, value: str, loc: str, words: str
) -> None:
    error = _refusal([{**evening(minNodes=1), field: value}])
    (detail,) = error.errors()
    assert detail["loc"] == ("windows", 0, loc)
    assert words in detail["msg"]


def test_the_crds_schedule_pattern_admits_no_schedule_the_cronjob_parser_refuses() -> None:
    """The API server's CEL pattern (`WINDOW_CRON_PATTERN`) against the parser, each field
    given each tricky value (the fields are read independently): whatever the pattern admits
    parses, except an inverted range (only the model and the Group webhook see that), and
    everyday schedules are admitted."""
    pattern = re.compile(WINDOW_CRON_PATTERN)
    values = ["0", "+05", "59", "60", "23", "24", "31", "32", "12", "13", "6", "7", "*", "?"]
    values += ["*/0", "*/15", "1-5", "5-1", "mon-fri", "JAN", "sun,sat", "1#2", "L", "-1", "3,"]
    admitted = 0
    for field, value in itertools.product(range(5), values):
        text = " ".join(value if at == field else "*" for at in range(5))
        if not pattern.fullmatch(text):
            continue
        if "5-1" in text:
            with pytest.raises(ScheduleError, match="beyond end of range"):
                parse(text, ZoneInfo("UTC"))
        else:
            parse(text, ZoneInfo("UTC"))
        admitted += 1
    assert admitted > 30
    for everyday in ("0 18 * * 1-5", "30 22 * * sun,sat", "*/10 7-9 1,15 * ?", "@daily"):
        assert pattern.fullmatch(everyday), everyday


def test_the_group_webhook_refuses_what_the_model_refuses_naming_the_field() -> None:
    late = {"name": "late", "schedule": "30 12 * * *", "durationSeconds": 600, "quiet": True}

    overlapping = spec_refusal({"windows": [evening(minNodes=1), late]})
    inverted = spec_refusal({"windows": [{**evening(minNodes=1), "schedule": "0 22-6 * * *"}]})

    assert overlapping is not None and overlapping.startswith("spec.windows: windows evening")
    assert inverted is not None and inverted.startswith("spec.windows[0].schedule: schedule")
    assert spec_refusal({"windows": [evening(minNodes=1)]}) is None
    assert spec_refusal(None) is None


def test_the_replay_has_the_floor_ready_at_its_opening_and_off_after_it() -> None:
    window = {**evening(minNodes=1), "schedule": "0 1 * * *"}  # 01:00-02:00 UTC
    result = replay(sim.trace([], hours=4, windows=[window]))
    (m,) = [m for m in result.machines if [p for _, p in m.timeline if p == "Ready"]]
    timeline = m.timeline
    opens = 3600.0
    on = min(t for t, p in timeline if p != "Off")
    ready = min(t for t, p in timeline if p == "Ready")
    # Powered on one boot estimate (its 600 s boot timeout: not learned yet) + margin ahead,
    # Ready (its true boot is 60 s) before the window opens.
    assert on == opens - m.template.boot_estimate - MARGIN.total_seconds()
    assert ready <= opens
    # Unneeded all along, it powers off the moment the window closes, and only then.
    off_from = min(t for t, p in timeline if p in ("Draining", "PoweringOff"))
    assert off_from == opens + 3600
    assert timeline[-1][1] == "Off"
    assert sim.phases(result, m.template.key.name).count("Ready") == 1


def test_status_shows_the_window_in_force_and_until_when() -> None:
    spec = {"windows": [{**evening(minNodes=1), "timeZone": "Europe/Berlin"}]}
    # 12:10 Berlin is 11:10 UTC in March (CET): T0 (12:00 UTC) is inside the window.
    assert status.window_in_force(spec, at(0)) == "evening until 13:10 Europe/Berlin"
    assert status.window_in_force(spec, at(7200)) == "-"
    row = status.group_row({"metadata": {"name": "lab"}, "spec": spec}, [], at(0))
    text = status.render_text({"groups": [row], "machines": []}, all_namespaces=False)
    assert "WINDOW" in text.splitlines()[0]
    assert "evening until 13:10 Europe/Berlin" in text


def test_a_group_whose_windows_fail_validation_is_planned_without_them_and_says_so() -> None:
    late = {**evening(maxNodes=1), "name": "late"}  # the same times as evening
    snapshot = snap(group(windows=[evening(minNodes=1), late]), machine("nuc-1"))
    assert snapshot.groups[0].windows == ()
    assert snapshot.problems == (
        "groups.lightsout.dev lightsout/lab: spec.windows unreadable, defaults used",
    )


def _quiet_household(**window: Any) -> list[Any]:
    """Group lab (a quiet window open now, T0) with a frugal machine; Group spare with a
    hungrier one; the lowest-energy choice for a small pod would be lab's."""
    quiet = {**evening(quiet=True, **window), "schedule": "0 12 * * *"}
    return [
        group(windows=[quiet]),
        machine("frugal", "8", "32Gi", watts=(30, 10, 1), learned={"bootSeconds": NUC_BOOT}),
        group("spare"),
        machine("hungry", "4", "16Gi", group="spare", watts=(200, 80, 5)),
    ]


def test_a_quiet_window_leaves_pods_another_group_can_host_to_that_group() -> None:
    small = pod("small", "1", "1Gi")
    quiet = plan(snap(*_quiet_household(), small), at(60))
    assert ons(quiet) == ["hungry"]
    assert (
        "window evening (12:00-13:00 UTC): quiet until 13:00"
        in next(iter(quiet.explanations.groups.values()))[1]
    )
    after = plan(snap(*_quiet_household(), small), at(3600))  # closed: lowest energy again
    assert ons(after) == ["frugal"]


def test_a_quiet_window_still_wakes_a_machine_for_a_pod_only_its_group_can_host() -> None:
    big = pod("big", "6", "1Gi")  # only frugal (8 cpu) can host it
    assert ons(plan(snap(*_quiet_household(), big), at(60))) == ["frugal"]


def test_a_strict_quiet_window_wakes_no_machine_even_for_such_a_pod() -> None:
    big = pod("big", "6", "1Gi")
    strict = plan(snap(*_quiet_household(strict=True), big), at(60))
    assert ons(strict) == []
    assert "quiet, strict until 13:00: no power-on for any pending pod" in pod_note(strict, "big")
    assert ons(plan(snap(*_quiet_household(strict=True), big), at(3600))) == ["frugal"]


def test_strict_without_quiet_is_refused_naming_the_field() -> None:
    error = _refusal([evening(minNodes=1, strict=True)])
    (detail,) = error.errors()
    assert detail["loc"] == ("windows", 0)
    assert "strict applies only to a quiet window" in detail["msg"]


def test_the_replay_holds_a_pod_through_a_strict_quiet_window() -> None:
    window = {**evening(quiet=True, strict=True), "schedule": "0 1 * * *"}  # 01:00-02:00 UTC
    pods = [sim.pod(3600 + 600, 300, "late-job")]  # arrives at 01:10
    result = replay(sim.trace(pods, hours=4, windows=[window]))
    (job,) = result.pods
    assert job.started is not None and job.started > 7200  # after the window closed
    loud = replay(sim.trace(pods, hours=4))
    assert loud.pods[0].wait is not None and loud.pods[0].wait < 600
