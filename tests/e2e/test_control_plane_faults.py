"""Promises kept when the control plane or a BMC is not there: the API server down for a
minute mid-action, etcd restarted with machines in several phases, a BMC that fails every other
request, a replica cut off from the API server while another runs.

One lab for the module, with a control plane of its own (its API server and etcd are stopped
here, which the session's cluster's other users must never see): a runner node, one Redfish
emulator for the outage tests and a flapping one, the machine simulator and one operator
process, which is never restarted: it must find its way back by itself. Each test prints its
figures (orders per machine, seconds to recover, requests sent); the times are not asserted.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.execution.jobs import JobRequest
from lightsout.planning.fsm import retry_backoff
from lightsout.planning.outages import attempts_within
from lightsout_lab import Cluster, flapping
from lightsout_lab.kubelet import JOB_PLACEMENT_ENV, KubeletAgent, runner_image_env
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.proxy import Proxy
from lightsout_lab.sushy import POWER_OFF, POWER_ON, FakeSystem, SushyEmulator
from tests.conftest import CRD_NAMES, ROOT
from tests.e2e.conftest import PATIENCE, patch_desired, running_job, status, wait_phase
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, holds, wait_for

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
    "etcd-drain": "On",
    "etcd-off": "Off",
    "etcd-ready": "On",
    "split": "Off",
}
FLAPPY = "flappy"


@dataclass
class FaultLab:
    cluster: Cluster
    bmc: SushyEmulator
    flappy_bmc: SushyEmulator
    machines: dict[str, fleet.MachineDef]
    operator: OperatorProcess


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultLab]:
    work = tmp_path_factory.mktemp("faults")
    machines = {
        role: fleet.MachineDef(name=role, uuid=str(uuid.uuid4())) for role in [*ROLES, FLAPPY]
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
            FakeSystem(uuid=machines[r].uuid, name=r, power_state=p) for r, p in ROLES.items()
        ]
        bmc = SushyEmulator(systems).start()
        parts.append(bmc)
        flappy_bmc = SushyEmulator(
            [FakeSystem(uuid=machines[FLAPPY].uuid, name=FLAPPY)],
            middlewares=(flapping.MIDDLEWARE,),
        ).start()
        parts.append(flappy_bmc)
        parts.append(fleet.simulator(api, bmc, [machines[r] for r in ROLES], NAMESPACE))
        parts.append(fleet.simulator(api, flappy_bmc, [machines[FLAPPY]], NAMESPACE))
        # No health check: its hourly run would add BMC requests the flapping test counts.
        group = fleet.group(healthCheck={"enabled": False})
        nodes = [fleet.redfish_node(machines[r], bmc, desired=p) for r, p in ROLES.items()]
        nodes.append(
            fleet.redfish_node(machines[FLAPPY], flappy_bmc, secret_name="flappy", maxRetries=0)
        )
        objects = [
            *fleet.bmc_secrets(bmc),
            *fleet.bmc_secrets(flappy_bmc, name="flappy"),
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
        yield FaultLab(cluster, bmc, flappy_bmc, machines, operator)
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


def test_api_server_down_for_a_minute_mid_boot_and_mid_drain(lab: FaultLab) -> None:
    start_drain(lab, "api-drain")
    job = start_boot(lab, "api-boot")

    lab.cluster.halt("kube-apiserver")
    time.sleep(API_DOWN_SECONDS)  # the outage itself, not a wait for a condition
    back = lab.cluster.resume("kube-apiserver")

    finish(lab, back, "api-boot", "api-drain", job, "API server down 60 s")


def test_etcd_restarted_with_machines_in_every_phase(lab: FaultLab) -> None:
    steady = {"etcd-off": "Off", "etcd-ready": "Ready"}
    start_drain(lab, "etcd-drain")
    job = start_boot(lab, "etcd-boot")
    before = {role: orders(lab.bmc, lab.machines[role]) for role in steady}

    lab.cluster.halt("etcd")
    time.sleep(ETCD_DOWN_SECONDS)  # the outage itself
    back = lab.cluster.resume("etcd")

    finish(lab, back, "etcd-boot", "etcd-drain", job, "etcd restarted")
    for role, phase in steady.items():
        assert status(lab.cluster, NAMESPACE, role)["phase"] == phase, role
        assert orders(lab.bmc, lab.machines[role]) == before[role], f"{role} got an order"


def per_pod_requests() -> int:
    """The most requests one startup pod sends a Redfish BMC, from the role's defaults: the
    system read, one order, then PowerState reads every poll interval until the transition
    timeout (community.general's listing is not used: the system id resolves directly)."""
    defaults = yaml.safe_load((ROOT / "roles/redfish_power/defaults/main.yml").read_text())
    timeout = defaults["redfish_power_transition_timeout"]
    polls = -(-timeout // defaults["redfish_power_poll_interval"]) + 1  # the role's ceil + 1
    return 1 + 1 + polls


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
    warnings = [
        e["reason"] for e in events_for(lab.cluster, NAMESPACE, FLAPPY) if e["type"] == "Warning"
    ]
    assert "BMCUnavailable" in warnings, warnings
    flapping.stop(bmc.workdir)
    flap_seconds = time.monotonic() - flap_start

    ready = wait_phase(lab.cluster, NAMESPACE, FLAPPY, "Ready")
    sent = bmc.requests()
    refused = [r for r in sent if r.status in {503, 0}]
    pods = JobRequest.__dataclass_fields__["backoff_limit"].default + 1
    attempts = attempts_within(flap_seconds, retry_backoff) + 1  # + the one after the flap
    bound = attempts * pods * per_pod_requests()
    five_minutes = attempts_within(300, retry_backoff) * pods * per_pod_requests()
    print(  # figures for the report, not assertions
        f"\n[flapping BMC] flap {flap_seconds:.0f}s: {len(sent)} requests ({len(refused)} "
        f"refused or dropped), bound {bound} = {attempts} attempts x {pods} pods x "
        f"{per_pod_requests()} requests; a 5-minute flap: at most {five_minutes}; "
        f"orders {orders(bmc, machine)}; attempts used {ready['lastOperation']['attempt']}"
    )
    assert refused, "the BMC flapped while the operator worked"
    assert len(sent) <= bound, "more requests than the retry policy allows: a request storm"
    assert orders(bmc, machine)["on"] == 1, "one power order for one intent"
    assert ready["lastOperation"]["attempt"] >= 2, "the outage was retried, not given up"
    assert lab.operator.proc is not None and lab.operator.proc.poll() is None


def lease_of(lab: FaultLab, role: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(
        lab.cluster, "lease", f"lightsout.{NAMESPACE}.{role}", "-n", NAMESPACE
    )
    return found["spec"] if found else {}


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
        try:
            a.start()
            job = start_boot(lab, "split")
            assert lease_of(lab, "split").get("holderIdentity") == "replica-a"
            b.start()

            proxy.cut()
            cut = time.monotonic()
            held = lease_of(lab, "split")  # A's last renewal: it can renew no more
            expiry = micro(held["renewTime"]) + dt.timedelta(seconds=held["leaseDurationSeconds"])
            taken = wait_for(
                lambda: (s := lease_of(lab, "split")).get("holderIdentity") == "replica-b" and s,
                PATIENCE,
                "replica B to take the machine's Lease",
            )
            taken_after = time.monotonic() - cut
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
