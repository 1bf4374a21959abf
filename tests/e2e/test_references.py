"""Issue 19, part 1: a machine whose Group, Secret, Secret key, CA Secret, overlay ConfigMap or
playbook is missing gets no Job and no power order, says which object is missing, and goes on by
itself once the object exists.

One operator, one Redfish emulator and one namespace for every row (each row is a machine
whose one reference is missing), so the whole table costs one power-on cycle. Every machine's
bootTimeoutSeconds is 3000, so its Job's deadline (3120 s) is far beyond what this test waits:
a regression to "wait for the Job deadline" fails it. A seventh machine, in a Group that never
exists, sits beside a pod only it could host: the autoscaler never chooses it, and
`lightsout plan` says why.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_ON, FakeSystem, SushyEmulator
from tests.e2e.autoscaling import plan_text
from tests.e2e.conftest import PATIENCE, status
from tests.harness import fleet
from tests.harness.wait import events_for, get_json, wait_for

pytestmark = pytest.mark.e2e

#: Seconds within which a missing reference must be reported: far below the Job deadline.
REPORTED_WITHIN = 90
BOOT_TIMEOUT = 3000
#: A playbook of the overlay that runs the shipped one (the overlay is laid over the shipped
#: playbooks in one project directory).
OVERLAY_PLAYBOOK = "- name: Site startup\n  ansible.builtin.import_playbook: startup.yml\n"


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def reached(
    crds: Cluster, namespace: str, name: str, field: str, value: str
) -> dict[str, Any] | None:
    found = status(crds, namespace, name)
    return found if found.get(field) == value else None


def warned(crds: Cluster, namespace: str, name: str, reason: str, named: str) -> bool:
    return any(
        (e["type"], e["reason"]) == ("Warning", reason) and named in e["message"]
        for e in events_for(crds, namespace, name)
    )


def test_missing_references_hold_every_action_back_until_the_object_exists(
    crds: Cluster, namespace: str, operator: OperatorProcess, kube_api: client.ApiClient
) -> None:
    rows = ("secret", "ca", "key", "configmap", "playbook", "group", "auto")
    machines = {
        row: fleet.MachineDef(name=f"{row}-{namespace}", uuid=str(uuid.uuid4()), cpu="8")
        for row in rows
    }
    systems = [FakeSystem(uuid=m.uuid, name=m.name) for m in machines.values()]
    with SushyEmulator(systems) as bmc:
        simulator = fleet.simulator(kube_api, bmc, machines.values(), namespace)
        try:
            _run(crds, namespace, bmc, machines)
        finally:
            simulator.stop()
            for m in machines.values():
                crds.kubectl("delete", "node", m.name, "--ignore-not-found", "--wait=false")


def _run(
    crds: Cluster, namespace: str, bmc: SushyEmulator, machines: dict[str, fleet.MachineDef]
) -> None:
    power = {"onWatts": 60, "bootTimeoutSeconds": BOOT_TIMEOUT}

    def node(row: str, **spec: Any) -> dict[str, Any]:
        spec.setdefault("secret_name", f"bmc-{row}")
        return fleet.redfish_node(machines[row], bmc, desired="On", power=power, **spec)

    full = {"username": bmc.username, "password": bmc.password}
    ca = {"ca.crt": bmc.ca_path.read_bytes()}
    # Each row lacks one thing: bmc-secret; bmc-ca-ca; the password key of bmc-key; the
    # ConfigMap overlay-configmap; the key site.yml of overlay-playbook; the Group later.
    present = [
        fleet.group(),
        fleet.secret("bmc-secret-ca", ca),
        fleet.secret("bmc-ca", full),
        fleet.secret("bmc-key", {"username": bmc.username}),
        fleet.secret("bmc-key-ca", ca),
        *fleet.bmc_secrets(bmc, "bmc-configmap"),
        *fleet.bmc_secrets(bmc, "bmc-playbook"),
        configmap("overlay-playbook", {"notes.txt": "site playbooks go here"}),
        *fleet.bmc_secrets(bmc, "bmc-group"),
        *fleet.bmc_secrets(bmc, "bmc-auto"),
    ]
    nodes = [
        node("secret"),
        node("ca"),
        node("key"),
        node("configmap", playbooks={"configMapName": "overlay-configmap"}),
        node("playbook", playbooks={"configMapName": "overlay-playbook", "startup": "site.yml"}),
        node("group", group_name="later"),
        fleet.redfish_node(
            machines["auto"],
            bmc,
            group_name="never",
            secret_name="bmc-auto",
            power=power,
            labels={"lightsout.dev/only": "auto"},
        ),
    ]
    fleet.apply(crds, namespace, [*present, *nodes])
    expected = {
        "secret": ("SecretNotFound", f"credentials Secret {namespace}/bmc-secret not found"),
        "ca": ("SecretNotFound", f"CA Secret {namespace}/bmc-ca-ca not found"),
        "key": ("SecretKeyMissing", f"Secret {namespace}/bmc-key has no key 'password'"),
        "configmap": ("ConfigMapNotFound", f"ConfigMap {namespace}/overlay-configmap not found"),
        "playbook": ("PlaybookNotFound", "playbook 'site.yml' for startup"),
        "group": ("GroupNotFound", f"Group {namespace}/later not found"),
    }

    # --- each machine says which object is missing, in status, condition and event
    for row, (reason, named) in expected.items():
        name = machines[row].name
        held = wait_for(
            partial(reached, crds, namespace, name, "reason", reason),
            REPORTED_WITHIN,
            f"{name} to report {reason}",
        )
        assert named in held["message"], held["message"]
        assert held["phase"] == "Off" and held.get("attempts", 0) == 0
        condition = {c["type"]: c for c in held["conditions"]}["ReferencesResolved"]
        assert (condition["status"], condition["reason"]) == ("False", reason)
        wait_for(
            partial(warned, crds, namespace, name, reason, named),
            REPORTED_WITHIN,
            f"a Warning event {reason} on {name} naming {named}",
        )
        jobs = get_json(crds, "jobs", "-n", namespace, "-l", f"lightsout.dev/node={name}")
        assert jobs["items"] == [], f"{name}: a Job was created: {jobs['items']}"
    for row in expected:
        assert bmc.power_requests(machines[row].uuid) == [], f"{row}: a power order was sent"

    # --- the autoscaler: a pod only the machine of the missing Group could host
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "needs-auto"},
        "spec": {
            "nodeSelector": {"lightsout.dev/only": "auto"},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1"}},
                }
            ],
        },
    }
    fleet.apply(crds, namespace, [pod])
    auto = machines["auto"].name
    why = f"{auto}: off, cannot be powered on: GroupNotFound: Group {namespace}/never not found"

    def explained() -> str | None:
        text = plan_text(crds, namespace)
        return text if why in text else None

    shown = wait_for(
        explained,
        REPORTED_WITHIN,
        "lightsout plan to say why the machine of the missing Group is not powered on",
    )
    print(f"\nlightsout plan:\n{shown}")
    # Every machine held back is listed with the reason it cannot be powered on.
    lines = shown.splitlines()
    for row, (reason, named) in expected.items():
        (at,) = [i for i, line in enumerate(lines) if line.split()[:1] == [machines[row].name]]
        note = lines[at + 1]
        assert f"└ off, cannot be powered on: {reason}: " in note and named in note, (row, shown)

    # --- the missing objects appear (and the key is added): every held machine goes on
    fleet.apply(
        crds,
        namespace,
        [
            fleet.secret("bmc-secret", full),
            fleet.secret("bmc-ca-ca", ca),
            fleet.secret("bmc-key", full),
            configmap("overlay-configmap", {"notes.txt": "site playbooks go here"}),
            configmap("overlay-playbook", {"site.yml": OVERLAY_PLAYBOOK}),
            fleet.group("later"),
        ],
    )
    for row in expected:
        m = machines[row]
        ready = wait_for(
            partial(reached, crds, namespace, m.name, "phase", "Ready"),
            PATIENCE,
            f"{m.name} to reach Ready once its reference exists",
        )
        assert ready["lastOperation"]["attempt"] == 1, ready["lastOperation"]
        assert bmc.count_power_requests(m.uuid, reset_types=POWER_ON) == 1, row
        condition = {c["type"]: c for c in ready["conditions"]}["ReferencesResolved"]
        assert condition["status"] == "True"

    # --- the machine of the Group that never came: never chosen, never ordered anything
    spec = get_json(crds, "lsn", auto, "-n", namespace)["spec"]
    assert spec["desiredPowerState"] == "Off"
    assert bmc.power_requests(machines["auto"].uuid) == []
