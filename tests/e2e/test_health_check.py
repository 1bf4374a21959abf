"""Health checks end to end: the Group's CronJob → an Indexed Job → Ansible → BMCs → Node status.

Real control plane (its CronJob, Job and garbage-collector controllers), the operator as a real
process, the health-check pods run by the stand-in kubelet (real ansible-runner, the shipped
healthcheck playbook), one machine of each driver: sushy-tools as a Redfish BMC, ipmi_sim as an
IPMI BMC, an OpenSSH server as a Wake-on-LAN machine (its power state is whether its SSH port
answers) and fakepve as a Proxmox VE host. A run is started from the CronJob at once, as
`kubectl create job --from=cronjob/…` does, instead of waiting for the schedule. Before it, each
new machine's first check (the Job the operator starts for a new machine) has landed, with no run
of the schedule behind it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from lightsout.commands.power import ExitCode
from lightsout.execution.health import cronjob_name
from lightsout_lab import Cluster
from lightsout_lab.fakepve import SHUTDOWN, START, FakePveCluster, Guest
from lightsout_lab.ipmi import IpmiBmc, IpmiMachine, IpmiSim
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sshd import SshMachine
from lightsout_lab.sushy import POWER_OFF, FakeSystem, SushyEmulator
from lightsout_lab.wol import WolListener
from tests.e2e.conftest import PATIENCE, status, wait_phase
from tests.e2e.test_cli_power import lightsout
from tests.harness import fleet
from tests.harness.wait import events_for, events_with_reason, get_json, wait_for

GROUP = "homelab"
CRONJOB = cronjob_name(GROUP)
#: Once a year: the runs the test makes are the only ones (a scheduled run landing between
#: them would not be the run the test waits for).
SCHEDULE = "0 0 1 1 *"


VMID = 100


@pytest.fixture
def ipmi(namespace: str) -> Iterator[IpmiBmc]:
    with IpmiSim(IpmiMachine(f"ipmi-{namespace}", power_state="Off")) as sim:
        yield sim.bmc


@pytest.fixture
def mini(namespace: str, lan: WolListener) -> Iterator[SshMachine]:
    with SshMachine(f"mini-{namespace}", power_state="Off") as machine:
        lan.wakes(machine)
        yield machine


@pytest.fixture
def pve() -> Iterator[FakePveCluster]:
    # The VM runs: its check must report On (drift, with driftPolicy Report: nothing is sent).
    with FakePveCluster([Guest(VMID, "db", node="pve1", status="running")]) as cluster:
        yield cluster


def wol_and_proxmox(
    lan: WolListener, mini: SshMachine, pve: FakePveCluster, vm: str
) -> list[dict[str, Any]]:
    """Secrets and Nodes of the Wake-on-LAN machine and the Proxmox VM."""
    return [
        fleet.secret("ssh", {"ssh-privatekey": mini.ssh.client_key}),
        fleet.secret("pve", {"username": pve.username, "password": pve.password}),
        fleet.secret("pve-ca", {"ca.crt": pve.ca_path.read_bytes()}),
        fleet.wol_node(
            mini.name,
            mac=mini.mac,
            lan_host=lan.host,
            lan_port=lan.port,
            ssh_host=mini.ssh.host,
            ssh_port=mini.ssh.port,
            ssh_user=mini.ssh.user,
            known_hosts=mini.ssh.known_hosts_line + "\n",
            shutdown_command=mini.shutdown_command,
        ),
        fleet.proxmox_node(vm, pve.endpoint, proxmox={"mode": "Persistent", "vmid": VMID}),
    ]


def after_last_phase_change(cluster: Cluster, namespace: str) -> None:
    """Return in a later second than every machine's status.phaseSince.

    A check only counts against a machine's phase if it started after the phase did, and both
    times are whole seconds (a container's startedAt, status.phaseSince): a check started in
    the second a machine went Off waits for the next run, as it would in a user's cluster. A
    check started after this is the one that is judged."""
    latest = max(
        (
            dt.datetime.fromisoformat(since)
            for item in (get_json(cluster, "lsn", "-n", namespace) or {}).get("items") or []
            if (since := (item.get("status") or {}).get("phaseSince"))
        ),
        default=None,
    )
    if latest is not None:
        wait_for(
            lambda: dt.datetime.now(dt.UTC).replace(microsecond=0) > latest,
            PATIENCE,
            f"a second later than the last phase change ({latest:%H:%M:%S})",
            interval=0.1,
        )


def run_check(cluster: Cluster, namespace: str) -> str:
    """Start one run of the Group's health check now, in a later second than every machine's
    phase (`after_last_phase_change`); returns its Job's name."""
    after_last_phase_change(cluster, namespace)
    job = f"check-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "job", job, f"--from=cronjob/{CRONJOB}", "-n", namespace)
    return job


def cli_job(output: str) -> str:
    """The Job `lightsout healthcheck` made ("Job NAME: checking …" is its first line)."""
    return output.split()[1].rstrip(":")


def wait_checked(
    cluster: Cluster, namespace: str, names: list[str], job: str | None, timeout: float = PATIENCE
) -> dict[str, dict[str, Any]]:
    """Every machine's status once the run `job` (None: any check) has landed in it (one list
    per poll, not a `kubectl get` per machine: those would compete with the check's own pods for
    the CPU)."""

    def landed() -> dict[str, dict[str, Any]] | None:
        items = (get_json(cluster, "lsn", "-n", namespace) or {}).get("items") or []
        every = {i["metadata"]["name"]: i.get("status") or {} for i in items}
        found = {name: every.get(name, {}) for name in names}
        checks = [s.get("lastHealthCheck") or {} for s in found.values()]
        done = all(c.get("job") == job if job else c for c in checks)
        return found if done else None

    what = f"the health check {job}" if job else "a health check"
    return wait_for(landed, timeout, f"{what} to land on {names}")


def condition(machine: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in machine.get("conditions") or [] if c["type"] == kind)


def health(machine: Mapping[str, Any]) -> tuple[str, str, str | None]:
    cond = condition(machine, "Healthy")
    return cond["status"], cond["reason"], machine.get("observedPowerState")


def test_group_health_check_follows_the_bmcs_and_the_group(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    ipmi: IpmiBmc,
    lan: WolListener,
    mini: SshMachine,
    pve: FakePveCluster,
) -> None:
    box = fleet.MachineDef(name=f"box-{namespace}", uuid=str(uuid.uuid4()))
    # A machine whose credentials Secret does not exist yet: left out of the check.
    lost = fleet.MachineDef(name=f"lost-{namespace}", uuid=str(uuid.uuid4()))
    vm = f"vm-{namespace}"
    systems = [FakeSystem(uuid=m.uuid, name=m.name, power_state="Off") for m in (box, lost)]
    with SushyEmulator(systems) as bmc:
        fleet.apply(
            crds,
            namespace,
            [
                *fleet.bmc_secrets(bmc),
                fleet.secret("ipmi", {"username": ipmi.username, "password": ipmi.password}),
                fleet.group(GROUP, healthCheck={"schedule": SCHEDULE}),
                fleet.redfish_node(box, bmc),
                fleet.ipmi_node(ipmi.name, ipmi.host, ipmi.port, secret_name="ipmi"),
                fleet.redfish_node(lost, bmc, secret_name="gone"),
                *wol_and_proxmox(lan, mini, pve, vm),
            ],
        )
        names = [box.name, ipmi.name, mini.name, vm]
        for name in names:
            wait_phase(crds, namespace, name, "Off")
        unchecked = wait_for(
            lambda: next(
                (
                    c
                    for c in status(crds, namespace, lost.name).get("conditions") or []
                    if c["type"] == "Healthy"
                ),
                None,
            ),
            PATIENCE,
            "the machine whose Secret is missing to say why it is not checked",
        )
        print(
            f"\n{lost.name}: Healthy={unchecked['status']} {unchecked['reason']}: "
            f"{unchecked['message']}"
        )
        assert (unchecked["status"], unchecked["reason"]) == ("False", "SecretNotFound")
        assert f"credentials Secret {namespace}/gone not found" in unchecked["message"]
        #: What each machine's emulator says, which its check must report.
        found = {box.name: "Off", ipmi.name: "Off", mini.name: "Off", vm: "On"}

        # --- the CronJob: owned by the Group, on its schedule, never two runs at once
        # Four machines: the fifth's pod could not mount its Secret and would never start. The
        # Group's pass follows its machines' changes a moment later, so the CronJob may first
        # list the machines seen so far.
        cron = wait_for(
            lambda: (
                c
                if (c := get_json(crds, "cronjob", CRONJOB, "-n", namespace))
                and c["spec"]["jobTemplate"]["spec"].get("completions") == 4
                else None
            ),
            PATIENCE,
            "the Group's health-check CronJob to list its four checkable machines",
        )
        spec = cron["spec"]
        print("\ncronjob:", json.dumps({k: v for k, v in spec.items() if k != "jobTemplate"}))
        assert cron["metadata"]["ownerReferences"][0]["kind"] == "Group"
        assert spec["schedule"] == SCHEDULE
        assert spec["concurrencyPolicy"] == "Forbid"
        assert spec["successfulJobsHistoryLimit"] == spec["failedJobsHistoryLimit"] == 1
        job_spec = spec["jobTemplate"]["spec"]
        assert job_spec["completionMode"] == "Indexed"
        assert job_spec["activeDeadlineSeconds"] > 0
        pod = job_spec["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        secrets = sorted(v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v)
        # The Group's machines' Secrets only.
        assert secrets == ["bmc", "bmc-ca", "ipmi", "pve", "pve-ca", "ssh"]
        assert pod["hostNetwork"] is True  # a Wake-on-LAN machine is reached from the host

        # --- each new machine's first check: the operator's own, before any run of the schedule;
        # every machine healthy, in the power state its emulator reports (the checks of the runs
        # below, each a pod per machine, only add what changed: the BMC gone, wrong passwords,
        # the fifth machine)
        firsts = wait_checked(crds, namespace, names, None)
        scheduled = (get_json(crds, "cronjob", CRONJOB, "-n", namespace) or {}).get("status") or {}
        assert "lastScheduleTime" not in scheduled  # no run of the schedule made them
        first_jobs = {n: firsts[n]["lastHealthCheck"]["job"] for n in names}
        print(f"first checks: {json.dumps(first_jobs)}")
        for name in names:
            assert health(firsts[name]) == ("True", "Healthy", found[name])

        # --- the Redfish BMC stops answering (checked with the CLI, as a person debugging does)
        bmc.halt()
        cli = lightsout(crds, "healthcheck", box.name, "-n", namespace)
        print(f"$ lightsout healthcheck {box.name} (exit {cli.returncode})\n{cli.stdout}")
        assert cli.returncode == ExitCode.FAILED, cli.stderr
        assert f"{box.name}: Unhealthy, BMCUnreachable: " in cli.stdout
        checked = wait_checked(crds, namespace, names, cli_job(cli.stdout))
        print(f"BMC stopped: {json.dumps(checked[box.name]['lastHealthCheck'])}")
        assert health(checked[box.name]) == ("False", "BMCUnreachable", "Unknown")
        for name in names[1:]:
            assert health(checked[name]) == ("True", "Healthy", found[name])
        bmc.resume()

        # --- a run of the CronJob (as `kubectl create job --from`), with wrong passwords in
        # both BMC Secrets: every machine is checked by it, after and apart from its first check
        fleet.apply(crds, namespace, fleet.bmc_secrets(bmc, password="not-the-password"))
        fleet.apply(
            crds,
            namespace,
            [fleet.secret("ipmi", {"username": ipmi.username, "password": "wrong-pw"})],
        )
        job = run_check(crds, namespace)
        checked = wait_checked(crds, namespace, names, job)
        for name, machine in checked.items():
            print(f"{name}: lastHealthCheck {json.dumps(machine['lastHealthCheck'])}")
            # The first check came from another Job, and earlier than this run.
            assert first_jobs[name] != job
            first = dt.datetime.fromisoformat(firsts[name]["lastHealthCheck"]["time"])
            assert first < dt.datetime.fromisoformat(machine["lastHealthCheck"]["time"])
        for name in (box.name, ipmi.name):
            machine = checked[name]
            print(f"{name} wrong password: {json.dumps(machine['lastHealthCheck'])}")
            assert health(machine)[:2] == ("False", "AuthenticationFailed")
            assert "not-the-password" not in json.dumps(machine)
            assert "wrong-pw" not in json.dumps(machine)
        for name in (mini.name, vm):  # their own credentials are untouched
            assert health(checked[name]) == ("True", "Healthy", found[name])
        # The running VM is drift (phase Off); driftPolicy Report: it is only reported. The
        # result lands first, the state machine's next pass finds the drift in it.
        wait_for(
            lambda: any(
                c["type"] == "Drifted" and c["status"] == "True"
                for c in status(crds, namespace, vm).get("conditions") or []
            ),
            PATIENCE,
            "the running VM to be reported Drifted",
        )
        assert bmc.count_power_requests(box.uuid) == 0  # a check sends no order
        assert ipmi.count_power_commands() == 0
        assert "lastHealthCheck" not in status(crds, namespace, lost.name)
        assert (mini.power_ons, mini.shutdown_requests(), lan.packets()) == (0, 0, [])
        assert (pve.count(START), pve.count(SHUTDOWN), pve.status(VMID)) == (0, 0, "running")

        # --- restored, and the third machine's Secret created: it is checked from now on
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), *fleet.bmc_secrets(bmc, "gone")])
        fleet.apply(
            crds,
            namespace,
            [fleet.secret("ipmi", {"username": ipmi.username, "password": ipmi.password})],
        )
        wait_for(
            lambda: (
                get_json(crds, "cronjob", CRONJOB, "-n", namespace)["spec"]["jobTemplate"]["spec"][
                    "completions"
                ]
                == len(names) + 1
            ),
            PATIENCE,
            "the machine whose Secret now exists to join the check",
        )
        cli = lightsout(crds, "healthcheck", "--group", GROUP, "-n", namespace)
        print(f"$ lightsout healthcheck --group {GROUP} (exit {cli.returncode})\n{cli.stdout}")
        assert cli.returncode == ExitCode.DONE, cli.stderr
        found[lost.name] = "Off"
        names.append(lost.name)
        for name in names:
            assert f"{name}: Healthy, power {found[name]}" in cli.stdout
        checked = wait_checked(crds, namespace, names, cli_job(cli.stdout))
        for name, machine in checked.items():
            assert health(machine) == ("True", "Healthy", found[name])
        print(crds.kubectl("get", "lsn", "-n", namespace).stdout)

        # --- the schedule follows the Group
        body = json.dumps({"spec": {"healthCheck": {"schedule": "30 0 1 1 *"}}})
        crds.kubectl("patch", "lsg", GROUP, "-n", namespace, "--type=merge", "-p", body)
        wait_for(
            lambda: (
                get_json(crds, "cronjob", CRONJOB, "-n", namespace)["spec"]["schedule"]
                == "30 0 1 1 *"
            ),
            PATIENCE,
            "the CronJob's schedule to follow the Group's",
        )

        # --- healthCheck.enabled: false removes the CronJob; deleting the Group removes it too
        body = json.dumps({"spec": {"healthCheck": {"enabled": False}}})
        crds.kubectl("patch", "lsg", GROUP, "-n", namespace, "--type=merge", "-p", body)
        wait_for(
            lambda: get_json(crds, "cronjob", CRONJOB, "-n", namespace) is None,
            PATIENCE,
            "the CronJob deleted when the check is disabled",
        )
        body = json.dumps({"spec": {"healthCheck": {"enabled": True}}})
        crds.kubectl("patch", "lsg", GROUP, "-n", namespace, "--type=merge", "-p", body)
        wait_for(
            lambda: get_json(crds, "cronjob", CRONJOB, "-n", namespace),
            PATIENCE,
            "the CronJob back when the check is enabled again",
        )
        crds.kubectl("delete", "lsg", GROUP, "-n", namespace, "--wait=false")
        wait_for(
            lambda: (
                get_json(crds, "cronjob", CRONJOB, "-n", namespace) is None
                and get_json(crds, "configmap", CRONJOB, "-n", namespace) is None
            ),
            PATIENCE,
            "the CronJob and its machine list deleted with the Group",
        )


def drift_events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[str]:
    return [e["message"] for e in events_for(cluster, namespace, name) if e["reason"] == reason]


def test_drift_is_reported_corrected_once_then_given_up_and_adopted(
    crds: Cluster, namespace: str, operator: OperatorProcess, kube_api: client.ApiClient
) -> None:
    box = fleet.MachineDef(name=f"box-{namespace}", uuid=str(uuid.uuid4()))
    with (
        SushyEmulator([FakeSystem(uuid=box.uuid, name=box.name, power_state="Off")]) as bmc,
        # The machine's kubelet: its core Node registers while the BMC says On.
        fleet.simulated(crds, kube_api, namespace, box.name, bmc.power_reader(box.uuid)),
    ):
        fleet.apply(
            crds,
            namespace,
            [
                *fleet.bmc_secrets(bmc),
                fleet.group(GROUP, healthCheck={"schedule": SCHEDULE}),
                fleet.redfish_node(box, bmc),
            ],
        )
        names = [box.name]
        wait_phase(crds, namespace, box.name, "Off")
        wait_for(
            lambda: get_json(crds, "cronjob", CRONJOB, "-n", namespace),
            PATIENCE,
            "the Group's health-check CronJob",
        )

        # --- drift, driftPolicy Report: a person powers the Redfish machine on at the BMC
        bmc.reset(box.uuid, "On", wait="On")
        bmc.clear_requests()
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        drifted = wait_for(
            lambda: (
                (s := status(crds, namespace, box.name))
                and condition(s, "Drifted")["status"] == "True"
                and s
            ),
            PATIENCE,
            "Drifted=True",
        )
        print(f"drift reported: {drifted['reason']}: {drifted['message']}")
        assert drifted["observedPowerState"] == "On"
        assert drifted["phase"] == "Off"
        warnings = [
            message
            for kind, message in events_with_reason(crds, namespace, box.name, "DriftDetected")
            if kind == "Warning"
        ]
        assert set(warnings) == {
            "the health check found the machine powered On although its desired power state "
            "is Off (phase Off)"
        }
        assert bmc.count_power_requests(box.uuid) == 0  # Report sends nothing
        assert bmc.power_state(box.uuid) == "On"

        # --- driftPolicy Correct (one correction a day): drained and powered off, one order
        body = json.dumps(
            {"spec": {"healthCheck": {"driftPolicy": "Correct", "maxCorrections": 1}}}
        )
        crds.kubectl("patch", "lsg", GROUP, "-n", namespace, "--type=merge", "-p", body)
        corrected = wait_for(
            lambda: (
                (s := status(crds, namespace, box.name))
                and s.get("phase") == "Off"
                and (s.get("lastOperation") or {}).get("action") == "shutdown"
                and s
            ),
            PATIENCE,
            "the drift corrected by a shutdown",
        )
        assert corrected["lastOperation"]["result"] == "Succeeded"
        assert len(corrected["driftCorrections"]) == 1
        assert bmc.power_state(box.uuid) == "Off"
        orders = bmc.power_requests(box.uuid)
        print(f"correction: {[r.reset_type for r in orders]}")
        assert len(bmc.power_requests(box.uuid, reset_types=POWER_OFF)) == 1
        assert len(orders) == 1
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        assert health(checked[box.name]) == ("True", "Healthy", "Off")
        assert condition(checked[box.name], "Drifted")["status"] == "False"
        assert len(bmc.power_requests(box.uuid)) == 1  # not fought over: no further order

        # --- the person powers it on again: the one correction is used up, so it is Failed
        bmc.reset(box.uuid, "On", wait="On")
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        failed = wait_for(
            lambda: (s := status(crds, namespace, box.name)).get("phase") == "Failed" and s,
            PATIENCE,
            "Failed after the corrections ran out",
        )
        print(f"given up: {failed['reason']}: {failed['message']}")
        assert failed["reason"] == "DriftCorrectionsExhausted"
        assert "already corrected 1 times within 86400s (maxCorrections 1)" in failed["message"]
        assert events_with_reason(crds, namespace, box.name, "DriftCorrectionsExhausted")
        assert len(bmc.power_requests(box.uuid)) == 1  # no second power-off
        assert bmc.power_state(box.uuid) == "On"
        print(crds.kubectl("get", "lsn", "-n", namespace, "-o", "wide").stdout)
        print(crds.kubectl("describe", "lsn", box.name, "-n", namespace).stdout)

        # --- driftPolicy Adopt: the machine is kept On; its desired state follows it
        body = json.dumps(
            {"spec": {"healthCheck": {"driftPolicy": "Adopt", "maxCorrections": None}}}
        )
        crds.kubectl("patch", "lsg", GROUP, "-n", namespace, "--type=merge", "-p", body)
        wait_checked(crds, namespace, names, run_check(crds, namespace))
        adopted = wait_phase(crds, namespace, box.name, "Ready")
        spec = get_json(crds, "lsn", box.name, "-n", namespace)["spec"]
        print(f"adopted: desiredPowerState {spec['desiredPowerState']}, {adopted['message']}")
        assert spec["desiredPowerState"] == "On"
        assert drift_events(crds, namespace, box.name, "DriftAdopted")
        assert condition(adopted, "Drifted")["status"] == "False"
        assert len(bmc.power_requests(box.uuid)) == 1  # adopted without a power-on order
        assert bmc.power_state(box.uuid) == "On"

        print(crds.kubectl("get", "lsn", "-n", namespace, "-o", "wide").stdout)
        print(crds.kubectl("describe", "lsn", box.name, "-n", namespace).stdout)
