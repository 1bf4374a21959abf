"""Measured watts and inspected capacity end to end: a Redfish BMC that meters and describes its
machine, the first health check right after `kubectl apply`, and the autoscaler planning with
what was inspected.

sushy-tools with the lab's power meter (`lightsout_lab.redfish_power_meter`): the machine
`bare` declares no `spec.resources` and a 2 W standby draw; its BMC reports 16 logical cpus,
64 GiB, an x86-64 processor and 6 W while Off. The Group's health check is scheduled once a year,
so the only check that can run is the one the operator starts for a new machine. Asserted is
what a person sees: the WATTS column of `kubectl get lsn -o wide`, `/metrics`, the Group's
energy rate, the inspected capacity in status, and a pod asking for 12 cpus powering on `bare`
(the other machine declares 4).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.redfish_power_meter import PowerMeter
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.autoscaling import desired, diagnosed, pod
from tests.e2e.conftest import PATIENCE, status, wait_phase
from tests.e2e.test_metrics import scrape, value
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

GROUP = "measured"
#: Once a year: a check that lands is the first check of a new machine, nothing scheduled.
SCHEDULE = "0 0 1 1 *"
OFF_W, ON_W, DECLARED_OFF_W = 6.0, 137.0, 2.0
METER = PowerMeter(
    on_watts=ON_W, off_watts=OFF_W, sockets=1, cores_per_socket=8, threads_per_core=2, memory_gib=64
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
def bmc(machine: fleet.MachineDef, small: fleet.MachineDef) -> Iterator[SushyEmulator]:
    systems = [
        FakeSystem(uuid=machine.uuid, name=machine.name, meter=METER),
        FakeSystem(uuid=small.uuid, name=small.name),
    ]
    with SushyEmulator(systems) as emulator:
        yield emulator


def test_measured_watts_and_inspected_capacity_reach_status_metrics_energy_and_the_planner(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    bmc: SushyEmulator,
    machine: fleet.MachineDef,
    small: fleet.MachineDef,
    sim: MachineSimulator,
) -> None:
    name = machine.name
    bare = fleet.redfish_node(
        machine,
        bmc,
        group_name=GROUP,
        power={"offWatts": DECLARED_OFF_W, "bootTimeoutSeconds": 180},
    )
    del bare["spec"]["resources"]
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
        assert (inspected["cpu"], inspected["memory"], inspected["architecture"]) == (
            16,
            "64Gi",
            "amd64",
        )
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

        # --- a pod only the inspected capacity holds powers on the machine with no resources
        fleet.apply(crds, namespace, [pod("big-1", "12")])
        wait_for(lambda: desired(crds, namespace, name) == "On", PATIENCE, f"{name} powered on")
        wait_phase(crds, namespace, name, "Ready")
        assert desired(crds, namespace, small.name) == "Off"
        assert bmc.count_power_requests(machine.uuid, reset_types=POWER_ON) == 1
        assert bmc.count_power_requests(small.uuid, reset_types=POWER_ON) == 0
