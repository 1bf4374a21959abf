"""Benchmark: from a pod becoming Unschedulable to its machine's power-on, on the real stack.

Runs the whole installation (`Lab`: control plane with kube-scheduler, sushy-tools, stand-in
kubelet, machine simulator, the operator with its built-in autoscaler) with N powered-off
machines, each labelled with a slot number. Each repetition creates one pod whose nodeSelector
names the next slot, so exactly one machine can host it, and times:

- decision   the pod's PodScheduled=False/Unschedulable seen on a watch → that machine's
             `spec.desiredPowerState: On` seen on a watch (the autoscaler woke, planned, wrote)
- execution  the same start → the Redfish power-on request reaching the emulator (its own
             request log; the action Job started, ran Ansible, which called the BMC)

Watch events are stamped on arrival with the wall clock, as is the emulator's request log, so
both sides use one clock on one machine. Machines stay on afterwards (scale-down is off), so
the repetitions do not wait for each other's power-off.

Run: `.venv/bin/python -m benchmarks.scaleup_latency [repetitions]` (part of `make bench`).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client, watch

from benchmarks.lab_objects import GROUP, PASSWORD, bmc_secret, redfish_machine
from lightsout_lab.lab import Lab
from lightsout_lab.sushy import POWER_ON

NAMESPACE = "bench-scaleup"
SLOT_LABEL = "bench.lightsout.dev/slot"


def _objects(count: int) -> list[dict[str, Any]]:
    group = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": GROUP},
        "spec": {
            "autoscaler": "builtin",
            "maxNodes": count,
            "scaleUp": {"maxConcurrentOperations": 100},
            "scaleDown": {"enabled": False},
        },
    }
    machines = [
        redfish_machine(
            f"slot-{slot:02d}", cpu="2", memory="4Gi", labels={SLOT_LABEL: f"{slot:02d}"}
        )
        for slot in range(count)
    ]
    return [bmc_secret(), group, *machines]


def _pod(slot: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"wants-{slot:02d}"},
        "spec": {
            "nodeSelector": {SLOT_LABEL: f"{slot:02d}"},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}},
                }
            ],
        },
    }


class Observer:
    """Two watches stamping, on arrival, when each pod turned Unschedulable and when each
    machine's desired power state turned On."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.unschedulable: dict[str, float] = {}
        self.desired_on: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._pods, daemon=True),
            threading.Thread(target=self._machines, daemon=True),
        ]

    def start(self) -> Observer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _stream(self, call: Any, *args: Any) -> Iterator[dict[str, Any]]:
        while not self._stop.is_set():
            stream: Iterator[dict[str, Any]] = watch.Watch().stream(  # type: ignore[no-untyped-call]
                call, *args, timeout_seconds=30
            )
            try:
                for event in stream:
                    yield event["raw_object"]
                    if self._stop.is_set():
                        return
            except Exception:
                if self._stop.is_set():
                    return  # the cluster is being taken down under the watch
                time.sleep(0.5)

    def _pods(self) -> None:
        core = client.CoreV1Api(self.api)
        for pod in self._stream(core.list_namespaced_pod, NAMESPACE):
            name = pod["metadata"]["name"]
            for cond in (pod.get("status") or {}).get("conditions") or []:
                verdict = (cond.get("type"), cond.get("status"), cond.get("reason"))
                if verdict == ("PodScheduled", "False", "Unschedulable"):
                    self.unschedulable.setdefault(name, time.time())

    def _machines(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        args = ("lightsout.dev", "v1alpha1", NAMESPACE, "nodes")
        for node in self._stream(custom.list_namespaced_custom_object, *args):
            if node["spec"].get("desiredPowerState") == "On":
                self.desired_on.setdefault(node["metadata"]["name"], time.time())


def _until(probe: Any, timeout: float = 120) -> Any:
    end = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > end:
            raise TimeoutError("benchmark step did not finish in time")
        time.sleep(0.02)
    return value


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 20
    lab = Lab(objects=_objects(count), namespace=NAMESPACE, password=PASSWORD)
    lab.start()
    decisions: list[float] = []
    executions: list[float] = []
    assert lab.cluster is not None and lab.bmc is not None
    bmc, cluster = lab.bmc, lab.cluster
    api = cluster.api_client()
    observer = Observer(api)
    try:
        custom = client.CustomObjectsApi(api)

        def phases() -> list[str]:
            listed: Any = custom.list_namespaced_custom_object(
                "lightsout.dev", "v1alpha1", NAMESPACE, "nodes"
            )
            items: list[dict[str, Any]] = listed["items"]
            return [str((n.get("status") or {}).get("phase")) for n in items]

        # Every machine first settles into phase Off; twenty of them take a while on a small host.
        _until(lambda: phases().count("Off") == count, timeout=900)
        observer.start()
        core = client.CoreV1Api(api)
        for slot in range(count):
            machine, pod = f"slot-{slot:02d}", f"wants-{slot:02d}"
            system = lab.system_id(machine)
            body: Any = _pod(slot)
            core.create_namespaced_pod(NAMESPACE, body)
            start = _until(lambda p=pod: observer.unschedulable.get(p))
            decided = _until(lambda m=machine: observer.desired_on.get(m))
            request = _until(lambda s=system: bmc.power_requests(s, reset_types=POWER_ON))[0]
            decisions.append(decided - start)
            executions.append(request.time - start)
            print(
                f"  {slot + 1:2d}/{count}: decision {decisions[-1]:6.3f}s  "
                f"power request {executions[-1]:6.3f}s",
                flush=True,
            )
    finally:
        observer.stop()
        lab.stop()
    print(f"Unschedulable → power-on over {count} pods (seconds):")
    print(f"{'step':<26}{'median':>8}{'p95':>8}{'max':>8}")
    for label, values in (
        ("decision (desired On)", decisions),
        ("execution (BMC request)", executions),
    ):
        print(
            f"{label:<26}{statistics.median(values):8.3f}"
            f"{_percentile(values, 0.95):8.3f}{max(values):8.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
