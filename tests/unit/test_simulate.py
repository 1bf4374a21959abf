"""The replay simulator (`lightsout.simulate`): traces, CronJob runs, the replay of the
production planner and state machine, the report and the offline optimum.

Small hand-built traces whose outcome can be worked out by hand; the shipped weeks are only
checked to be what their seeded generator writes (replaying them is `make bench`'s job).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lightsout import cli
from lightsout.models.enums import Phase
from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.wake import next_wake
from lightsout.simulate.analysis import optimum
from lightsout.simulate.analysis.optimum import model, solver
from lightsout.simulate.analysis.report import longest_wait, percentile, render_text, summarise
from lightsout.simulate.replay.engine import Options, Policy, Result, Scoring, Simulator, replay
from lightsout.simulate.replay.machines import WaitCause
from lightsout.simulate.traces import generate
from lightsout.simulate.traces.trace import Durations, Trace, TracePod, load, write
from lightsout.state import cron
from lightsout.state.build import CRONJOBS_KEY, GROUPS_KEY, MACHINES_KEY, snapshot_from
from lightsout.state.parse import scheduling_requirements
from lightsout.state.types import ExpectedPod, ObjectKey, Snapshot

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 2, tzinfo=UTC)
TRUTH = Durations(power_on_seconds=10, boot_seconds=50, shutdown_seconds=20)


def group(**spec: Any) -> dict[str, Any]:
    body = {"maxNodes": 5, "electricity": {"pricePerKWh": 0.30, "currency": "EUR"}, **spec}
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": "lab"},
        "spec": body,
    }


def node(name: str, cpu: int = 4, watts: tuple[int, int, int] = (120, 40, 5)) -> dict[str, Any]:
    on, idle, off = watts
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {
            "desiredPowerState": "Off",
            "group": "lab",
            "kubernetesNodeName": name,
            "driver": {
                "wol": {
                    "macAddress": "02:00:00:00:00:01",
                    "ssh": {"host": name, "user": "lo", "privateKeySecretRef": {"name": "ssh"}},
                }
            },
            "resources": {"cpu": cpu, "memory": "16Gi"},
            "power": {"onWatts": on, "idleWatts": idle, "offWatts": off},
        },
    }


def pod_spec(cpu: str = "1") -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}


def pod(at: float, run: float, name: str, cpu: str = "1") -> TracePod:
    return TracePod(at, run, "default", name, pod_spec(cpu), "Job", name)


def cronjob(schedule: str, policy: str = "Allow", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "backup", "namespace": "ops"},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {"template": {"spec": pod_spec()}}},
            **spec,
        },
    }


def trace(
    pods: list[TracePod],
    *,
    machines: list[dict[str, Any]] | None = None,
    cronjobs: tuple[dict[str, Any], ...] = (),
    hours: float = 2.0,
    cron_run: float = 60.0,
    **group_spec: Any,
) -> Trace:
    machines = machines or [node("m1"), node("m2")]
    return Trace(
        name="t",
        start=START,
        duration_seconds=hours * 3600,
        machines=(group(**group_spec), *machines),
        cronjobs=cronjobs,
        pods=tuple(pods),
        durations={m["metadata"]["name"]: TRUTH for m in machines},
        cron_run_seconds={"ops/backup": cron_run} if cronjobs else {},
    )


def phases(result: Result, name: str) -> list[str]:
    (machine,) = [m for m in result.machines if m.template.key.name == name]
    return [phase for _, phase in machine.timeline]


# --- the trace format and the shipped weeks -------------------------------------------------


@pytest.mark.parametrize("name", sorted(generate.GENERATORS))
def test_shipped_trace_is_what_its_seeded_generator_writes(name: str, tmp_path: Path) -> None:
    written = write(generate.generate(name), tmp_path / name)
    shipped = ROOT / "traces" / name
    for path in sorted(written.iterdir()):
        assert (shipped / path.name).read_text() == path.read_text(), path.name
    again = load(shipped)
    assert again.pods and again.machines
    assert again.durations == generate.generate(name).durations


def test_bursty_random_has_no_schedule_and_homelab_week_has_every_kind_of_load() -> None:
    bursty = generate.generate("bursty-random")
    assert bursty.cronjobs == ()
    week = generate.generate("homelab-week")
    owners = {p.owner_kind for p in week.pods}
    assert owners == {"Job", "ReplicaSet", None}
    assert any("nvidia.com/gpu" in json.dumps(p.spec) for p in week.pods)
    assert {c["metadata"]["name"] for c in week.cronjobs} >= {"backup-nightly", "db-dump"}


def test_a_trace_round_trips_through_its_directory(tmp_path: Path) -> None:
    original = trace([pod(60, 300, "a"), pod(90, 30, "b")], cronjobs=(cronjob("*/30 * * * *"),))
    loaded = load(write(original, tmp_path / "t"))
    assert loaded.pods == original.pods
    assert loaded.machines == original.machines
    assert loaded.durations == original.durations
    assert loaded.cron_run_seconds == original.cron_run_seconds


# --- CronJob runs ---------------------------------------------------------------------------


def test_cron_runs_follow_the_time_zone_and_suspend() -> None:
    berlin = cron.read(cronjob("0 2 * * *", timeZone="Europe/Berlin"))
    times = cron.fire_times(berlin, START, START + timedelta(days=2))
    # 02:00 in Berlin is 01:00 UTC in November.
    assert [t.astimezone(UTC).hour for t in times] == [1, 1]
    utc = cron.read(cronjob("@hourly"))
    assert len(cron.fire_times(utc, START, START + timedelta(hours=3))) == 3  # 00, 01, 02
    suspended = cron.read(cronjob("* * * * *", suspend=True))
    assert cron.fire_times(suspended, START, START + timedelta(hours=1)) == []
    with pytest.raises(cron.CronError):
        cron.fire_times(cron.read(cronjob("every day")), START, START + timedelta(hours=1))


@pytest.mark.parametrize(
    ("policy", "deadline", "runs", "late", "skipped"),
    [
        ("Allow", None, 10, 0, 0),
        # The controller leaves a time missed under Forbid unmet and starts it the moment the
        # active Job ends (a run for :01 at 01:30, one for :03 at 03:00 + scheduling, ...)...
        ("Forbid", None, 6, 5, 4),
        # ...unless startingDeadlineSeconds has passed by then: the run is skipped for good.
        ("Forbid", 10, 5, 0, 5),
        ("Replace", None, 10, 0, 0),
    ],
)
def test_concurrency_policy_decides_what_a_run_does_to_the_previous_one(
    policy: str, deadline: int | None, runs: int, late: int, skipped: int
) -> None:
    # A run every minute that takes 90 s: Forbid delays or skips, Replace cuts them short.
    extra = {} if deadline is None else {"startingDeadlineSeconds": deadline}
    job = cronjob("* * * * *", policy, **extra)
    t = trace([], cronjobs=(job,), hours=10 / 60, cron_run=90, minNodes=1)
    result = replay(t)
    assert len(result.pods) == runs
    assert (result.late_cron_runs, result.skipped_cron_runs) == (late, skipped)
    if policy == "Replace":
        assert result.replaced_cron_runs >= 8


# --- the replay of the production planner and state machine ---------------------------------


def test_one_pod_powers_a_machine_on_through_every_phase_and_off_again() -> None:
    result = replay(trace([pod(60, 600, "a")], scaleDown={"unneededSeconds": 300}))
    assert phases(result, "m1") == [
        "Off",
        "PoweringOn",
        "Booting",
        "Ready",
        "Draining",
        "PoweringOff",
        "Off",
    ]
    assert phases(result, "m2") == ["Off"]
    (sim_pod,) = result.pods
    # It waits for the power-on Job and the boot, plus the planner's 0.1 s debounce.
    assert sim_pod.wait == pytest.approx(TRUTH.power_on_seconds + TRUTH.boot_seconds + 0.1)
    summary = summarise(result)
    assert summary["machines"][0]["powerOns"] == 1
    assert summary["waits"]["other"]["maxSeconds"] == pytest.approx(60.1)
    assert 0 < summary["energy"]["usedKWh"] < summary["energy"]["alwaysOnKWh"]


def test_changing_a_planner_setting_changes_the_simulated_result() -> None:
    # Two pods 20 minutes apart: waiting 30 minutes before a power-off keeps the machine on
    # through the gap (one power cycle, more idle energy); waiting 1 minute powers it off in
    # between (two power cycles, less energy, the second pod waits for a boot again).
    pods = [pod(60, 300, "a"), pod(60 + 300 + 1200, 300, "b")]
    patient = summarise(
        replay(trace(pods), Options(overrides=("group.spec.scaleDown.unneededSeconds=1800",)))
    )
    eager = summarise(
        replay(trace(pods), Options(overrides=("group.spec.scaleDown.unneededSeconds=60",)))
    )
    assert patient["machines"][0]["powerOns"] == 1
    assert eager["machines"][0]["powerOns"] == 2
    assert eager["energy"]["usedKWh"] < patient["energy"]["usedKWh"]
    assert eager["waits"]["other"]["p50Seconds"] > patient["waits"]["other"]["p50Seconds"]


@pytest.mark.parametrize(
    ("scoring", "spread"),
    [
        (Scoring.LEAST_ALLOCATED, True),
        (Scoring.MOST_ALLOCATED, False),
    ],
)
def test_scheduler_scoring_spreads_or_packs(scoring: Scoring, spread: bool) -> None:
    # Both machines kept on (minNodes 2); two pods arrive once they are Ready.
    t = trace([pod(600, 300, "a"), pod(601, 300, "b")], minNodes=2)
    result = replay(t, Options(scoring=scoring))
    assert [p.wait for p in result.pods] == [0.0, 0.0]
    hosts = {p.host for p in result.pods}
    assert len(hosts) == (2 if spread else 1)


def test_always_on_saves_nothing_and_the_reactive_baseline_runs_the_same_placement() -> None:
    pods = [pod(60, 600, "a")]
    always = summarise(replay(trace(pods), Options(policy=Policy.ALWAYS_ON)))
    assert always["energy"]["savedKWh"] == pytest.approx(0.0, abs=0.01)
    reactive = summarise(replay(trace(pods), Options(policy=Policy.REACTIVE)))
    assert reactive["machines"][0]["powerOns"] == 1
    # It notices the pending pod at its next 10 s scan, not at once.
    assert reactive["waits"]["other"]["maxSeconds"] >= 60


def test_a_machine_pinned_on_is_replayed_on_all_week_and_its_energy_counted() -> None:
    """`desiredPowerState: On` with autoscaling off: the operator powers it on and never off,
    so the replay does too (it used to start every machine Off and leave this one there)."""
    pinned = node("m1")
    pinned["spec"] |= {"desiredPowerState": "On", "autoscaling": {"enabled": False}}
    result = replay(trace([], machines=[pinned, node("m2")], hours=24))
    assert phases(result, "m1") == ["Off", "PoweringOn", "Booting", "Ready"]
    assert phases(result, "m2") == ["Off"]
    summary = summarise(result)
    used = {m["name"]: m for m in summary["machines"]}
    # Idle (40 W) for the day but the boot: about 0.96 kWh, far above m2's 5 W off.
    assert summary["energy"]["usedKWh"] == pytest.approx(0.96 + 0.12, abs=0.02)
    assert used["m1"]["powerOns"] == 1


def clone(name: str) -> dict[str, Any]:
    """An Ephemeral Proxmox machine that joins by itself (it takes a pool address)."""
    machine = node(name)
    machine["spec"]["driver"] = {
        "proxmox": {
            "mode": "Ephemeral",
            "endpoint": "https://pve.example:8006",
            "node": "pve1",
            "template": {"vmid": 9000},
            "credentialsSecretRef": {"name": "pve"},
            "join": {"apiServerEndpoint": "10.0.0.10:6443"},
        }
    }
    return machine


def test_ephemeral_clones_provision_with_their_durations_and_run_out_of_addresses() -> None:
    """Two pods that need a clone each, a pool of one address: the first clone is provisioned
    (its power-on Job's 10 s) and deprovisioned (its 20 s); the second finds no address, as
    the operator would, and after its attempts is Failed saying so, made no clone and drew
    nothing; its pod runs once the first pod is done."""
    pool = {"cidr": "10.77.0.0/24", "start": "10.77.0.10", "end": "10.77.0.10"}
    pods = [pod(60, 3000, "a", cpu="3"), pod(61, 3000, "b", cpu="3")]
    result = replay(trace(pods, machines=[clone("m1"), clone("m2")], hours=3, addressPool=pool))
    first, second = result.machines
    assert [p for _, p in first.timeline] == [
        "Off", "Provisioning", "Booting", "Ready", "Draining", "Deprovisioning", "Off"
    ]  # fmt: skip
    times = dict((p, t) for t, p in first.timeline)
    assert times["Booting"] - times["Provisioning"] == pytest.approx(TRUTH.power_on_seconds)
    assert times["Off"] - times["Deprovisioning"] == pytest.approx(TRUTH.shutdown_seconds)
    assert second.state.phase is Phase.FAILED
    assert "address pool of Group lab is exhausted" in second.state.message
    assert second.power_ons == 0
    # b starts on the first clone the moment a ends there (a started once it was Ready).
    started = {p.key.name: p.arrival + (p.wait or 0) for p in result.pods}
    assert started["b"] == pytest.approx(started["a"] + 3000)
    assert started["a"] == pytest.approx(times["Ready"])


def test_a_pool_as_large_as_the_demand_provisions_every_clone() -> None:
    pool = {"cidr": "10.77.0.0/24", "start": "10.77.0.10", "end": "10.77.0.11"}
    pods = [pod(60, 3000, "a", cpu="3"), pod(61, 3000, "b", cpu="3")]
    result = replay(trace(pods, machines=[clone("m1"), clone("m2")], hours=3, addressPool=pool))
    assert [m.power_ons for m in result.machines] == [1, 1]
    assert all(m.state.phase is Phase.OFF for m in result.machines)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0


# --- the offline optimum --------------------------------------------------------------------


def test_optimum_of_one_pod_is_the_hand_computed_energy() -> None:
    t = trace([pod(1800, 3600, "a")], machines=[node("m1")])
    bound = optimum.solve(t, time_limit=20)
    # 2 h standby at 5 W, 1 h up at idle-standby 35 W, the pod's quarter of (120-40) W for 1 h,
    # one cycle of 10+50+20 s at 35 W.
    expected = 10 + 35 + 20 + 80 / 3600 * 35
    assert (bound.kind, bound.source, bound.gap) == (optimum.ZERO_WAIT, "MIP optimum", 0.0)
    assert bound.kwh is not None
    assert bound.kwh * 1000 == pytest.approx(expected, rel=1e-4)
    simulated = summarise(replay(t))["energy"]["usedKWh"]
    assert simulated >= bound.kwh


def test_optimum_packs_two_pods_on_the_cheaper_machine() -> None:
    machines = [node("big", cpu=8, watts=(200, 80, 5)), node("small", cpu=4, watts=(60, 20, 2))]
    t = trace([pod(600, 1800, "a"), pod(600, 1800, "b")], machines=machines)
    bound = optimum.solve(t, time_limit=20)
    assert bound.kwh is not None
    # Both on "small": 0.5 h x 18 W + 2 x (40 W x 1/4 x 0.5 h) + a cycle + standby of both.
    standby = (5 + 2) * 2
    expected = standby + 0.5 * 18 + 2 * 40 * 0.25 * 0.5 + 80 / 3600 * 18
    assert bound.kwh * 1000 == pytest.approx(expected, rel=1e-4)


def _contended() -> Trace:
    """Two pods needing 3 of the one machine's 4 cpu, overlapping: no zero-wait schedule."""
    return trace(
        [pod(600, 1800, "a", cpu="3"), pod(900, 1800, "b", cpu="3")], machines=[node("m1")]
    )


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"non-finite JSON number {constant}")

    return json.loads(text, parse_constant=refuse)


def test_contended_pods_get_no_bound_from_the_infeasible_zero_wait_model() -> None:
    bound = optimum.solve(_contended(), time_limit=20)
    assert (bound.kind, bound.kwh, bound.gap) == (optimum.NO_BOUND, None, None)
    assert "no zero-wait schedule" in bound.note
    _strict(json.dumps(bound.as_json(), allow_nan=False))


def test_contended_pods_are_bounded_with_waits_below_the_replay_and_above_their_work() -> None:
    t = _contended()
    result = replay(t)
    waited = longest_wait(result)
    assert waited > 1000  # b waited for a
    bound = optimum.solve(t, time_limit=20, max_wait=waited)
    assert (bound.kind, bound.source, bound.gap) == (optimum.WITH_WAITS, "LP relaxation", None)
    assert bound.kwh is not None
    # Standby 2 h x 5 W, the machine up at least 1 h (the pods cannot overlap) x 35 W, each
    # pod's 3/4 of 80 W for 0.5 h; at most one cycle of 80 s x 35 W on top.
    work = 10 + 35 + 2 * 80 * 0.75 * 0.5
    assert work <= bound.kwh * 1000 <= work + 80 / 3600 * 35 + 1e-6
    assert bound.kwh <= summarise(result)["energy"]["usedKWh"]


def test_the_with_waits_bound_is_below_the_zero_wait_one_it_relaxes() -> None:
    t = trace([pod(600, 1800, "a"), pod(3000, 600, "b", cpu="2")], machines=[node("m1")])
    zero = optimum.solve(t, time_limit=20)
    assert zero.kind == optimum.ZERO_WAIT and zero.kwh is not None
    waits, upper = model.waits_problem(t, optimum.zero_wait_runs(t), 0.0)
    h = solver.highs(__import__("highspy"), __import__("numpy"), waits, upper, 20)
    h.run()
    relaxed = (h.getInfo().objective_function_value + waits.constant) / 1000
    assert relaxed <= zero.kwh + 1e-9
    assert relaxed >= zero.kwh * 0.9


def test_contended_simulate_prints_the_kind_gap_and_why_beside_the_ratio_in_strict_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(_contended(), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "--optimum", "-o", "json"]) == 0
    out = _strict(capsys.readouterr().out)
    bound = out["bound"]
    assert bound["kind"] == "with waits" and bound["gap"] is None
    assert bound["kWh"] <= out["energy"]["usedKWh"]
    assert "each pod may wait up to" in bound["note"]
    assert cli.main(["simulate", str(directory), "--optimum"]) == 0
    text = capsys.readouterr().out
    assert "offline bound (with waits, LP relaxation, solver Optimal, gap unknown)" in text
    assert "Lights-Out / bound = " in text and "no zero-wait schedule" in text


def test_no_bound_prints_no_ratio_and_says_why() -> None:
    t = _contended()
    summary = summarise(replay(t))
    bound = optimum.solve(t, time_limit=20).as_json()
    line = render_text(summary, None, bound).splitlines()[-1]
    assert line.startswith("offline bound: none, so no ratio (no zero-wait schedule")
    assert "/ bound" not in line


# --- the command ----------------------------------------------------------------------------


def test_simulate_command_prints_json_with_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(trace([pod(60, 600, "a")]), tmp_path / "t")
    assert cli.main(["simulate", str(directory), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "lightsout"
    assert out["baseline"]["policy"] == "reactive"
    assert out["waits"]["other"]["pods"] == 1
    assert cli.main(["simulate", str(tmp_path / "missing")]) == 2


# --- pre-warming for scheduled work ---------------------------------------------------------


def _planner_snapshot(expected_in: float, learned: float | None = None) -> Snapshot:
    snapshot = snapshot_from({GROUPS_KEY: [group()], MACHINES_KEY: [node("m1")]}, complete=True)
    (machine,) = snapshot.machines
    machine = dataclasses.replace(machine, phase=Phase.OFF, learned_boot_seconds=learned)
    run = ExpectedPod(
        ObjectKey("ops", "backup-1"),
        START + timedelta(seconds=expected_in),
        scheduling_requirements(pod_spec()),
    )
    return dataclasses.replace(snapshot, machines=(machine,), expected=(run,))


def test_planner_powers_on_for_a_cronjob_run_once_it_is_within_the_boot_time() -> None:
    # Learned boot 60 s + 15 s margin: a run 70 s away is due, one 80 s away is not yet.
    soon = plan(_planner_snapshot(70, learned=60), START)
    assert [(type(a).__name__, a.machine.name) for a in soon.actions] == [("PowerOn", "m1")]
    later_snapshot = _planner_snapshot(80, learned=60)
    later = plan(later_snapshot, START)
    assert later.actions == ()
    assert next_wake(later_snapshot, later, START) == START + timedelta(seconds=5)
    # Never learned: the boot timeout (600 s by default) is the lead time.
    assert plan(_planner_snapshot(500), START).power_on


def test_the_live_snapshot_announces_cronjob_runs_as_the_simulator_does() -> None:
    # The operator's handler gives snapshot_from its watched CronJobs and the time; the
    # replay announces the trace's. Both go through cron.expected_pods: same pods, same times.
    idx = {**cronjob("*/20 * * * *"), "metadata": {"name": "idx", "namespace": "ops"}}
    jobs = (cronjob("30 * * * *"), idx)
    t = trace([], cronjobs=jobs, hours=2)
    simulator = Simulator(t, Options())
    simulator.run()
    for seconds in (0.0, 600.0, 1800.0, 1800.5, 4000.0):
        simulator.clock.now = seconds
        now = START + timedelta(seconds=seconds)
        live = snapshot_from({CRONJOBS_KEY: list(jobs)}, complete=True, now=now)
        assert live.expected == simulator.snapshot().expected, seconds
    live = snapshot_from({CRONJOBS_KEY: list(jobs)}, now=START + timedelta(minutes=10))
    assert [(str(e.key), e.at) for e in live.expected] == [
        (
            f"ops/idx-{int((START + timedelta(minutes=20)).timestamp() // 60)}",
            START + timedelta(minutes=20),
        ),
        (
            f"ops/backup-{int((START + timedelta(minutes=30)).timestamp() // 60)}",
            START + timedelta(minutes=30),
        ),
    ]
    assert live.expected[0].scheduling == scheduling_requirements(pod_spec())
    # Without the time nothing is announced; a suspended CronJob never announces; a schedule
    # the builder cannot read is named among the problems, and the others still count.
    assert snapshot_from({CRONJOBS_KEY: list(jobs)}).expected == ()
    suspended = cronjob("30 * * * *", suspend=True)
    broken = {**cronjob("every day"), "metadata": {"name": "broken", "namespace": "ops"}}
    other = snapshot_from({CRONJOBS_KEY: [suspended, broken, jobs[1]]}, now=START)
    assert [e.key.name.split("-")[0] for e in other.expected] == ["idx"]
    assert any("ops/broken" in problem for problem in other.problems), other.problems


def test_a_power_on_for_a_cronjob_run_says_it_is_pre_warming() -> None:
    objects = {
        GROUPS_KEY: [group()],
        MACHINES_KEY: [node("m1")],
        CRONJOBS_KEY: [cronjob("30 * * * *")],
    }
    now = START + timedelta(minutes=29)  # 60 s before the run: inside the 600 s + 15 s lead
    snapshot = snapshot_from(objects, complete=True, now=now)
    machine = dataclasses.replace(snapshot.machines[0], phase=Phase.OFF)
    result = plan(dataclasses.replace(snapshot, machines=(machine,)), now)
    (action,) = result.actions
    assert action.machine.name == "m1"
    assert action.reason.startswith("pre-warming for the CronJob run ops/backup-"), action.reason
    assert "due at 00:30:00Z (in 60s, lead time 615s" in action.reason, action.reason


def test_prewarming_makes_cronjob_runs_start_without_waiting() -> None:
    t = trace([], cronjobs=(cronjob("30 * * * *"),), hours=4)
    warm = summarise(replay(t))["waits"]["cronjob"]
    cold = summarise(replay(t, Options(prewarm=False)))["waits"]["cronjob"]
    assert warm["pods"] == cold["pods"] == 4
    assert warm["maxSeconds"] == 0.0
    # Without it every run waits for a power-on and a boot.
    assert cold["p50Seconds"] == pytest.approx(60.1)


def test_prewarming_powers_one_machine_on_per_run_just_in_time() -> None:
    # A household: a frugal tower that boots in about 3 minutes (LowestEnergy picks it for the
    # hourly 2-CPU backup), a NUC that boots in 95 s (the only one with the Zigbee stick, so
    # it learns its boot at once), a 1-CPU Pi too small for the backup that never boots, so
    # its 600 s boot timeout is all the planner knows of it.
    def machine(name: str, cpu: int, watts: tuple[int, int, int], **labels: str) -> Any:
        spec = node(name, cpu, watts)
        spec["spec"]["labels"] = labels
        return spec

    zigbee = {**pod_spec(), "nodeSelector": {"zigbee": "true"}}
    backup = cronjob("30 * * * *", jobTemplate={"spec": {"template": {"spec": pod_spec("2")}}})
    t = Trace(
        name="household",
        start=START,
        duration_seconds=6 * 3600,
        machines=(
            group(),
            machine("pi", 1, (6, 3, 1)),
            machine("nuc", 4, (35, 15, 1), zigbee="true"),
            machine("tower", 8, (30, 10, 2)),
        ),
        cronjobs=(backup,),
        pods=(TracePod(0, 60, "home", "zigbee", zigbee, "Job", "zigbee"),),
        durations={
            "pi": Durations(3, 60, 10),
            "nuc": Durations(5, 90, 15),
            "tower": Durations(8, 170, 20),
        },
        cron_run_seconds={"ops/backup": 60.0},
    )
    result = replay(t)
    summary = summarise(result)
    assert summary["waits"]["cronjob"]["pods"] == 6
    assert summary["waits"]["cronjob"]["maxSeconds"] == 0.0
    # One power-on per run, all of the tower: the NUC, quicker but Ready no sooner than it
    # is needed, is not powered on as well (it only comes on for the Zigbee pod).
    powered = {m["name"]: m["powerOns"] for m in summary["machines"]}
    assert powered == {"pi": 0, "nuc": 1, "tower": 6}
    # Once the tower's boot is learned (178 s), it is powered on its boot and the 15 s margin
    # before each run, not the Pi's 600 s boot timeout before.
    (tower,) = [m for m in result.machines if m.template.key.name == "tower"]
    starts = [moment for moment, phase in tower.timeline if phase == Phase.POWERING_ON.value]
    runs = [1800.0 + 3600 * hour for hour in range(6)]
    assert [round(run - start) for start, run in zip(starts[1:], runs[1:], strict=True)] == [
        193
    ] * 5


def test_a_machine_pre_warmed_before_its_boot_is_learned_is_powered_on_once_for_the_run() -> None:
    # The 01:00 run is pre-warmed 615 s ahead (600 s boot timeout + 15 s margin: m1 never
    # booted); m1 is Ready at 00:50:45 and learns its 60 s boot, which cuts the run's lead to
    # 75 s. It stays on for the run: not drained at 00:54:45 (its unneeded time and the
    # stabilisation window over) to come on again at 00:58:45.
    t = trace([], machines=[node("m1")], cronjobs=(cronjob("0 1 * * *"),), cron_run=600)
    result = replay(t)
    (m1,) = result.machines
    assert m1.power_on_times == [2985.0]
    assert [(moment, phase) for moment, phase in m1.timeline if moment < 4200] == [
        (0.0, "Off"),
        (2985.0, "PoweringOn"),
        (2995.0, "Booting"),
        (3045.0, "Ready"),
    ]
    assert summarise(result)["waits"]["cronjob"]["maxSeconds"] == 0.0


def test_a_pod_waiting_past_its_machines_boot_is_counted() -> None:
    result = replay(trace([pod(60, 600, "a")]))
    # 60.1 s for a power-on: power-on + boot (+ the planner's debounce)
    assert summarise(result)["waits"]["other"]["forPowerOn"]["pastBoot"] == 0
    (sim_pod,) = result.pods
    assert sim_pod.waits == {WaitCause.POWER_ON: pytest.approx(60.1)}
    sim_pod.waits[WaitCause.POWER_ON] = TRUTH.power_on_seconds + TRUTH.boot_seconds + 5.5
    assert summarise(result)["waits"]["other"]["forPowerOn"]["pastBoot"] == 1


def test_a_pod_counted_on_a_slow_machine_that_starts_sooner_elsewhere_is_not_late() -> None:
    # "slow" boots 210 s and is powered on for "big" (8 CPUs, fits only there); "later" arrives
    # while it boots and is counted on it (nothing else is off). "fast" frees up first and
    # takes "later" after about 150 s: longer than fast's 60 s boot, but less than the boot of
    # the machine it was waiting for, so it did not wait past its machine's boot.
    slow_truth = Durations(power_on_seconds=10, boot_seconds=200, shutdown_seconds=20)
    t = trace(
        [pod(0, 160, "first", cpu="4"), pod(70, 600, "big", cpu="8"), pod(75, 600, "later", "4")],
        machines=[node("fast", cpu=4, watts=(30, 10, 1)), node("slow", cpu=12)],
    )
    t = dataclasses.replace(t, durations={"fast": TRUTH, "slow": slow_truth})
    result = replay(t)
    later = next(p for p in result.pods if p.key.name == "later")
    assert (later.counted_on, later.first_host, later.powered_for) == ("slow", "fast", None)
    assert later.wait is not None
    assert TRUTH.power_on_seconds + TRUTH.boot_seconds + 5 < later.wait < 210
    assert summarise(result)["waits"]["other"]["forPowerOn"]["pastBoot"] == 0


def _cycles_trace(**node_autoscaling: Any) -> Trace:
    # a, then (after an idle gap longer than 600 s) b, then after a 200 s gap c: one machine's
    # worth of work each, on m1 alone.
    pods = [pod(60, 300, "a"), pod(1060, 300, "b"), pod(1560, 300, "c")]
    machine = node("m1")
    machine["spec"]["autoscaling"] = node_autoscaling
    return trace(pods, machines=[machine])


def test_auto_unneeded_time_learns_the_machine_and_waits_one_break_even_time() -> None:
    auto = replay(_cycles_trace())
    (m1,) = auto.machines
    # Its durations were learned by the production state machine from its phase history:
    # power-on Job start to Ready = 10 + 50 s, shutdown Job = 20 s; break-even 80 s.
    assert set(m1.state.learned.boot_samples) == {60}
    assert set(m1.state.learned.shutdown_samples) == {20}
    # Before its first shutdown is timed, the first gap is waited out for twice the learned
    # boot (120 s) instead of the flat 600 s; the 200 s gap before c is longer than the 80 s
    # break-even, so m1 is powered off and on again for b and for c.
    assert m1.power_ons == 3
    fixed = replay(_cycles_trace(), Options(overrides=("spec.scaleDown.unneededSeconds=600",)))
    assert fixed.machines[0].power_ons == 2
    assert summarise(auto)["energy"]["usedKWh"] < summarise(fixed)["energy"]["usedKWh"]


def test_the_snapshot_reuses_machine_records_until_the_machine_changes() -> None:
    # The replay caches each machine's planner records (a copy per machine and plan was a fifth
    # of the replay time): unchanged machines give the same object, every change shows.
    sim = Simulator(_cycles_trace(), Options())
    first = sim.snapshot()
    assert sim.snapshot().machines[0] is first.machines[0]
    (m1,) = sim.machines.values()
    m1.state = dataclasses.replace(m1.state, phase=Phase.READY, phase_since=sim.start)
    m1.node_exists = m1.node_ready = m1.cordoned = True
    changed = sim.snapshot()
    assert (changed.machines[0].phase, changed.machines[0].phase_since) == (
        Phase.READY,
        sim.start,
    )
    assert [(n.name, n.ready, n.unschedulable) for n in changed.nodes] == [("m1", True, True)]
    m1.cordoned = False
    assert not sim.snapshot().nodes[0].unschedulable


def test_the_wear_limit_caps_power_ons_in_the_simulation_and_the_report_shows_it() -> None:
    limited = summarise(replay(_cycles_trace(maxPowerCyclesPerDay=2)))
    (m1,) = limited["machines"]
    assert (m1["powerOns"], m1["maxPowerOnsIn24h"], m1["maxPowerCyclesPerDay"]) == (2, 2, 2)
    unlimited = summarise(replay(_cycles_trace()))
    assert unlimited["machines"][0]["maxPowerOnsIn24h"] == 3


def test_plot_draws_the_timeline_into_a_png(tmp_path: Path) -> None:
    from lightsout.simulate.analysis.plot import plot

    target = tmp_path / "week.png"
    plot(replay(_cycles_trace()), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 10_000


def test_a_forbid_run_still_going_is_not_pre_warmed_for_but_the_next_one_is() -> None:
    # Every 2 h a 1-CPU run on 1-CPU machines that takes 2.5 h: the 02:30 run is due while the
    # 00:30 one still runs, so the controller does not start it (Forbid), nor later (its
    # 60 s starting deadline has passed when the 00:30 run ends at 03:00). Pre-warming m2 for
    # it would be a power-on for nothing; the 04:30 run is pre-warmed for and starts on time.
    backup = cronjob("30 */2 * * *", "Forbid", startingDeadlineSeconds=60)
    machines = [node("m1", cpu=1), node("m2", cpu=1)]
    result = replay(trace([], machines=machines, cronjobs=(backup,), hours=5, cron_run=9000))
    power_ons = [
        (m.template.key.name, at)
        for m in result.machines
        for at, phase in m.timeline
        if phase == "PoweringOn"
    ]
    assert len(power_ons) == 2, power_ons  # one for 00:30, one for 04:30; none for 02:30
    assert result.skipped_cron_runs == 1
    runs = sorted((p.arrival, p.wait) for p in result.pods)
    assert [(arrival, wait) for arrival, wait in runs] == [(1800.0, 0.0), (16200.0, 0.0)]


def test_identical_machines_are_pooled_and_pods_of_more_than_half_a_machine_kept_apart() -> None:
    # Three 2.5-cpu pods at once on three identical 4-cpu machines: pooled, their 7.5 cpu would
    # fit in two machines' room; each needs more than half a machine, so three are up.
    t = trace(
        [pod(600, 1800, f"p{i}", cpu="2500m") for i in range(3)],
        machines=[node("m1"), node("m2"), node("m3")],
    )
    bound = optimum.solve(t, time_limit=20)
    standby, idle, load, cycle = 3 * 5 * 2, 3 * 35 * 0.5, 3 * 80 * 2.5 / 4 * 0.5, 3 * 80 / 3600 * 35
    assert bound.kwh is not None and bound.gap == 0.0
    assert bound.kwh * 1000 == pytest.approx(standby + idle + load + cycle, rel=1e-4)
    assert [(s.name, s.starts) for s in bound.schedule] == [("m1", 1), ("m2", 1), ("m3", 1)]
