"""Emulated machines joining and leaving the local cluster as their power state changes.

A real machine that powers on boots, its kubelet registers a core Node, and heartbeats keep it
Ready; when it powers off the heartbeats stop. Here each machine's power state is read from its
emulator's own API (a callable per machine: sushy-tools, ipmi_sim, fakepve…, or `tcp_probe` for
a Wake-on-LAN machine, which has no API and is "on" while a port answers), and after a boot
delay the simulator registers the matching core Node with its capacity, labels and providerID,
annotated so that kwok keeps it Ready and runs its pods (a Node that exists already, as
Lights-Out creates it before power-on, keeps its labels, taints and providerID, as with a real
kubelet).
When the machine goes off, the Node is
deleted (as a node that stopped heartbeating would later be removed). Used by the end-to-end
tests and by `lightsout-lab demo`.

kwok takes over a Node when it sees it added (its Lease in kube-node-lease is its heartbeat).
A Node made again while kwok's watch was down (the API server restarted) reaches kwok as a
change, not an addition, when it lists again, and kwok (v0.7) never takes it over: no Lease,
NotReady for ever. So, as a kubelet keeps trying until its Node is registered and heartbeating,
a machine whose Node has no fresh Lease `HEARTBEAT_SECONDS` after its registration registers
it again (deleted and made again, which kwok's re-established watch sees as an addition).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException

from lightsout_lab import bootstrap
from lightsout_lab.cluster import KWOK_ANNOTATION

log = logging.getLogger(__name__)

#: How long a registered Node may go without its first heartbeat (kwok's Lease renewed since
#: the registration) before the machine registers it again. kwok makes the Lease within a
#: second of seeing the Node; a CI machine running three labs may take tens of seconds for
#: twenty Nodes at once, and a Node registered again while its operator is at work on it is
#: churn the tests did not ask for.
HEARTBEAT_SECONDS = 45.0
#: How often a machine waiting for its first heartbeat reads its Lease.
HEARTBEAT_POLL_SECONDS = 2.0
NODE_LEASE_NAMESPACE = "kube-node-lease"
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"})


def tcp_probe(host: str, port: int, timeout: float = 1.0) -> Callable[[], str]:
    """A power reader for machines without a management API (Wake-on-LAN + SSH).

    `On` while `host:port` accepts a TCP connection, else `Off` — the same evidence the
    `reachability` role uses, so the simulator and the playbooks agree on what "on" means.
    """

    def read() -> str:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return "On"
        except OSError:
            return "Off"

    return read


#: What a kubelet reports about itself, in its first POST of the Node already (so a Node this
#: simulator made never reads as one no kubelet registered).
NODE_INFO = {
    "architecture": "amd64",
    "operatingSystem": "linux",
    "kubeletVersion": "v1.34.9",
    "bootID": "",
    "containerRuntimeVersion": "",
    "kernelVersion": "",
    "kubeProxyVersion": "",
    "machineID": "",
    "osImage": "",
    "systemUUID": "",
}


@dataclass
class SimMachine:
    """One emulated machine and the core Node it registers as."""

    node_name: str
    provider_id: str
    power: Callable[[], str]
    capacity: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "4", "memory": "8Gi", "pods": "110"}
    )
    #: Its kubelet's own labels (--node-labels): only on a Node it creates itself.
    labels: Mapping[str, str] = field(default_factory=dict)
    boot_seconds: float = 2.0
    #: For a clone that joins by itself: returns the cloud-init ISO attached to it (None when
    #: none is). The machine then joins with the ISO's bootstrap token (lightsout_lab.bootstrap)
    #: instead of being registered with the simulator's admin credentials.
    cloud_init: Callable[[], bytes | None] | None = None
    #: Why the last join failed ("" when it did not).
    join_error: str = ""
    joined_as: str = ""
    on_since: float | None = None
    registered: bool = False
    registrations: int = 0
    observed: str = "Unknown"
    #: When (monotonic, and wall-clock for the Lease's renewTime) the Node was last registered,
    #: while its first heartbeat is awaited; None once a heartbeat was seen.
    awaiting_heartbeat: tuple[float, float] | None = None
    heartbeat_checked: float = 0.0


@dataclass
class MachineSimulator:
    api: client.ApiClient
    machines: list[SimMachine]
    poll_seconds: float = 0.5
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> MachineSimulator:
        self._thread = threading.Thread(target=self._loop, name="machine-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def machine(self, node_name: str) -> SimMachine:
        return next(m for m in self.machines if m.node_name == node_name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for machine in self.machines:
                try:
                    self._step(machine, time.monotonic())
                except Exception:
                    log.exception("simulating %s failed", machine.node_name)
            self._stop.wait(self.poll_seconds)

    def _step(self, machine: SimMachine, now: float) -> None:
        try:
            machine.observed = machine.power()
        except Exception as exc:  # an emulator that does not answer counts as unknown
            # Said once per outage (not every poll): a machine that stays Unknown never boots.
            if machine.observed != "Unknown":
                log.warning("power of %s unreadable: %s", machine.node_name, exc)
            machine.observed = "Unknown"
            return
        if machine.observed == "On":
            if machine.on_since is None:
                machine.on_since = now
            if not machine.registered and now - machine.on_since >= machine.boot_seconds:
                self._register(machine)
            elif machine.registered and machine.awaiting_heartbeat is not None:
                self._check_heartbeat(machine, now)
        elif machine.observed == "Off":
            machine.on_since = None
            if machine.registered:
                self._unregister(machine)

    def _register(self, machine: SimMachine) -> None:
        api, labels, taints = self.api, dict(machine.labels), []
        if machine.cloud_init is not None:
            joined = self._join(machine)
            if joined is None:
                return
            api, plan = joined
            labels.update(plan.labels)
            taints = plan.taints
        core = client.CoreV1Api(api)
        resources = dict(machine.capacity)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": machine.node_name,
                "labels": {"kubernetes.io/hostname": machine.node_name, **labels},
                "annotations": {KWOK_ANNOTATION: "fake"},
            },
            "spec": {"providerID": machine.provider_id, **({"taints": taints} if taints else {})},
            # Capacity in the create request, as a kubelet registers: a Node created bare gets
            # kwok's default allocatable (1k cpu, 1Ti) until patched, and kube-scheduler would
            # bind pods that fit nowhere onto it in between.
            "status": {"capacity": resources, "allocatable": resources, "nodeInfo": NODE_INFO},
        }
        try:
            core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._adopt(machine, body)
        core.patch_node_status(
            machine.node_name,
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "nodeInfo": NODE_INFO,
                }
            },
        )
        machine.registered = True
        machine.registrations += 1
        machine.awaiting_heartbeat = (time.monotonic(), time.time())
        log.info("machine %s booted and registered", machine.node_name)

    def _check_heartbeat(self, machine: SimMachine, now: float) -> None:
        """Until kwok renews the registered Node's Lease, read it every few seconds; past
        `HEARTBEAT_SECONDS` without a renewal since the registration, register again."""
        assert machine.awaiting_heartbeat is not None
        since, since_wall = machine.awaiting_heartbeat
        if now - machine.heartbeat_checked < HEARTBEAT_POLL_SECONDS:
            return
        machine.heartbeat_checked = now
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
                machine.node_name, NODE_LEASE_NAMESPACE
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = None
        renewed = lease.spec.renew_time if lease is not None and lease.spec else None
        if renewed is not None and renewed.timestamp() >= since_wall - 1:
            machine.awaiting_heartbeat = None
            return
        if now - since < HEARTBEAT_SECONDS:
            return
        log.warning(
            "machine %s: no heartbeat %.0fs after its registration; registering again",
            machine.node_name,
            now - since,
        )
        self._register_again(machine)

    def _register_again(self, machine: SimMachine) -> None:
        """Delete the Node (this one: uid precondition) and make it again as it was, so kwok
        sees it added; labels, taints and providerID are kept."""
        core = client.CoreV1Api(self.api)
        existing = self.api.sanitize_for_serialization(core.read_node(machine.node_name))
        meta = existing["metadata"]
        body: Any = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": machine.node_name,
                "labels": meta.get("labels") or {},
                "annotations": {**(meta.get("annotations") or {}), KWOK_ANNOTATION: "fake"},
            },
            "spec": {
                k: v
                for k, v in (existing.get("spec") or {}).items()
                if k in ("taints", "providerID", "unschedulable")
            },
            "status": {
                k: v
                for k, v in (existing.get("status") or {}).items()
                if k in ("capacity", "allocatable", "nodeInfo")
            },
        }
        # The node-lifecycle controller's taints for a Node without heartbeats are its own to
        # add and remove; a kubelet registering does not send them.
        body["spec"]["taints"] = [
            t for t in body["spec"].get("taints") or [] if t["key"] not in LIFECYCLE_TAINTS
        ]
        core.delete_node(
            machine.node_name, body=client.V1DeleteOptions(preconditions={"uid": meta["uid"]})
        )
        core.create_node(body)
        machine.registrations += 1
        machine.awaiting_heartbeat = (time.monotonic(), time.time())

    def _adopt(self, machine: SimMachine, body: Any) -> None:
        """The Node exists (Lights-Out creates it, tainted, before power-on): like a real
        kubelet, keep its labels, taints and providerID and set only the default labels
        (kubelet `tryRegisterWithAPIServer`: hostname, os, arch...), never its own `labels`
        (--node-labels). kwok (v0.7) only takes over a Node created with its annotation, so
        the Node is created again, the same but for that annotation (and, in between, absent:
        nothing can be scheduled on it)."""
        core = client.CoreV1Api(self.api)
        existing = self.api.sanitize_for_serialization(core.read_node(machine.node_name))
        meta, spec = existing["metadata"], existing.get("spec") or {}
        if (meta.get("annotations") or {}).get(KWOK_ANNOTATION):
            return
        kept = {k: spec[k] for k in ("taints", "providerID", "unschedulable") if k in spec}
        body["metadata"]["labels"] = {
            **(meta.get("labels") or {}),
            "kubernetes.io/hostname": machine.node_name,
        }
        body["metadata"]["annotations"] = {
            **(meta.get("annotations") or {}),
            **body["metadata"]["annotations"],
        }
        body["spec"] = {**body["spec"], **kept}
        core.delete_node(
            machine.node_name, body=client.V1DeleteOptions(preconditions={"uid": meta["uid"]})
        )
        core.create_node(body)

    def _join(self, machine: SimMachine) -> tuple[client.ApiClient, bootstrap.JoinPlan] | None:
        """The TLS bootstrap from the attached ISO; None (and `join_error`) when it fails."""
        assert machine.cloud_init is not None
        iso = machine.cloud_init()
        if iso is None:
            machine.join_error = "no cloud-init ISO attached"
            return None
        try:
            joined, plan = bootstrap.join(iso)
        except bootstrap.JoinError as exc:
            if machine.join_error != str(exc):
                log.warning("machine %s cannot join: %s", machine.node_name, exc)
            machine.join_error = str(exc)
            # Like a real node's join retry loop: not every poll.
            machine.on_since = time.monotonic()
            return None
        machine.join_error = ""
        machine.joined_as = joined.node_name
        return joined.api, plan

    def _unregister(self, machine: SimMachine) -> None:
        try:
            client.CoreV1Api(self.api).delete_node(machine.node_name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        machine.registered = False
        machine.awaiting_heartbeat = None
        log.info("machine %s powered off; its Node is gone", machine.node_name)
