"""Benchmark: a pod's Unschedulable verdict → its machine's power-on, through cluster-autoscaler
and through the built-in planner, in one run.

One `Lab` (control plane with kube-scheduler, sushy-tools, stand-in kubelet, machine simulator,
the operator with its externalgrpc server on 127.0.0.1) holds two Groups of identical 2-cpu
Redfish machines: `bench` (autoscaler `builtin`) and `ca` (autoscaler `cluster-autoscaler`),
their core Nodes labelled `bench.lightsout.dev/via: builtin|ca`. A real cluster-autoscaler
(built by tools/cluster-autoscaler/build.sh) runs with its default `--scan-interval=10s`.
Each repetition creates one 1.5-cpu pod per path, selecting that path's label, so each needs a
machine of its own Group, and times, with the wall clock of watch arrivals and of the
emulator's request log:

- decision   Unschedulable → a machine of that Group wanted On (`spec.desiredPowerState`)
- execution  Unschedulable → the power-on request at the emulator

and prints both per path and the ratio cluster-autoscaler / built-in of the medians.
Run: `.venv/bin/python -m benchmarks.ca_latency [repetitions]` (part of `make bench`).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from kubernetes import client

from benchmarks.lab_objects import GROUP, PASSWORD, bmc_secret, redfish_machine
from benchmarks.scaleup_latency import NAMESPACE, Observer, _until
from lightsout_lab.cluster_autoscaler import ClusterAutoscaler, find_cluster_autoscaler
from lightsout_lab.lab import Lab
from lightsout_lab.process import free_port
from lightsout_lab.sushy import POWER_ON

VIA = "bench.lightsout.dev/via"
PATHS = {"builtin": GROUP, "cluster-autoscaler": "ca"}


def _group(name: str, autoscaler: str, count: int, via: str) -> dict[str, Any]:
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": name},
        "spec": {
            "autoscaler": autoscaler,
            "maxNodes": count,
            "labels": {VIA: via},
            "scaleUp": {"maxConcurrentOperations": 100},
            "scaleDown": {"enabled": False},
        },
    }


def _objects(count: int) -> list[dict[str, Any]]:
    objects = [bmc_secret()]
    for path, group in PATHS.items():
        objects.append(_group(group, path, count, group))
        for slot in range(count):
            machine = redfish_machine(f"{group}-{slot:02d}", cpu="2", memory="4Gi")
            machine["spec"]["group"] = group
            objects.append(machine)
    return objects


def _pod(name: str, via: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {VIA: via},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "1500m", "memory": "100Mi"}},
                }
            ],
        },
    }


def _bound(core: client.CoreV1Api, pod: str) -> bool:
    found: Any = core.read_namespaced_pod(pod, NAMESPACE)
    return bool(found.spec.node_name)


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 5
    find_cluster_autoscaler()  # build it (or find it cached) before the clock matters
    address = f"127.0.0.1:{free_port()}"
    lab = Lab(
        objects=_objects(count),
        namespace=NAMESPACE,
        password=PASSWORD,
        operator_env={"LIGHTSOUT_GRPC_ADDRESS": address, "LIGHTSOUT_GRPC_INSECURE": "true"},
    )
    lab.start()
    assert lab.cluster is not None and lab.bmc is not None and lab.simulator is not None
    # The core Nodes register with their Group's label, as from a kubelet started with
    # --node-labels: were it only applied by Lights-Out after registration, cluster-autoscaler
    # would see a Ready node of its group that the pod does not fit yet, and add another.
    for sim in lab.simulator.machines:
        sim.labels = {VIA: sim.node_name.rsplit("-", 1)[0]}
    bmc, cluster = lab.bmc, lab.cluster
    api = cluster.api_client()
    observer = Observer(api)
    results: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in PATHS}
    autoscaler = ClusterAutoscaler(
        cluster,
        address,
        lab.workdir / "cluster-autoscaler",
        flags=["--scan-interval=10s", "--scale-down-enabled=false", "--v=2"],
    )
    try:
        custom = client.CustomObjectsApi(api)

        def phases() -> list[str]:
            listed: Any = custom.list_namespaced_custom_object(
                "lightsout.dev", "v1alpha1", NAMESPACE, "nodes"
            )
            return [str((n.get("status") or {}).get("phase")) for n in listed["items"]]

        _until(lambda: phases().count("Off") == 2 * count, timeout=900)
        autoscaler.start()
        observer.start()
        core = client.CoreV1Api(api)
        for rep in range(count):
            for path, group in PATHS.items():
                pod = f"wants-{group}-{rep:02d}"
                before = {m for m in observer.desired_on if m.startswith(f"{group}-")}
                body: Any = _pod(pod, group)
                core.create_namespaced_pod(NAMESPACE, body)
                start = _until(lambda p=pod: observer.unschedulable.get(p))
                machine = _until(
                    lambda g=group, b=before: next(
                        (m for m in observer.desired_on if m.startswith(f"{g}-") and m not in b),
                        None,
                    ),
                    timeout=180,
                )
                decided = observer.desired_on[machine]
                system = lab.system_id(machine)
                request = _until(
                    lambda s=system: bmc.power_requests(s, reset_types=POWER_ON), timeout=300
                )[0]
                decisions, executions = results[path]
                decisions.append(decided - start)
                executions.append(request.time - start)
                print(
                    f"  {rep + 1}/{count} {path:<18}: decision {decisions[-1]:6.2f}s  "
                    f"power request {executions[-1]:6.2f}s  ({machine})",
                    flush=True,
                )
                # The next pod starts from a quiet cluster: this one runs on its machine, so
                # no later pod can take a machine powered on for an earlier one.
                _until(lambda p=pod: _bound(core, p), timeout=300)
    finally:
        observer.stop()
        autoscaler.stop()
        lab.stop()
    print(f"Unschedulable → power-on, {count} pods per path (seconds, median / max):")
    medians = {}
    for path, (decisions, executions) in results.items():
        medians[path] = statistics.median(executions)
        print(
            f"  {path:<18} decision {statistics.median(decisions):6.2f} / {max(decisions):6.2f}"
            f"   power request {medians[path]:6.2f} / {max(executions):6.2f}"
        )
    ratio = medians["cluster-autoscaler"] / medians["builtin"]
    print(
        f"  cluster-autoscaler (scan interval 10s) / built-in, power request medians: {ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
