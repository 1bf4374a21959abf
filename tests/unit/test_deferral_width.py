"""A deferrable Job priced as the scale-up runs it (`planning.autoscaler.deferral`): its
`spec.parallelism` pods side by side on as many machines as they need (in waves when those
cannot hold them all), on the machines the Group's selectionPolicy would power on for them
(`policy.select`), so the machine a Job is held for is the one powered on at its release.

Same style as `test_deferral`: raw API objects through `snapshot_from` and `plan`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lightsout.planning.autoscaler.deferral import MARGIN
from tests.unit.test_autoscale_objects import (
    at,
    group,
    machine,
    ons,
    pod,
    ready_machine,
    snap,
    ts,
)
from tests.unit.test_deferral import AFTERNOON, CHEAP_AT, KEY, job, planned, released

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


def wide(parallelism: int | None, completions: int | None = None, **kw: Any) -> Obj:
    """`job` with its `spec.parallelism` and `spec.completions` (None: unset)."""
    made = job(**kw)
    for field, value in (("parallelism", parallelism), ("completions", completions)):
        if value is not None:
            made["spec"][field] = value
    return made


def nucs(count: int = 2, **spec: Any) -> list[Obj]:
    """`count` NUCs of 4 cpu (50 W busy, boot in 120 s), off, in a Group on AFTERNOON."""
    found: list[Obj] = [group(electricity=AFTERNOON, **spec)]
    for i in range(1, count + 1):
        found.append(machine(f"nuc-{i}", watts=(50, 10, 2), learned={"bootSeconds": 120}))
    return found


@pytest.mark.parametrize(
    ("parallelism", "completions", "width"),
    [(None, None, 1), (3, None, 3), (3, 2, 2), (2, 5, 2), (None, 4, 1), (0, None, 1)],
)
def test_the_width_is_the_pods_the_job_controller_runs_at_once(
    parallelism: int | None, completions: int | None, width: int
) -> None:
    (held,) = snap(*nucs(), wide(parallelism, completions)).deferred
    assert held.width == width


def test_three_pods_that_fit_two_a_machine_are_priced_on_two_machines() -> None:
    # 2 cpu each on 4-cpu NUCs: two on nuc-1, one on nuc-2, both machines priced. Each draws
    # 50 W for 120 s of boot and 30 min of run at 0.10: 0.0027 EUR, 0.0053 EUR together.
    wait = planned(*nucs(), wide(3, cpu="2")).waits[KEY]
    assert wait.start == CHEAP_AT
    assert "(0.0053 EUR for 3 pods at once on 2 machines (2 on nuc-1, 1 on nuc-2))" in wait.reason
    assert "runs 30 min (lightsout.dev/expected-duration)" in wait.reason
    # Released, the reason says the width too; a Job of one pod is said as before.
    now = released(planned(*nucs(), wide(3, cpu="2"), now=2 * 3600))["backup"]
    assert now == (
        "released: now is its cheapest start (0.0053 EUR for 3 pods at once on 2 machines "
        "(2 on nuc-1, 1 on nuc-2))"
    )
    alone = planned(*nucs(), wide(1, cpu="2")).waits[KEY]
    assert "(0.0027 EUR on machine nuc-1)" in alone.reason


def test_pods_beyond_what_can_run_at_once_run_in_waves_and_start_earlier() -> None:
    # maxNodes 1: two of the three pods at once, so the run takes two waves (60 min), and its
    # latest start is a wave earlier: deadline - margin - boot - 2 x 30 min.
    roomy = {"lightsout.dev/max-delay": "3h", "lightsout.dev/expected-duration": "30m"}
    wait = planned(*nucs(maxNodes=1), wide(3, cpu="2", annotations=roomy)).waits[KEY]
    assert wait.start == at(3 * 3600) - MARGIN - timedelta(seconds=120 + 60 * 60)
    assert "for 3 pods, 2 at once on 1 machine (2 on nuc-1) in 2 waves" in wait.reason
    assert "runs 60 min in 2 waves of 30 min (lightsout.dev/expected-duration)" in wait.reason
    # Its deadline counts the waves: 72 min of boot, waves and margin do not fit in 70.
    tight = {"lightsout.dev/max-delay": "70m", "lightsout.dev/expected-duration": "30m"}
    reason = released(planned(*nucs(maxNodes=1), wide(3, cpu="2", annotations=tight)))
    assert "it must start now" in reason["backup"]


def test_the_machine_priced_is_the_one_powered_on_at_the_release() -> None:
    # FastestBoot powers on `quick` for a pending pod, though `frugal` (a quarter of its draw)
    # would run the Job for less: the Job is priced on `quick`, the machine it will wake.
    objects = [
        group(electricity=AFTERNOON, selectionPolicy="FastestBoot"),
        machine("quick", watts=(200, 40, 2), learned={"bootSeconds": 60}),
        machine("frugal", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    wait = planned(*objects, job()).waits[KEY]
    assert wait.start == CHEAP_AT and "on machine quick)" in wait.reason
    assert "on machine quick)" in released(planned(*objects, job(), now=2 * 3600))["backup"]
    # Released, its pod is pending: the scale-up powers on the machine the Job was priced on.
    running = job(suspend=False)
    pending = pod("backup-x7k2p", "1", None, owner="Job", pending_since=at(2 * 3600 - 30))
    assert ons(planned(*objects, running, pending, now=2 * 3600)) == ["quick"]


def test_a_job_the_scale_up_would_run_at_one_price_is_not_held_for_another_groups_hours() -> None:
    # The scale-up picks `steady` (0.20 a kWh against 0.30 outside the cheap hours), whose
    # price never changes: holding the Job for `cheap`'s afternoon would save nothing.
    objects = [
        group(electricity=AFTERNOON),
        machine("cheap", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        group("steady", electricity={"pricePerKWh": 0.20}),
        machine("steady", group="steady", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    reason = released(planned(*objects, job()))["backup"]
    assert reason == "released at once: its machines' Groups have one price at every hour"
    pending = pod("backup-x7k2p", "1", None, owner="Job")
    assert ons(planned(*objects, job(suspend=False), pending)) == ["steady"]


def test_a_finish_by_job_of_width_two_reads_its_deadline_and_width_together() -> None:
    due = {"lightsout.dev/finish-by": ts(at(6 * 3600)), "lightsout.dev/expected-duration": "30m"}
    (held,) = snap(*nucs(), wide(2, 2, annotations=due)).deferred
    assert (held.width, held.deadline) == (2, at(6 * 3600))


def test_a_machine_already_on_counts_against_max_nodes_and_lends_only_its_free_room() -> None:
    # maxNodes 2 and nuc-1 is on, its 4 cpu taken: one more machine may be powered on, and
    # nuc-1 holds none of the Job's pods. Two of the four 2-cpu pods run at once on the one
    # machine left: two waves (60 min), the latest start a wave earlier.
    roomy = {"lightsout.dev/max-delay": "3h", "lightsout.dev/expected-duration": "30m"}
    objects = [
        group(electricity=AFTERNOON, maxNodes=2),
        ready_machine("nuc-1", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        pod("busy", "4", None, node="nuc-1"),
        machine("nuc-2", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        machine("nuc-3", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    wait = planned(*objects, wide(4, cpu="2", annotations=roomy)).waits[KEY]
    assert "for 4 pods, 2 at once on 1 machine (2 on nuc-2) in 2 waves" in wait.reason
    assert "runs 60 min in 2 waves of 30 min" in wait.reason
    assert wait.start == at(3 * 3600) - MARGIN - timedelta(seconds=120 + 60 * 60)


def test_a_machine_already_on_holds_only_what_its_running_pods_leave() -> None:
    # nuc-1 is on with 2 of its 4 cpu taken: one 2-cpu pod fits beside them. maxNodes 2 with
    # nuc-1 counted lets one more machine on: three of the four pods at once, two waves.
    objects = [
        group(electricity=AFTERNOON, maxNodes=2),
        ready_machine("nuc-1", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        pod("busy", "2", None, node="nuc-1"),
        machine("nuc-2", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        machine("nuc-3", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    wait = planned(*objects, wide(4, cpu="2")).waits[KEY]
    assert "for 4 pods, 3 at once on 2 machines (2 on nuc-2, 1 on nuc-1) in 2 waves" in wait.reason


def test_a_job_no_machine_has_room_for_now_is_released_at_once() -> None:
    # maxNodes 1, and the one machine on is full: nothing could take a pod now, so there is
    # no machine to price and the Job is released (it pends as any pod would).
    objects = [
        group(electricity=AFTERNOON, maxNodes=1),
        ready_machine("nuc-1", watts=(50, 10, 2), learned={"bootSeconds": 120}),
        pod("busy", "4", None, node="nuc-1"),
        machine("nuc-2", watts=(50, 10, 2), learned={"bootSeconds": 120}),
    ]
    reason = released(planned(*objects, wide(2, cpu="2")))["backup"]
    assert reason == (
        "released at once: no machine could run it now (those that could are full, "
        "or their Groups at maxNodes)"
    )
