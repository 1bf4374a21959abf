"""Health checks end to end: the Group's CronJob → an Indexed Job → Ansible → BMCs → Node status.

Real control plane (its CronJob, Job and garbage-collector controllers), the operator as a real
process, the health-check pods run by the stand-in kubelet (real ansible-runner, the shipped
healthcheck playbook), sushy-tools as a Redfish BMC and ipmi_sim as an IPMI BMC. A run is
started from the CronJob at once, as `kubectl create job --from=cronjob/…` does, instead of
waiting for the schedule.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from lightsout.commands.power import ExitCode
from lightsout.execution.health import cronjob_name
from lightsout_lab import Cluster
from lightsout_lab.ipmi import IpmiBmc, IpmiMachine, IpmiSim
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_OFF, FakeSystem, SushyEmulator
from tests.e2e.conftest import PATIENCE, status, wait_phase
from tests.e2e.test_cli_power import lightsout
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, wait_for

GROUP = "homelab"
CRONJOB = cronjob_name(GROUP)
#: Once a year: the runs the test makes are the only ones (a scheduled run landing between
#: them would not be the run the test waits for).
SCHEDULE = "0 0 1 1 *"


@pytest.fixture
def ipmi(namespace: str) -> Iterator[IpmiBmc]:
    with IpmiSim(IpmiMachine(f"ipmi-{namespace}", power_state="Off")) as sim:
        yield sim.bmc


def run_check(cluster: Cluster, namespace: str) -> str:
    """Start one run of the Group's health check now; returns its Job's name."""
    job = f"check-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "job", job, f"--from=cronjob/{CRONJOB}", "-n", namespace)
    return job


def cli_job(output: str) -> str:
    """The Job `lightsout healthcheck` made ("Job NAME: checking …" is its first line)."""
    return output.split()[1].rstrip(":")


def wait_checked(
    cluster: Cluster, namespace: str, names: list[str], job: str
) -> dict[str, dict[str, Any]]:
    """Every machine's status once the run `job` has landed in it."""

    def landed() -> dict[str, dict[str, Any]] | None:
        found = {name: status(cluster, namespace, name) for name in names}
        done = all((s.get("lastHealthCheck") or {}).get("job") == job for s in found.values())
        return found if done else None

    return wait_for(landed, PATIENCE, f"the health check {job} to land on {names}")


def condition(machine: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in machine.get("conditions") or [] if c["type"] == kind)


def health(machine: Mapping[str, Any]) -> tuple[str, str, str | None]:
    cond = condition(machine, "Healthy")
    return cond["status"], cond["reason"], machine.get("observedPowerState")


def test_group_health_check_follows_the_bmcs_and_the_group(
    crds: Cluster, namespace: str, operator: OperatorProcess, ipmi: IpmiBmc
) -> None:
    box = fleet.MachineDef(name=f"box-{namespace}", uuid=str(uuid.uuid4()))
    # A third machine whose credentials Secret does not exist yet: left out of the check.
    lost = fleet.MachineDef(name=f"lost-{namespace}", uuid=str(uuid.uuid4()))
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
            ],
        )
        names = [box.name, ipmi.name]
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

        # --- the CronJob: owned by the Group, on its schedule, never two runs at once
        cron = wait_for(
            lambda: get_json(crds, "cronjob", CRONJOB, "-n", namespace),
            PATIENCE,
            "the Group's health-check CronJob",
        )
        spec = cron["spec"]
        print("\ncronjob:", json.dumps({k: v for k, v in spec.items() if k != "jobTemplate"}))
        assert cron["metadata"]["ownerReferences"][0]["kind"] == "Group"
        assert spec["schedule"] == SCHEDULE
        assert spec["concurrencyPolicy"] == "Forbid"
        assert spec["successfulJobsHistoryLimit"] == spec["failedJobsHistoryLimit"] == 1
        job_spec = spec["jobTemplate"]["spec"]
        # Two machines: the third's pod could not mount its Secret and would never start.
        assert (job_spec["completionMode"], job_spec["completions"]) == ("Indexed", 2)
        assert job_spec["activeDeadlineSeconds"] > 0
        pod = job_spec["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        secrets = sorted(v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v)
        assert secrets == ["bmc", "bmc-ca", "ipmi"]  # the Group's machines' Secrets only

        # --- both machines checked: healthy, Off as their BMCs say
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        for name, machine in checked.items():
            print(f"{name}: lastHealthCheck {json.dumps(machine['lastHealthCheck'])}")
            assert health(machine) == ("True", "Healthy", "Off")
        assert bmc.count_power_requests(box.uuid) == 0  # a check sends no order
        assert ipmi.count_power_commands() == 0
        assert "lastHealthCheck" not in status(crds, namespace, lost.name)

        # --- the Redfish BMC stops answering (checked with the CLI, as a person debugging does)
        bmc.halt()
        cli = lightsout(crds, "healthcheck", box.name, "-n", namespace)
        print(f"$ lightsout healthcheck {box.name} (exit {cli.returncode})\n{cli.stdout}")
        assert cli.returncode == ExitCode.FAILED, cli.stderr
        assert f"{box.name}: Unhealthy, BMCUnreachable: " in cli.stdout
        checked = wait_checked(crds, namespace, names, cli_job(cli.stdout))
        print(f"BMC stopped: {json.dumps(checked[box.name]['lastHealthCheck'])}")
        assert health(checked[box.name]) == ("False", "BMCUnreachable", "Unknown")
        assert health(checked[ipmi.name]) == ("True", "Healthy", "Off")
        bmc.resume()

        # --- wrong passwords in both Secrets
        fleet.apply(crds, namespace, fleet.bmc_secrets(bmc, password="not-the-password"))
        fleet.apply(
            crds,
            namespace,
            [fleet.secret("ipmi", {"username": ipmi.username, "password": "wrong-pw"})],
        )
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        for name, machine in checked.items():
            print(f"{name} wrong password: {json.dumps(machine['lastHealthCheck'])}")
            assert health(machine)[:2] == ("False", "AuthenticationFailed")
            assert "not-the-password" not in json.dumps(machine)
            assert "wrong-pw" not in json.dumps(machine)

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
                == 3
            ),
            PATIENCE,
            "the machine whose Secret now exists to join the check",
        )
        cli = lightsout(crds, "healthcheck", "--group", GROUP, "-n", namespace)
        print(f"$ lightsout healthcheck --group {GROUP} (exit {cli.returncode})\n{cli.stdout}")
        assert cli.returncode == ExitCode.DONE, cli.stderr
        assert f"{box.name}: Healthy, power Off" in cli.stdout
        assert f"{ipmi.name}: Healthy, power Off" in cli.stdout
        assert f"{lost.name}: Healthy, power Off" in cli.stdout
        names.append(lost.name)
        checked = wait_checked(crds, namespace, names, cli_job(cli.stdout))
        for machine in checked.values():
            assert health(machine) == ("True", "Healthy", "Off")

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


def test_drift_is_reported_then_corrected_with_one_order(
    crds: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    box = fleet.MachineDef(name=f"box-{namespace}", uuid=str(uuid.uuid4()))
    with SushyEmulator([FakeSystem(uuid=box.uuid, name=box.name, power_state="Off")]) as bmc:
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
            e["message"]
            for e in events_for(crds, namespace, box.name)
            if e["reason"] == "DriftDetected" and e["type"] == "Warning"
        ]
        assert set(warnings) == {
            "the health check found the machine powered On although its desired power state "
            "is Off (phase Off)"
        }
        assert bmc.count_power_requests(box.uuid) == 0  # Report sends nothing
        assert bmc.power_state(box.uuid) == "On"

        # --- driftPolicy Correct: powered off again through the state machine, one order
        body = json.dumps({"spec": {"healthCheck": {"driftPolicy": "Correct"}}})
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
        assert bmc.power_state(box.uuid) == "Off"
        orders = bmc.power_requests(box.uuid)
        print(f"correction: {[r.reset_type for r in orders]}")
        assert len(bmc.power_requests(box.uuid, reset_types=POWER_OFF)) == 1
        assert len(orders) == 1
        checked = wait_checked(crds, namespace, names, run_check(crds, namespace))
        assert health(checked[box.name]) == ("True", "Healthy", "Off")
        assert condition(checked[box.name], "Drifted")["status"] == "False"
        assert len(bmc.power_requests(box.uuid)) == 1  # not fought over: no further order

        print(crds.kubectl("get", "lsn", "-n", namespace, "-o", "wide").stdout)
        print(crds.kubectl("describe", "lsn", box.name, "-n", namespace).stdout)
