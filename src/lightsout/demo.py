"""`lightsout demo` / `make demo`: the whole product on one machine, narrated.

Starts the local control plane, a Redfish BMC emulator (sushy-tools) for the three sample
machines, the stand-in kubelet that runs action Jobs, the machine simulator that registers a
machine's core Node once its BMC says On, and the operator. It applies deploy/samples (with the
BMC endpoint pointed at the emulator), then powers machines on and off with `kubectl patch`,
printing a timeline of what the operator does, and cleans up. Ends by itself in a few minutes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from lightsout.devcluster import Cluster
from lightsout.devcluster.binaries import repo_root
from lightsout.devcluster.lab import Lab
from lightsout.devcluster.sushy import SushyEmulator

NAMESPACE = "lightsout-demo"
PHASE_TIMEOUT = 300.0


class Narrator:
    """Prints timestamped lines and every phase change of the demo's machines."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.started = time.monotonic()
        self.seen: dict[str, tuple[str, str]] = {}

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    def machines(self) -> dict[str, dict[str, Any]]:
        out = self.cluster.kubectl("get", "lsn", "-n", NAMESPACE, "-o", "json").stdout
        return {item["metadata"]["name"]: item for item in json.loads(out)["items"]}

    def poll(self) -> dict[str, dict[str, Any]]:
        machines = self.machines()
        for name, obj in sorted(machines.items()):
            status = obj.get("status") or {}
            key = (str(status.get("phase")), str(status.get("reason")))
            if self.seen.get(name) != key and status.get("phase"):
                self.seen[name] = key
                self.say(f"  {name:<10} {key[0]:<12} {key[1]}: {status.get('message', '')}")
        return machines

    def wait(self, name: str, phase: str) -> None:
        end = time.monotonic() + PHASE_TIMEOUT
        while time.monotonic() < end:
            status = self.poll().get(name, {}).get("status") or {}
            if status.get("phase") == phase:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not reach {phase} within {PHASE_TIMEOUT:.0f}s")

    def show(self, *args: str) -> None:
        print(f"$ kubectl {' '.join(args)}")
        print(self.cluster.kubectl(*args).stdout, flush=True)


def _samples(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sample objects, and among them the Nodes (desired Off, brisk timeouts)."""
    objects: list[dict[str, Any]] = []
    for path in sorted((root / "deploy" / "samples").glob("*.yaml")):
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    nodes = [obj for obj in objects if obj["kind"] == "Node"]
    for node in nodes:
        node["spec"]["desiredPowerState"] = "Off"
        # Short timeouts keep the demo brisk; the emulator shuts down at once anyway.
        node["spec"]["driver"]["redfish"]["gracefulShutdownSeconds"] = 20
    return objects, nodes


def _credentials(objects: Iterable[dict[str, Any]]) -> tuple[str, str]:
    secret = next(obj for obj in objects if obj["kind"] == "Secret")
    return secret["stringData"]["username"], secret["stringData"]["password"]


def _patch(narrator: Narrator, name: str, desired: str) -> None:
    body = json.dumps({"spec": {"desiredPowerState": desired}})
    narrator.say(f"$ kubectl patch lsn {name} --type merge -p '{body}'")
    narrator.cluster.kubectl("patch", "lsn", name, "-n", NAMESPACE, "--type", "merge", "-p", body)


def power_cycle(narrator: Narrator, bmc: SushyEmulator, uuid: str, name: str) -> None:
    """Power one machine on and off by hand, showing what a user would look at."""
    _patch(narrator, name, "On")
    narrator.wait(name, "Ready")
    narrator.say(f"BMC reports {name} {bmc.power_state(uuid)}; its core Node joined the cluster:")
    narrator.show("get", "lightsout,nodes", "-n", NAMESPACE)

    _patch(narrator, name, "Off")
    narrator.wait(name, "Off")
    narrator.say(
        f"BMC reports {name} {bmc.power_state(uuid)}; "
        f"power orders the BMC received: {len(bmc.power_requests())}"
    )
    narrator.show("get", "lightsout", "-n", NAMESPACE)
    narrator.show(
        "get",
        "events",
        "-n",
        NAMESPACE,
        "--field-selector",
        f"involvedObject.name={name}",
        "--sort-by=.lastTimestamp",
    )


def run_demo(keep: bool = False) -> int:
    objects, nodes = _samples(repo_root())
    username, password = _credentials(objects)
    print("Lights-Out demo: a local control plane, three emulated Redfish servers, the operator.")
    lab = Lab(objects=objects, namespace=NAMESPACE, username=username, password=password)
    lab.start()
    assert lab.cluster is not None and lab.bmc is not None and lab.operator is not None
    narrator = Narrator(lab.cluster)
    try:
        narrator.say(
            f"control plane up at {lab.cluster.server}; Redfish emulator (sushy-tools) "
            f"for {len(nodes)} servers at {lab.bmc.endpoint}; operator running"
        )
        narrator.say("deploy/samples applied with every machine desired Off:")
        for node in nodes:
            narrator.wait(node["metadata"]["name"], "Off")
        narrator.show("get", "lightsout", "-n", NAMESPACE)
        power_cycle(narrator, lab.bmc, lab.system_id("big-box"), "big-box")
        if keep:
            print(
                f"Left running. export KUBECONFIG={lab.cluster.kubeconfig}\n"
                f"  kubectl get lightsout -n {NAMESPACE}\n"
                f"  kubectl patch lsn small-box -n {NAMESPACE} --type merge "
                '-p \'{"spec":{"desiredPowerState":"On"}}\''
            )
            return 0
    except Exception as exc:
        narrator.say(f"demo failed: {exc}")
        print(lab.operator.tail())
        return 1
    finally:
        if not keep:
            lab.stop()
            narrator.say("cleaned up")
    return 0
