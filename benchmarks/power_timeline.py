"""Benchmark: where the time goes from `kubectl patch … desiredPowerState: On` to phase Ready.

Runs the real stack (control plane, sushy-tools, stand-in kubelet, machine simulator, operator)
and, for several power-on cycles of one Redfish server, watches the API every 50 ms to time:

- decision      patch → the action Job exists (operator woke, decided, created the Job)
- job start     Job exists → its pod is Running (job controller, scheduler, kubelet)
- playbook      pod Running → Job complete (ansible-runner; sushy lands power 1-11 s late)
- boot          Job complete → core Node registered (the simulator's boot delay)
- registration  core Node registered → phase Ready (operator sees it, labels, uncordons)

Run: `.venv/bin/python -m benchmarks.power_timeline [cycles]` (part of `make bench`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.lab_objects import GROUP, PASSWORD, bmc_secret, redfish_machine
from lightsout_lab.lab import Lab

STEPS = ("decision", "job start", "playbook", "boot", "registration")


def _objects(name: str) -> list[dict[str, Any]]:
    return [
        bmc_secret(),
        {"apiVersion": "lightsout.dev/v1alpha1", "kind": "Group", "metadata": {"name": GROUP}},
        redfish_machine(name, cpu="8", memory="16Gi"),
    ]


def _until(probe: Callable[[], bool], timeout: float = 300) -> float:
    end = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > end:
            raise TimeoutError("step did not finish in time")
        time.sleep(0.05)
    return time.monotonic()


def cycle(lab: Lab, name: str) -> list[float]:
    assert lab.cluster is not None
    kubectl, ns = lab.cluster.kubectl, lab.namespace

    def get(*args: str) -> dict[str, Any]:
        out = kubectl("get", *args, "-n", ns, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def phase() -> str:
        return str((get("lsn", name).get("status") or {}).get("phase"))

    def jobs() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = get("jobs", "-l", f"lightsout.dev/node={name}").get(
            "items", []
        )
        return [j for j in items if j["metadata"]["labels"]["lightsout.dev/action"] == "startup"]

    before = {j["metadata"]["name"] for j in jobs()}

    def new_job() -> dict[str, Any] | None:
        return next((j for j in jobs() if j["metadata"]["name"] not in before), None)

    def pod_running() -> bool:
        job = new_job()
        if job is None:
            return False
        pods = get("pods", "-l", f"job-name={job['metadata']['name']}").get("items", [])
        return any(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)

    def job_done() -> bool:
        job = new_job()
        return bool(job and (job.get("status") or {}).get("succeeded"))

    patch = json.dumps({"spec": {"desiredPowerState": "On"}})
    start = time.monotonic()
    kubectl("patch", "lsn", name, "-n", ns, "--type", "merge", "-p", patch)
    marks = [
        _until(lambda: new_job() is not None),
        _until(pod_running),
        _until(job_done),
        _until(lambda: kubectl("get", "node", name, check=False).returncode == 0),
        _until(lambda: phase() == "Ready"),
    ]
    durations = [b - a for a, b in zip([start, *marks[:-1]], marks, strict=True)]
    off = json.dumps({"spec": {"desiredPowerState": "Off"}})
    kubectl("patch", "lsn", name, "-n", ns, "--type", "merge", "-p", off)
    _until(lambda: phase() == "Off")
    return durations


def main(argv: list[str]) -> int:
    cycles = int(argv[0]) if argv else 3
    name = "bench-box"
    lab = Lab(objects=_objects(name), namespace="bench", password=PASSWORD)
    lab.start()
    try:
        cluster = lab.cluster
        assert cluster is not None
        _until(lambda: "Off" in cluster.kubectl("get", "lsn", "-n", "bench").stdout)
        runs = [cycle(lab, name) for _ in range(cycles)]
    finally:
        lab.stop()
    print(f"patch → Ready over {cycles} power-on cycles (seconds; median, min, max):")
    print(f"{'step':<14}{'median':>8}{'min':>8}{'max':>8}")
    for index, step in enumerate([*STEPS, "total"]):
        values = [sum(r) for r in runs] if step == "total" else [r[index] for r in runs]
        print(f"{step:<14}{statistics.median(values):8.2f}{min(values):8.2f}{max(values):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
