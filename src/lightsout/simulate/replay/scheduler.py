"""The replay's kube-scheduler: which pod runs on which machine.

Pending pods, oldest first, are bound to Ready, uncordoned nodes that pass the production fit
check (`planning.autoscaler.scheduling.fits`), scored like kube-scheduler's NodeResourcesFit over
cpu and memory; a pod no node takes is marked Unschedulable, which is what the planner reacts to,
and why is kept on the pod for the report (`machines.WaitCause`: a machine that could hold it is
not up, or every one is up and its room taken). It keeps each machine's pods and requested
resources, which its draw follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum

from lightsout.planning.autoscaler.scheduling import NodeView, fits
from lightsout.planning.types import Phase
from lightsout.simulate.replay.clock import Clock, Kind
from lightsout.simulate.replay.machines import SimMachine, SimPod, WaitCause
from lightsout.state.resources import CPU, MEMORY, Resources
from lightsout.state.types import ObjectKey


class Scoring(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"


class Scheduler:
    def __init__(self, machines: Sequence[SimMachine], scoring: Scoring, clock: Clock) -> None:
        self.machines = machines
        self.by_node = {m.name: m for m in machines}
        self.scoring = scoring
        self.clock = clock
        #: Pods waiting for a node, by key (the planner sees them Pending).
        self.pending: dict[ObjectKey, SimPod] = {}

    def remove(self, pod: SimPod) -> None:
        """The pod ends (succeeded, or deleted by a CronJob's Replace)."""
        self.pending.pop(pod.key, None)
        if pod.node is not None:
            self._unbind(self.by_node[pod.node], pod)

    def evict(self, machine: SimMachine) -> None:
        """Drain: every pod on the node goes back to Pending and starts over elsewhere."""
        for pod in list(machine.pods.values()):
            self._unbind(machine, pod)
            pod.run += 1
            pod.started = None
            pod.pod = replace(pod.pod, phase="Pending", node_name=None, started=None)
            self.pending[pod.key] = pod

    def schedule(self) -> bool:
        """Bind each pending pod that fits a node; True when any pod changed."""
        if not self.pending:
            return False
        nodes = [
            m
            for m in self.machines
            if m.node_exists and m.node_ready and not m.cordoned and m.state.phase is Phase.READY
        ]
        changed = False
        for pod in sorted(self.pending.values(), key=lambda p: (p.arrival, p.key)):
            able = [m for m in nodes if fits(pod.pod, _view(m))]
            # The best score; on a tie, the first node by name.
            chosen = min(able, key=lambda m: (-self._score(m, pod), m.name), default=None)
            if chosen is not None:
                self._bind(pod, chosen)
                changed = True
                continue
            if pod.wait is None:  # a restart after an eviction is no wait
                pod.block(self._cause(pod, nodes), self.clock.now)
            if pod.pod.unschedulable_since is None:
                pod.pod = replace(pod.pod, unschedulable_since=self.clock.time())
                changed = True
        return changed

    def _cause(self, pod: SimPod, nodes: Sequence[SimMachine]) -> WaitCause:
        """Why no node took `pod`. Busy capacity: every machine that could hold it (were its
        pods gone) is up, so only their pods finishing can make room. A power-on: some machine
        that could hold it is off, still coming up or going down, so a power-on can end the
        wait (or must: none up could hold it at all); such a pod counts as waiting for a
        power-on even while an up machine that could hold it is full."""
        up = {machine.name for machine in nodes}
        able = [m for m in self.machines if fits(pod.pod, _view(m, empty=True))]
        if able and all(machine.name in up for machine in able):
            return WaitCause.BUSY_CAPACITY
        return WaitCause.POWER_ON

    def _score(self, machine: SimMachine, pod: SimPod) -> float:
        """kube-scheduler's NodeResourcesFit score over cpu and memory (0..1, higher wins)."""
        shares = []
        for name in (CPU, MEMORY):
            capacity = machine.allocatable.get(name)
            if capacity:
                used = machine.requested.get(name, 0) + pod.pod.requests.get(name)
                shares.append(min(1.0, used / capacity))
        used_share = sum(shares) / len(shares) if shares else 0.0
        return used_share if self.scoring is Scoring.MOST_ALLOCATED else 1.0 - used_share

    def _bind(self, pod: SimPod, machine: SimMachine) -> None:
        machine.count_energy()
        now = self.clock.now
        pod.node = pod.host = machine.name
        pod.started = now
        if pod.wait is None:
            pod.unblock(now)
            pod.wait = now - pod.arrival
            pod.first_host = machine.name
        pod.pod = replace(
            pod.pod,
            phase="Running",
            node_name=machine.name,
            unschedulable_since=None,
            started=self.clock.time(),
        )
        machine.pods[pod.key] = pod
        for name, value in pod.pod.requests:
            machine.requested[name] = machine.requested.get(name, 0) + value
        self.pending.pop(pod.key, None)
        self.clock.push(now + pod.run_seconds, Kind.POD_DONE, (pod, pod.run))

    def _unbind(self, machine: SimMachine, pod: SimPod) -> None:
        machine.count_energy()
        machine.pods.pop(pod.key, None)
        for name, value in pod.pod.requests:
            machine.requested[name] = machine.requested.get(name, 0) - value
        pod.node = None


def _view(machine: SimMachine, *, empty: bool = False) -> NodeView:
    """The node as the fit check sees it: with its pods' requests, or `empty` of them."""
    return NodeView(
        name=machine.name,
        labels=machine.labels,
        taints=machine.template.taints,
        allocatable=machine.allocatable,
        requested=Resources()
        if empty
        else Resources.of({k: v for k, v in machine.requested.items() if v}),
    )
