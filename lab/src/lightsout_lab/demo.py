"""`lightsout-lab demo` / `make demo`: the built-in autoscaler on one machine, narrated.

Starts the local control plane, a Redfish BMC emulator (sushy-tools) for the three sample
servers (4, 16 and 32 cores; 35, 110 and 180 W), the stand-in kubelet that runs action Jobs, the
machine simulator that registers a server's core Node once its BMC says On, and the operator.
It applies deploy/samples with every server Off, and adds to their Group a mini PC without a BMC
behind a Shelly plug (the lab's plug emulator: OS shutdown over SSH first, then the relay). A
small job comes first: the planner switches the plug on, the mini PC being the machine that fits
at the lowest energy cost; then a workload that fits no small machine: the planner powers on the
server that fits at the lowest cost, then a second one when the workload grows; when the work goes
away the machines drain and power off after the Group's unneeded time, the mini PC's OS shut down
before its plug is switched off. Then a short tour of the other drivers, machines the autoscaler
leaves alone (Group `lab-extras`, `autoscaler: none`): an IPMI server (OpenIPMI's ipmi_sim), a
Wake-on-LAN + SSH mini PC (a magic-packet listener and an sshd on loopback) and an Ephemeral
Proxmox VM (fakepve: cloned on power-on, destroyed on power-off) are patched On together, then
Off, each emulator saying what it saw. Prints a timeline and the kubectl commands to look
around; ends by itself within a few minutes and cleans up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from lightsout_lab import Cluster
from lightsout_lab.binaries import repo_root
from lightsout_lab.extras import (
    EXTRAS_GROUP,
    EphemeralVm,
    ExtraMachine,
    IpmiServer,
    PluggedMiniPc,
    WolMiniPc,
)
from lightsout_lab.lab import Lab

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

    def lightsout(self, *args: str) -> None:
        """Run the operator's own CLI as a person would, and print what it prints."""
        print(f"$ lightsout {' '.join(args)}")
        argv = [sys.executable, "-m", "lightsout.cli", *args]
        done = subprocess.run(
            argv, env=self.cluster.env(), capture_output=True, text=True, check=False, timeout=60
        )
        print(done.stdout + done.stderr, flush=True)

    def metrics(self, url: str, prefix: str) -> None:
        """The operator's /metrics lines of one family, as Prometheus would scrape them."""
        print(f"$ curl -s {url} | grep ^{prefix}")
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        print("\n".join(line for line in text.splitlines() if line.startswith(prefix)), flush=True)


DEMO_UNNEEDED_SECONDS = 20
WORKLOAD = "photo-indexer"
#: A small job that fits the mini PC behind the plug, the cheapest machine of the Group.
SMALL_JOB = "thumbnailer"
#: The demo's pods carry this label (whichever Deployment made them).
DEMO_LABEL = "lightsout.dev/demo"


def _samples(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sample objects, every Node desired Off, with timers short enough for a demo."""
    objects: list[dict[str, Any]] = []
    for path in sorted((root / "deploy" / "samples").glob("*.yaml")):
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    nodes = [obj for obj in objects if obj["kind"] == "Node"]
    for node in nodes:
        node["spec"]["desiredPowerState"] = "Off"
        # sushy-tools ignores a graceful shutdown: the order is forced after this long.
        node["spec"]["driver"]["redfish"]["gracefulShutdownSeconds"] = 5
    for group in (obj for obj in objects if obj["kind"] == "Group"):
        # Production defaults wait 10 minutes before powering an idle machine off.
        group["spec"]["scaleDown"] = {
            **group["spec"].get("scaleDown", {}),
            "unneededSeconds": DEMO_UNNEEDED_SECONDS,
            "stabilizationWindowSeconds": 0,
        }
    return objects, nodes


def _credentials(objects: Iterable[dict[str, Any]]) -> tuple[str, str]:
    secret = next(obj for obj in objects if obj["kind"] == "Secret")
    return secret["stringData"]["username"], secret["stringData"]["password"]


def _workload(
    replicas: int, name: str = WORKLOAD, cpu: str = "10", memory: str = "24Gi"
) -> dict[str, Any]:
    """A Deployment; by default pods of 10 cores and 24Gi, too big for the small machines."""
    labels = {"app": name, DEMO_LABEL: "workload"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "work",
                            "image": f"registry.example/{name}:1.0",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ]
                },
            },
        },
    }


class Scenario:
    """The demo's steps, each narrated, each waiting for what a user would wait for."""

    def __init__(self, narrator: Narrator, lab: Lab, plugged: PluggedMiniPc) -> None:
        self.narrator = narrator
        self.lab = lab
        self.plugged = plugged
        self.pods: dict[str, tuple[str, str]] = {}

    def poll_pods(self) -> list[dict[str, Any]]:
        out = self.narrator.cluster.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"{DEMO_LABEL}=workload", "-o", "json"
        ).stdout
        pods: list[dict[str, Any]] = json.loads(out)["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            phase = str((pod.get("status") or {}).get("phase"))
            node = str(pod["spec"].get("nodeName") or "-")
            if self.pods.get(name) != (phase, node):
                self.pods[name] = (phase, node)
                where = f"on {node}" if node != "-" else "waiting: no node has room"
                self.narrator.say(f"  pod {name:<32} {phase:<9} {where}")
        return pods

    def until(self, what: str, done: Callable[[list[dict[str, Any]]], bool]) -> None:
        end = time.monotonic() + PHASE_TIMEOUT
        while time.monotonic() < end:
            self.narrator.poll()
            if done(self.poll_pods()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {PHASE_TIMEOUT:.0f}s waiting for {what}")

    def running(self, count: int) -> None:
        self.until(
            f"{count} running pods",
            lambda pods: sum(p.get("status", {}).get("phase") == "Running" for p in pods) == count,
        )

    def machines_in(self, phase: str, names: Iterable[str]) -> None:
        wanted = set(names)

        def done(_: list[dict[str, Any]]) -> bool:
            machines = self.narrator.machines()
            return all((machines[n].get("status") or {}).get("phase") == phase for n in wanted)

        self.until(f"{', '.join(sorted(wanted))} {phase}", done)

    def kubectl(self, *args: str, quiet: bool = False) -> None:
        self.narrator.say(f"$ kubectl {' '.join(args)}")
        out = self.narrator.cluster.kubectl(*args, "-n", NAMESPACE).stdout
        if not quiet:
            print(out, flush=True)

    def run(self, machines: list[str]) -> None:
        say = self.narrator.say
        say("every server is Off; nothing runs:")
        self.machines_in("Off", machines)
        self.narrator.show("get", "lightsout", "-n", NAMESPACE)

        say(
            f"a small job arrives: 1 pod asking for 1 core and 1Gi ({SMALL_JOB}); the machine "
            f"that fits at the lowest energy cost is {self.plugged.name}, a mini PC without a "
            "BMC behind a smart plug"
        )
        self.apply(_workload(1, SMALL_JOB, cpu="1", memory="1Gi"))
        self.running(1)
        say(f"  {self.plugged.name:<10} {self.plugged.report()}")

        say(f"a workload arrives: 1 pod asking for 10 cores and 24Gi ({WORKLOAD})")
        self.apply(_workload(1))
        self.running(2)
        self.narrator.show("get", "lightsout,nodes", "-n", NAMESPACE)
        self.events("Pod")

        say("it grows to 3 pods: the running server has room for none of the new ones")
        self.kubectl("scale", "deployment", WORKLOAD, "--replicas=3", quiet=True)
        self.running(4)
        self.narrator.show("get", "lightsout,nodes", "-n", NAMESPACE)

        say(
            f"the work goes away: after {DEMO_UNNEEDED_SECONDS}s unneeded, each machine "
            "drains and powers off (the mini PC: its OS shut down, then its plug)"
        )
        for name in (SMALL_JOB, WORKLOAD):
            self.kubectl("delete", "deployment", name, "--wait=false", quiet=True)
        self.machines_in("Off", [*machines, self.plugged.name])
        self.narrator.show("get", "lightsout", "-n", NAMESPACE)
        self.events("Node")
        bmc = self.lab.bmc
        assert bmc is not None
        orders = Counter(str(r.reset_type) for r in bmc.power_requests())
        # A graceful shutdown the OS does not finish in gracefulShutdownSeconds is followed by
        # ForceOff: two orders for one power-off, by design.
        say(
            f"power orders the BMC received in all: {sum(orders.values())} ("
            + ", ".join(f"{kind} x{count}" for kind, count in sorted(orders.items()))
            + ")"
        )
        say(f"  {self.plugged.name:<10} {self.plugged.report()}")

    def apply(self, obj: dict[str, Any]) -> None:
        self.narrator.say(f"$ kubectl apply -f -   # Deployment {obj['metadata']['name']}")
        self.narrator.cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def events(self, kind: str) -> None:
        self.narrator.show(
            "get",
            "events",
            "-n",
            NAMESPACE,
            "--field-selector",
            f"involvedObject.kind={kind}",
            "--sort-by=.lastTimestamp",
        )


#: Three Ansible runs share the CPU during the tour: a kubectl every second, not every half.
TOUR_POLL_SECONDS = 1.0
DRIVER_TITLES = {
    "ipmi": "IPMI, ipmi_sim",
    "wol": "Wake-on-LAN + SSH, magic-packet listener and sshd",
    "shelly": "smart plug, Shelly Gen2 emulator and sshd",
    "proxmox": "Proxmox VM, Ephemeral, fakepve",
}


class DriverTour:
    """The other drivers: every machine patched On at once, then Off, its emulator quoted."""

    def __init__(self, narrator: Narrator, extras: Sequence[ExtraMachine]) -> None:
        self.narrator = narrator
        self.extras = list(extras)

    def run(self) -> None:
        say = self.narrator.say
        names = ", ".join(
            f"{m.name} ({DRIVER_TITLES.get(m.driver, m.driver)})" for m in self.extras
        )
        say(
            f"the other drivers: {names}; Group {EXTRAS_GROUP} has autoscaler none, so only "
            "kubectl powers them. What each emulator reports:"
        )
        self.report()
        began = time.monotonic()
        for state, phase in (("On", "Ready"), ("Off", "Off")):
            seconds = self.switch(state, phase)
            times = ", ".join(f"{name} {took:.1f}s" for name, took in seconds.items())
            say(f"all {phase} ({times} after the patch); what each emulator reports:")
            self.report()
            if state == "On":
                self.narrator.show("get", "lsn", *seconds, "-n", NAMESPACE)
        say(f"the other drivers: On and Off again in {time.monotonic() - began:.0f}s")

    def report(self) -> None:
        for machine in self.extras:
            self.narrator.say(f"  {machine.name:<10} {machine.report()}")

    def switch(self, state: str, phase: str) -> dict[str, float]:
        """Patch every machine to `state`; seconds until each reached `phase`."""
        body = json.dumps({"spec": {"desiredPowerState": state}}, separators=(",", ":"))
        started: dict[str, float] = {}
        for machine in self.extras:
            self.narrator.say(
                f"$ kubectl patch lsn {machine.name} -n {NAMESPACE} --type merge -p '{body}'"
            )
            started[machine.name] = time.monotonic()
            self.narrator.cluster.kubectl(
                "patch", "lsn", machine.name, "-n", NAMESPACE, "--type", "merge", "-p", body
            )
        reached: dict[str, float] = {}
        end = time.monotonic() + PHASE_TIMEOUT
        while len(reached) < len(started):
            if time.monotonic() > end:
                late = sorted(set(started) - set(reached))
                raise RuntimeError(f"{', '.join(late)} not {phase} within {PHASE_TIMEOUT:.0f}s")
            machines = self.narrator.poll()
            now = time.monotonic()
            for name in started.keys() - reached.keys():
                current = (machines.get(name, {}).get("status") or {}).get("phase")
                if current == phase:
                    reached[name] = now - started[name]
                elif current == "Failed":
                    raise RuntimeError(f"{name} Failed on its way to {phase}")
            time.sleep(TOUR_POLL_SECONDS)
        return {name: reached[name] for name in started}


def scenario_lab(
    objects: list[dict[str, Any]], tour: Sequence[ExtraMachine] = ()
) -> tuple[Lab, PluggedMiniPc]:
    """The lab `Scenario` runs in: the sample objects, a plugged mini PC added to their Group,
    and the `tour`'s machines (in the extras' Group); not started."""
    username, password = _credentials(objects)
    homelab = next(obj for obj in objects if obj["kind"] == "Group")
    plugged = PluggedMiniPc(group=homelab["metadata"]["name"])
    # One more machine in the samples' Group: room for it in maxNodes.
    servers = sum(obj["kind"] == "Node" for obj in objects)
    homelab["spec"]["maxNodes"] = homelab["spec"].get("maxNodes", servers) + 1
    lab = Lab(
        objects=objects,
        namespace=NAMESPACE,
        username=username,
        password=password,
        extras=[plugged, *tour],
    )
    return lab, plugged


def run_demo(keep: bool = False) -> int:
    objects, nodes = _samples(repo_root())
    names = [node["metadata"]["name"] for node in nodes]
    print(
        "Lights-Out demo: a local control plane, three emulated Redfish servers of different "
        "sizes and wattages and a mini PC behind a smart plug, the operator with its built-in "
        "autoscaler; then an IPMI server, "
        "a Wake-on-LAN mini PC and a Proxmox VM, powered by hand."
    )
    tour: list[ExtraMachine] = [IpmiServer(), WolMiniPc(), EphemeralVm(NAMESPACE)]
    lab, plugged = scenario_lab(objects, tour)
    lab.start()
    assert lab.cluster is not None and lab.bmc is not None and lab.operator is not None
    narrator = Narrator(lab.cluster)
    try:
        narrator.say(
            f"control plane up at {lab.cluster.server}; Redfish emulator (sushy-tools) "
            f"for {len(nodes)} servers at {lab.bmc.endpoint}; a Shelly plug emulator for "
            f"{plugged.name}; ipmi_sim, a Wake-on-LAN listener with an sshd, and fakepve for the "
            "other drivers; operator running"
        )
        Scenario(narrator, lab, plugged).run(names)
        DriverTour(narrator, tour).run()
        narrator.say("what the operator reports: its status table and its Prometheus figures")
        narrator.lightsout("status", "-n", NAMESPACE)
        narrator.metrics(lab.operator.metrics_url, "lightsout_actions_total")
        if not keep:
            return 0
        # Only while the cluster stays up: without --keep it is torn down right after this,
        # and a KUBECONFIG path printed then would point at nothing.
        print(
            "The cluster stays up (--keep); to look around:\n"
            f"  export KUBECONFIG={lab.cluster.kubeconfig}\n"
            f"  kubectl get lightsout,nodes -n {NAMESPACE}\n"
            f"  kubectl describe lsn mid-box -n {NAMESPACE}\n"
            f"  kubectl get events -n {NAMESPACE} --field-selector involvedObject.name=pve-burst\n"
            f"  .venv/bin/lightsout plan -n {NAMESPACE}\n"
            f"  kubectl get events -n {NAMESPACE} --sort-by=.lastTimestamp",
            flush=True,
        )
        return 0
    except Exception as exc:
        narrator.say(f"demo failed: {exc}")
        print(lab.operator.tail())
        return 1
    finally:
        if not keep:
            lab.stop()
            narrator.say(
                "cleaned up (`lightsout-lab demo --keep` leaves the cluster running, and prints "
                "how to reach it)"
            )
