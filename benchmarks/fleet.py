"""Benchmark: one operator carrying a fleet of powered-off Redfish machines.

For each fleet size N (arguments, e.g. `1 100 1000`) it starts the real stack (control plane,
sushy-tools emulating N systems, stand-in kubelet, the operator) with N powered-off machines in
Groups with `autoscaler: none` and the health check off (one Group per 1000 machines, the most a
Group's `maxNodes` allows), and prints:

- how long after the operator started every Node had a phase;
- the operator's resident memory and threads once settled;
- API requests per minute at rest: the API server's `apiserver_request_total` over a window
  with the operator idle, minus the same window measured before the operator started
  (so the control plane's own traffic cancels out); Lease requests and WATCH requests are
  shown apart from the rest;
- the timeline of one machine's power-on while the other N-1 exist: patch → its action Job
  exists → the BMC receives the power request → phase Ready.

Only the machine that is power-cycled is simulated (booted and registered by the machine
simulator); the others stay off and nobody asks anything of them.

Run: `.venv/bin/python -m benchmarks.fleet [N ...] [--rest SECONDS]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.lab_objects import GROUP, PASSWORD, bmc_secret, redfish_machine
from lightsout_lab.lab import Lab
from lightsout_lab.sushy import POWER_ON

NAMESPACE = "fleet"
_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class FleetResult:
    machines: int
    phased_seconds: float
    rss_mb: float
    threads: int
    rest_seconds: float
    per_minute: dict[tuple[str, str], float]
    timeline: dict[str, float]


GROUP_MAX_NODES = 1000  # the Group CRD's ceiling on `maxNodes`


def _group_name(index: int) -> str:
    """The first Group keeps the shared name (so 1000 machines are laid out as before)."""
    return GROUP if index == 0 else f"{GROUP}-{index}"


def _objects(count: int) -> list[dict[str, Any]]:
    """The Secret, one Group per `GROUP_MAX_NODES` machines, and `count` machines filling them."""
    groups = [
        {
            "apiVersion": "lightsout.dev/v1alpha1",
            "kind": "Group",
            "metadata": {"name": _group_name(g)},
            "spec": {
                "autoscaler": "none",
                "maxNodes": max(min(count - g * GROUP_MAX_NODES, GROUP_MAX_NODES), 1),
                # Off: a new machine's first health check is an Ansible pod per machine (a
                # Job of N pods), which would be counted as the operator's traffic at rest.
                "healthCheck": {"enabled": False},
            },
        }
        for g in range(max(-(-count // GROUP_MAX_NODES), 1))
    ]
    machines = [
        redfish_machine(
            f"m{i:04d}", cpu="8", memory="16Gi", group=_group_name(i // GROUP_MAX_NODES)
        )
        for i in range(count)
    ]
    return [bmc_secret(), *groups, *machines]


def _until(probe: Callable[[], bool], timeout: float, what: str, every: float = 0.1) -> float:
    end = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(every)
    return time.monotonic()


def request_totals(lab: Lab) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource) — every client together."""
    assert lab.cluster is not None
    text = lab.cluster.kubectl("get", "--raw", "/metrics").stdout
    totals: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if labels.get("group"):
            resource += "." + labels["group"]
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        totals[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return totals


def requests_per_minute(lab: Lab, seconds: float) -> dict[tuple[str, str], float]:
    before = request_totals(lab)
    time.sleep(seconds)
    after = request_totals(lab)
    return {key: (after[key] - before[key]) * 60.0 / seconds for key in after}


def _phases(lab: Lab) -> list[str | None]:
    """Every Node's phase; an API server too busy to answer counts as no phase yet."""
    assert lab.cluster is not None
    out = lab.cluster.kubectl("get", "lsn", "-n", NAMESPACE, "-o", "json", check=False)
    if out.returncode != 0:
        print(f"  (listing the Nodes failed: {out.stderr.strip()[:160]})", flush=True)
        return [None]
    items = json.loads(out.stdout)["items"]
    return [(i.get("status") or {}).get("phase") for i in items]


def _proc_status(pid: int) -> tuple[float, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


def power_on_timeline(lab: Lab, name: str) -> dict[str, float]:
    """Seconds from `desiredPowerState: On` to the Job, the BMC's power request, Ready."""
    assert lab.cluster is not None and lab.bmc is not None
    kubectl = lab.cluster.kubectl
    uuid = lab.system_id(name)

    def jobs() -> bool:
        out = kubectl("get", "jobs", "-n", NAMESPACE, "-l", f"lightsout.dev/node={name}", "-o=name")
        return bool(out.stdout.strip())

    def phase() -> str:
        out = kubectl("get", "lsn", name, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}")
        return out.stdout.strip()

    lab.bmc.clear_requests()
    patch = json.dumps({"spec": {"desiredPowerState": "On"}})
    start_wall, start = time.time(), time.monotonic()
    kubectl("patch", "lsn", name, "-n", NAMESPACE, "--type", "merge", "-p", patch)
    job = _until(jobs, 300, "the action Job")
    _until(
        lambda: bool(lab.bmc and lab.bmc.power_requests(uuid, reset_types=POWER_ON)), 300, "power"
    )
    power = lab.bmc.power_requests(uuid, reset_types=POWER_ON)[0].time - start_wall
    ready = _until(lambda: phase() == "Ready", 300, "phase Ready", every=0.2)
    return {
        "patch → Job": job - start,
        "patch → BMC power-on": power,
        "patch → Ready": ready - start,
    }


def wait_phased(lab: Lab, count: int, timeout: float) -> None:
    """Until every Node has a phase; prints progress every minute, fails after `timeout`."""
    start = time.monotonic()
    last_print = start
    while True:
        done = sum(1 for phase in _phases(lab) if phase)
        now = time.monotonic()
        if done == count:
            return
        if now - start > timeout:
            raise TimeoutError(f"after {timeout:.0f}s only {done} of {count} Nodes had a phase")
        if now - last_print >= 60:
            print(f"[{count}] {now - start:5.0f}s: {done} Nodes have a phase", flush=True)
            last_print = now
        time.sleep(1.0)


def run_fleet(count: int, rest: float, phase_timeout: float) -> FleetResult:
    cycled = "m0000"
    lab = Lab(
        objects=_objects(count),
        namespace=NAMESPACE,
        password=PASSWORD,
        simulated={cycled},
        with_operator=False,
    )
    lab.start()
    try:
        print(f"[{count}] lab in {lab.workdir}", flush=True)
        print(f"[{count}] cluster up; measuring the baseline for {rest:.0f}s", flush=True)
        baseline = requests_per_minute(lab, rest)
        started = time.monotonic()
        operator = lab.start_operator(verbose=False)  # as users run it: no debug log
        assert operator.proc is not None
        wait_phased(lab, count, phase_timeout)
        phased = time.monotonic() - started
        print(f"[{count}] every Node phased after {phased:.1f}s; settling", flush=True)
        time.sleep(min(30.0, rest / 4))
        rss, threads = _proc_status(operator.proc.pid)
        at_rest = requests_per_minute(lab, rest)
        per_minute = {
            k: at_rest.get(k, 0.0) - baseline.get(k, 0.0) for k in at_rest.keys() | baseline.keys()
        }
        timeline = power_on_timeline(lab, cycled)
        return FleetResult(count, phased, rss, threads, rest, per_minute, timeline)
    finally:
        lab.stop()


def report(result: FleetResult) -> None:
    rates = result.per_minute
    lease = "leases.coordination.k8s.io"
    leases = sum(v for (verb, res), v in rates.items() if res == lease and verb != "WATCH")
    watches = sum(v for (verb, _), v in rates.items() if verb == "WATCH")
    other = {k: v for k, v in rates.items() if k[1] != lease and k[0] != "WATCH"}
    groups = max(-(-result.machines // GROUP_MAX_NODES), 1)
    print(f"\n{result.machines} powered-off Redfish machines, {groups} Group(s), autoscaler none:")
    print(f"  every Node phased        {result.phased_seconds:8.1f} s after the operator started")
    print(f"  operator once settled    {result.rss_mb:8.1f} MB RSS, {result.threads} threads")
    print(f"  API requests/min at rest (operator minus baseline, {result.rest_seconds:.0f}s each):")
    print(f"    besides Leases/watches {sum(other.values()):8.1f}")
    print(f"    Lease requests         {leases:8.1f}")
    print(f"    watch requests ended   {watches:8.1f}")
    for (verb, resource), value in sorted(other.items(), key=lambda kv: -abs(kv[1]))[:8]:
        if abs(value) >= 0.5:
            print(f"      {verb:<8}{resource:<28}{value:8.1f}")
    print("  one machine powered on while the others exist:")
    for step, seconds in result.timeline.items():
        print(f"    {step:<22}{seconds:8.1f} s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.fleet")
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 1000])
    parser.add_argument("--rest", type=float, default=120.0, help="seconds per request window")
    parser.add_argument(
        "--phase-timeout", type=float, default=1800.0, help="give up waiting for phases after"
    )
    args = parser.parse_args(argv)
    for count in args.sizes:
        report(run_fleet(count, args.rest, args.phase_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
