"""`lightsout-lab dashboard-check`: every panel of the Grafana dashboard shows data from a real
Prometheus scraping a real run.

Starts the demo's lab (control plane, sushy-tools with the three sample servers, the operator
with its built-in autoscaler and `/metrics`), a Prometheus server (Debian's `prometheus`
package, installed by `tools/ci/system-packages.sh prometheus`) scraping the operator every 2 s,
runs the demo's autoscaling
scenario (a workload powers servers on, then off), then runs every panel's query over the run
through Prometheus' HTTP API, as Grafana would (its variables set to "All", `$__range` to the
run, `$__rate_interval` to 30 s), and prints what each returned. Exits 1 when a panel has no
data. `make dashboard-check` runs it (about as long as `make demo`); `tests/e2e/test_metrics.py`
uses `Prometheus` and `query_panels` to check the same against a single power cycle in CI.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightsout_lab.binaries import repo_root
from lightsout_lab.demo import Narrator, Scenario, _samples, scenario_lab
from lightsout_lab.process import free_port

SCRAPE_SECONDS = 2
RATE_INTERVAL = "30s"


@dataclass(frozen=True)
class PanelResult:
    title: str
    expr: str
    series: int
    points: int


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def grafana_expr(expr: str, range_seconds: int) -> str:
    """The query as Grafana sends it with every variable at "All"."""
    for variable in ("$namespace", "$group"):
        expr = expr.replace(variable, ".*")
    return expr.replace("$__range", f"{range_seconds}s").replace("$__rate_interval", RATE_INTERVAL)


def prometheus_binary() -> Path:
    """Debian's Prometheus server, installed first when missing (apt, like the other tools)."""
    script = repo_root() / "tools" / "ci" / "system-packages.sh"
    installed = subprocess.run(
        ["bash", str(script), "prometheus"], capture_output=True, text=True, check=False
    )
    found = shutil.which("prometheus")
    if installed.returncode != 0 or found is None:
        raise RuntimeError(f"installing prometheus failed:\n{installed.stderr[-2000:]}")
    return Path(found)


class Prometheus:
    """A Prometheus server scraping one target every `scrape_seconds`, its data in a temporary
    directory."""

    def __init__(self, binary: Path, target: str, scrape_seconds: int = SCRAPE_SECONDS) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="lightsout-prometheus-"))
        self.port = free_port()
        self.scrape_seconds = scrape_seconds
        config = {
            "global": {
                "scrape_interval": f"{scrape_seconds}s",
                "evaluation_interval": f"{scrape_seconds}s",
            },
            "scrape_configs": [
                {"job_name": "lightsout", "static_configs": [{"targets": [target]}]}
            ],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))
        self.log = (self.workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: see {self.workdir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("prometheus not ready")

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def __enter__(self) -> Prometheus:
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def query_panels(prom: Prometheus, dashboard: dict[str, Any], start: float) -> list[PanelResult]:
    end = time.time()
    range_seconds = max(int(end - start), 60)
    results = []
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            expr = grafana_expr(target["expr"], range_seconds)
            data = prom.api(
                "query_range",
                query=expr,
                start=f"{start:.3f}",
                end=f"{end:.3f}",
                step=str(prom.scrape_seconds),
            )
            values = [
                float(v)
                for series in data["result"]
                for _, v in series["values"]
                if math.isfinite(float(v))
            ]
            results.append(PanelResult(panel["title"], expr, len(data["result"]), len(values)))
    return results


def check_dashboard(prometheus: Path | None, dashboard_path: Path) -> int:
    dashboard = json.loads(dashboard_path.read_text())
    objects, nodes = _samples(repo_root())
    lab, plugged = scenario_lab(objects)
    lab.start()
    assert lab.cluster is not None and lab.operator is not None
    target = urllib.parse.urlsplit(lab.operator.metrics_url).netloc
    prom = Prometheus(prometheus or prometheus_binary(), target)
    try:
        prom.wait_ready()
        start = time.time()
        narrator = Narrator(lab.cluster)
        narrator.say(f"Prometheus {prom.url} scrapes the operator at {target}")
        Scenario(narrator, lab, plugged).run([node["metadata"]["name"] for node in nodes])
        time.sleep(3 * SCRAPE_SECONDS)  # the last changes scraped
        health = prom.api("targets")["activeTargets"]
        narrator.say(f"scrape target health: {[t['health'] for t in health]}")
        results = query_panels(prom, dashboard, start)
    finally:
        prom.stop()
        lab.stop()
    empty = [r for r in results if r.points == 0]
    print(f"\n{'panel':<42}{'series':>7}{'points':>8}  query")
    for r in results:
        mark = "NO DATA " if r.points == 0 else ""
        print(f"{r.title[:41]:<42}{r.series:>7}{r.points:>8}  {mark}{r.expr[:90]}")
    print(
        f"\n{len(results) - len(empty)} of {len(results)} queries "
        f"({len({r.title for r in results})} panels) returned data"
    )
    return 1 if empty else 0
