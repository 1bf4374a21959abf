"""`lightsout demo` / `make demo`: the whole product on one machine, narrated.

Starts the local control plane, installs the CRDs, applies the samples from deploy/samples,
runs the operator and prints what a user would look at (`kubectl get lightsout`), then cleans
up. Later stages add emulated machines and the autoscaling scenario.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from lightsout.devcluster import Cluster
from lightsout.devcluster.binaries import repo_root
from lightsout.devcluster.operator import OperatorProcess

NAMESPACE = "lightsout-demo"


def say(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)


def _all_observed(cluster: Cluster) -> bool:
    items = json.loads(cluster.kubectl("get", "lsn,lsg", "-n", NAMESPACE, "-o", "json").stdout)
    return bool(items["items"]) and all(
        (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
        for obj in items["items"]
    )


def run_demo(keep: bool = False) -> int:
    started = time.monotonic()
    root = repo_root()
    workdir = Path(tempfile.mkdtemp(prefix="lightsout-demo-"))
    cluster = Cluster(directory=workdir / "cluster")
    say(
        "starting the local control plane (etcd, kube-apiserver, controller-manager, "
        "scheduler, kwok)",
        started,
    )
    cluster.start()
    operator = OperatorProcess(cluster=cluster, namespaces=(NAMESPACE,), log_dir=workdir)
    try:
        say(f"control plane up at {cluster.server}", started)
        cluster.kubectl("apply", "--server-side", "-f", str(root / "crds"))
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "groups.lightsout.dev",
            "nodes.lightsout.dev",
        )
        say("CRDs installed", started)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(root / "deploy" / "samples"))
        say("samples applied (deploy/samples)", started)
        operator.start()
        say("operator running", started)
        end = time.monotonic() + 60
        while not _all_observed(cluster):
            if time.monotonic() > end:
                say("the operator did not observe every resource in 60s", started)
                print(operator.tail())
                return 1
            time.sleep(0.5)
        say("kubectl get lightsout:", started)
        print(cluster.kubectl("get", "lightsout", "-n", NAMESPACE).stdout, flush=True)
        if keep:
            print(f"cluster left running: export KUBECONFIG={cluster.kubeconfig}")
            return 0
    finally:
        if not keep:
            operator.stop()
            cluster.destroy()
            say("cleaned up", started)
    return 0
