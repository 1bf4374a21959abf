"""An Ephemeral Proxmox clone that joins the cluster by itself, with a short-lived token.

kubectl patch On → the operator issues a kubeadm bootstrap token (kube-system Secret) and a join
Secret → provision Job (Ansible: clone, cloud-init NoCloud ISO built with iso_create, uploaded to
fakepve's `local` storage, attached as ide2) → the simulated clone reads the ISO attached to it
and does the kubelet TLS bootstrap against the real API server (bootstrap-token authentication,
CSR approved and signed by kube-controller-manager) → its Node registers with its labels and
taints → Ready, and the token is deleted. Power-off removes the clone and its ISO (shown by the
second test, whose clone also gives its pool address back).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from lightsout_lab import Cluster, bootstrap
from lightsout_lab.fakepve import FakePveCluster, Guest
from lightsout_lab.machines import MachineSimulator
from lightsout_lab.operator_process import OperatorProcess
from tests.harness import fleet
from tests.harness.cycle import PATIENCE, patch_and_wait, report, status, summary, wait_phase
from tests.harness.wait import events_for, get_json, wait_for

TEMPLATE = 9000
#: Seconds for a wait that spans a provision Job: the heaviest Job there is (about 60 Ansible
#: tasks, a dozen of them Proxmox API modules that each start a Python). Quiet, it takes 40 s;
#: beside two other labs on two cores, 117 s here and over 200 s in CI, where PATIENCE alone
#: timed out before the clone had its ISO.
PROVISION_PATIENCE = 2 * PATIENCE
#: The boot timeout of the clone that never joins: short, but its provision Job's deadline is
#: this plus 120 s, and under load that Job alone may take over 165 s.
SILENT_BOOT_TIMEOUT = 90
JOIN_LABEL = "lightsout.dev/join-for"


@pytest.fixture
def pve() -> Iterator[FakePveCluster]:
    with FakePveCluster([Guest(TEMPLATE, "debian-template", template=True)]) as cluster:
        yield cluster


def join_secrets(cluster: Cluster, namespace: str) -> list[str]:
    """Names of the join credentials left: bootstrap tokens in kube-system, join Secrets."""
    names = []
    for where in ("kube-system", namespace):
        found = get_json(cluster, "secrets", "-n", where, "-l", JOIN_LABEL)
        names += [f"{where}/{s['metadata']['name']}" for s in (found or {}).get("items", [])]
    return names


def test_clone_joins_with_the_token_from_its_iso(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    pve: FakePveCluster,
) -> None:
    name = f"joiner-{namespace}"
    server = urlsplit(crds.server)
    node = fleet.proxmox_node(
        name,
        pve.endpoint,
        proxmox={
            "mode": "Ephemeral",
            "template": {"vmid": TEMPLATE},
            "vmidRange": {"lower": 400, "upper": 409},
            "join": {
                "apiServerEndpoint": f"{server.hostname}:{server.port}",
                "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB3x lab@test"],
            },
        },
        labels={"workload": "burst"},
        taints=[{"key": "burst", "value": "true", "effect": "NoSchedule"}],
    )
    fleet.apply(
        crds,
        namespace,
        [
            fleet.secret("pve", {"username": pve.username, "password": pve.password}),
            fleet.secret("pve-ca", {"ca.crt": pve.ca_path.read_bytes()}),
            fleet.group(),
            node,
        ],
    )
    tag = f"lightsout-node.{namespace}.{name}"
    machine = fleet.sim_machine(name, namespace, pve.power_reader(tag=tag), boot_seconds=1.0)
    machine.cloud_init = lambda: pve.attached_iso(tag)
    sim = MachineSimulator(kube_api, [machine]).start()
    try:
        wait_phase(crds, namespace, name, "Off")
        ready, seconds = patch_and_wait(crds, namespace, name, "On", "Ready", PROVISION_PATIENCE)
        clone = pve.tagged(tag)
        assert len(clone) == 1
        vmid = int(clone[0]["vmid"])
        config = (pve.vm(vmid) or {})["config"]
        iso_name = f"local:iso/{tag}.iso"
        report(
            "proxmox-join",
            "patch On -> Ready",
            seconds=seconds,
            ide2=config.get("ide2"),
            isos=pve.isos(),
            joined_as=machine.joined_as,
            join_error=machine.join_error,
        )
        # fakepve received the clone with the ISO attached; read it back as the VM boots it.
        assert config.get("ide2") == f"{iso_name},media=cdrom"
        iso = pve.iso_bytes(iso_name)
        assert iso is not None
        data = bootstrap.read_iso(iso)
        assert data.user_data["hostname"] == name
        assert data.user_data["ssh_authorized_keys"] == [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB3x lab@test"
        ]
        assert data.meta_data["local-hostname"] == name
        assert data.network_config["ethernets"]["primary"]["dhcp4"] is True
        plan = bootstrap.join_plan(data)
        assert plan.server == crds.server
        assert plan.labels["workload"] == "burst"
        assert plan.taints == [{"key": "burst", "value": "true", "effect": "NoSchedule"}]

        # The clone joined through bootstrap-token authentication and a signed kubelet CSR.
        assert machine.joined_as == name and machine.registrations == 1
        csrs = [
            c
            for c in (get_json(crds, "csr") or {}).get("items", [])
            if c["spec"].get("username", "").startswith("system:bootstrap:")
            and c["metadata"]["name"].startswith(f"node-csr-{name}-")
        ]
        assert len(csrs) == 1, csrs
        token_id = plan.token.split(".")[0]
        assert csrs[0]["spec"]["username"] == f"system:bootstrap:{token_id}"
        assert bootstrap.JOIN_GROUP in csrs[0]["spec"]["groups"]
        assert [c["type"] for c in csrs[0]["status"]["conditions"]] == ["Approved"]
        assert csrs[0]["status"].get("certificate")
        # Registered already labelled and tainted, by the node itself.
        core = get_json(crds, "node", name)
        assert core is not None
        assert core["metadata"]["labels"]["workload"] == "burst"
        assert {"key": "burst", "value": "true", "effect": "NoSchedule"} in core["spec"]["taints"]
        assert ready["clone"]["vmid"] == vmid

        # The token is gone once Ready (deleted in the pass that wrote Ready), and never showed
        # in status, events or the Job.
        wait_for(lambda: not join_secrets(crds, namespace), 30, "the join credentials deleted")
        secret_part = plan.token.split(".")[1]
        shown = json.dumps(
            [
                get_json(crds, "lsn", name, "-n", namespace),
                events_for(crds, namespace, name),
                get_json(crds, "jobs", "-n", namespace),
                get_json(crds, "configmaps", "-n", namespace),
            ]
        )
        assert secret_part not in shown

        # A wrong token and an expired one are refused by the API server; the revoked one too,
        # once the API server's authentication cache lets go of its last success (kube-apiserver
        # caches a token's success for 10 s by default).
        for token in (f"{token_id}.{'x' * 16}", expired_token(crds)):
            with pytest.raises(bootstrap.JoinError, match="401"):
                bootstrap.tls_bootstrap(dataclasses.replace(plan, token=token))

        def revoked_refused() -> bool:
            try:
                bootstrap.tls_bootstrap(dataclasses.replace(plan, token=plan.token))
            except bootstrap.JoinError as error:
                return "401" in str(error)
            return False

        wait_for(revoked_refused, 30, "the revoked token refused", interval=2.0)
        # Power-off (a deprovision Job: the clone and its ISO destroyed, no join credentials
        # left) is the last step of the next test, which asserts all of it and the address
        # given back besides: not repeated here, where it would be this test's second Job.
    finally:
        sim.stop()
        crds.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def address_leases(cluster: Cluster, namespace: str) -> dict[str, str]:
    """The Group's address leases left: address -> holder."""
    found = get_json(cluster, "leases", "-n", namespace, "-l", "lightsout.dev/address-pool")
    return {
        lease["metadata"]["annotations"]["lightsout.dev/address"]: lease["spec"]["holderIdentity"]
        for lease in (found or {}).get("items", [])
    }


def test_pool_addresses_and_a_clone_that_never_joins(
    crds: Cluster,
    namespace: str,
    operator: OperatorProcess,
    kube_api: client.ApiClient,
    pve: FakePveCluster,
) -> None:
    """Two clones provisioned at once get the pool's two addresses; a third finds it exhausted
    and is not cloned. One clone joins; the other never does (nothing runs in it): Failed
    after its short boot timeout, deprovisioned, nothing left behind."""
    server = urlsplit(crds.server)
    joins, silent, third = (f"{kind}-{namespace}" for kind in ("joins", "silent", "third"))

    def clone(name: str, lower: int, **spec: Any) -> dict[str, Any]:
        join = {"apiServerEndpoint": f"{server.hostname}:{server.port}"}
        proxmox = {
            "mode": "Ephemeral",
            "template": {"vmid": TEMPLATE},
            "vmidRange": {"lower": lower, "upper": lower + 9},
            "join": join,
        }
        return fleet.proxmox_node(name, pve.endpoint, proxmox=proxmox, **spec)

    pool = {
        "cidr": "10.77.0.0/24",
        "start": "10.77.0.10",
        "end": "10.77.0.11",
        "gateway": "10.77.0.1",
        "dnsServers": ["10.77.0.2"],
    }
    fleet.apply(
        crds,
        namespace,
        [
            fleet.secret("pve", {"username": pve.username, "password": pve.password}),
            fleet.secret("pve-ca", {"ca.crt": pve.ca_path.read_bytes()}),
            fleet.group(addressPool=pool),
            clone(joins, 410),
            clone(
                silent,
                420,
                maxRetries=0,
                power={"bootTimeoutSeconds": SILENT_BOOT_TIMEOUT, "shutdownTimeoutSeconds": 180},
            ),
            clone(third, 430, maxRetries=0),
        ],
    )
    tags = {name: f"lightsout-node.{namespace}.{name}" for name in (joins, silent, third)}
    # Only `joins` has something inside that joins; `silent` boots into nothing.
    machine = fleet.sim_machine(joins, namespace, pve.power_reader(tag=tags[joins]), 1.0)
    machine.cloud_init = lambda: pve.attached_iso(tags[joins])
    sim = MachineSimulator(kube_api, [machine]).start()
    try:
        for name in (joins, silent, third):
            wait_phase(crds, namespace, name, "Off")
        on = json.dumps({"spec": {"desiredPowerState": "On"}})
        for name in (joins, silent):
            crds.kubectl("patch", "lsn", name, "-n", namespace, "--type", "merge", "-p", on)
        # Both ISOs at fakepve: each clone's network-config has its own address from the pool.
        wait_for(
            lambda: all(pve.attached_iso(tags[n]) for n in (joins, silent)),
            PROVISION_PATIENCE,
            "both clones booting their ISO",
            interval=1.0,
            seen=lambda: {n: summary(status(crds, namespace, n)) for n in (joins, silent)},
        )
        networks = {}
        for name in (joins, silent):
            iso = pve.attached_iso(tags[name])
            assert iso is not None
            networks[name] = bootstrap.read_iso(iso).network_config["ethernets"]["primary"]
        report("proxmox-join", "two clones at once", networks=networks)
        assert sorted(n["addresses"][0] for n in networks.values()) == [
            "10.77.0.10/24",
            "10.77.0.11/24",
        ]
        for net in networks.values():
            assert net["dhcp4"] is False
            assert net["routes"] == [{"to": "default", "via": "10.77.0.1"}]
            assert net["nameservers"] == {"addresses": ["10.77.0.2"]}
        assert set(address_leases(crds, namespace).values()) == {
            f"{namespace}/{joins}",
            f"{namespace}/{silent}",
        }

        # A third clone while both addresses are leased: no clone, a reason that says why.
        crds.kubectl("patch", "lsn", third, "-n", namespace, "--type", "merge", "-p", on)
        failed = wait_for(
            lambda: (st := status(crds, namespace, third)).get("phase") == "Failed" and st,
            PATIENCE,
            "the third clone Failed",
        )
        assert "address pool of Group homelab is exhausted" in failed["message"], failed
        assert pve.tagged(tags[third]) == []
        assert get_json(crds, "node", third) is None

        wait_phase(crds, namespace, joins, "Ready")
        # The silent clone: Failed after its boot timeout, and deprovisioned first.
        gave_up = wait_for(
            lambda: (st := status(crds, namespace, silent)).get("phase") == "Failed" and st,
            PROVISION_PATIENCE,
            "the clone that never joins Failed",
        )
        report("proxmox-join", "never joins", reason=gave_up["reason"], message=gave_up["message"])
        assert gave_up["reason"] == "RegistrationTimeout"
        assert f"did not become Ready within {SILENT_BOOT_TIMEOUT}s" in gave_up["message"]
        assert "deprovisioned" in gave_up["message"]
        assert (gave_up["lastOperation"]["action"], gave_up["lastOperation"]["result"]) == (
            "deprovision",
            "Succeeded",
        )
        assert pve.tagged(tags[silent]) == []
        assert pve.isos() == [f"local:iso/{tags[joins]}.iso"]
        # The core Node and the address go in the pass that wrote Failed, after its status.
        wait_for(lambda: get_json(crds, "node", silent) is None, 60, f"core Node {silent} removed")
        wait_for(
            lambda: set(address_leases(crds, namespace).values()) == {f"{namespace}/{joins}"},
            60,
            f"{silent}'s address released, {joins}'s kept",
        )
        wait_for(lambda: not join_secrets(crds, namespace), 30, "the join credentials deleted")

        # Power-off of the clone that joined: destroyed with its ISO, its address released.
        vmid = int(pve.tagged(tags[joins])[0]["vmid"])
        off, seconds = patch_and_wait(crds, namespace, joins, "Off", "Off")
        report("proxmox-join", "patch Off -> Off", seconds=seconds, isos=pve.isos())
        assert pve.tagged(tags[joins]) == [] and not pve.exists(vmid)
        assert pve.isos() == []
        # Its join credentials, then its address, go after the Off status is written.
        wait_for(lambda: not join_secrets(crds, namespace), 60, "the join credentials deleted")
        wait_for(lambda: address_leases(crds, namespace) == {}, 60, f"{joins}'s address released")
        assert (off["lastOperation"]["action"], off["lastOperation"]["result"]) == (
            "deprovision",
            "Succeeded",
        )
    finally:
        sim.stop()
        for name in (joins, silent, third):
            crds.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def expired_token(cluster: Cluster) -> str:
    """A bootstrap token Secret that expired a minute ago; returns its token."""
    token_id, secret = "exp0ed", "0123456789abcdef"
    expired = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "stringData": {
            "token-id": token_id,
            "token-secret": secret,
            "expiration": expired.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": bootstrap.JOIN_GROUP,
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    return f"{token_id}.{secret}"
