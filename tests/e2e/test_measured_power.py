"""Measured watts, learned draw and inspected capacity end to end: a Redfish BMC that meters and
describes its machine, the first health check right after `kubectl apply`, the autoscaler
planning with what was inspected, and the idle and busy draw learned from readings under load.

sushy-tools with the lab's power meter (`lightsout_lab.redfish_power_meter`): the machine
`bare` declares 8 cpus (not pinned) and a 2 W standby draw; its BMC reports 16 logical cpus,
64 GiB, an x86-64 processor, a GPU listed only among its PCIe devices (next to the BMC's own
video), 6 W while Off, and while On 57 W idle rising to 137 W at full load. The Group's health
check is scheduled once a year, so the checks that run are the one the operator starts for a
new machine and those the test asks for with `lightsout healthcheck`. Asserted is what a
person sees: the WATTS column of `kubectl get lsn -o wide`, `/metrics`, the Group's energy
rate, the inspected capacity and InspectionMismatch in status, a pod asking for 12 cpus powering
on `bare` (the other machine declares 4), and `status.learned` after a check with no pods and one
with pods requesting 3/4 of its cpu.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightsout.commands.power import ExitCode
from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.redfish_power_meter import PowerMeter
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.autoscaling import desired, diagnosed, lightsout, pod
from tests.e2e.conftest import PATIENCE, status, wait_phase
from tests.e2e.test_metrics import scrape, value
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

GROUP = "measured"
#: Once a year: a check that lands is the first check of a new machine, nothing scheduled.
SCHEDULE = "0 0 1 1 *"
OFF_W, IDLE_W, BUSY_W, DECLARED_OFF_W = 6.0, 57.0, 137.0, 2.0
#: The share of bare's 16 cpus a 12-cpu pod requests, which the meter is told is busy.
LOAD = 0.75
METER = PowerMeter(
    on_watts=BUSY_W,
    idle_watts=IDLE_W,
    off_watts=OFF_W,
    sockets=1,
    cores_per_socket=8,
    threads_per_core=2,
    memory_gib=64,
    pcie_gpus=1,
)


@pytest.fixture
def machine(namespace: str) -> fleet.MachineDef:
    """`bare`: what its core Node will offer once it runs is what its BMC reports."""
    return fleet.MachineDef(
        name=f"bare-{namespace}", uuid=str(uuid.uuid4()), cpu="16", memory="64Gi"
    )


@pytest.fixture
def small(namespace: str) -> fleet.MachineDef:
    return fleet.MachineDef(name=f"small-{namespace}", uuid=str(uuid.uuid4()), cpu="4")


@pytest.fixture
def load(tmp_path: Path) -> Path:
    """Where the test tells bare's meter the cpu share its pods keep busy."""
    return tmp_path / "load"


@pytest.fixture
def bmc(machine: fleet.MachineDef, small: fleet.MachineDef, load: Path) -> Iterator[SushyEmulator]:
    meter = dataclasses.replace(METER, load_file=str(load))
    systems = [
        FakeSystem(uuid=machine.uuid, name=machine.name, meter=meter),
        FakeSystem(uuid=small.uuid, name=small.name),
    ]
    with SushyEmulator(systems) as emulator:
        yield emulator


def running_on(crds: Cluster, namespace: str, name: str, node: str) -> bool:
    found = get_json(crds, "pod", name, "-n", namespace) or {}
    return (found.get("spec") or {}).get("nodeName") == node and (
        (found.get("status") or {}).get("phase") == "Running"
    )


def check_now(crds: Cluster, namespace: str, name: str) -> None:
    """`lightsout healthcheck NAME`, as a person asks for a reading now."""
    cli = lightsout(crds, "healthcheck", name, "-n", namespace)
    print(f"$ lightsout healthcheck {name} (exit {cli.returncode})\n{cli.stdout}")
    assert cli.returncode == ExitCode.DONE, cli.stderr


def test_measured_watts_and_inspected_capacity_reach_status_metrics_energy_and_the_planner(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    small: fleet.MachineDef,
    sim: MachineSimulator,
    load: Path,
) -> None:
    name = machine.name
    bare = fleet.redfish_node(
        machine,
        bmc,
        group_name=GROUP,
        power={"offWatts": DECLARED_OFF_W, "bootTimeoutSeconds": 180},
    )
    # Less than the BMC will report, not pinned: the inspected figures replace these.
    bare["spec"]["resources"] = {"cpu": "8", "memory": "64Gi"}
    group = fleet.group(
        GROUP,
        autoscaler="builtin",
        healthCheck={"schedule": SCHEDULE},
        electricity={"pricePerKWh": 0.3, "currency": "EUR"},
        scaleDown={"unneededSeconds": 3600},
    )
    with diagnosed(crds, namespace):
        fleet.apply(
            crds,
            namespace,
            [
                *fleet.bmc_secrets(bmc),
                group,
                fleet.redfish_node(small, bmc, group_name=GROUP),
                bare,
            ],
        )
        # --- the first check: power state, health, draw and inspection, without the schedule
        checked = wait_for(
            lambda: (s := status(crds, namespace, name)).get("inspected") and s.get("power") and s,
            PATIENCE,
            f"{name}'s first health check to report its draw and inspection",
        )
        print(f"\n{name}: power {checked['power']}, inspected {checked['inspected']}")
        assert checked["lastHealthCheck"]["reason"] == "Healthy"
        assert checked["observedPowerState"] == "Off"
        assert (checked["power"]["watts"], checked["power"]["source"]) == (OFF_W, "redfish")
        inspected = checked["inspected"]
        # The GPU is listed only among the PCIe devices; the BMC's own video is not a GPU.
        assert (
            inspected["cpu"],
            inspected["memory"],
            inspected["architecture"],
            inspected["gpus"],
        ) == (16, "64Gi", "amd64", 1)
        mismatch = wait_for(
            lambda: next(
                (
                    c
                    for c in status(crds, namespace, name).get("conditions") or []
                    if c["type"] == "InspectionMismatch"
                ),
                None,
            ),
            PATIENCE,
            f"{name}'s InspectionMismatch condition",
        )
        print(
            f"InspectionMismatch={mismatch['status']} {mismatch['reason']}: {mismatch['message']}"
        )
        assert (mismatch["status"], mismatch["reason"]) == ("True", "InspectedCapacityUsed")
        assert "spec.resources.cpu 8 < inspected 16" in mismatch["message"]
        assert "the planner uses the inspected cpu, memory and GPUs" in mismatch["message"]
        wide = crds.kubectl("get", "lsn", name, "-n", namespace, "-o", "wide").stdout.splitlines()
        print("\n".join(wide))
        column = wide[0].split().index("WATTS")
        assert wide[1].split()[column] == "6"

        # --- the measured standby draw replaces the declared one in the energy accounts
        wait_for(
            lambda: (status(crds, namespace, name).get("energy") or {}).get("watts") == OFF_W,
            PATIENCE,
            f"{name}'s energy to be counted at the measured {OFF_W} W",
        )
        wait_for(
            lambda: (
                ((get_json(crds, "lsg", GROUP, "-n", namespace) or {}).get("status") or {})
                .get("energy", {})
                .get("watts")
                == OFF_W
            ),
            PATIENCE,
            f"the Group's energy rate to be the measured {OFF_W} W (small declares no off draw)",
        )
        samples = wait_for(
            lambda: (
                s
                if value(
                    s := scrape(operator),
                    "lightsout_machine_measured_power_watts",
                    namespace=namespace,
                    group=GROUP,
                    node=name,
                    source="redfish",
                )
                is not None
                else None
            ),
            PATIENCE,
            "the measured draw in /metrics",
        )
        labels = {"namespace": namespace, "group": GROUP, "node": name}
        assert value(samples, "lightsout_machine_measured_power_watts", **labels, source="redfish")
        assert value(samples, "lightsout_machine_power_watts", **labels) == OFF_W

        # --- a pod only the inspected capacity holds powers on the machine that declares 8 cpus
        fleet.apply(crds, namespace, [pod("big-1", "12")])
        wait_for(lambda: desired(crds, namespace, name) == "On", PATIENCE, f"{name} powered on")
        wait_phase(crds, namespace, name, "Ready")
        assert desired(crds, namespace, small.name) == "Off"
        assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests(small.uuid, reset_types=POWER_ON) == 0
        wait_for(lambda: running_on(crds, namespace, "big-1", name), PATIENCE, "big-1 running")
        load.write_text(str(LOAD))

        # --- the idle draw: a reading with no pods on the machine
        crds.kubectl("delete", "pod", "big-1", "-n", namespace, "--wait=false")
        wait_for(
            lambda: get_json(crds, "pod", "big-1", "-n", namespace) is None,
            PATIENCE,
            "big-1 gone",
        )
        load.write_text("0")
        check_now(crds, namespace, name)
        learned = wait_for(
            lambda: (
                (s := status(crds, namespace, name).get("learned") or {}).get("idleWatts") and s
            ),
            PATIENCE,
            f"{name}'s idle draw to be learned",
        )
        assert learned["idleWatts"] == IDLE_W
        assert "busyWatts" not in learned

        # --- the busy draw: a reading while a pod requests 3/4 of the cpu, extrapolated to all
        fleet.apply(crds, namespace, [pod("big-2", "12")])
        wait_for(lambda: running_on(crds, namespace, "big-2", name), PATIENCE, "big-2 running")
        load.write_text(str(LOAD))
        check_now(crds, namespace, name)
        learned = wait_for(
            lambda: (
                (s := status(crds, namespace, name).get("learned") or {}).get("busyWatts") and s
            ),
            PATIENCE,
            f"{name}'s busy draw to be learned",
        )
        print(f"{name}: learned {learned}")
        # The meter read 57 + (137 - 57) * 0.75 = 117 W; 117 W at 3/4 of the cpu is 137 W busy.
        assert (learned["idleWatts"], learned["busyWatts"], learned["offWatts"]) == (
            IDLE_W,
            BUSY_W,
            OFF_W,
        )
        assert status(crds, namespace, name)["power"]["watts"] == 117.0
