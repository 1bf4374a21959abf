"""Machines without a BMC behind a smart plug, powered on and off by the operator.

kubectl patch → Job → Ansible (plug_power role: the plug's API; ssh_shutdown role: the OS
shutdown over SSH) → the lab's plugs (lightsout_lab/plugs.py, plug_apis.py): a Shelly Gen2
RPC, a Tasmota `cmnd` and a Home Assistant REST API on 127.0.0.1, each in front of a machine
that is an OpenSSH server on 127.0.0.1 (lightsout_lab/sshd.py), booting when its plug switches
on ("power on after AC loss"), drawing what its state says (booting, idle, soft-off, nothing).
Each plug records every relay order with what the machine was doing and drew at that moment,
so the tests see whether an order ever cut a running OS.

The machines of a test share one lab and run at once (the Jobs overlap), to keep the module
short: one test per driver cycle, one for the faults.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.plug_apis import HomeAssistant, ShellyPlug, TasmotaPlug
from lightsout_lab.plugs import PlugApi, PlugMachine
from lightsout_lab.sshd import SshMachine
from tests.e2e.autoscaling import lightsout
from tests.e2e.conftest import PATIENCE
from tests.harness import fleet
from tests.harness.cycle import report, status, wait_phase
from tests.harness.wait import events_for, wait_for

pytestmark = pytest.mark.e2e

TOKEN = "lab-long-lived-token"
THRESHOLD = 5.0  # W: over the plug's standby draw (1.5 W), under its idle draw (14 W)


@dataclass
class Plugged:
    """One machine behind one plug, and its Node."""

    name: str
    kind: str
    box: SshMachine
    plug: PlugMachine
    api: PlugApi
    node: dict[str, Any]
    secret: dict[str, Any]


@pytest.fixture
def lab(namespace: str) -> Iterator[Callable[..., Plugged]]:
    """Makes plugged machines (stopped at the end of the test)."""
    numbers = itertools.count()
    with contextlib.ExitStack() as stack:

        def make(
            kind: str,
            *,
            obey_shutdown: bool = True,
            token: str = TOKEN,
            plug: Mapping[str, Any] | None = None,
            **spec: Any,
        ) -> Plugged:
            name = f"{kind[:5]}-{next(numbers)}-{namespace}"
            box = stack.enter_context(
                SshMachine(
                    name, boot_seconds=1.0, shutdown_seconds=1.0, obey_shutdown=obey_shutdown
                )
            )
            machine = PlugMachine(box, standby_watts=1.5, idle_watts=14.0)
            block: dict[str, Any] = {"offWattsThreshold": THRESHOLD, **(plug or {})}
            api: PlugApi
            if kind == "homeassistant":
                api = HomeAssistant(machine, token=TOKEN)
                block |= {
                    "switchEntity": api.switch_entity,
                    "powerSensorEntity": api.power_entity,
                    "tokenSecretRef": {"name": f"{name}-creds", "key": "token"},
                }
            else:
                api = ShellyPlug(machine) if kind == "shelly" else TasmotaPlug(machine)
            stack.enter_context(api)
            node = fleet.plug_node(
                name,
                kind,
                api.endpoint,
                ssh_host=box.ssh.host,
                ssh_port=box.ssh.port,
                ssh_user=box.ssh.user,
                known_hosts=box.ssh.known_hosts_line + "\n",
                shutdown_command=box.shutdown_command,
                secret_name=f"{name}-creds",
                plug=block,
                **spec,
            )
            secret = fleet.secret(
                f"{name}-creds", {"ssh-privatekey": box.ssh.client_key, "token": token}
            )
            return Plugged(name, kind, box, machine, api, node, secret)

        yield make


@contextlib.contextmanager
def running(
    crds: Cluster, kube_api: client.ApiClient, namespace: str, machines: list[Plugged]
) -> Iterator[None]:
    """Apply the machines' Nodes and simulate their kubelets while the test runs."""
    fleet.apply(
        crds,
        namespace,
        # The health check on, but scheduled once a year: the test runs it when it wants one.
        [
            *(m.secret for m in machines),
            fleet.group(healthCheck={"schedule": "0 0 1 1 *"}),
            *(m.node for m in machines),
        ],
    )
    sims = [fleet.sim_machine(m.name, namespace, m.plug.power_state, 1.0) for m in machines]
    sim = MachineSimulator(kube_api, sims).start()
    try:
        yield
    finally:
        sim.stop()
        for m in machines:
            crds.kubectl("delete", "node", m.name, "--ignore-not-found", "--wait=false")


def patch_all(crds: Cluster, namespace: str, machines: list[Plugged], desired: str) -> None:
    for m in machines:
        crds.kubectl(
            "patch", "lsn", m.name, "-n", namespace, "--type", "merge",
            "-p", f'{{"spec": {{"desiredPowerState": "{desired}"}}}}',
        )  # fmt: skip


def test_each_plug_powers_its_machine_on_and_off_never_under_a_running_os(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lab: Callable[..., Plugged],
) -> None:
    machines = [lab("shelly"), lab("tasmota"), lab("homeassistant")]
    with running(crds, kube_api, namespace, machines):
        for m in machines:
            wait_phase(crds, namespace, m.name, "Off")
        assert all(m.plug.orders() == [] for m in machines)

        patch_all(crds, namespace, machines, "On")
        for m in machines:
            ready = wait_phase(crds, namespace, m.name, "Ready")
            op = ready["lastOperation"]
            report(m.kind, "patch On -> Ready", orders=len(m.plug.orders()), watts=m.plug.watts())
            assert (op["action"], op["result"], op["values"]["driver"]) == (
                "startup",
                "Succeeded",
                m.kind,
            )
            # One relay order: on, to a plug that was off; the machine booted from it.
            assert [(o.on, o.machine_state) for o in m.plug.orders()] == [(True, "unpowered")]
            assert m.box.reachable() and m.box.shutdown_requests() == 0
            assert m.plug.watts() == 14.0  # idle draw, what the plug's meter reads

        # The plug's meter is the machine's measured draw: a health check, run now as a person
        # would, carries it into status.power, named after the plug that measured it.
        check = lightsout(crds, "healthcheck", "--group", "homelab", "-n", namespace)
        assert check.returncode == 0, check.stdout + check.stderr
        for m in machines:

            def measured(m: Plugged = m) -> dict[str, Any] | None:
                power: dict[str, Any] = status(crds, namespace, m.name).get("power") or {}
                return power if power.get("watts") == 14.0 else None

            power = wait_for(measured, PATIENCE, f"{m.kind}'s measured 14 W in status.power")
            report(m.kind, "healthcheck while Ready", power=power)
            assert power["source"] == m.kind

        patch_all(crds, namespace, machines, "Off")
        for m in machines:
            off = wait_phase(crds, namespace, m.name, "Off")
            op = off["lastOperation"]
            orders = m.plug.orders()
            report(
                m.kind,
                "patch Off -> Off",
                orders=[(o.on, o.machine_state, o.watts, o.shutdown_requests) for o in orders],
            )
            assert (op["action"], op["result"], op["values"]["power_state"]) == (
                "shutdown",
                "Succeeded",
                "Off",
            )
            assert "forced_after_seconds" not in op["values"]
            # Exactly one order off, sent after the one OS shutdown, once the machine was
            # soft-off and drew under the threshold: the OS was never cut.
            assert [o.on for o in orders] == [True, False]
            last = orders[-1]
            assert (last.shutdown_requests, last.machine_state) == (1, "soft-off")
            assert last.watts < THRESHOLD
            assert m.box.shutdown_requests() == 1
            assert not m.plug.relay_on and m.plug.watts() == 0.0


def test_an_os_ignoring_shutdown_keeps_its_power_and_a_wrong_token_sends_nothing(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lab: Callable[..., Plugged],
) -> None:
    timeout = 10  # spec.power.shutdownTimeoutSeconds: what the OS gets before the verdict
    power = {"bootTimeoutSeconds": 180, "shutdownTimeoutSeconds": timeout}
    kept = lab("tasmota", obey_shutdown=False, desired="On", maxRetries=0, power=power)
    forced = lab(
        "tasmota", obey_shutdown=False, desired="On", maxRetries=0, power=power,
        plug={"force": True},
    )  # fmt: skip
    locked_out = lab("homeassistant", token="not-the-token", desired="On", maxRetries=0)
    machines = [kept, forced, locked_out]
    with running(crds, kube_api, namespace, machines):
        # A wrong Home Assistant token: Failed naming the 401, and no relay order at all.
        failed = wait_phase(crds, namespace, locked_out.name, "Failed")
        message = failed["lastOperation"]["message"]
        report("homeassistant", "wrong token", message=message)
        assert "HTTP 401" in message and "token" in message, message
        assert locked_out.plug.orders() == [] and not locked_out.plug.relay_on
        seen = message + str(events_for(crds, namespace, locked_out.name)) + operator.text()
        assert "not-the-token" not in seen

        for m in (kept, forced):
            wait_phase(crds, namespace, m.name, "Ready")
        patch_all(crds, namespace, [kept, forced], "Off")

        # force false (default): the plug stays on, the power-off fails saying why.
        def kept_failed() -> dict[str, Any] | None:
            current = status(crds, namespace, kept.name)
            return current if current.get("phase") == "Failed" else None

        failed = wait_for(kept_failed, 300, f"{kept.name} to go Failed")
        message = failed["lastOperation"]["message"]
        report("tasmota", "OS ignores shutdown, force false", message=message)
        assert failed["lastOperation"]["action"] == "shutdown"
        assert f"still answers on 127.0.0.1:{kept.box.ssh.port} {timeout} s after" in message
        assert "plug stays on" in message
        assert [o.on for o in kept.plug.orders()] == [True]  # no order off
        assert kept.plug.relay_on and kept.box.reachable()
        assert kept.box.shutdown_requests() == 1
        warnings = [e for e in events_for(crds, namespace, kept.name) if e["type"] == "Warning"]
        assert warnings, "a Warning event says why the power-off failed"

        # force true: the power is cut, but only once the timeout has passed, with a Warning.
        off = wait_phase(crds, namespace, forced.name, "Off")
        report("tasmota", "OS ignores shutdown, force true", values=off["lastOperation"]["values"])
        assert off["lastOperation"]["values"]["forced_after_seconds"] == timeout
        switched_on, cut = forced.plug.orders()
        assert switched_on.on
        assert (cut.on, cut.machine_state, cut.shutdown_requests) == (False, "running", 1)
        requested_at = forced.box.requests_path.stat().st_mtime  # the shutdown command's write
        assert cut.time - requested_at >= timeout
        reasons = [
            e["reason"] for e in events_for(crds, namespace, forced.name) if e["type"] == "Warning"
        ]
        assert "ForcedPowerOff" in reasons
