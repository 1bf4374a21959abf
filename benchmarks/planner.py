"""Benchmark: how long `plan(snapshot, now)` takes, and how much memory, as the cluster grows.

Builds synthetic clusters of 10/100/1000 machines with 100/1,000/10,000 pending pods and times
the planner alone (the median of a few runs), then measures its peak memory with tracemalloc in
a separate run (tracing slows the code down). The snapshot is built from raw API dicts through
`snapshot_from`, as the handler will; its build time is shown too.

The synthetic cluster: machines of five sizes (one with GPUs and a taint) in Groups of at most
100 machines, a third of them Ready with ten bound pods each, a few powering on, failed or
pinned, the rest off; three DaemonSets, a PodDisruptionBudget per workload, three always-on
core nodes; pending pods from 24 workloads (some needing a GPU, some a zone, some a big
machine), each Group allowing 100 concurrent power-ons so the planner has real choosing to do.

Run: `.venv/bin/python -m benchmarks.planner [runs]` (part of `make bench`).
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
import tracemalloc
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lightsout.planning.autoscaler.autoscale import plan
from lightsout.state.build import (
    DAEMONSETS_KEY,
    GROUPS_KEY,
    MACHINES_KEY,
    NODES_KEY,
    PDBS_KEY,
    PODS_KEY,
    snapshot_from,
)
from lightsout.state.types import Snapshot

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MACHINES = (10, 100, 1000)
PENDING = (0, 100, 1_000, 10_000)
#: Age of the unneeded-since times the timed plan starts from (past the default 600 s).
UNNEEDED = timedelta(seconds=700)
#: (cpu, memory, extended, watts on/idle/off, boot seconds)
SIZES: list[tuple[str, str, dict[str, int], tuple[int, int, int], int]] = [
    ("2", "4Gi", {}, (35, 15, 1), 60),
    ("4", "16Gi", {}, (65, 30, 2), 90),
    ("8", "32Gi", {}, (120, 55, 3), 180),
    ("16", "64Gi", {}, (220, 90, 5), 300),
    ("16", "64Gi", {"nvidia.com/gpu": 2}, (450, 140, 8), 300),
]
Obj = dict[str, Any]


def _ts(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _pod(name: str, workload: int, cpu: str, memory: str, node: str | None, **spec: Any) -> Obj:
    body: Obj = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        **spec,
    }
    status: Obj = {"phase": "Running" if node else "Pending"}
    if node:
        body["nodeName"] = node
    else:
        since = _ts(NOW - timedelta(seconds=60 + workload))
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": since,
            }
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "apps",
            "uid": name,
            "labels": {"app": f"w{workload}"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"w{workload}", "controller": True}],
        },
        "spec": body,
        "status": status,
    }


def _workload_spec(workload: int) -> tuple[str, str, Obj]:
    """Requests and constraints of workload `workload` (24 distinct pod shapes)."""
    cpu = ("100m", "250m", "500m", "1", "1500m", "3")[workload % 6]
    memory = ("128Mi", "512Mi", "1Gi", "2Gi")[workload % 4]
    spec: Obj = {}
    if workload % 8 == 7:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        spec["containers"] = [
            {
                "name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": "1"}},
            }
        ]
    elif workload % 8 == 3:
        zone = "ab"[workload % 2]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
                    ]
                }
            }
        }
    return cpu, memory, spec


def cluster(machines: int, pending: int, seed: int = 7) -> dict[str, list[Obj]]:
    rng = random.Random(seed)  # noqa: S311 - reproducible data, not secrets
    objects: dict[str, list[Obj]] = {
        k: [] for k in (PODS_KEY, NODES_KEY, MACHINES_KEY, GROUPS_KEY, PDBS_KEY, DAEMONSETS_KEY)
    }
    groups = max(1, machines // 100)
    for g in range(groups):
        objects[GROUPS_KEY].append(
            {
                "metadata": {"name": f"g{g}", "namespace": "lightsout"},
                "spec": {
                    "maxNodes": 100,
                    "selectionPolicy": ("LowestEnergy", "LeastWaste", "Priority", "FastestBoot")[
                        g % 4
                    ],
                    "scaleUp": {"maxConcurrentOperations": 100},
                    "scaleDown": {"maxConcurrentOperations": 5},
                },
            }
        )
    for i in range(3):
        objects[NODES_KEY].append(_core(f"base-{i}", "8", "32Gi", {}))
    for i in range(machines):
        name = f"m{i:04d}"
        # Sizes vary within each Group (machine i is in Group i % groups).
        cpu, memory, extended, watts, boot = SIZES[(i // groups + i) % len(SIZES)]
        roll = rng.random()
        desired, phase = "Off", "Off"
        if roll < 0.33:
            desired, phase = "On", "Ready"
        elif roll < 0.38:
            desired, phase = "On", "Booting"
        elif roll < 0.40:
            phase = "Failed"
        spec: Obj = {
            "group": f"g{i % groups}",
            "kubernetesNodeName": name,
            "desiredPowerState": desired,
            "resources": {
                "cpu": cpu,
                "memory": memory,
                **({"extended": extended} if extended else {}),
            },
            "labels": {"zone": "ab"[i % 2]},
            "power": {
                "onWatts": watts[0],
                "idleWatts": watts[1],
                "offWatts": watts[2],
                "bootTimeoutSeconds": boot,
            },
            "autoscaling": {"enabled": roll < 0.97 or roll >= 0.99, "priority": i % 7},
        }
        if extended:
            spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        objects[MACHINES_KEY].append(
            {
                "metadata": {"name": name, "namespace": "lightsout"},
                "spec": spec,
                "status": {"phase": phase},
            }
        )
        if phase == "Ready":
            objects[NODES_KEY].append(
                _core(
                    name,
                    cpu,
                    memory,
                    {"zone": "ab"[i % 2]},
                    extended=extended,
                    taints=spec.get("taints"),
                )
            )
            for j in range(10):
                w = rng.randrange(24)
                small = ("50m", "100m", "200m")[j % 3]
                objects[PODS_KEY].append(_pod(f"{name}-p{j}", w, small, "128Mi", name))
    for p in range(pending):
        w = p % 24
        cpu, memory, spec = _workload_spec(w)
        objects[PODS_KEY].append(_pod(f"pending-{p:05d}", w, cpu, memory, None, **spec))
    for w in range(24):
        objects[PDBS_KEY].append(
            {
                "metadata": {"name": f"w{w}", "namespace": "apps"},
                "spec": {"selector": {"matchLabels": {"app": f"w{w}"}}},
                "status": {"disruptionsAllowed": 0 if w == 5 else 1},
            }
        )
    for d, (cpu, memory) in enumerate((("100m", "128Mi"), ("50m", "64Mi"), ("200m", "256Mi"))):
        template: Obj = {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
        }
        if d == 0:
            template["tolerations"] = [{"operator": "Exists"}]
        objects[DAEMONSETS_KEY].append(
            {
                "metadata": {"name": f"ds{d}", "namespace": "kube-system"},
                "spec": {"template": {"spec": template}},
            }
        )
    return objects


def _core(
    name: str,
    cpu: str,
    memory: str,
    labels: dict[str, str],
    *,
    extended: dict[str, int] | None = None,
    taints: Any = None,
) -> Obj:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": memory,
                "pods": "110",
                **{k: str(v) for k, v in (extended or {}).items()},
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": _ts(NOW - timedelta(days=1)),
                }
            ],
        },
    }


def _median_seconds(snapshot: Snapshot, runs: int) -> float:
    timings = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        plan(snapshot, NOW)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def _peak_mib(snapshot: Snapshot) -> float:
    gc.collect()
    tracemalloc.start()
    plan(snapshot, NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def main(argv: list[str]) -> int:
    runs = int(argv[1]) if len(argv) > 1 else 5
    print(
        f"{'machines':>8} {'pending':>8} {'snapshot':>9} {'plan p50':>9} {'peak MiB':>9} "
        f"{'on':>5} {'off':>4} {'unneeded':>8} {'placed':>7} {'waiting':>8}"
    )
    print("-" * 84)
    for machines in MACHINES:
        for pending in PENDING:
            objects = cluster(machines, pending)
            started = time.perf_counter()
            snapshot = snapshot_from(objects, complete=True)
            built = time.perf_counter() - started
            # The timed plan follows one made UNNEEDED earlier, so idle machines are due for
            # power-off and the scale-down path does its full work too.
            earlier = plan(snapshot, NOW - UNNEEDED)
            snapshot = replace(snapshot, unneeded_since=earlier.unneeded_since)
            seconds = _median_seconds(snapshot, runs)
            peak = _peak_mib(snapshot)
            result = plan(snapshot, NOW)
            placed = sum(len(a.pods) for a in result.power_on)
            stuck = sum(
                1 for notes in result.explanations.pods.values() if notes[0].startswith("no ")
            )
            print(
                f"{machines:>8} {pending:>8} {built * 1000:>7.0f}ms {seconds * 1000:>7.0f}ms "
                f"{peak:>9.1f} {len(result.power_on):>5} {len(result.power_off):>4} "
                f"{len(result.unneeded_since):>8} {placed:>7} {stuck:>8}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
