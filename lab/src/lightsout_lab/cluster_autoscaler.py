"""A real cluster-autoscaler (its `externalgrpc` cloud provider only) run against the lab.

`find_cluster_autoscaler` returns the binary: `LIGHTSOUT_CLUSTER_AUTOSCALER` when set, else the
repository's `tools/cluster-autoscaler/build.sh` builds it into the versioned cache outside the
work tree (minutes cold, instant when cached). `ClusterAutoscaler` runs it as a subprocess
against a local cluster and the operator's gRPC server, with plaintext or mTLS, its log kept
in a file. Used by the end-to-end tests of the externalgrpc provider and its benchmark.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from lightsout.planning.types import STARTUP_TAINT_KEY
from lightsout_lab.binaries import repo_root
from lightsout_lab.cluster import Cluster
from lightsout_lab.process import free_port, read_log, terminate


class ClusterAutoscalerMissingError(RuntimeError):
    """No cluster-autoscaler binary could be found or built."""


@functools.cache
def find_cluster_autoscaler() -> Path:
    configured = os.environ.get("LIGHTSOUT_CLUSTER_AUTOSCALER")
    if configured:
        path = Path(configured)
    else:
        script = repo_root() / "tools" / "cluster-autoscaler" / "build.sh"
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ClusterAutoscalerMissingError(
                f"building cluster-autoscaler failed:\n{proc.stderr[-4000:]}"
            )
        path = Path(proc.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        raise ClusterAutoscalerMissingError(f"{path} is not an executable")
    return path


def service_account_kubeconfig(
    cluster: Cluster, path: Path, namespace: str = "kube-system", name: str = "cluster-autoscaler"
) -> Path:
    """A kubeconfig with a fresh token of ServiceAccount `namespace/name` (which must exist),
    so cluster-autoscaler runs with exactly the rights its RBAC manifests grant."""
    token = cluster.kubectl(
        "create", "token", name, "-n", namespace, "--duration=2h"
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority": str(cluster.directory / "pki" / "ca.crt"),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": name}}],
        "current-context": "lab",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Tls:
    """Client side of mTLS: its certificate and key, and the CA of the server's certificate."""

    cert: Path
    key: Path
    ca: Path


@dataclass
class ClusterAutoscaler:
    """cluster-autoscaler with `--cloud-provider=externalgrpc` against `address`."""

    cluster: Cluster
    address: str
    workdir: Path
    tls: Tls | None = None
    #: Whose rights it runs with: the cluster's admin kubeconfig unless given (see
    #: `service_account_kubeconfig`).
    kubeconfig: Path | None = None
    #: Flags added to (or replacing) the defaults below, e.g. `--scan-interval=10s`; of one
    #: given twice, cluster-autoscaler takes the last (a list flag, every one).
    flags: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / "cluster-autoscaler.log"

    def cloud_config(self) -> Path:
        lines = [f'address: "{self.address}"', "grpc_timeout: 10s"]
        if self.tls is not None:
            lines += [
                f'cert: "{self.tls.cert}"',
                f'key: "{self.tls.key}"',
                f'cacert: "{self.tls.ca}"',
            ]
        path = self.workdir / "cloud-config.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def argv(self) -> list[str]:
        defaults = {
            "--cloud-provider": "externalgrpc",
            "--cloud-config": str(self.cloud_config()),
            "--kubeconfig": str(self.kubeconfig or self.cluster.kubeconfig),
            "--leader-elect": "false",
            # Its metrics/health server otherwise listens on :8085 on every interface.
            "--address": f"127.0.0.1:{free_port()}",
            "--scan-interval": "2s",
            "--max-node-provision-time": "3m",
            # A Node carrying Lights-Out's startup taint is on its way, not unusable capacity.
            "--startup-taint": STARTUP_TAINT_KEY,
            "--scale-down-delay-after-add": "0s",
            "--scale-down-delay-after-failure": "5s",
            "--skip-nodes-with-system-pods": "false",
            "--skip-nodes-with-local-storage": "false",
            "--max-graceful-termination-sec": "5",
            "--v": "4",
        }
        given = {flag.partition("=")[0] for flag in self.flags}
        kept = [f"{k}={v}" for k, v in defaults.items() if k not in given]
        # The given flags as they are, repeats included: cluster-autoscaler collects a repeated
        # list flag (`--balancing-ignore-label`), and a flag without a value is a boolean one.
        return [str(find_cluster_autoscaler()), *kept, *self.flags]

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError(f"cluster-autoscaler exited at once:\n{self.tail()}")
        return self

    def stop(self) -> None:
        terminate(self.proc, timeout=20)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def text(self) -> str:
        return read_log(self.log_path)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])
