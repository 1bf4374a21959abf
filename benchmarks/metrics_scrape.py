"""Benchmark: what one Prometheus scrape of the operator's `/metrics` costs as the fleet grows.

For each fleet size (arguments, default 10 100 1000) it feeds the operator's own
`MachineTracker` the Nodes as the Node watch hands them over (machines in Groups of 100, in
every phase, each with a finished action and an energy account in status, as a running fleet
has), serves the default registry with the operator's collectors on 127.0.0.1 through
prometheus-client's own HTTP server (what `LIGHTSOUT_METRICS_ADDRESS` starts), and scrapes it
over HTTP. Prints the CPU time of one render (`generate_latest`, the scrape's work in the
operator), the median and slowest scrape over HTTP (wall clock: on a loaded machine mostly
waiting for a core), the body's size (plain and gzip, which Prometheus asks for), the number of
series, and what feeding one Node event costs.

The API server is not involved: the collectors read only what the watch already delivered, so
the scrape's cost is the operator's alone (`benchmarks.fleet` measures the watch itself).

Run: `.venv/bin/python -m benchmarks.metrics_scrape [N ...]` (part of `make bench`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import statistics
import sys
import time
import urllib.request
from typing import Any

from prometheus_client import REGISTRY, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from lightsout.execution import energy
from lightsout.metrics.energy import MachineCollector
from lightsout.metrics.machines import MachineTracker, PhaseCollector
from lightsout.models.enums import Phase
from lightsout.models.group import Electricity, GroupSpec
from lightsout.planning.energy.status import checkpoint
from lightsout_lab.process import free_port

NOW = dt.datetime.now(dt.UTC)
GROUP_SIZE = 100
SCRAPES = 20
PHASES = list(Phase)
GROUP = GroupSpec(electricity=Electricity(price_per_kwh=0.3, currency="EUR"))


def node(index: int, job_state: str) -> dict[str, Any]:
    name = f"m{index:04d}"
    phase = PHASES[index % len(PHASES)]
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "fleet"},
        "spec": {
            "group": f"rack-{index // GROUP_SIZE:02d}",
            "desiredPowerState": "On" if phase == Phase.READY else "Off",
            "driver": {"redfish": {"endpoint": "https://bmc"}},
            "resources": {"cpu": "8", "memory": "32Gi"},
            "power": {"onWatts": 120, "idleWatts": 40, "offWatts": 5},
        },
        "status": {
            "phase": str(phase),
            "lastOperation": {
                "action": "startup",
                "job": f"lo-{name}-startup-g1-a1-{job_state}",
                "result": "Succeeded" if index % 7 else "Failed",
                "started": "2026-11-24T08:00:00Z",
                "finished": "2026-11-24T08:00:40Z",
            },
        },
    }
    # No account yet: the pass opens one (`planning.energy.status.checkpoint`).
    account = checkpoint(
        None, energy.draw(body), GROUP, phase, 0.25, now=NOW - dt.timedelta(hours=5)
    )
    body["status"]["energy"] = account
    return body


def scrape(url: str, encoding: str) -> tuple[float, bytes]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": encoding})  # noqa: S310
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        body = response.read()
    return time.perf_counter() - started, body


def measure(count: int, tracker: MachineTracker, url: str) -> None:
    # Two events per Node: first sight, then a finished action (which counts in the histograms).
    nodes = [node(i, "a") for i in range(count)]
    started = time.perf_counter()
    for body in nodes:
        tracker.observe(body, NOW)
    for body in (node(i, "b") for i in range(count)):
        tracker.observe(body, NOW)
    per_event = (time.perf_counter() - started) / (2 * count)
    scrape(url, "identity")  # warm
    renders = []
    for _ in range(SCRAPES):
        cpu = time.process_time()
        generate_latest(REGISTRY)
        renders.append(time.process_time() - cpu)
    plain = [scrape(url, "identity") for _ in range(SCRAPES)]
    zipped = [scrape(url, "gzip") for _ in range(SCRAPES)]
    text = plain[-1][1].decode()
    ours = [f for f in text_string_to_metric_families(text) if f.name.startswith("lightsout_")]
    series = sum(len(f.samples) for f in ours)
    times = [t for t, _ in plain]
    gz_times = [t for t, _ in zipped]
    print(f"{count:>6} machines, {count // GROUP_SIZE or 1} Groups:")
    print(f"  one render (CPU)       {statistics.median(renders) * 1000:8.1f} ms median")
    print(
        f"  one scrape (plain)     {statistics.median(times) * 1000:8.1f} ms median, "
        f"{max(times) * 1000:.1f} ms slowest of {SCRAPES}"
    )
    print(
        f"  one scrape (gzip)      {statistics.median(gz_times) * 1000:8.1f} ms median, "
        f"{max(gz_times) * 1000:.1f} ms slowest of {SCRAPES}"
    )
    print(
        f"  body                   {len(plain[-1][1]) / 1024:8.1f} KiB plain, "
        f"{len(gzip.compress(plain[-1][1])) / 1024:.1f} KiB gzip"
    )
    print(f"  lightsout_ series      {series:8d} (in {len(ours)} families)")
    print(f"  one Node event fed     {per_event * 1e6:8.1f} µs")


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [10, 100, 1000]
    tracker = MachineTracker()
    REGISTRY.register(PhaseCollector(tracker))
    REGISTRY.register(MachineCollector(tracker))
    port = free_port()
    start_http_server(port, addr="127.0.0.1")
    url = f"http://127.0.0.1:{port}/metrics"
    print(f"/metrics of the operator's collectors, {SCRAPES} scrapes each over HTTP ({url})")
    for count in sizes:
        # Each size on a fresh fleet (the action counters keep what earlier sizes counted).
        for key in list(tracker.machines()):
            tracker.forget(key[0], key[1])
        measure(count, tracker, url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
