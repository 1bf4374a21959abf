"""A real cluster-autoscaler drives a Group through the operator's externalgrpc server.

cluster-autoscaler 1.34.5, built from source with only its `externalgrpc` provider, runs as a
process against the local control plane and the operator's gRPC server on 127.0.0.1; the
operator is a real `lightsout run`; machines are sushy-tools Redfish systems powered by real
Ansible Jobs; the lab's simulator registers a machine's core Node when its emulator says it is
on — without a providerID, as a kubelet started without `--provider-id` would, so the one
cluster-autoscaler matches is the one Lights-Out sets.

Asserted is what a user sees: the machine cluster-autoscaler's IncreaseSize chose is powered on
(and only it, once), its core Node carries the providerID, the pending pod runs on it; when the
pod goes, cluster-autoscaler's DeleteNodes powers that machine off through Lights-Out and its
core Node goes away. With README's flags (`--expander=price`) and two Groups that can both
hold a pending pod, cluster-autoscaler prices them through PricingNodePrice and
PricingPodPrice without an error and powers on one machine of the Group that draws least
(issue 28); the other expanders and README's other flags are test_cluster_autoscaler_matrix.py's.
Over mTLS, cluster-autoscaler with the right client certificate works and a client without it
is refused. Seconds between the steps are printed, never asserted.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from lightsout.grpc.protos import externalgrpc_pb2 as pb
from lightsout.grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from lightsout_lab import Cluster
from lightsout_lab.cluster_autoscaler import ClusterAutoscaler, Tls
from lightsout_lab.kubelet import KubeletAgent
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.pki import Pki, create_pki
from lightsout_lab.sushy import POWER_OFF, POWER_ON, SushyEmulator
from tests.e2e.autoscaling import Fleet, desired, diagnosed, pod, pod_node, running
from tests.e2e.ca_support import (
    PRICED,
    PRICED_GROUP_OF,
    assert_allowed,
    ca_group,
    condition_since,
    event_time,
    lab_flags,
    operator,
    priced_groups,
)
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

#: Two machines alike but for their draw: LowestEnergy powers on "lean" first.
SIZES = {
    "lean": {"cpu": "4", "memory": "8Gi", "watts": 40},
    "hungry": {"cpu": "4", "memory": "8Gi", "watts": 90},
}


@pytest.fixture
def machines(namespace: str) -> Fleet:
    return Fleet(namespace, SIZES)


@pytest.fixture
def bmc(kube_api: client.ApiClient, cluster: Cluster, machines: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, machines, provider_ids=False) as (emulator, _):
        yield emulator


def test_scale_up_from_zero_and_back_through_cluster_autoscaler(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    plaintext_operator: OperatorProcess,
    grpc_address: str,
    machines: Fleet,
    bmc: SushyEmulator,
    ca_kubeconfig: Path,
) -> None:
    lean, hungry = machines.name("lean"), machines.name("hungry")
    fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), ca_group(), *machines.nodes(bmc, "ca")])
    for name in (lean, hungry):
        wait_phase(crds, namespace, name, "Off")
    autoscaler = ClusterAutoscaler(crds, grpc_address, tmp_path / "ca", kubeconfig=ca_kubeconfig)
    with autoscaler, diagnosed(crds, namespace):
        try:
            scale_up_then_down(crds, namespace, machines, bmc, lean, hungry)
        except AssertionError as error:
            raise AssertionError(f"{error}\ncluster-autoscaler:\n{autoscaler.tail()}") from error
        log = autoscaler.text()
    assert f"Scale-up: setting group {namespace}/ca size to 1" in log
    assert "Scale-down: removing empty node" in log or "Scale-down: removing node" in log
    assert_allowed(autoscaler)


def scale_up_then_down(
    crds: Cluster, namespace: str, machines: Fleet, bmc: SushyEmulator, lean: str, hungry: str
) -> None:
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod("work", "3")))
    unschedulable = wait_for(
        lambda: condition_since(
            get_json(crds, "pod", "work", "-n", namespace), "PodScheduled", "False"
        ),
        60,
        "the pod to be declared Unschedulable",
    )
    # cluster-autoscaler calls IncreaseSize; the operator records intent on the cheapest machine.
    wait_for(lambda: desired(crds, namespace, lean) == "On", 120, f"{lean} to be wanted On")
    increase = wait_for(
        lambda: event_time(crds, namespace, lean, "ClusterAutoscaler"),
        30,
        "the IncreaseSize event",
    )
    power_on = wait_for(
        lambda: bmc.power_requests(machines.uuids["lean"], reset_types=POWER_ON),
        PATIENCE,
        f"a power-on request for {lean} at the BMC",
    )[0]
    node = wait_for(
        lambda: (
            (n := get_json(crds, "node", lean))
            and (n["spec"].get("providerID") and condition_since(n, "Ready", "True"))
            and n
        ),
        PATIENCE,
        f"core Node {lean} Ready with a providerID",
    )
    assert node["spec"]["providerID"] == f"lightsout://{namespace}/{lean}"
    wait_for(lambda: pod_node(crds, namespace, "work") == lean, PATIENCE, f"the pod on {lean}")
    scheduled = condition_since(
        get_json(crds, "pod", "work", "-n", namespace), "PodScheduled", "True"
    )
    status = wait_phase(crds, namespace, lean, "Ready")
    assert status["providerID"] == f"lightsout://{namespace}/{lean}"
    assert desired(crds, namespace, hungry) == "Off"
    assert bmc.count_power_requests(machines.uuids["hungry"]) == 0
    start = unschedulable.timestamp()
    print(  # figures for the report, not assertions
        "\ncluster-autoscaler scale-up from zero, seconds after the Unschedulable verdict:"
        f" IncreaseSize {increase.timestamp() - start:.0f},"
        f" power-on at the BMC {power_on.time - start:.1f},"
        f" core Node Ready {condition_since(node, 'Ready', 'True').timestamp() - start:.0f},"  # type: ignore[union-attr]
        f" pod scheduled {(scheduled.timestamp() if scheduled else float('nan')) - start:.0f}"
    )

    # The workload goes: cluster-autoscaler finds the node unneeded (the Group's 10 s), taints
    # it and calls DeleteNodes; Lights-Out drains, powers off and removes the core Node.
    gone = dt.datetime.now(dt.UTC)
    crds.kubectl("delete", "pod", "work", "-n", namespace, "--wait=false")
    wait_for(lambda: desired(crds, namespace, lean) == "Off", 180, f"{lean} to be wanted Off")
    deleted = dt.datetime.now(dt.UTC)
    wait_phase(crds, namespace, lean, "Off")
    wait_for(lambda: get_json(crds, "node", lean) is None, PATIENCE, f"core Node {lean} gone")
    off = bmc.power_requests(machines.uuids["lean"], reset_types=POWER_OFF)
    assert len(off) == 1, off
    assert len(bmc.power_requests(machines.uuids["lean"], reset_types=POWER_ON)) == 1
    assert bmc.count_power_requests(machines.uuids["hungry"]) == 0
    print(
        "cluster-autoscaler scale-down, seconds after the pod was deleted:"
        f" DeleteNodes seen by {(deleted - gone).total_seconds():.0f},"
        f" power-off at the BMC {off[0].time - gone.timestamp():.1f}"
    )


# ------------------------------------------------------------------------- price expander
#: What cluster-autoscaler logs when a price is missing (expander/price/price.go).
PRICING_ERRORS = ("Failed to get price", "Failed to calculate", "Not implemented")


@pytest.fixture
def priced(namespace: str) -> Fleet:
    return Fleet(namespace, PRICED)


@pytest.fixture
def priced_bmc(
    kube_api: client.ApiClient, cluster: Cluster, priced: Fleet
) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, priced, provider_ids=False) as (emulator, _):
        yield emulator


def test_price_expander_powers_on_the_group_that_draws_least(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    plaintext_operator: OperatorProcess,
    grpc_address: str,
    priced: Fleet,
    priced_bmc: SushyEmulator,
    ca_kubeconfig: Path,
) -> None:
    names = priced.apply(crds, priced_bmc, priced_groups(), PRICED_GROUP_OF)
    # README's flags as a user copies them; --v=5 logs the price expander's scores.
    flags = [*lab_flags(), "--v=5"]
    assert "--expander=price" in flags
    autoscaler = ClusterAutoscaler(
        crds, grpc_address, tmp_path / "ca", kubeconfig=ca_kubeconfig, flags=flags
    )
    smalls = (names["small-1"], names["small-2"])
    with autoscaler, diagnosed(crds, namespace):
        started = dt.datetime.now(dt.UTC)
        try:
            crds.kubectl(
                "apply", "-n", namespace, "-f", "-", input=json.dumps(pod("small-job", "3"))
            )
            host = wait_for(
                lambda: pod_node(crds, namespace, "small-job"),
                PATIENCE,
                "the 3-cpu pod to be scheduled",
            )
            ran = dt.datetime.now(dt.UTC)
            wait_phase(crds, namespace, host, "Ready")
        except AssertionError as error:
            raise AssertionError(f"{error}\ncluster-autoscaler:\n{autoscaler.tail()}") from error
        log = autoscaler.text()
    assert host in smalls, host
    power_ons = {
        short: priced_bmc.count_power_requests(priced.uuids[short], reset_types=POWER_ON)
        for short in PRICED
    }
    assert sorted(power_ons.values()) == [0, 0, 1], power_ons
    assert power_ons[next(s for s, n in names.items() if n == host)] == 1
    assert desired(crds, namespace, names["big"]) == "Off"
    assert log.count("] Scale-up: setting group") == 1, log
    assert f"Scale-up: setting group {namespace}/small size to 1" in log
    errors = [line for line in log.splitlines() if any(e in line for e in PRICING_ERRORS)]
    assert errors == [], "\n".join(errors[:10])
    scores = [line for line in log.splitlines() if "Price expander for" in line]
    assert any(f"{namespace}/small:" in line for line in scores), scores
    assert any(f"{namespace}/big:" in line for line in scores), scores
    assert_allowed(autoscaler)
    print(  # figures and evidence for the report, not assertions
        f"\nprice expander: pod on {host} {(ran - started).total_seconds():.0f} s after it was"
        " created; scores:\n" + "\n".join(s.split("] ", 1)[-1] for s in scores[:2])
    )


# ------------------------------------------------------------------------------------ mTLS
@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    # Its serving certificate has the IP SAN 127.0.0.1, its admin certificate is a client one.
    return create_pki(tmp_path / "grpc-pki")


@pytest.fixture
def mtls_operator(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    runner: KubeletAgent,
    grpc_address: str,
    pki: Pki,
) -> Iterator[OperatorProcess]:
    env = {
        "LIGHTSOUT_GRPC_ADDRESS": grpc_address,
        "LIGHTSOUT_GRPC_TLS_CERT": str(pki.serving_cert),
        "LIGHTSOUT_GRPC_TLS_KEY": str(pki.serving_key),
        "LIGHTSOUT_GRPC_TLS_CLIENT_CA": str(pki.ca_cert),
    }
    yield from operator(crds, namespace, tmp_path, env)


def _groups(address: str, credentials: grpc.ChannelCredentials) -> list[pb.NodeGroup]:
    with grpc.secure_channel(address, credentials) as channel:
        stub = pb_grpc.CloudProviderStub(channel)
        return list(stub.NodeGroups(pb.NodeGroupsRequest(), timeout=10).nodeGroups)


def _node_groups(address: str, credentials: grpc.ChannelCredentials) -> list[str]:
    return [g.id for g in _groups(address, credentials)]


def test_mtls_serves_cluster_autoscaler_and_refuses_clients_without_the_right_certificate(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    mtls_operator: OperatorProcess,
    grpc_address: str,
    pki: Pki,
    ca_kubeconfig: Path,
) -> None:
    # One machine, whose credentials Secret does not exist: never offered (issue 19).
    ghost = fleet.ipmi_node("ghost", "127.0.0.1", 9, secret_name="gone", group_name="ca")
    fleet.apply(crds, namespace, [ca_group(), ghost])
    ca = pki.ca_cert.read_bytes()
    right = grpc.ssl_channel_credentials(
        ca, pki.admin_key.read_bytes(), pki.admin_cert.read_bytes()
    )
    (group,) = _groups(grpc_address, right)
    assert group.id == f"{namespace}/ca"
    assert group.maxSize == 0, group
    assert f"ghost: SecretNotFound: credentials Secret {namespace}/gone not found" in group.debug
    print(f"\nNodeGroups debug: {group.debug}")
    fleet.apply(crds, namespace, [fleet.secret("gone", {"username": "u", "password": "p"})])
    wait_for(
        lambda: _groups(grpc_address, right)[0].maxSize == 1,
        60,
        "the machine to be offered once its Secret exists",
    )
    stranger = create_pki(tmp_path / "stranger")  # a client certificate from another CA
    for credentials in (
        grpc.ssl_channel_credentials(ca),  # no client certificate at all
        grpc.ssl_channel_credentials(
            ca, stranger.admin_key.read_bytes(), stranger.admin_cert.read_bytes()
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            _node_groups(grpc_address, credentials)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(grpc_address) as plain, pytest.raises(grpc.RpcError):
        pb_grpc.CloudProviderStub(plain).NodeGroups(pb.NodeGroupsRequest(), timeout=10)

    # The real cluster-autoscaler, with the right certificate, sees the node group: its status
    # ConfigMap lists it once a loop has run.
    tls = Tls(cert=pki.admin_cert, key=pki.admin_key, ca=pki.ca_cert)
    autoscaler = ClusterAutoscaler(
        crds, grpc_address, tmp_path / "ca", tls=tls, kubeconfig=ca_kubeconfig
    )
    with autoscaler:
        try:
            wait_for(
                lambda: f"{namespace}/ca" in _status(crds),
                120,
                "cluster-autoscaler's status to list the node group",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{autoscaler.tail()}") from error
    assert_allowed(autoscaler)


def _status(crds: Cluster) -> str:
    cm = get_json(crds, "configmap", "cluster-autoscaler-status", "-n", "kube-system")
    return str(((cm or {}).get("data") or {}).get("status", ""))
