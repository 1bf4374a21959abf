"""The observe step of a pass (`execution.observe`): a machine's cached objects and the few live
reads into what its pass decides from, with no API at hand."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lightsout.actuation import inputs
from lightsout.execution.leases import build_lease, lease_name
from lightsout.execution.observe import LiveReads, MachineView, needed, observe
from lightsout.planning.types import DrainStatus, LeaseState, ObservedPowerState
from tests.unit.test_health import redfish

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)
ME = "operator-a"


def machine(phase: str, **status: Any) -> dict[str, Any]:
    node = redfish("m1", "bmc", desiredPowerState="Off", resources={"cpu": 8, "memory": "16Gi"})
    node["metadata"]["generation"] = 1
    node["status"] = {"phase": phase, "phaseSince": "2026-11-29T11:00:00Z", **status}
    return node


def view(node: dict[str, Any], **more: Any) -> MachineView:
    return MachineView(node=node, spec=inputs.node_spec(node), **more)


def core(name: str = "m1", provider_id: str = "") -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T11:00:00Z"}
    return {
        "metadata": {"name": name},
        "spec": {"providerID": provider_id} if provider_id else {},
        "status": {"conditions": [ready], "allocatable": {"cpu": "4"}},
    }


def pod(cpu: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": f"p{cpu}", "namespace": "ns", "ownerReferences": []},
        "spec": {
            "nodeName": "m1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }


def test_a_drain_the_cache_calls_finished_is_counted_live_and_keeps_its_blocker() -> None:
    draining = view(machine("Draining"), core_node=core(), pods_on_node=())
    assert needed(draining, NOW).drain_count
    last = DrainStatus(1, blocked_by="web-pdb", blocked_message="evicting would break web-pdb")
    reads = LiveReads(core_node=core(), lease=None, pods_left=2)
    seen = observe(draining, reads, identity=ME, last_drain=last, now=NOW)
    assert seen.observations.drain == DrainStatus(2, "web-pdb", "evicting would break web-pdb")
    # The live list agrees the Node is empty: drained, and the old blocker is forgotten.
    reads = LiveReads(core_node=core(), lease=None, pods_left=0)
    empty = observe(draining, reads, identity=ME, last_drain=last, now=NOW)
    assert empty.observations.drain == DrainStatus(0)


def test_a_drain_with_pods_in_the_cache_needs_no_live_list() -> None:
    draining = view(machine("Draining"), core_node=core(), pods_on_node=(pod("1"),))
    assert not needed(draining, NOW).drain_count
    seen = observe(draining, LiveReads(core(), None), identity=ME, last_drain=None, now=NOW)
    assert seen.observations.drain == DrainStatus(1)
    ready = view(machine("Ready"), core_node=core(), pods_on_node=())
    assert not needed(ready, NOW).drain_count


def test_the_kubelets_heartbeat_is_read_only_while_a_cut_waits_for_the_os() -> None:
    waiting = machine(
        "PoweringOff",
        lastOperation={
            "action": "shutdown",
            "intent": 1,
            "attempt": 1,
            "started": "2026-11-29T11:50:00Z",
            "result": "Succeeded",
            "values": {"power_state": "On", "cut_pending": True},
        },
    )
    assert needed(view(waiting), NOW).kubelet
    assert not needed(view(machine("PoweringOff")), NOW).kubelet


def test_a_lease_another_holder_owns_is_seen_with_its_end() -> None:
    held = build_lease(lease_name("ns", "m1"), "ns", "a-person", 60, NOW)
    seen = observe(
        view(machine("Off")), LiveReads(None, held), identity=ME, last_drain=None, now=NOW
    )
    assert seen.observations.lease is LeaseState.HELD_BY_OTHER
    assert seen.observations.lease_expires == NOW + dt.timedelta(seconds=60)
    mine = build_lease(lease_name("ns", "m1"), "ns", ME, 60, NOW)
    again = observe(
        view(machine("Off")), LiveReads(None, mine), identity=ME, last_drain=None, now=NOW
    )
    assert again.observations.lease is LeaseState.HELD_BY_ME


def test_the_readings_hold_cpu_use_of_the_core_nodes_allocatable_and_the_provider_ids() -> None:
    node = machine("Ready")
    ready = view(node, core_node=core(provider_id="lightsout://ns/m1"), pods_on_node=(pod("1"),))
    reads = LiveReads(core(provider_id="lightsout://ns/m1"), None)
    seen = observe(ready, reads, identity=ME, last_drain=None, now=NOW)
    assert seen.readings.utilisation == 0.25  # 1 of the core Node's 4, not of the declared 8
    assert seen.readings.provider_ids is not None
    assert seen.machine.phase.value == "Ready"
    assert seen.observations.node_ready
    # No health check yet: the state machine is told nothing about the power state.
    assert seen.observations.power_state is ObservedPowerState.UNKNOWN
