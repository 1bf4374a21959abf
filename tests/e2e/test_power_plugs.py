"""Machines without a BMC behind a smart plug, powered on and off by the operator.

kubectl patch → Job → Ansible (plug_power role: the plug's API; ssh_shutdown role: the OS
shutdown over SSH) → the lab's plugs (lightsout_lab/plugs.py, plug_apis.py): a Shelly Gen2
RPC, a Tasmota `cmnd` and a Home Assistant REST API on 127.0.0.1, each in front of a machine
that is an OpenSSH server on 127.0.0.1 (lightsout_lab/sshd.py), booting when its plug switches
on ("power on after AC loss"), drawing what its state says (booting, idle, soft-off, nothing).
Each plug records every relay order with what the machine was doing and drew at that moment,
so the tests see whether an order ever cut a running OS.

The machines of a test share one lab and run at once (the Jobs overlap), to keep the module
short: one test per driver cycle, one for the faults, one for the evidence a power-off needs
(no meter, SSH unreachable, a kubelet still heartbeating; the lab's kwok renews each simulated
machine's Lease in kube-node-lease while its Node exists), one for Wake-on-LAN after the plug.
Every Ansible run costs the 2-core CI machine 10-25 CPU-seconds, so a test runs only the Jobs
its claims are about: the Group's health check (whose first run is a Job per new machine) only
where the test reads one, and a machine whose power-off is the subject is found running (its
plug on, its OS up, its core Node Ready) instead of being powered on by a startup Job first.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from lightsout.models.drivers import role_kinds
from lightsout_lab import Cluster
from lightsout_lab.emulators import EMULATORS
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.plug_apis import HomeAssistant
from lightsout_lab.plugs import HttpApi, PlugMachine
from lightsout_lab.sshd import SshMachine
from lightsout_lab.wol import WolListener
from tests.e2e.autoscaling import lightsout
from tests.e2e.conftest import PATIENCE
from tests.harness import fleet
from tests.harness.cycle import report, status, wait_found_running, wait_phase
from tests.harness.wait import events_until, events_with_reason, wait_for, warned

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
    api: HttpApi
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
            ac_restore: bool = True,
            relay_on: bool = False,
            lan: WolListener | None = None,
            powered: bool = False,
            **spec: Any,
        ) -> Plugged:
            """`powered`: found running (plug on, OS up), as a machine a person switched on
            before it was put under Lights-Out; `running` waits for its core Node."""
            name = f"{kind[:5]}-{next(numbers)}-{namespace}"
            box = stack.enter_context(
                SshMachine(
                    name,
                    power_state="On" if powered else "Off",
                    boot_seconds=1.0,
                    shutdown_seconds=1.0,
                    obey_shutdown=obey_shutdown,
                )
            )
            machine = PlugMachine(
                box,
                relay_on=relay_on or powered,
                ac_restore=ac_restore,
                standby_watts=1.5,
                idle_watts=14.0,
            )
            block: dict[str, Any] = {"offWattsThreshold": THRESHOLD, **(plug or {})}
            if lan is not None:
                # Its packets go to the lab's listener on loopback, never to a real broadcast.
                lan.wakes(machine)
                block["wakeOnLan"] = {
                    "macAddress": box.mac,
                    "broadcastAddress": lan.host,
                    "port": lan.port,
                    "delaySeconds": 1,
                }
            api: HttpApi
            if kind == "homeassistant":
                api = HomeAssistant(machine, token=TOKEN)
                block |= {
                    "switchEntity": api.switch_entity,
                    "powerSensorEntity": api.power_entity,
                    "tokenSecretRef": {"name": f"{name}-creds", "key": "token"},
                }
            else:
                api = EMULATORS[kind](machine)  # the lab's emulator of this vendor's API
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
    crds: Cluster,
    kube_api: client.ApiClient,
    namespace: str,
    machines: list[Plugged],
    *,
    health_check: bool = False,
) -> Iterator[None]:
    """Simulate the machines' kubelets and apply their Nodes while the test runs.

    The machines found running register their core Nodes first, so the operator takes them
    as running (Ready, no startup Job). `health_check`: the Group's health check on, but
    scheduled once a year (the test runs it when it wants one); off otherwise, as its first
    run would be one Ansible Job per machine that nothing in the test reads."""
    sims = [fleet.sim_machine(m.name, namespace, m.plug.power_state, 1.0) for m in machines]
    sim = MachineSimulator(kube_api, sims).start()
    try:
        wait_found_running(crds, [m.name for m in machines if m.plug.power_state() == "On"])
        group = (
            fleet.group(healthCheck={"schedule": "0 0 1 1 *"}) if health_check else fleet.group()
        )
        fleet.apply(
            crds,
            namespace,
            [*(m.secret for m in machines), group, *(m.node for m in machines)],
        )
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


def wait_failed(crds: Cluster, namespace: str, m: Plugged) -> dict[str, Any]:
    """The machine's status once it is Failed (its power-off refused)."""

    def probe() -> dict[str, Any] | None:
        current = status(crds, namespace, m.name)
        return current if current.get("phase") == "Failed" else None

    return wait_for(probe, 300, f"{m.name} to go Failed")


def test_each_plug_powers_its_machine_on_and_off_never_under_a_running_os(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lab: Callable[..., Plugged],
) -> None:
    # Every plug vendor of the registry (a new one is driven here with its emulator).
    machines = [lab(kind) for kind in role_kinds("plug_power")]
    with running(crds, kube_api, namespace, machines, health_check=True):
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
    # Found running: what is tested is their power-off.
    kept = lab(
        "tasmota", obey_shutdown=False, powered=True, desired="On", maxRetries=0, power=power
    )
    forced = lab(
        "tasmota", obey_shutdown=False, powered=True, desired="On", maxRetries=0, power=power,
        plug={"force": True},
    )  # fmt: skip
    # The default maxRetries (3): a refused token is not retried all the same.
    locked_out = lab("homeassistant", token="not-the-token", desired="On")
    assert "maxRetries" not in locked_out.node["spec"]
    machines = [kept, forced, locked_out]
    with running(crds, kube_api, namespace, machines):
        # A wrong Home Assistant token: Failed after the first attempt, naming the 401 and the
        # Secret's key to fix, and no relay order at all.
        failed = wait_phase(crds, namespace, locked_out.name, "Failed")
        op = failed["lastOperation"]
        message = op["message"]
        report("homeassistant", "wrong token", attempts=failed["attempts"], message=message)
        assert (op["attempt"], failed["attempts"]) == (1, 1)
        assert failed["reason"] == "AuthenticationFailed"
        secret = f"Secret {namespace}/{locked_out.name}-creds, key 'token'"
        assert "HTTP 401" in message and "(authentication failed: " in message, message
        assert f"refused the credentials from {secret}" in message, message
        events = warned(crds, namespace, locked_out.name, secret, "AuthenticationFailed")
        assert locked_out.plug.orders() == [] and not locked_out.plug.relay_on
        seen = message + str(events) + operator.text()
        assert "not-the-token" not in seen

        for m in (kept, forced):
            wait_phase(crds, namespace, m.name, "Ready")
        patch_all(crds, namespace, [kept, forced], "Off")

        # force false (default): the plug stays on, the power-off fails saying why.
        failed = wait_failed(crds, namespace, kept)
        message = failed["lastOperation"]["message"]
        report("tasmota", "OS ignores shutdown, force false", message=message)
        assert failed["lastOperation"]["action"] == "shutdown"
        assert "the shutdown command was delivered over SSH" in message
        assert f"still answered on 127.0.0.1:{kept.box.ssh.port} {timeout} s later" in message
        assert "plug stays on" in message
        assert kept.plug.orders() == []  # no order off (nor any other)
        assert kept.plug.relay_on and kept.box.reachable()
        assert kept.box.shutdown_requests() == 1
        warned(crds, namespace, kept.name)  # a Warning event says why the power-off failed

        # force true: the power is cut, but only once the timeout has passed, with a Warning.
        off = wait_phase(crds, namespace, forced.name, "Off")
        report("tasmota", "OS ignores shutdown, force true", values=off["lastOperation"]["values"])
        assert off["lastOperation"]["values"]["forced_after_seconds"] == timeout
        (cut,) = forced.plug.orders()  # one order: off
        assert (cut.on, cut.machine_state, cut.shutdown_requests) == (False, "running", 1)
        requested_at = forced.box.requests_path.stat().st_mtime  # the shutdown command's write
        assert cut.time - requested_at >= timeout
        assert "Warning" in dict(events_with_reason(crds, namespace, forced.name, "ForcedPowerOff"))


@contextlib.contextmanager
def probe_port() -> Iterator[tuple[int, Callable[[], None]]]:
    """A TCP port that answers until `silence()`: a probe that goes quiet while the OS runs
    (a firewall rule, a port another service owned)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def silence() -> None:
        stop.set()
        thread.join()
        server.close()

    try:
        yield server.getsockname()[1], silence
    finally:
        if not stop.is_set():
            silence()


def closed_port() -> int:
    """A loopback port nothing listens on (connections refused): a wrong SSH port."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port: int = server.getsockname()[1]
    return port


def test_no_power_is_cut_without_evidence_that_the_os_went_down(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lab: Callable[..., Plugged],
) -> None:
    timeout = 15  # spec.power.shutdownTimeoutSeconds
    power = {"bootTimeoutSeconds": 180, "shutdownTimeoutSeconds": timeout}
    # Found running: what is tested is their power-off.
    one_try = {"desired": "On", "maxRetries": 0, "power": power, "powered": True}
    # Home Assistant switches without a power sensor (no meter), and a metered Shelly.
    clean = lab("homeassistant", **one_try)
    unreachable = lab("homeassistant", **one_try)
    forced = lab("homeassistant", plug={"force": True}, **one_try)
    metered = lab("shelly", **one_try)
    beating = lab("homeassistant", obey_shutdown=False, **one_try)
    unmetered = [clean, unreachable, forced, beating]
    for m in unmetered:
        del m.node["spec"]["driver"]["homeassistant"]["powerSensorEntity"]
    broken = [unreachable, forced, metered]
    machines = [*unmetered, metered]
    with probe_port() as (port, silence):
        # `beating` is probed on a port that goes silent once its shutdown command arrives,
        # while its OS (which ignores the command) and its kubelet keep running.
        beating.node["spec"]["driver"]["homeassistant"]["probe"] = {
            "host": "127.0.0.1",
            "port": port,
        }
        with running(crds, kube_api, namespace, machines):
            for m in machines:
                wait_phase(crds, namespace, m.name, "Ready")
            # Their SSH stops answering (a wrong port), the OS running: probe and SSH are silent.
            wrong = closed_port()
            for m in broken:
                body = {
                    "spec": {
                        "desiredPowerState": "Off",
                        "driver": {m.kind: {"ssh": {"port": wrong}}},
                    }
                }
                crds.kubectl(
                    "patch",
                    "lsn",
                    m.name,
                    "-n",
                    namespace,
                    "--type",
                    "merge",
                    "-p",
                    json.dumps(body),
                )
            patch_all(crds, namespace, [clean, beating], "Off")
            wait_for(lambda: beating.box.shutdown_requests() >= 1 or None, PATIENCE, "its shutdown")
            silence()

            # No meter, nothing delivered, force false: refused at once, saying what is missing.
            message = wait_failed(crds, namespace, unreachable)["lastOperation"]["message"]
            report("homeassistant", "no meter, SSH unreachable, force false", message=message)
            assert (
                "did not answer at" in message
                and "no shutdown command could be delivered" in message
            )
            assert "has no power sensor, so nothing shows the machine is off" in message
            assert "check the probe address and port" in message and "powerSensorEntity" in message
            assert "The plug stays on (force is false)" in message
            assert unreachable.plug.orders() == []  # no order off (nor any other)
            assert unreachable.plug.relay_on and unreachable.box.reachable()
            assert unreachable.box.shutdown_requests() == 0
            warned(crds, namespace, unreachable.name, "no shutdown command could be delivered")

            # With a meter reading the running OS's draw: the same refusal, naming the draw.
            message = wait_failed(crds, namespace, metered)["lastOperation"]["message"]
            report("shelly", "metered, SSH unreachable, force false", message=message)
            assert "no shutdown command could be delivered" in message
            assert "the plug measured 14.0 W at" in message and "not under the 5.0 W" in message
            assert "check the shutdown command" not in message  # none was sent
            assert metered.plug.orders() == [] and metered.box.reachable()

            # The probe went silent after a delivered shutdown, but the kubelet kept renewing its
            # Lease for shutdownTimeoutSeconds: a running OS, its power kept.
            message = wait_failed(crds, namespace, beating)["lastOperation"]["message"]
            report("homeassistant", "probe silent, kubelet heartbeating", message=message)
            assert "the shutdown command was delivered over SSH" in message
            assert f"the kubelet of core Node {beating.name} last renewed its Lease" in message
            assert "the OS is running" in message and "the power stays on" in message
            assert beating.plug.orders() == [] and beating.box.reachable()
            events_until(
                crds,
                namespace,
                beating.name,
                lambda events: (
                    {"WaitingForHeartbeat", "OSStillRunning"} <= {e["reason"] for e in events}
                ),
                "WaitingForHeartbeat and OSStillRunning",
            )

            # Delivered, the probe silent, then the kubelet's heartbeat stopped: one order off.
            off = wait_phase(crds, namespace, clean.name, "Off")
            confirmed = [
                m for _, m in events_with_reason(crds, namespace, clean.name, "OSDownConfirmed")
            ]
            report("homeassistant", "no meter, SSH reachable", confirmed=confirmed)
            assert off["lastOperation"]["attempt"] == 2  # the cut, after the Job that shut it down
            assert "forced_after_seconds" not in off["lastOperation"]["values"]
            (said,) = confirmed
            assert "the shutdown command was delivered over SSH" in said and "went silent" in said
            assert said.endswith("the OS is down, cutting the power")
            assert [o.on for o in clean.plug.orders()] == [False]  # one order: off
            cut = clean.plug.orders()[-1]
            assert (cut.shutdown_requests, cut.machine_state) == (1, "soft-off")

            # force true, nothing delivered: the power is cut after the timeout, with a warning.
            off = wait_phase(crds, namespace, forced.name, "Off")
            report(
                "homeassistant", "no meter, SSH unreachable, force true", op=off["lastOperation"]
            )
            assert off["lastOperation"]["values"]["forced_after_seconds"] == timeout
            # It says what happened: no shutdown was ever sent, so none "did not finish".
            said = off["lastOperation"]["message"]
            assert "the power was cut without evidence that the OS went down" in said
            assert "no shutdown command could be delivered" in said
            assert "did not shut down" not in said and "forced_reason=" not in said
            (cut,) = forced.plug.orders()  # one order: off
            assert (cut.on, cut.machine_state) == (False, "running")
            assert forced.box.shutdown_requests() == 0
            assert "Warning" in dict(
                events_with_reason(crds, namespace, forced.name, "ForcedPowerOff")
            )


def test_a_machine_without_ac_restore_wakes_on_its_packet_and_a_live_plug_is_never_cycled(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    lan: WolListener,
    lab: Callable[..., Plugged],
) -> None:
    # Firmware without "power on after AC loss": the relay only gives standby power, the magic
    # packet boots the machine. `cold` starts unpowered; `live` has its plug left on under an
    # OS that was shut down (soft-off, drawing standby power).
    cold = lab("shelly", ac_restore=False, lan=lan)
    live = lab("tasmota", ac_restore=False, relay_on=True, lan=lan)
    machines = [cold, live]
    with running(crds, kube_api, namespace, machines):
        for m in machines:
            wait_phase(crds, namespace, m.name, "Off")
        report(
            "wakeOnLan",
            "before",
            states=[m.plug.machine_state() for m in machines],
            watts=[m.plug.watts() for m in machines],
            packets=len(lan.packets()),
        )
        assert [m.plug.machine_state() for m in machines] == ["unpowered", "soft-off"]
        assert all(m.plug.orders() == [] for m in machines) and lan.packets() == []

        patch_all(crds, namespace, machines, "On")
        for m in machines:
            ready = wait_phase(crds, namespace, m.name, "Ready")
            op = ready["lastOperation"]
            assert (op["action"], op["result"], op["values"]["driver"]) == (
                "startup",
                "Succeeded",
                m.kind,
            )
            assert m.plug.machine_state() == "running" and m.box.reachable()
            assert m.box.power_ons == 1 and m.box.shutdown_requests() == 0
            assert len(lan.magic_packets(m.box.mac)) == 1  # one packet, for its MAC

        delay = cold.node["spec"]["driver"]["shelly"]["wakeOnLan"]["delaySeconds"]
        (switched_on,) = cold.plug.orders()
        (packet,) = lan.magic_packets(cold.box.mac)
        report(
            "shelly",
            "unpowered, patch On -> Ready",
            orders=[(o.on, o.machine_state, o.watts) for o in cold.plug.orders()],
            packet_after_order_s=round(packet.time - switched_on.time, 2),
            watts=cold.plug.watts(),
        )
        # One order, on, to a plug under an unpowered machine; the packet after it, once the
        # standby power had its delaySeconds to come up.
        assert (switched_on.on, switched_on.machine_state) == (True, "unpowered")
        assert packet.time - switched_on.time >= delay

        report(
            "tasmota",
            "soft-off under a live plug, patch On -> Ready",
            orders=len(live.plug.orders()),
            packets=[p.mac for p in lan.magic_packets(live.box.mac)],
            relay_on=live.plug.relay_on,
            watts=live.plug.watts(),
        )
        # The plug that was already on is never cycled: no relay order, the packet alone.
        assert live.plug.orders() == [] and live.plug.relay_on
        assert len(lan.magic_packets()) == 2  # and no packet for anyone else
