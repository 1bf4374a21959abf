"""Promises kept when the control plane or a BMC is not there: the API server killed for a
minute mid-action, etcd restarted with machines in every phase, a BMC that fails every other
request, a replica cut off from the API server while another runs.

One lab for the module, with a control plane of its own (its API server and etcd are stopped
here, which the session's cluster's other users must never see): a runner node, one Redfish
emulator for the outage tests and a flapping one, the machine simulator and one operator
process, which is never restarted: it must find its way back by itself, and so must kwok, which
plays the machines' kubelets. Each test prints its figures (orders per machine, seconds to
recover, requests sent); the times are not asserted.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from lightsout.execution.jobs import JobRequest
from lightsout.planning.machine.common import retry_backoff
from lightsout.planning.machine.outages import (
    attempts_within,
    outage_requests,
    redfish_power_on_requests,
)
from lightsout_lab import Cluster, flapping
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent, runner_image_env
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.proxy import Proxy
from lightsout_lab.sushy import POWER_OFF, POWER_ON, FakeSystem, SushyEmulator
from tests.conftest import CRD_NAMES, ROOT
from tests.e2e.conftest import PATIENCE, patch_desired, running_job, status, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, holds, says_ready, wait_for, warned
from tests.harness.watching import Recorder

#: One pytest-xdist worker runs them all (`--dist loadgroup`): they share the module's lab,
#: which other workers would otherwise each start again.
pytestmark = pytest.mark.xdist_group("control-plane-faults")

NAMESPACE = "faults"
#: How long the API server stays down (the issue's figure).
API_DOWN_SECONDS = 60
#: How long etcd stays down before it is started again on its data.
ETCD_DOWN_SECONDS = 20
#: One machine per role; `on` ones start powered on (Ready without a Job).
ROLES = {
    "api-boot": "Off",
    "api-drain": "On",
    "etcd-boot": "Off",
    "etcd-booting": "Off",
    "etcd-drain": "On",
    "etcd-poweroff": "On",
    "etcd-off": "Off",
    "etcd-ready": "On",
    "split": "Off",
}
#: Its OS ignores the power button: its shutdown Job waits `GRACE_SECONDS` for the graceful
#: shutdown before it forces the power off, so it is still PoweringOff while etcd is away.
SLOW_OFF = "etcd-poweroff"
GRACE_SECONDS = 90
#: Its Secret holds a wrong password: Failed (AuthenticationFailed) before the tests start.
FAILED = "etcd-failed"
FLAPPY = "flappy"


@dataclass
class FaultLab:
    cluster: Cluster
    bmc: SushyEmulator
    flappy_bmc: SushyEmulator
    machines: dict[str, fleet.MachineDef]
    operator: OperatorProcess
    sim: MachineSimulator


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultLab]:
    work = tmp_path_factory.mktemp("faults")
    machines = {
        role: fleet.MachineDef(name=role, uuid=str(uuid.uuid4()))
        for role in [*ROLES, FAILED, FLAPPY]
    }
    cluster = Cluster(directory=work / "cluster").start()
    parts: list[Any] = []
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        cluster.wait_established(CRD_NAMES)
        cluster.kubectl("create", "namespace", NAMESPACE)
        api = cluster.api_client()
        parts.append(KubeletAgent(api=api, image_env=runner_image_env(ROOT), log_dir=work).start())
        systems = [
            FakeSystem(
                uuid=machines[r].uuid,
                name=r,
                power_state=p,
                graceful_shutdown="ignore" if r == SLOW_OFF else "obey",
            )
            for r, p in {**ROLES, FAILED: "Off"}.items()
        ]
        bmc = SushyEmulator(systems).start()
        parts.append(bmc)
        flappy_bmc = SushyEmulator(
            [FakeSystem(uuid=machines[FLAPPY].uuid, name=FLAPPY)],
            middlewares=(flapping.MIDDLEWARE,),
        ).start()
        parts.append(flappy_bmc)
        sim = fleet.simulator(api, bmc, [machines[r] for r in [*ROLES, FAILED]], NAMESPACE)
        parts.append(sim)
        parts.append(fleet.simulator(api, flappy_bmc, [machines[FLAPPY]], NAMESPACE))
        # No health check: its hourly run would add BMC requests the flapping test counts.
        group = fleet.group(healthCheck={"enabled": False})
        nodes = [fleet.redfish_node(machines[r], bmc, desired=p) for r, p in ROLES.items()]
        slow_off = next(n for n in nodes if n["metadata"]["name"] == SLOW_OFF)
        slow_off["spec"]["driver"]["redfish"]["gracefulShutdownSeconds"] = GRACE_SECONDS
        nodes.append(fleet.redfish_node(machines[FAILED], bmc, secret_name="wrong", desired="On"))
        nodes.append(
            fleet.redfish_node(machines[FLAPPY], flappy_bmc, secret_name="flappy", maxRetries=0)
        )
        objects = [
            *fleet.bmc_secrets(bmc),
            *fleet.bmc_secrets(flappy_bmc, name="flappy"),
            *fleet.bmc_secrets(bmc, name="wrong", password="not-the-bmc-password"),
            group,
            *nodes,
        ]
        fleet.apply(cluster, NAMESPACE, objects)
        operator = OperatorProcess(
            cluster=cluster, namespaces=(NAMESPACE,), log_dir=work, extra_env=JOB_PLACEMENT_ENV
        )
        operator.start()
        parts.append(operator)
        for role, power in ROLES.items():
            wait_phase(cluster, NAMESPACE, role, "Ready" if power == "On" else "Off")
        wait_phase(cluster, NAMESPACE, FAILED, "Failed")
        yield FaultLab(cluster, bmc, flappy_bmc, machines, operator, sim)
    finally:
        for part in reversed(parts):
            part.stop()
        cluster.destroy()


def hold_pod(lab: FaultLab, role: str) -> None:
    """A pod on the machine that a PodDisruptionBudget keeps there: its drain stays blocked
    (DrainBlocked) until the test deletes the budget."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"held-{role}", "labels": {"held": role}},
        "spec": {
            "nodeName": role,
            "containers": [{"name": "app", "image": "busybox"}],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"held-{role}"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"held": role}}},
    }
    fleet.apply(lab.cluster, NAMESPACE, [pod, pdb])
    wait_for(
        lambda: (
            (get_json(lab.cluster, "pdb", f"held-{role}", "-n", NAMESPACE).get("status") or {}).get(
                "currentHealthy"
            )
            == 1
        ),
        PATIENCE,
        f"the PodDisruptionBudget of {role} to count its pod",
    )


def release_pod(lab: FaultLab, role: str) -> None:
    lab.cluster.kubectl("delete", "pdb", f"held-{role}", "-n", NAMESPACE)


def start_drain(lab: FaultLab, role: str) -> None:
    hold_pod(lab, role)
    patch_desired(lab.cluster, NAMESPACE, role, "Off")
    wait_for(
        lambda: status(lab.cluster, NAMESPACE, role).get("reason") == "DrainBlocked",
        PATIENCE,
        f"{role} draining, held by its budget",
    )


def start_boot(lab: FaultLab, role: str) -> str:
    patch_desired(lab.cluster, NAMESPACE, role, "On")
    job: str = wait_for(
        lambda: running_job(lab.cluster, NAMESPACE, role), PATIENCE, f"{role}'s running Job"
    )
    return job


def orders(bmc: SushyEmulator, machine: fleet.MachineDef) -> dict[str, int]:
    """Power orders the BMC took (2xx) for the machine, on and off."""
    return {
        "on": bmc.count_power_requests(machine.uuid, reset_types=POWER_ON, accepted_only=True),
        "off": bmc.count_power_requests(machine.uuid, reset_types=POWER_OFF, accepted_only=True),
        "sent": bmc.count_power_requests(machine.uuid),
    }


def action_jobs(lab: FaultLab, role: str) -> list[str]:
    jobs = get_json(lab.cluster, "jobs", "-n", NAMESPACE, "-l", f"lightsout.dev/node={role}")
    return sorted(j["metadata"]["name"] for j in jobs["items"])


def created_after(obj: dict[str, Any], back_wall: float) -> float:
    """Seconds from the control plane's return to the object's creation, at least 0 (whole
    seconds: the API server's timestamps have no more, so a creation in the same second as the
    return reads as up to a second before it)."""
    created = dt.datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return max(0.0, created.timestamp() - back_wall)


def finish(lab: FaultLab, back: float, boot: str, drain: str, job: str, label: str) -> None:
    """After the outage: the booting machine Ready, the draining one (its budget deleted) Off,
    each with exactly one power order and one Job; prints how long each took, the operator's
    own recovery (its first step on each machine) apart from kube-controller-manager's (the
    shutdown Job's pod, which only the Job controller creates)."""
    back_wall = time.time() - (time.monotonic() - back)
    release_pod(lab, drain)
    wait_for(
        lambda: status(lab.cluster, NAMESPACE, boot).get("phase") in ("Booting", "Ready"),
        PATIENCE,
        f"{boot}'s Job result taken",
    )
    adopted_after = time.monotonic() - back
    ready = wait_phase(lab.cluster, NAMESPACE, boot, "Ready")
    ready_after = time.monotonic() - back
    off = wait_phase(lab.cluster, NAMESPACE, drain, "Off")
    off_after = time.monotonic() - back
    shutdown = off["lastOperation"]["job"]
    shutdown_job = get_json(lab.cluster, "job", shutdown, "-n", NAMESPACE)
    [shutdown_pod] = get_json(lab.cluster, "pods", "-n", NAMESPACE, "-l", f"job-name={shutdown}")[
        "items"
    ]
    boot_orders = orders(lab.bmc, lab.machines[boot])
    drain_orders = orders(lab.bmc, lab.machines[drain])
    job_after = created_after(shutdown_job, back_wall)
    print(  # figures for the report, not assertions
        f"\n[{label}] after the control plane returned: the operator recovered in "
        f"{max(adopted_after, job_after):.1f}s ({boot}'s Job result taken in {adopted_after:.1f}s, "
        f"{drain}'s shutdown Job created in {job_after:.0f}s, its budget deleted at once); "
        f"{boot} Ready in {ready_after:.1f}s; the Job controller created the shutdown pod in "
        f"{created_after(shutdown_pod, back_wall):.0f}s; {drain} Off in {off_after:.1f}s; "
        f"orders {boot}: {boot_orders}, {drain}: {drain_orders}"
    )
    assert boot_orders == {"on": 1, "off": 0, "sent": 1}, boot_orders
    assert drain_orders == {"on": 0, "off": 1, "sent": 1}, drain_orders
    assert ready["lastOperation"]["job"] == job, "the operator adopted the Job it had started"
    assert action_jobs(lab, boot) == [job], "one Job for one intent"
    shutdowns = [j for j in action_jobs(lab, drain) if "-shutdown-" in j]
    assert shutdowns == [shutdown], "one shutdown Job for one intent"
    assert lab.operator.starts == 1 and lab.operator.proc is not None
    assert lab.operator.proc.poll() is None, "the operator rode the outage out, not restarted"


def heartbeat(lab: FaultLab, role: str) -> tuple[float, bool]:
    """The machine's kubelet heartbeat as the node-lifecycle controller reads it: its Lease's
    last renewal (epoch seconds, 0 without one) and whether its Node says Ready."""
    lease = get_json(lab.cluster, "lease", role, "-n", "kube-node-lease") or {}
    renewed = (lease.get("spec") or {}).get("renewTime")
    ready = says_ready(get_json(lab.cluster, "node", role))
    return (micro(renewed).timestamp() if renewed else 0.0), ready


def test_api_server_down_for_a_minute_mid_boot_and_mid_drain(lab: FaultLab) -> None:
    """kube-apiserver killed (SIGKILL, a crash) and started again with the same flags while a
    machine powers on and another drains; nothing else in the lab is restarted: kwok, playing
    the machines' kubelets, must resume their heartbeats as a kubelet does."""
    start_drain(lab, "api-drain")
    job = start_boot(lab, "api-boot")

    lab.cluster.kill("kube-apiserver")
    time.sleep(API_DOWN_SECONDS)  # the outage itself, not a wait for a condition
    back = lab.cluster.resume("kube-apiserver")
    back_wall = time.time() - (time.monotonic() - back)

    finish(lab, back, "api-boot", "api-drain", job, "API server killed 60 s")
    # A machine that stayed Ready through the outage: its kubelet renews its Lease again.
    renewed, ready = wait_for(
        lambda: (h := heartbeat(lab, "etcd-ready"))[0] > back_wall and h[1] and h,
        PATIENCE,
        "etcd-ready's Node Lease renewed after the API server's return",
    )
    print(  # figures for the report, not assertions
        f"[API server killed 60 s] etcd-ready's Node Lease renewed {renewed - back_wall:.1f}s "
        f"after the return (read once the others finished); api-boot's Node registered "
        f"{lab.sim.machine('api-boot').registrations} times (again when kwok missed it)"
    )
    assert ready and status(lab.cluster, NAMESPACE, "etcd-ready")["phase"] == "Ready"


def phases(lab: FaultLab) -> dict[str, str]:
    """Every machine's phase, from one list (one moment, as near as the API gives)."""
    listed = get_json(lab.cluster, "lsn", "-n", NAMESPACE)
    return {
        n["metadata"]["name"]: (n.get("status") or {}).get("phase", "")
        for n in cast(list[dict[str, Any]], listed["items"])
    }


def test_etcd_restarted_with_machines_in_every_phase(lab: FaultLab) -> None:
    """etcd stopped for 20 s and started on its data with a machine in each phase: PoweringOn
    (its startup Job running), Booting (powered on, its Node not registered yet: the lab holds
    its boot), Ready, Draining (held by a budget), PoweringOff (its shutdown Job waiting for an
    OS that ignores the button), Off and Failed. Each ends as asked with one order per intent;
    the steady ones get none."""
    steady = {"etcd-off": "Off", "etcd-ready": "Ready", FAILED: "Failed"}
    before = {role: orders(lab.bmc, lab.machines[role]) for role in steady}
    booting = lab.sim.machine("etcd-booting")
    booting.boot_seconds = float("inf")  # powered on, its OS never done booting until released
    # The three get under way together (CI minutes), then each is waited for.
    patch_desired(lab.cluster, NAMESPACE, "etcd-booting", "On")
    patch_desired(lab.cluster, NAMESPACE, SLOW_OFF, "Off")
    start_drain(lab, "etcd-drain")
    wait_phase(lab.cluster, NAMESPACE, "etcd-booting", "Booting")
    slow_off = lab.machines[SLOW_OFF]
    wait_for(
        lambda: lab.bmc.count_power_requests(slow_off.uuid, reset_types={"GracefulShutdown"}),
        PATIENCE,
        f"{SLOW_OFF}'s shutdown Job to order the graceful shutdown",
    )
    job = start_boot(lab, "etcd-boot")
    caught = phases(lab)
    expected = {
        "etcd-boot": "PoweringOn",
        "etcd-booting": "Booting",
        "etcd-ready": "Ready",
        "etcd-drain": "Draining",
        SLOW_OFF: "PoweringOff",
        "etcd-off": "Off",
        FAILED: "Failed",
    }
    assert {role: caught[role] for role in expected} == expected, caught

    lab.cluster.halt("etcd")
    time.sleep(ETCD_DOWN_SECONDS)  # the outage itself
    back = lab.cluster.resume("etcd")
    booting.boot_seconds = 0.0  # its OS is up: the kubelet registers

    finish(lab, back, "etcd-boot", "etcd-drain", job, "etcd restarted")
    wait_phase(lab.cluster, NAMESPACE, "etcd-booting", "Ready")
    off = wait_phase(lab.cluster, NAMESPACE, SLOW_OFF, "Off")
    booting_orders = orders(lab.bmc, lab.machines["etcd-booting"])
    off_orders = {
        kind: lab.bmc.count_power_requests(slow_off.uuid, reset_types={kind}, accepted_only=True)
        for kind in ("On", "ForceOn", "GracefulShutdown", "ForceOff")
    }
    print(  # figures for the report, not assertions
        f"[etcd restarted] phases caught {expected}; orders etcd-booting: {booting_orders}, "
        f"{SLOW_OFF}: {off_orders} (sent {orders(lab.bmc, slow_off)['sent']}), steady: "
        f"{ {role: orders(lab.bmc, lab.machines[role]) for role in steady} }; etcd-booting's "
        f"Node registered {booting.registrations} times"
    )
    assert booting_orders == {"on": 1, "off": 0, "sent": 1}, booting_orders
    # One intent: the graceful order, then the forced one the driver sends after its timeout.
    assert off_orders == {"On": 0, "ForceOn": 0, "GracefulShutdown": 1, "ForceOff": 1}
    assert orders(lab.bmc, slow_off)["sent"] == 2
    shutdowns = [j for j in action_jobs(lab, SLOW_OFF) if "-shutdown-" in j]
    assert shutdowns == [off["lastOperation"]["job"]], "one shutdown Job for one intent"
    booting_jobs = action_jobs(lab, "etcd-booting")
    assert len(booting_jobs) == 1 and "-startup-" in booting_jobs[0], booting_jobs
    for role, phase in steady.items():
        assert status(lab.cluster, NAMESPACE, role)["phase"] == phase, role
        assert orders(lab.bmc, lab.machines[role]) == before[role], f"{role} got an order"


#: How long the flappy BMC fails every other request (docs/architecture.md quotes its bound):
#: long enough for both attempts `attempts_within(90)` lets start (at 0 and 30 s), over before
#: a third can (90 s after the first), so the test waits for no third backoff.
FLAP_SECONDS = 90


def request_kinds(sent: list[Any]) -> dict[str, int]:
    """The recorded requests by what the role sent them for (session.yml, resolve.yml and
    wait.yml, order.yml, logout.yml)."""
    kinds = {"login": 0, "read": 0, "order": 0, "logout": 0, "other": 0}
    for request in sent:
        if request.method == "POST" and request.path.endswith("/Sessions"):
            kinds["login"] += 1
        elif request.is_reset:
            kinds["order"] += 1
        elif request.method == "GET":
            kinds["read"] += 1
        elif request.method == "DELETE":
            kinds["logout"] += 1
        else:
            kinds["other"] += 1
    return kinds


def test_flapping_bmc_is_retried_with_backoff_and_sent_one_order(lab: FaultLab) -> None:
    machine = lab.machines[FLAPPY]
    bmc = lab.flappy_bmc
    bmc.clear_requests()
    flapping.start(bmc.workdir)  # every other request refused (503) or dropped, in turn
    flap_start = time.monotonic()
    patch_desired(lab.cluster, NAMESPACE, FLAPPY, "On")
    # maxRetries is 0 on this machine: an outage must not use it up.
    unavailable = wait_for(
        lambda: (
            (s := status(lab.cluster, NAMESPACE, FLAPPY)).get("reason") == "BMCUnavailable" and s
        ),
        PATIENCE,
        "the status to say the BMC is unavailable",
    )
    assert unavailable["phase"] == "PoweringOn", unavailable
    assert "HTTP 503" in unavailable["message"] or "closed" in unavailable["message"], unavailable
    warned(lab.cluster, NAMESPACE, FLAPPY, reason="BMCUnavailable")
    # The rest of the flap itself, not a wait for a condition. It ends a second short of
    # FLAP_SECONDS (stopping takes a moment): the bound below is for the length measured.
    time.sleep(max(0.0, FLAP_SECONDS - 1 - (time.monotonic() - flap_start)))
    flapping.stop(bmc.workdir)
    flap_seconds = time.monotonic() - flap_start

    ready = wait_phase(lab.cluster, NAMESPACE, FLAPPY, "Ready")
    sent = bmc.requests()  # every request but the harness' own, refused and dropped ones too
    refused = [r for r in sent if r.status in {503, 0}]
    startups = [j for j in action_jobs(lab, FLAPPY) if "-startup-" in j]
    pods = JobRequest.backoff_limit + 1  # the default: the Node sets no other
    per_pod = redfish_power_on_requests()
    attempts = attempts_within(flap_seconds, retry_backoff) + 1  # + the one after the flap
    bound = outage_requests(flap_seconds, retry_backoff, pods=pods, per_pod=per_pod)
    print(  # figures for the report, not assertions
        f"\n[flapping BMC] flap {flap_seconds:.0f}s: {len(sent)} requests "
        f"{request_kinds(sent)}, {len(refused)} refused or dropped; bound {bound} = "
        f"{attempts} attempts x {pods} pods x {per_pod} requests; attempts used "
        f"{ready['lastOperation']['attempt']}, Jobs {len(startups)}; orders {orders(bmc, machine)}"
    )
    assert refused, "the BMC flapped while the operator worked"
    assert len(sent) <= bound, "more requests than the retry policy allows: a request storm"
    assert ready["lastOperation"]["attempt"] <= attempts, "retried sooner than the backoff"
    assert len(startups) == ready["lastOperation"]["attempt"], startups
    assert orders(bmc, machine)["on"] == 1, "one power order for one intent"
    assert ready["lastOperation"]["attempt"] >= 2, "the outage was retried, not given up"
    assert lab.operator.proc is not None and lab.operator.proc.poll() is None


def lease_of(lab: FaultLab, role: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(
        lab.cluster, "lease", f"lightsout.{NAMESPACE}.{role}", "-n", NAMESPACE
    )
    return found["spec"] if found else {}


def held_by(watch: Recorder, holder: str) -> tuple[float, dict[str, Any]] | None:
    """When the recorded Lease first named `holder`, and its spec then."""
    for at, _, lease in watch.events:
        if lease.get("spec", {}).get("holderIdentity") == holder:
            return at, lease["spec"]
    return None


def micro(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


#: Seconds a cut-off replica needs to notice its API server is back: its watches' retry pause
#: (at most 5 s, `handlers.lifecycle`), a fresh list, a pass; doubled for a loaded machine.
RECONNECT_SECONDS = 30
LEASE_SECONDS = 10


def test_a_partitioned_replica_never_acts_on_its_stale_view(lab: FaultLab, tmp_path: Path) -> None:
    """Replica A reaches the API server through a proxy the test cuts while A holds a booting
    machine's Lease; replica B, connected directly, takes the machine over only once that Lease
    has expired, adopts A's Job and finishes the boot. Once A is connected again it does not
    act on what it saw before the cut: no second order or Job, the status stays B's."""
    lab.operator.stop()  # the module's operator steps aside: A must be the one holding the Lease
    env = {**JOB_PLACEMENT_ENV, "LIGHTSOUT_LEASE_SECONDS": str(LEASE_SECONDS)}
    with Proxy(lab.cluster.ports["apiserver"]) as proxy:
        through = proxy.kubeconfig(lab.cluster, tmp_path / "replica-a.kubeconfig")
        a, b = (
            OperatorProcess(
                cluster=lab.cluster,
                namespaces=(NAMESPACE,),
                log_dir=tmp_path,
                identity=identity,
                extra_env={**env, **extra},
            )
            for identity, extra in (
                ("replica-a", {"KUBECONFIG": str(through)}),
                ("replica-b", {}),
            )
        )
        leases = client.CoordinationV1Api(lab.cluster.api_client()).list_namespaced_lease
        try:
            a.start()
            job = start_boot(lab, "split")
            assert lease_of(lab, "split").get("holderIdentity") == "replica-a"
            b.start()

            # Every version of the Lease: B may finish the boot and release it between two
            # probes (A's Job can have succeeded before the cut).
            with Recorder(leases, f"lightsout.{NAMESPACE}.split", namespace=NAMESPACE) as watch:
                proxy.cut()
                cut = time.monotonic()
                held = lease_of(lab, "split")  # A's last renewal: it can renew no more
                expiry = micro(held["renewTime"]) + dt.timedelta(
                    seconds=held["leaseDurationSeconds"]
                )
                seen, taken = wait_for(
                    lambda: held_by(watch, "replica-b"),
                    PATIENCE,
                    "replica B to take the machine's Lease",
                )
            taken_after = seen - cut
            assert micro(taken["acquireTime"]) >= expiry, "B acted before A's Lease expired"
            ready = wait_phase(lab.cluster, NAMESPACE, "split", "Ready")
            assert ready["lastOperation"]["job"] == job, "B adopted A's Job"

            proxy.mend()
            mended = time.monotonic()
            assert a.proc is not None

            def nothing_stale() -> bool:
                state = status(lab.cluster, NAMESPACE, "split")
                return (
                    state.get("phase") == "Ready"
                    and state["lastOperation"]["job"] == job
                    and action_jobs(lab, "split") == [job]
                    and orders(lab.bmc, lab.machines["split"]) == {"on": 1, "off": 0, "sent": 1}
                    and a.proc is not None
                    and a.proc.poll() is None
                )

            holds(nothing_stale, mended + RECONNECT_SECONDS, "one order, one Job, B's status")
            print(  # figures for the report, not assertions
                f"\n[partition] B took the Lease {taken_after:.1f}s after the cut (A's Lease: "
                f"{LEASE_SECONDS}s), the machine Ready with orders "
                f"{orders(lab.bmc, lab.machines['split'])}; A back for {RECONNECT_SECONDS}s: "
                "nothing stale written"
            )
        finally:
            a.stop()
            b.stop()
