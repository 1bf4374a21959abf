"""cluster-autoscaler as people configure it: each expander, and the flags README sets, on one
lab (issues 28 and 40).

One `lightsout run` with its gRPC server, one Redfish emulator and one set of machines: two
Groups on which cluster-autoscaler's expanders disagree, "small" (two 4-cpu machines at 180 W)
and "big" (one 16-cpu machine at 30 W: larger, yet frugal enough to win the price expander
despite its size penalty), and two Groups alike, "rack-a" and "rack-b" (two 4-cpu machines
each, labelled `pool: racks` and tainted `dedicated=racks:NoSchedule`, so only the pods that
ask for them go there). Each row starts its own cluster-autoscaler process with README's
flags, adding only what the row is about (the racks row also drops README's 10-minute pause
after a scale-up), and ends with every machine Off again, its core Node gone. The expander
rows' machines are pinned meanwhile by Leases the test holds (as a person pins a machine with
kubectl): the operator records cluster-autoscaler's intent on them and acts on none, so a row
costs no Ansible run and its reset none either (powering machines on through cluster-autoscaler
is the racks row's, and test_cluster_autoscaler.py's):

- one row per expander (`price`, README's; `least-waste`, cluster-autoscaler's default;
  `most-pods`; `priority` with its ConfigMap): each asserts the one Group that expander
  chooses under cluster-autoscaler's own scoring (worked out in `ROWS`), and, where the
  expander logs its score of every option (price, least-waste), that both Groups were scored.
  `random` has no row: a test that it picks both Groups needs repeated scale-ups (7 for a
  false failure under 2 %: n draws all alike has probability 2^(1-n)), each a row's cost,
  for one `rand.Int31n` over the options (expander/random/random.go);
- one row for the racks, with README's `--balance-similar-node-groups` and
  `--max-nodes-total` two above the Nodes there are: of three pods that each need a rack
  machine, two run, on one machine powered on in each rack, and the third waits while
  cluster-autoscaler says the cap is reached; with the pods gone, rack-a
  (`scaleDown.unneededSeconds: 10`, through NodeGroupGetOptions) powers its machine off
  although README's global `--scale-down-unneeded-time` is 10 minutes, while rack-b (1800 s)
  keeps its machine on for longer than rack-a's time. (One row, not three: each costs two
  Ansible Jobs per machine it powers on.)

Seconds per row are printed, never asserted.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.cluster_autoscaler import ClusterAutoscaler
from lightsout_lab.operator_process import OperatorProcess
from lightsout_lab.sushy import POWER_ON, SushyEmulator
from tests.e2e.autoscaling import Fleet, diagnosed, pod, pod_node, running
from tests.e2e.ca_support import (
    PRICED_GROUP_OF,
    assert_allowed,
    ca_group,
    condition_since,
    lab_flags,
    priced_groups,
    with_flags,
)
from tests.e2e.conftest import PATIENCE, patch_desired, status
from tests.harness.wait import get_json, wait_for

#: Issue 28's Groups (`priced_groups`) with other machines: "small"'s 4-cpu machines draw 180 W,
#: "big"'s 16-cpu one 30 W, so the expanders disagree (`ROWS`).
DISAGREEING = {
    "small-1": {"cpu": "4", "memory": "8Gi", "watts": 180},
    "small-2": {"cpu": "4", "memory": "8Gi", "watts": 180},
    "big": {"cpu": "16", "memory": "32Gi", "watts": 30},
}
#: Two Groups alike: two 4-cpu machines each.
RACKS = {f"rack-{r}{i}": {"cpu": "4", "memory": "8Gi", "watts": 30} for r in "ab" for i in (1, 2)}
GROUP_OF = {**PRICED_GROUP_OF, **{short: short[:-1] for short in RACKS}}
RACK_LABEL = {"pool": "racks"}
RACK_TAINT = {"key": "dedicated", "value": "racks", "effect": "NoSchedule"}
#: rack-a's machines are powered off after this long unneeded, rack-b's after RACK_B_SECONDS;
#: README's global --scale-down-unneeded-time is 10 minutes.
RACK_A_SECONDS = 10
RACK_B_SECONDS = 1800
PRIORITIES = "cluster-autoscaler-priority-expander"
SCALE_UP = re.compile(r"\] Scale-up: setting group (\S+) size to (\d+)")
#: What the price expander logs of each option at --v=5 (expander/price/price.go).
PRICE_SCORE = re.compile(r"Price expander for (\S+): .*final_score=([\d.]+)")
#: What least-waste logs of each option at --v=1 (expander/waste/waste.go).
WASTE_SCORE = re.compile(r"Expanding Node Group (\S+) would waste .* ([\d.]+)% Blended")


def rack_group(name: str, unneeded_seconds: int) -> dict[str, Any]:
    return ca_group(
        name,
        labels=RACK_LABEL,
        taints=[RACK_TAINT],
        scaleDown={"unneededSeconds": unneeded_seconds, "utilizationThreshold": 0.5},
    )


def rack_pod(name: str) -> dict[str, Any]:
    """A 3-cpu pod that only a rack machine takes."""
    work = pod(name, "3")
    work["spec"]["nodeSelector"] = dict(RACK_LABEL)
    work["spec"]["tolerations"].append({"operator": "Equal", **RACK_TAINT})
    return work


@pytest.fixture
def machines(namespace: str) -> Fleet:
    return Fleet(namespace, {**DISAGREEING, **RACKS})


@pytest.fixture
def bmc(kube_api: client.ApiClient, cluster: Cluster, machines: Fleet) -> Iterator[SushyEmulator]:
    with running(kube_api, cluster, machines, provider_ids=False) as (emulator, _):
        yield emulator


@dataclass(frozen=True)
class Lab:
    """The matrix's one lab: what each row needs to start cluster-autoscaler and look."""

    crds: Cluster
    namespace: str
    workdir: Path
    address: str
    kubeconfig: Path
    machines: Fleet
    bmc: SushyEmulator

    def autoscaler(self, row: str, *own: str) -> ClusterAutoscaler:
        """cluster-autoscaler with README's flags and the row's `own`."""
        flags = with_flags(lab_flags(), *own)
        return ClusterAutoscaler(
            self.crds, self.address, self.workdir / row, kubeconfig=self.kubeconfig, flags=flags
        )

    def create(self, pods: Iterable[dict[str, Any]]) -> None:
        items = {"apiVersion": "v1", "kind": "List", "items": list(pods)}
        self.crds.kubectl("apply", "-n", self.namespace, "-f", "-", input=json.dumps(items))

    def wanted_on(self, group: str | None = None) -> list[str]:
        """Machines (of `group`) whose desiredPowerState is On."""
        listed = self.crds.kubectl("get", "lsn", "-n", self.namespace, "-o", "json").stdout
        return sorted(
            o["metadata"]["name"]
            for o in json.loads(listed)["items"]
            if o["spec"]["desiredPowerState"] == "On" and group in (None, o["spec"]["group"])
        )

    def power_ons(self, before: Mapping[str, int] | None = None) -> dict[str, int]:
        """Power-on requests the BMC has heard, by machine short name (since `before`, another
        answer of this): those of no machine are left out."""
        heard = {
            short: self.bmc.count_power_requests(uuid, reset_types=POWER_ON)
            - (before or {}).get(short, 0)
            for short, uuid in self.machines.uuids.items()
        }
        return {short: count for short, count in heard.items() if count}

    def short(self, name: str) -> str:
        return name.removesuffix(f"-{self.namespace}")

    def running_on(self, pods: Iterable[str]) -> dict[str, str]:
        """Where each of `pods` that is scheduled runs."""
        return {p: node for p in pods if (node := pod_node(self.crds, self.namespace, p))}

    def reset(self, pods: Iterable[str]) -> None:
        """Every machine Off again, with no core Node left, and `pods` gone. Intent first: a
        power-on Job that has not started yet is cancelled rather than run."""
        for name in self.wanted_on():
            patch_desired(self.crds, self.namespace, name, "Off")
        for name in pods:
            self.crds.kubectl(
                "delete", "pod", name, "-n", self.namespace,
                "--grace-period=0", "--force", "--ignore-not-found",
            )  # fmt: skip
        for short in self.machines.sizes:
            name = self.machines.name(short)
            # A machine caught powering on finishes its startup, then drains and shuts down:
            # two Ansible runs, minutes each when three labs share two cores.
            wait_for(partial(self.is_off, name), RESET_PATIENCE, f"{name} Off again")
            wait_for(partial(self.core_node_gone, name), PATIENCE, f"core Node {name} gone")

    def pin(self, shorts: Iterable[str]) -> None:
        """Hold the Leases of `shorts`' machines with no duration, which never expire: the
        operator leaves a machine alone while another holder has its Lease. Made anew: the
        Lease the operator freed keeps its duration and renew time, so it would expire."""
        self.unpin(shorts)
        leases = [
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.lease(short), "namespace": self.namespace},
                "spec": {"holderIdentity": PINNED_BY},
            }
            for short in shorts
        ]
        items = {"apiVersion": "v1", "kind": "List", "items": leases}
        self.crds.kubectl("create", "-f", "-", input=json.dumps(items))

    def unpin(self, shorts: Iterable[str]) -> None:
        for short in shorts:
            self.crds.kubectl(
                "delete", "lease", self.lease(short), "-n", self.namespace, "--ignore-not-found"
            )

    def lease(self, short: str) -> str:
        return f"lightsout.{self.namespace}.{self.machines.name(short)}"

    def is_off(self, name: str) -> bool:
        return status(self.crds, self.namespace, name).get("phase") == "Off"

    def core_node_gone(self, name: str) -> bool:
        return get_json(self.crds, "node", name) is None


#: How long a reset waits for each machine to be Off (a power-on and a power-off under load).
RESET_PATIENCE = 600
#: The holder of the Leases that pin the expander rows' machines.
PINNED_BY = "expander-matrix"


@dataclass(frozen=True)
class Row:
    """One expander, the 3-cpu pods left pending, the Group it must choose and why. `scores`
    matches the line the expander logs of each option, if it logs one; `flags` are what the
    row adds to README's and its `--expander` (such as the log level that line needs)."""

    expander: str
    pods: int
    chosen: str
    why: str
    scores: re.Pattern[str] | None = None
    flags: tuple[str, ...] = ()


# Each row's choice under cluster-autoscaler 1.34.5's own scoring, for 3-cpu, 100Mi pods.
# - price (expander/price): per option, unfitness * (node price + s) / (pods' price + s),
#   lowest wins. Prices per hour, in W (x pricePerKWh / 1000, the same for both): a small
#   node 180, the big one 30; a pod's price is its share of the machine where that is
#   cheapest, 3/16 of the big one, 5.625; s, the stabilization pod's (500m, 500Mi), 0.5/16 of
#   the big one, 0.94. Ratios: small 180.94 / 6.56 = 27.6, big 30.94 / 6.56 = 4.71.
#   Unfitness is max(P/cpus, cpus/P), P the preferred node's cpus (1 up to 2 Nodes in the
#   cluster, 2 up to 6, 4 up to 20 ...): small 4, big 16 at P=1, scores 110 vs 75; 55 vs 38
#   at P=2; 28 vs 19 at P=4; a larger P favours big more. Big wins at any cluster size.
# - least-waste (expander/waste): idle share of cpu plus of memory of the new nodes: small
#   0.25 + 0.988, big 0.8125 + 0.997. Small wins.
# - most-pods (expander/mostpods): of three pods, "small" (at most two machines) holds two, the
#   big machine all three. Big wins (least-waste would take small: 0.25 + 0.988 vs 0.44 + 0.99).
# - priority: the ConfigMap ranks ^<namespace>/small$ (50) above .* (10). Small wins, where
#   price, README's expander, takes big.
ROWS = (
    Row(
        "price",
        1,
        "big",
        "16 cpus at 30 W beat 4 at 180 W despite the size penalty",
        PRICE_SCORE,
        ("--v=5",),
    ),
    Row("least-waste", 1, "small", "a 4-cpu node idles 1 cpu, a 16-cpu node 13", WASTE_SCORE),
    Row("most-pods", 3, "big", "two small machines hold two 3-cpu pods, one big holds three"),
    Row("priority", 1, "small", "its ConfigMap ranks ^<namespace>/small$ above .*"),
)


def test_each_expander_and_flag_chooses_as_readme_documents(
    crds: Cluster,
    namespace: str,
    tmp_path: Path,
    plaintext_operator: OperatorProcess,
    grpc_address: str,
    machines: Fleet,
    bmc: SushyEmulator,
    ca_kubeconfig: Path,
) -> None:
    """One lab and one set of machines, one cluster-autoscaler process per row; each expander
    row ends once IncreaseSize has recorded its intent."""
    groups = [
        *priced_groups(),
        rack_group("rack-a", RACK_A_SECONDS),
        rack_group("rack-b", RACK_B_SECONDS),
    ]
    machines.apply(crds, bmc, groups, GROUP_OF)
    lab = Lab(crds, namespace, tmp_path, grpc_address, ca_kubeconfig, machines, bmc)
    priorities = {"priorities": f"10:\n  - .*\n50:\n  - ^{namespace}/small$\n"}
    crds.kubectl(
        "create", "configmap", PRIORITIES, "-n", "kube-system",
        *(f"--from-literal={k}={v}" for k, v in priorities.items()),
    )  # fmt: skip
    seconds: dict[str, float] = {}
    lab.pin(DISAGREEING)
    try:
        for row in ROWS:
            started = dt.datetime.now(dt.UTC)
            pods = [f"{row.expander}-{i}" for i in range(row.pods)]
            chosen, scores = expander_row(lab, row, pods)
            assert chosen == f"{namespace}/{row.chosen}", (row, chosen, scores)
            chose = (dt.datetime.now(dt.UTC) - started).total_seconds()
            lab.reset(pods)
            seconds[row.expander] = (dt.datetime.now(dt.UTC) - started).total_seconds()
            print(
                f"\n{row.expander}: {chosen} ({row.why}); chosen after {chose:.0f} s,"
                f" reset after {seconds[row.expander] - chose:.0f} s more; scores: {scores}"
            )
        # Pinned, the chosen machine was never acted on: no power-on order reached the BMC.
        assert lab.power_ons() == {}, lab.power_ons()
    finally:
        crds.kubectl("delete", "configmap", PRIORITIES, "-n", "kube-system", "--ignore-not-found")
        lab.unpin(DISAGREEING)
    started = dt.datetime.now(dt.UTC)
    lab.reset(racks_row(lab))
    seconds["racks"] = (dt.datetime.now(dt.UTC) - started).total_seconds()
    print(f"racks: {seconds['racks']:.0f} s with its reset")
    print(f"matrix: {sum(seconds.values()):.0f} s for {len(seconds)} rows")


def expander_row(lab: Lab, row: Row, pods: list[str]) -> tuple[str, dict[str, str]]:
    """The node group cluster-autoscaler with `row.expander` scales up for `pods`, once the
    operator has recorded the intent on one of that group's machines, and what the expander
    logged of each option (`row.scores`, by node group)."""
    autoscaler = lab.autoscaler(row.expander, f"--expander={row.expander}", *row.flags)
    with autoscaler, diagnosed(lab.crds, lab.namespace):
        lab.create(pod(name, "3") for name in pods)
        try:
            group, size = wait_for(
                lambda: (m := SCALE_UP.search(autoscaler.text())) and m.groups(),
                120,
                f"cluster-autoscaler ({row.expander}) to choose a node group",
            )
            wait_for(
                lambda: lab.wanted_on(group.partition("/")[2]),
                60,
                f"IncreaseSize of {group} to be recorded",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\ncluster-autoscaler:\n{autoscaler.tail()}") from error
        log = autoscaler.text()
    assert len(SCALE_UP.findall(log)) == 1, SCALE_UP.findall(log)
    assert size == "1", (group, size)
    scores = dict(row.scores.findall(log)) if row.scores else {}
    if row.scores:
        # Both Groups were options: the choice was the expander's, not the only one left.
        groups = [f"{lab.namespace}/{g}" for g in ("big", "small")]
        assert sorted(scores) == groups, (row.expander, scores)
    assert_allowed(autoscaler)
    return str(group), scores


def settled_nodes(crds: Cluster) -> list[str] | None:
    """The core Nodes, once every one is Ready and none is being deleted."""
    items = json.loads(crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    settled = all(
        "deletionTimestamp" not in n["metadata"] and condition_since(n, "Ready", "True")
        for n in items
    )
    return [n["metadata"]["name"] for n in items] if settled else None


#: cluster-autoscaler's "<node> was unneeded for <Go duration>" (scaledown/unneeded).
UNNEEDED = r"{node} was unneeded for ((?:[\d.]+(?:h|ms|µs|ns|m|s))+)"
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def unneeded_seconds(log: str, node: str) -> float:
    """How long cluster-autoscaler last said `node` had been unneeded (0: never)."""
    said = re.findall(UNNEEDED.format(node=re.escape(node)), log)
    if not said:
        return 0.0
    parts = re.findall(r"([\d.]+)(h|ms|µs|ns|m|s)", said[-1])
    return sum(float(amount) * GO_UNITS[unit] for amount, unit in parts)


def racks_row(lab: Lab) -> list[str]:
    """Three pods that each need a rack machine, with README's `--balance-similar-node-groups`
    and `--max-nodes-total` two above the Nodes there are: one machine powers on in each rack
    (balanced: without it both would be rack-a's) and the third pod waits (capped: without
    it a third machine would). With the pods gone, each rack's own unneeded time decides, not
    README's global 10 minutes. Returns the row's pods."""
    crds, namespace = lab.crds, lab.namespace
    before = wait_for(
        lambda: settled_nodes(crds), PATIENCE, "every core Node Ready, none being deleted"
    )
    cap = len(before) + 2
    heard = lab.power_ons()
    pods = ["racked-0", "racked-1", "racked-2"]
    # README's 10-minute pause after a scale-up is global and not what this row is about.
    flags = (f"--max-nodes-total={cap}", "--scale-down-delay-after-add=0s")
    autoscaler = lab.autoscaler("racks", *flags)
    # Logged once both new Nodes are Ready and a later loop looked again.
    reached = f"Max total nodes in cluster reached: {cap}. Current number of ready nodes: {cap}"
    with autoscaler, diagnosed(crds, namespace):
        lab.create(rack_pod(name) for name in pods)
        try:
            hosts = wait_for(
                lambda: len(r := lab.running_on(pods)) == 2 and r,
                PATIENCE,
                "two of the rack pods running",
            )
            wait_for(
                lambda: reached in autoscaler.text(), 120, "cluster-autoscaler to find the cap"
            )
            nodes = json.loads(crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]
            waiting = sorted(set(pods) - set(lab.running_on(pods)))
            racks = {GROUP_OF[lab.short(h)]: h for h in hosts.values()}
            assert sorted(racks) == ["rack-a", "rack-b"], hosts
            quick, slow = racks["rack-a"], racks["rack-b"]
            crds.kubectl("delete", "pod", *pods, "-n", namespace, "--wait=false")
            gone = dt.datetime.now(dt.UTC)
            wait_for(
                lambda: lab.wanted_on("rack-a") == [],
                180,
                f"cluster-autoscaler to delete {quick} after rack-a's {RACK_A_SECONDS} s",
            )
            deleted = dt.datetime.now(dt.UTC)
            wait_for(
                lambda: unneeded_seconds(autoscaler.text(), slow) > 2 * RACK_A_SECONDS,
                120,
                f"{slow} to have been unneeded for twice rack-a's time",
            )
            kept = lab.wanted_on("rack-b")
        except AssertionError as error:
            raise AssertionError(f"{error}\ncluster-autoscaler:\n{autoscaler.tail()}") from error
        log = autoscaler.text()
    # Balanced: one scale-up split between the two racks.
    assert "Splitting scale-up between 2 similar node groups" in log
    assert sorted(SCALE_UP.findall(log)) == [
        (f"{namespace}/rack-a", "1"),
        (f"{namespace}/rack-b", "1"),
    ], SCALE_UP.findall(log)
    power_ons = lab.power_ons(heard)
    assert power_ons == {lab.short(quick): 1, lab.short(slow): 1}, power_ons
    # Capped: the cap, not the pods, stopped at two Nodes; the third pod waited.
    assert "Capping binpacking after exceeding threshold of 2 nodes" in log
    assert len(nodes) == cap, [n["metadata"]["name"] for n in nodes]
    assert len(waiting) == 1, waiting
    # Each rack's own unneeded time: rack-a's machine went, rack-b's stayed.
    assert kept == [slow], kept
    removed = [line for line in log.splitlines() if "Scale-down: removing" in line]
    assert removed and all(quick in line and slow not in line for line in removed), removed
    assert_allowed(autoscaler)
    print(
        f"\nracks: {quick} and {slow} on, {waiting[0]} pending at --max-nodes-total={cap};"
        f" pods deleted, DeleteNodes of {quick} seen after {(deleted - gone).total_seconds():.0f}"
        f" s; {slow} still on after {unneeded_seconds(log, slow):.0f} s unneeded"
    )
    return pods
