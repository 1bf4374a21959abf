"""Runs `lightsout run` as a real subprocess against a local cluster, with its log kept.

The demo and the tests use it to start, kill (SIGKILL, to prove restart safety) and restart
the operator, and to
read its structured log lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightsout_lab import Cluster
from lightsout_lab.process import free_port


@dataclass
class OperatorProcess:
    cluster: Cluster
    namespaces: tuple[str, ...]
    log_dir: Path
    identity: str = "operator-a"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Where this process serves Prometheus `/metrics` (a free port per start).
    metrics_url: str = ""
    #: Debug logging, which the tests read; a benchmark runs the operator as users do.
    verbose: bool = True

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.identity}.log"

    def start(self, timeout: float = 120.0) -> None:
        # Healthy within seconds on an idle machine; importing kopf and the client while three
        # labs run Ansible can take a minute.
        port, metrics = free_port(), free_port()
        argv = [sys.executable, "-m", "lightsout.cli", "run", *(["--verbose"] * self.verbose)]
        argv += [f"--namespace={ns}" for ns in self.namespaces]
        argv += [f"--liveness=http://127.0.0.1:{port}/healthz"]
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        env = {
            **self.cluster.env(),
            "LIGHTSOUT_IDENTITY": self.identity,
            "LIGHTSOUT_METRICS_ADDRESS": f"127.0.0.1:{metrics}",
            **self.extra_env,
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        self.starts += 1
        self._wait_healthy(port, timeout)

    def _wait_healthy(self, port: int, timeout: float) -> None:
        import urllib.error
        import urllib.request

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"operator not healthy in {timeout}s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: the operator gets no chance to clean up, as in a node crash."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def records(self) -> list[dict[str, Any]]:
        """The operator's JSON log lines (non-JSON lines are skipped)."""
        out = []
        for line in self.text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def webhook_env(cluster: Cluster, port: int, configuration: str) -> dict[str, str]:
    """Environment of an operator serving its admission webhooks on 127.0.0.1:`port` with the
    lab's API server certificate (the API server trusts its CA), writing the webhook
    configuration `configuration` itself, as in dev."""
    pki = cluster.directory / "pki"
    return {
        "LIGHTSOUT_WEBHOOK_ADDRESS": f"127.0.0.1:{port}",
        "LIGHTSOUT_WEBHOOK_TLS_CERT": str(pki / "apiserver.crt"),
        "LIGHTSOUT_WEBHOOK_TLS_KEY": str(pki / "apiserver.key"),
        "LIGHTSOUT_WEBHOOK_TLS_CA": str(pki / "ca.crt"),
        "LIGHTSOUT_WEBHOOK_URL": f"https://127.0.0.1:{port}",
        "LIGHTSOUT_WEBHOOK_CONFIGURATION": configuration,
        # The lab's 2 cores may run three labs at once: an answer later than the default 5 s
        # is let through without the webhook (failurePolicy Ignore), which a test would read
        # as a label the webhook failed to merge.
        "LIGHTSOUT_WEBHOOK_TIMEOUT_SECONDS": "15",
    }
