"""Measured watts and inspected capacity: from a health check's report to status, to the draw
learned, the energy counted, the planner's choice, recorded traces and metrics; and the first
check a new or edited machine gets at once."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from lightsout.config import OperatorConfig
from lightsout.execution import energy, health
from lightsout.execution.healthsync import HealthCronJobs
from lightsout.execution.jobs import CONTAINER_NAME
from lightsout.k8s.api import ConflictError
from lightsout.metrics.energy import MachineCollector
from lightsout.metrics.machines import MachineTracker
from lightsout.models.enums import Phase
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.energy.status import account_from_status, checkpoint
from lightsout.planning.learning import learn_draw
from lightsout.planning.machine import healthjudge, inspection
from lightsout.planning.types import ConditionStatus, EventType, LeaseState
from lightsout.simulate.traces.record import node_spec_as_measured
from lightsout.state.learned import Learned, learned_from_status, learned_to_status
from lightsout.state.measured import expected_resources, expected_watts
from lightsout.state.resources import CPU, MEMORY
from lightsout.state.status import node_status
from tests.unit.test_autoscale import ons
from tests.unit.test_autoscale_objects import group, machine, pod, run

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 11, 24, 8, 0, tzinfo=dt.UTC)
REDFISH = {"systemId": "1", "credentialsSecretRef": {"name": "bmc"}}


def node(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base = {
        "group": "lab",
        "kubernetesNodeName": "box",
        "driver": {"redfish": {**REDFISH, "endpoint": "https://10.0.0.5"}},
        "power": {"onWatts": 120, "idleWatts": 40, "offWatts": 5},
    }
    return {
        "metadata": {"name": "box", "namespace": "ns", "generation": 1},
        "spec": {**base, **(spec or {})},
        "status": status,
    }


# ---------------------------------------------------------------- learning the draw
def test_readings_teach_off_idle_and_busy_draw_and_one_odd_reading_moves_little() -> None:
    learned = learn_draw(Learned(), 6.0, powered=False, utilisation=0.0)
    assert learned.off_watts == 6.0
    learned = learn_draw(learned, 80.0, powered=True, utilisation=0.05)
    assert learned.idle_watts == 80.0
    # Half the cpu requested at 130 W: busy extrapolates to 80 + (130 - 80) / 0.5 = 180 W.
    learned = learn_draw(learned, 130.0, powered=True, utilisation=0.5)
    assert learned.busy_watts == 180.0
    # A spike to 200 W at idle moves the idle figure a quarter of the way.
    assert learn_draw(learned, 200.0, powered=True, utilisation=0.0).idle_watts == 110.0
    # Between the idle and busy shares a reading teaches nothing.
    assert learn_draw(learned, 100.0, powered=True, utilisation=0.2) == learned


def test_busy_draw_waits_for_an_idle_one_and_the_record_survives_status() -> None:
    assert learn_draw(Learned(), 150.0, powered=True, utilisation=0.8) == Learned()
    learned = Learned(boot_samples=(40,), off_watts=5.5, idle_watts=70.0, busy_watts=190.0)
    written = learned_to_status(learned)
    assert written["idleWatts"] == 70.0 and written["busyWatts"] == 190.0
    assert learned_from_status(written) == learned


# ---------------------------------------------------------------- declared vs measured
def test_measured_draw_wins_over_declared_and_inspected_capacity_unless_pinned() -> None:
    declared = node()
    assert tuple(expected_watts(declared)) == (120.0, 40.0, 5.0)
    measured = node(learned={"idleWatts": 137.0, "offWatts": 7.0})
    # A measured idle above the declared busy draw: the declaration is wrong, busy follows.
    assert tuple(expected_watts(measured)) == (137.0, 137.0, 7.0)

    inspected = {"cpu": 16, "memory": "64Gi"}
    without = node(inspected=inspected)
    assert expected_resources(without) is not None
    assert expected_resources(without).get(CPU) == 16_000
    # Declared less (or more) than inspected: the planner takes the inspected cpu and memory,
    # keeps the declared pods, and gives the one GPU resource the inspected count.
    declared_spec = {
        "cpu": "12",
        "memory": "48Gi",
        "pods": 30,
        "extended": {"nvidia.com/gpu": "2", "example.com/fpga": "1"},
    }
    with_declared = node({"resources": declared_spec}, inspected={**inspected, "gpus": 1})
    assert expected_resources(with_declared).as_dict() == {
        CPU: 16_000,
        MEMORY: 64 * 2**30,
        "pods": 30,
        "nvidia.com/gpu": 1,
        "example.com/fpga": 1,
    }
    pinned = node({"resources": {**declared_spec, "pinned": True}}, inspected=inspected)
    assert expected_resources(pinned).get(CPU) == 12_000
    assert expected_resources(pinned).get("nvidia.com/gpu") == 2
    # Only memory inspected: not enough to replace the declared capacity.
    half = node({"resources": declared_spec}, inspected={"memory": "64Gi"})
    assert expected_resources(half).get(MEMORY) == 48 * 2**30
    assert expected_resources(node()) is None


def test_energy_is_counted_at_the_measured_draw() -> None:
    spec = GroupSpec.model_validate({"electricity": {"pricePerKWh": 0.5}})
    declared = checkpoint(None, energy.draw(node()), spec, Phase.READY, 0.0, now=T0)
    assert declared is not None and declared["watts"] == 40.0
    measured = node(learned={"idleWatts": 137.0}, energy=declared)
    later = T0 + dt.timedelta(minutes=5)
    held = account_from_status(measured["status"]["energy"])
    moved = checkpoint(held, energy.draw(measured), spec, Phase.READY, 0.0, now=later)
    assert moved is not None and moved["watts"] == 137.0
    group_obj: dict[str, Any] = {"metadata": {"name": "lab"}, "status": {}}
    summed = energy.group_energy(
        group_obj, spec, [{**measured, "status": {"energy": moved}}], later
    )
    assert summed is not None and summed["watts"] == 137.0


def test_a_node_without_resources_is_planned_with_its_inspected_capacity() -> None:
    inspected = machine("inspected", resources=False)
    inspected["status"]["inspected"] = {"cpu": 16, "memory": "64Gi", "source": "redfish"}
    result = run(
        group(),
        machine("small", "4", "8Gi"),
        inspected,
        machine("unknown", resources=False),
        pod("big-1", "12", "32Gi"),
    )
    assert ons(result) == ["inspected"]


def test_the_lowest_energy_choice_follows_measured_draw_over_declared() -> None:
    # Declared, "a" looks cheaper; measured, "a" idles at 90 W and "b" at 25 W.
    a = machine("a", "4", "8Gi", watts=(60, 30, 1), learned={"idleWatts": 90.0})
    b = machine("b", "4", "8Gi", watts=(80, 45, 1), learned={"idleWatts": 25.0})
    result = run(group(selectionPolicy="LowestEnergy"), a, b, pod("web-1", "1", "1Gi"))
    assert ons(result) == ["b"]
    declared_only = run(
        group(selectionPolicy="LowestEnergy"),
        machine("a", "4", "8Gi", watts=(60, 30, 1)),
        machine("b", "4", "8Gi", watts=(80, 45, 1)),
        pod("web-1", "1", "1Gi"),
    )
    assert ons(declared_only) == ["a"]


# ---------------------------------------------------------------- health-check reports
def health_pod(values: dict[str, Any]) -> dict[str, Any]:
    message = {"result": "Succeeded", "values": {"node": "box", "power_state": "On", **values}}
    return {
        "metadata": {
            "name": "lo-health-lab-1-0",
            "labels": {"job-name": "lo-health-lab-1", health.LABEL_GROUP: "lab"},
        },
        "status": {
            "containerStatuses": [
                {
                    "name": CONTAINER_NAME,
                    "state": {
                        "terminated": {
                            "message": json.dumps(message),
                            "startedAt": "2026-11-24T08:00:00Z",
                            "finishedAt": "2026-11-24T08:00:05Z",
                        }
                    },
                }
            ]
        },
    }


def test_a_check_that_measured_and_inspected_lands_in_status_power_and_inspected() -> None:
    values = {
        "driver": "redfish",
        "power_watts": 137,
        "inspected": {"cpu": 8, "memory": "32Gi", "architecture": "amd64", "gpus": 1, "x": 1},
    }
    found = health.pod_record(health_pod(values))
    assert found is not None
    checked = healthjudge.assess(node_status(None), found[1], LeaseState.FREE)
    assert checked.measured == {
        "power": {"watts": 137.0, "observedAt": "2026-11-24T08:00:00Z", "source": "redfish"},
        "inspected": {
            "cpu": 8,
            "memory": "32Gi",
            "architecture": "amd64",
            "gpus": 1,
            "observedAt": "2026-11-24T08:00:00Z",
            "source": "redfish",
        },
    }
    plug = health.pod_record(health_pod({"power_watts": 12.5, "power_source": "shelly"}))
    assert plug is not None
    assert healthjudge.assess(node_status(None), plug[1], LeaseState.FREE).measured == {
        "power": {"watts": 12.5, "observedAt": "2026-11-24T08:00:00Z", "source": "shelly"}
    }
    silent = health.pod_record(health_pod({"power_watts": "lots", "inspected": {"cpu": 0}}))
    assert silent is not None
    assert healthjudge.assess(node_status(None), silent[1], LeaseState.FREE).measured is None


def spec_of(raw: dict[str, Any]) -> NodeSpec:
    return NodeSpec.model_validate(raw["spec"])


def test_declared_resources_above_inspected_get_a_condition_and_one_event_naming_both() -> None:
    inspected = {"cpu": 8, "memory": "32Gi", "architecture": "arm64", "gpus": 0}
    raw = node(
        {
            "resources": {"cpu": "16", "memory": "32Gi", "extended": {"nvidia.com/gpu": "1"}},
            "labels": {"kubernetes.io/arch": "amd64"},
        }
    )
    judged = inspection.judge(spec_of(raw), inspected, None)
    assert judged.condition is not None and judged.condition.status is ConditionStatus.TRUE
    assert judged.condition.reason == "InspectedCapacityUsed"
    assert "spec.resources.cpu 16 > inspected 8" in judged.condition.message
    assert "kubernetes.io/arch=amd64 but inspected architecture arm64" in judged.condition.message
    assert "GPUs in spec.resources.extended 1 > inspected 0" in judged.condition.message
    assert "the planner uses the inspected cpu, memory and GPUs" in judged.condition.message
    assert "memory 32Gi" not in judged.condition.message
    assert judged.event is not None and judged.event.type is EventType.WARNING
    # Once the condition holds that message, no second event.
    held = {"type": "InspectionMismatch", "status": "True", "message": judged.condition.message}
    again = inspection.judge(spec_of(raw), inspected, held)
    assert again.event is None
    # Fixing it is news once.
    fixed = node({"resources": {"cpu": "8", "memory": "32Gi"}})
    resolved = inspection.judge(spec_of(fixed), inspected, held)
    assert resolved.condition is not None and resolved.condition.status is ConditionStatus.FALSE
    assert resolved.condition.reason == "DeclaredMatchesInspected"
    assert resolved.event is not None and resolved.event.type is EventType.NORMAL
    assert inspection.judge(spec_of(fixed), None, None).condition is None


def test_declared_resources_below_inspected_are_a_mismatch_too_and_say_which_figure_is_used() -> (
    None
):
    inspected = {"cpu": 16, "memory": "64Gi", "gpus": 2}
    less = {"cpu": "12", "memory": "60Gi", "extended": {"nvidia.com/gpu": "1"}}
    judged = inspection.judge(spec_of(node({"resources": less})), inspected, None)
    assert judged.condition is not None and judged.condition.status is ConditionStatus.TRUE
    assert judged.condition.reason == "InspectedCapacityUsed"
    message = judged.condition.message
    assert "spec.resources.cpu 12 < inspected 16" in message
    assert "spec.resources.memory 60Gi < inspected 64Gi" in message
    assert "GPUs in spec.resources.extended 1 < inspected 2" in message
    assert "spec.resources.pinned: true keeps the declared ones" in message
    assert judged.event is not None and judged.event.type is EventType.WARNING
    # Pinned: still a mismatch, the declared figures are planned and the condition says so.
    pinned = spec_of(node({"resources": {**less, "pinned": True}}))
    kept = inspection.judge(pinned, inspected, None)
    assert kept.condition is not None and kept.condition.status is ConditionStatus.TRUE
    assert kept.condition.reason == "DeclaredCapacityUsed"
    assert "spec.resources.pinned: the planner uses the declared figures" in kept.condition.message
    # GPUs found on a machine that names no GPU resource: flagged, and the count can't be used.
    unnamed = spec_of(node({"resources": {"cpu": "16", "memory": "64Gi"}}))
    gpus = inspection.judge(unnamed, inspected, None)
    assert gpus.condition is not None
    assert "GPUs in spec.resources.extended 0 < inspected 2 (the declared count is planned" in (
        gpus.condition.message
    )
    # Only an arch label differs: its own reason, capacity untouched.
    label = spec_of(
        node(
            {
                "resources": {"cpu": "16", "memory": "64Gi"},
                "labels": {"kubernetes.io/arch": "arm64"},
            }
        )
    )
    arch = inspection.judge(label, {"cpu": 16, "memory": "64Gi", "architecture": "amd64"}, None)
    assert arch.condition is not None and arch.condition.reason == "ArchitectureLabelDiffers"
    # No spec.resources: nothing to disagree with, and the condition says the inspected is used.
    bare = inspection.judge(spec_of(node()), inspected, None)
    assert bare.condition is not None and bare.condition.status is ConditionStatus.FALSE
    assert "the planner uses the inspected figures" in bare.condition.message


def test_a_bad_pinned_value_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="pinned"):
        spec_of(node({"resources": {"cpu": "4", "memory": "8Gi", "pinned": "maybe"}}))


def test_the_planner_powers_on_the_machine_whose_inspected_capacity_holds_the_pod() -> None:
    # Declared 8 cpus but inspected 16: a 12-cpu pod fits it unless the 8 are pinned.
    declared_low = machine("low", "8", "16Gi")
    declared_low["status"]["inspected"] = {"cpu": 16, "memory": "64Gi", "source": "redfish"}
    assert ons(run(group(), declared_low, pod("big-1", "12", "32Gi"))) == ["low"]
    declared_low["spec"]["resources"]["pinned"] = True
    assert ons(run(group(), declared_low, pod("big-1", "12", "32Gi"))) == []


# ---------------------------------------------------------------- the first check
class FakeApi:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def apply_configmap(self, _namespace: str, _body: Any) -> None:
        return None

    def create_cronjob(self, _namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "uid": "cj-uid"}}

    def create_job(self, _namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if any(j["metadata"]["name"] == body["metadata"]["name"] for j in self.jobs):
            raise ConflictError("exists")
        self.jobs.append(body)
        return body


def test_a_new_or_edited_machine_is_checked_at_once_and_only_once_per_list() -> None:
    api = FakeApi()
    sync = HealthCronJobs(OperatorConfig(identity="me", runner_image="runner:1"), api)  # type: ignore[arg-type]
    lab = {"metadata": {"name": "lab", "namespace": "ns", "uid": "g"}, "spec": {}}
    spec = GroupSpec.model_validate({})
    checked = node(lastHealthCheck={"time": "2026-11-24T08:00:00Z", "result": "Healthy"})
    sync.sync(lab, spec, [checked])
    assert api.jobs == []  # known machines after a restart: the schedule is enough
    fresh = {**node(), "metadata": {"name": "new", "namespace": "ns", "generation": 1}}
    sync.sync(lab, spec, [checked, fresh])
    (job,) = api.jobs
    assert job["metadata"]["ownerReferences"][0]["uid"] == "cj-uid"
    assert checks(job) == ["new"]  # the new machine only, not the Group
    sync.written.clear()  # a rewrite of the same list (an operator restart) makes no second Job
    sync.sync(lab, spec, [checked, fresh])
    assert len(api.jobs) == 1
    # Another machine before the first one's result landed: that one alone, not both again.
    other = {**node(), "metadata": {"name": "other", "namespace": "ns", "generation": 1}}
    sync.sync(lab, spec, [checked, fresh, other])
    assert checks(api.jobs[-1]) == ["other"]
    edited = node({"driver": {"redfish": {**REDFISH, "endpoint": "https://10.0.0.9"}}})
    edited["status"] = checked["status"]
    landed = [{**m, "status": checked["status"]} for m in (fresh, other)]
    sync.sync(lab, spec, [edited, *landed])
    assert len(api.jobs) == 3
    assert checks(api.jobs[-1]) == ["box"]


def checks(job: dict[str, Any]) -> list[str]:
    """The machines a first-check Job checks, one pod each."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    names = str(env["LIGHTSOUT_CHECK_ONLY"]).split(",")
    assert job["spec"]["completions"] == len(names)
    return names


# ---------------------------------------------------------------- traces and metrics
def test_a_recorded_trace_carries_the_measured_draw_and_the_inspected_capacity() -> None:
    raw = node(
        learned={"idleWatts": 90.0, "busyWatts": 210.0, "offWatts": 8.0},
        inspected={"cpu": 16, "memory": "64Gi"},
    )
    spec = node_spec_as_measured({**raw, "kind": "Node"})
    assert spec["power"] == {"onWatts": 210.0, "idleWatts": 90.0, "offWatts": 8.0}
    assert spec["resources"] == {"cpu": "16", "memory": "64Gi"}
    assert NodeSpec.model_validate(spec).resources is not None  # the replay reads it back
    kept = node_spec_as_measured({**node({"resources": {"cpu": "4", "memory": "8Gi"}})})
    assert kept["resources"] == {"cpu": "4", "memory": "8Gi"}
    declared = {"cpu": "4", "memory": "8Gi", "extended": {"nvidia.com/gpu": "2"}}
    both = {"cpu": 16, "memory": "64Gi", "gpus": 1}
    replaced = node_spec_as_measured(node({"resources": declared}, inspected=both))
    assert replaced["resources"] == {
        "cpu": "16",
        "memory": "64Gi",
        "extended": {"nvidia.com/gpu": "1"},
    }
    pinned = {**declared, "pinned": True}
    assert node_spec_as_measured(node({"resources": pinned}, inspected=both))["resources"] == (
        pinned
    )
    assert expected_resources({"spec": spec}).get(MEMORY) == 64 * 2**30


def test_the_measured_draw_is_a_metric_with_its_source() -> None:
    tracker = MachineTracker()
    power = {"watts": 137.0, "observedAt": "2026-11-24T08:00:00Z", "source": "redfish"}
    tracker.observe(node(phase="Ready", power=power), T0)
    registry = CollectorRegistry()
    registry.register(MachineCollector(tracker, clock=lambda: T0))
    text = generate_latest(registry).decode()
    assert (
        'lightsout_machine_measured_power_watts{group="lab",namespace="ns",node="box",'
        'source="redfish"} 137.0'
    ) in text
