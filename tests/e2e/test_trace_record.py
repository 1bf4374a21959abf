"""`lightsout trace record` against a live cluster, and `lightsout simulate` replaying what it
wrote.

Two emulated Redfish servers in a `builtin` Group, the operator as a real process, the real
kube-scheduler and kwok running the pods: while `lightsout trace record` runs as a subprocess,
a small demo-like workload arrives (a bare pod, a two-replica Deployment, a Job, and a CronJob
with a one-minute schedule whose run is started at once with `kubectl create job --from`), the
autoscaler powers a machine on for it; then the bare pod and the Deployment are deleted and
the machine powers off again. The recorder is stopped with SIGTERM, as a person's Ctrl-C
would; then checked is what a user reads in the trace (the pods with their requests, run
times and origin, the CronJob, the machines with the boot and shutdown times the operator
learned of that power cycle) and what `lightsout simulate DIR -o json` reports on it. A
second, 2-second recording checks that `--duration` ends a recording by itself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from lightsout_lab import Cluster
from lightsout_lab.operator_process import OperatorProcess
from tests.e2e.autoscaling import Fleet, diagnosed, lightsout, pod, running
from tests.e2e.conftest import PATIENCE, wait_phase
from tests.harness import fleet
from tests.harness.wait import get_json, wait_for

SIZES = {
    "small": {"cpu": "2", "memory": "4Gi", "watts": 30},
    "large": {"cpu": "8", "memory": "16Gi", "watts": 80},
}
TOLERATIONS = pod("x", "1")["spec"]["tolerations"]


def template(cpu: str, restart: str = "Always") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "w"}},
        "spec": {
            "restartPolicy": restart,
            "tolerations": TOLERATIONS,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "env": [{"name": "TOKEN", "value": "do-not-record-me"}],
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ],
        },
    }


def workload() -> list[dict[str, Any]]:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "w"}},
            "template": template("250m"),
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {"template": template("250m", "Never")},
    }
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "*/1 * * * *",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": template("250m", "Never")}},
        },
    }
    return [pod("solo", "500m"), deployment, job, cronjob]


def test_a_recorded_workload_is_written_as_a_trace_that_simulate_replays(
    crds: Cluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    two = Fleet(namespace, SIZES)
    small = two.name("small")
    with running(kube_api, crds, two) as (bmc, _), diagnosed(crds, namespace):
        group = fleet.group(
            "autoscaled",
            autoscaler="builtin",
            scaleDown={"unneededSeconds": 5, "stabilizationWindowSeconds": 0},
        )
        fleet.apply(crds, namespace, [*fleet.bmc_secrets(bmc), group, *two.nodes(bmc)])
        for short in SIZES:
            wait_phase(crds, namespace, two.name(short), "Off")

        out = tmp_path / "recorded"
        argv = ["trace", "record", "--duration", "10m", "-n", namespace, "-o", str(out)]
        recorder = subprocess.Popen(
            [sys.executable, "-m", "lightsout.cli", *argv],
            env=crds.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert recorder.stdout is not None
            assert recorder.stdout.readline().startswith("recording namespace(s)")
            fleet.apply(crds, namespace, workload())
            crds.kubectl("create", "job", "nightly-now", "--from=cronjob/nightly", "-n", namespace)

            def pods() -> dict[str, dict[str, Any]]:
                listed = get_json(crds, "pods", "-n", namespace)["items"]
                return {p["metadata"]["name"]: p for p in listed}

            def phases() -> dict[str, str]:
                return {name: p["status"].get("phase", "") for name, p in pods().items()}

            def ran() -> bool:
                now = phases()
                jobs_done = [p for n, p in now.items() if n.startswith(("migrate", "nightly-now"))]
                web = [p for n, p in now.items() if n.startswith("web-")]
                return (
                    now.get("solo") == "Running"
                    and web == ["Running", "Running"]
                    and sorted(jobs_done) == ["Succeeded", "Succeeded"]
                )

            wait_for(ran, PATIENCE, "the workload running on a powered-on machine")
            # Every pod fits the small machine: it was the one powered on.
            assert get_json(crds, "pod", "solo", "-n", namespace)["spec"]["nodeName"] == small
            # The workload goes away, and so does the machine: a whole power cycle recorded.
            crds.kubectl("delete", "pod", "solo", "-n", namespace, "--wait=false")
            crds.kubectl("delete", "deployment", "web", "-n", namespace)
            # A CronJob due every minute keeps its machine on (pre-warming): suspended, it
            # announces no further run.
            body = json.dumps({"spec": {"suspend": True}})
            crds.kubectl("patch", "cronjob", "nightly", "-n", namespace, "--type=merge", "-p", body)
            learned = wait_phase(crds, namespace, small, "Off")["learned"]
            recorder.send_signal(signal.SIGTERM)
            stdout, stderr = recorder.communicate(timeout=120)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.communicate()  # reaped and its pipes closed, not left to a later test
        assert recorder.returncode == 0, stderr
        assert f"-> {out}" in stdout, stdout

        # The pods that ran, with their requests and where they came from; the CronJob's run
        # is not a pod line but the CronJob's run time.
        lines = [json.loads(line) for line in (out / "pods.jsonl").read_text().splitlines()]
        by_name = {line["name"]: line for line in lines}
        web = [line for name, line in by_name.items() if name.startswith("web-")]
        migrate = [line for name, line in by_name.items() if name.startswith("migrate-")]
        assert sorted(by_name) == sorted(["solo", *(w["name"] for w in web), migrate[0]["name"]])
        assert [w["owner"] for w in web] == [{"kind": "ReplicaSet", "name": "web"}] * 2
        assert migrate[0]["owner"] == {"kind": "Job", "name": "migrate"}
        assert "owner" not in by_name["solo"]
        requests = {
            n: line["spec"]["containers"][0]["resources"]["requests"]["cpu"]
            for n, line in by_name.items()
        }
        assert requests["solo"] == "500m" and requests[web[0]["name"]] == "250m"
        # From their start to their deletion.
        assert all(by_name[n]["runSeconds"] > 0 for n in ("solo", *(w["name"] for w in web)))
        assert "do-not-record-me" not in "".join(p.read_text() for p in out.iterdir())

        meta = yaml.safe_load((out / "trace.yaml").read_text())
        cronjobs = list(yaml.safe_load_all((out / "cronjobs.yaml").read_text()))
        assert [c["metadata"]["name"] for c in cronjobs if c] == ["nightly"]
        assert cronjobs[-1]["spec"]["schedule"] == "*/1 * * * *"
        assert f"{namespace}/nightly" in meta["cronjobs"]  # its observed run time
        machines = [m for m in yaml.safe_load_all((out / "machines.yaml").read_text()) if m]
        assert sorted((m["kind"], m["metadata"]["name"]) for m in machines) == sorted(
            [("Group", "autoscaled"), *(("Node", two.name(s)) for s in SIZES)]
        )
        assert meta["machines"][small] == {
            "powerOnSeconds": 0,
            "bootSeconds": learned["bootSeconds"],
            "shutdownSeconds": learned["shutdownSeconds"],
        }
        assert two.name("large") not in meta["machines"]  # never cycled: nothing learned

        replayed = lightsout(crds, "simulate", str(out), "-o", "json", "--no-baseline")
        assert replayed.returncode == 0, replayed.stderr
        report = json.loads(replayed.stdout)
        assert report["trace"] == "recorded"
        assert report["waits"]["other"]["pods"] == len(lines)
        assert report["waits"]["other"]["started"] == len(lines)
        # A recording of a minute or two uses a few watt-hours (kWh rounded to 3 places): the
        # share saved is the figure that shows the replay powered the small machine on for the
        # workload and left the large one off, as the cluster did.
        energy = report["energy"]
        assert energy["alwaysOnKWh"] > 0 and energy["usedKWh"] <= energy["alwaysOnKWh"], energy
        assert 0.3 < energy["savedShare"] < 1, energy
        power_ons = {m["name"]: m["powerOns"] for m in report["machines"]}
        assert power_ons == {small: 1, two.name("large"): 0}, power_ons
        print(f"recorded {meta['durationSeconds']} s, {len(lines)} pods; replay: {energy}")

        # --duration ends a recording by itself; the trace then holds the machines.
        brief = lightsout(
            crds,
            "trace",
            "record",
            "--duration",
            "2s",
            "-n",
            namespace,
            "-o",
            str(tmp_path / "short"),
        )
        assert brief.returncode == 0, brief.stderr
        assert (tmp_path / "short" / "machines.yaml").read_text().count("kind: Node") == 2
