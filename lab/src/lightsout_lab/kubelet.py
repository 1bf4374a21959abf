"""A stand-in kubelet for one "runner" node of the local cluster.

There is no container runtime on the machines this project is developed on, yet every hardware
action is a Kubernetes Job. This agent registers a Node (labelled and tainted so that only
Lights-Out's action Jobs land there), keeps it Ready, and runs each pod bound to it as a local
subprocess: ConfigMap, Secret, emptyDir and projected (Secret and ConfigMap sources) volumes are
written to a temporary directory (`lightsout_lab.kubelet_volumes`), env values and arguments
that start with a mount path are rewritten to it, the image's environment is emulated by
`image_env`, and the container's exit code and termination message are reported through the
pod's status, exactly where the operator reads them.

A volume whose Secret or ConfigMap (or a key its `items` name) does not exist is handled as a
real kubelet does: unless the source is `optional`, the pod stays Pending with its container
waiting in `ContainerCreating`, a `FailedMount` Warning event on the pod says why in the
kubelet's words (`MountVolume.SetUp failed for volume "credentials" : secret "bmc" not found`,
posted and counted up by `lightsout_lab.kubelet_events`), and the mount is retried with backoff
until the object exists (then the pod runs) or the pod is deleted. Pods being deleted are killed
and force-removed. Each pod's output stays in a file that the agent's kubelet API
(`lightsout_lab.kubelet_api`) serves to the API server, so `kubectl logs` and `lightsout logs`
work for its pods. Used by the end-to-end tests and by `lightsout-lab demo`.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client import ApiException

from lightsout_lab import kubelet_status as pod_status
from lightsout_lab.kubelet_api import KubeletApi
from lightsout_lab.kubelet_events import EventRecorder
from lightsout_lab.kubelet_status import now
from lightsout_lab.kubelet_volumes import (
    SECRET,
    Fetch,
    VolumeError,
    Volumes,
    pod_volumes,
    write_volumes,
)

log = logging.getLogger(__name__)

RUNNER_LABEL = "lightsout.dev/runner"
TERMINATION_MESSAGE_LIMIT = 4096
#: Operator settings that send action Jobs to the runner node (see lightsout.config).
JOB_PLACEMENT_ENV = {
    "LIGHTSOUT_JOB_NODE_SELECTOR": f"{RUNNER_LABEL}=true",
    "LIGHTSOUT_JOB_TOLERATIONS": RUNNER_LABEL,
}
#: The kubelet's event reason. Written here, not taken from the operator's code: the stand-in
#: plays Kubernetes, so an operator that reads the wrong reason must fail the tests.
MOUNT_FAILED = "FailedMount"
#: How long a pod waits before its volumes are mounted again. A real kubelet waits 500 ms after
#: a failed mount, doubling up to 2 min 2 s; here the wait starts at 1 s but stops doubling at
#: 16 s, so a pod runs within seconds of its missing Secret being created (a test or the demo
#: is not kept waiting minutes), while a pod left waiting costs the API server a few reads a
#: minute.
MOUNT_RETRY_FIRST = 1.0
MOUNT_RETRY_CAP = 16.0


def runner_image_env(repo: Path) -> dict[str, str]:
    """What the runner image's environment would be: this venv's python, the repo's playbooks."""
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin",
        "LIGHTSOUT_PLAYBOOK_DIR": str(repo / "playbooks"),
        "LIGHTSOUT_ROLES_DIR": str(repo / "roles"),
    }


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Running:
    proc: subprocess.Popen[bytes]
    workdir: Path


@dataclass
class KubeletAgent:
    """Plays kubelet for `node_name`; start() spawns the watch and heartbeat threads."""

    api: client.ApiClient
    node_name: str = "lightsout-runner"
    image_env: Mapping[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _running: dict[str, _Running] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _kubelet_api: KubeletApi | None = None
    #: Pods waiting for their volumes → what wakes them (their deletion, stop()).
    _mount_waits: dict[str, threading.Event] = field(default_factory=dict)
    _pod_threads: list[threading.Thread] = field(default_factory=list)
    _events: EventRecorder = field(init=False)
    runs: int = 0

    def __post_init__(self) -> None:
        self._events = EventRecorder(self.api, self.node_name)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KubeletAgent:
        if self.log_dir is None:  # pods' output outlives their working directories
            self.log_dir = Path(tempfile.mkdtemp(prefix="lightsout-runner-logs-"))
        self._kubelet_api = KubeletApi(
            self.pod_log, Path(tempfile.mkdtemp(prefix="lightsout-kubelet-pki-"))
        )
        self._register()
        for target in (self._heartbeat_loop, self._watch_loop):
            thread = threading.Thread(target=target, name=f"kubelet-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def pod_log(self, namespace: str, name: str) -> Path | None:
        """Where the pod's container output goes (None before start())."""
        return self.log_dir / f"{namespace}_{name}.log" if self.log_dir else None

    def waiting_for_volumes(self) -> set[str]:
        """Pods (`namespace/name`) kept from starting because a volume cannot be mounted."""
        with self._lock:
            return set(self._mount_waits)

    def stop(self) -> None:
        with self._lock:  # a pod's thread checks _stop under the lock before it waits
            self._stop.set()
            running = list(self._running.values())
            waits = list(self._mount_waits.values())
            threads = [*self._threads, *self._pod_threads]
        if self._kubelet_api is not None:
            self._kubelet_api.stop()
        for wait in waits:
            wait.set()
        for run in running:
            _terminate(run.proc)
        for thread in threads:
            thread.join(timeout=10)

    # ------------------------------------------------------------------ node
    def _node_status(self) -> dict[str, Any]:
        stamp = now()
        return {
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "lightsout dev kubelet agent is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            # Where the API server asks for pods' logs (at the InternalIP above).
            "daemonEndpoints": {
                "kubeletEndpoint": {"Port": self._kubelet_api.port if self._kubelet_api else 0}
            },
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.34.9",
                "containerRuntimeVersion": "subprocess://lightsout",
                "bootID": "",
                "kernelVersion": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        }

    def _register(self) -> None:
        core = client.CoreV1Api(self.api)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {RUNNER_LABEL: "true", "kubernetes.io/hostname": self.node_name},
            },
            # Only Lights-Out's action Jobs tolerate this taint: test workloads never land here.
            "spec": {"taints": [{"key": RUNNER_LABEL, "value": "true", "effect": "NoSchedule"}]},
        }
        try:
            core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        core.patch_node_status(self.node_name, {"status": self._node_status()})

    def _heartbeat_loop(self) -> None:
        while True:
            try:
                self._heartbeat()
            except Exception:
                log.exception("runner node heartbeat failed")
            if self._stop.wait(10):
                return

    def _heartbeat(self) -> None:
        lease: Any = {
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": 40,
                "renewTime": _micro_now(),
            },
        }
        coordination = client.CoordinationV1Api(self.api)
        try:
            coordination.patch_namespaced_lease(self.node_name, "kube-node-lease", lease)
        except ApiException as exc:
            if exc.status != 404:
                raise
            coordination.create_namespaced_lease("kube-node-lease", lease)
        client.CoreV1Api(self.api).patch_node_status(
            self.node_name, {"status": self._node_status()}
        )

    # ------------------------------------------------------------------ pods
    def _watch_loop(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    core.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={self.node_name}",
                    timeout_seconds=5,
                    _preload_content=False,
                ):
                    if self._stop.is_set():
                        break
                    self._on_pod(event["type"], event["raw_object"])
            except Exception:
                if not self._stop.is_set():
                    log.exception("runner pod watch failed; restarting")
                    self._stop.wait(1)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = _key(pod)
        if kind == "DELETED":
            self._kill(key)
            return
        if meta.get("deletionTimestamp"):
            self._kill(key)
            self._force_delete(meta["namespace"], meta["name"])
            return
        phase = (pod.get("status") or {}).get("phase", "Pending")
        thread = threading.Thread(target=self._run_pod, args=(pod,), daemon=True)
        with self._lock:
            if key in self._seen or phase != "Pending" or self._stop.is_set():
                return
            self._seen.add(key)
            self._pod_threads = [t for t in self._pod_threads if t.is_alive()]
            self._pod_threads.append(thread)
        thread.start()

    def _kill(self, key: str) -> None:
        with self._lock:
            run = self._running.get(key)
            wait = self._mount_waits.get(key)
        if wait is not None:
            wait.set()
        if run is not None:
            _terminate(run.proc)

    def _force_delete(self, namespace: str, name: str) -> None:
        try:
            client.CoreV1Api(self.api).delete_namespaced_pod(
                name, namespace, grace_period_seconds=0
            )
        except ApiException as exc:
            if exc.status != 404:
                log.warning("force delete of %s/%s failed: %s", namespace, name, exc.reason)

    def _run_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = _key(pod)
        container = pod["spec"]["containers"][0]
        started = now()
        try:
            volumes = self._mount(pod, container, started)
            if volumes is None:
                return  # deleted while it waited, or the agent stops
            workdir = Path(tempfile.mkdtemp(prefix=f"pod-{meta['name']}-"))
            mounts = write_volumes(container, volumes, workdir)
            termination_path = container.get("terminationMessagePath", "/dev/termination-log")
            local_termination = workdir / "termination-log"
            local_termination.touch()
            mounts[termination_path] = str(local_termination)
            argv = [
                _rewrite(v, mounts)
                for v in [*container.get("command", []), *container.get("args", [])]
            ]
            env = {**os.environ, **self.image_env}
            env.update(self._container_env(pod, container, mounts))
            if argv and argv[0] in {"python", "python3"}:
                env["PATH"] = self.image_env.get("PATH", env.get("PATH", ""))
        except Exception as exc:  # what this stand-in cannot emulate (a volume kind, ...)
            log.exception("cannot prepare pod %s", key)
            self._report(pod, started, 128, "ContainerCannotRun", str(exc))
            return
        self._report_running(pod, started)
        log_file = self.pod_log(meta["namespace"], meta["name"]) or workdir / "output.log"
        with log_file.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with self._lock:
                self._running[key] = _Running(proc, workdir)
                self.runs += 1
            code = proc.wait()
        with self._lock:
            self._running.pop(key, None)
        message = local_termination.read_bytes()[-TERMINATION_MESSAGE_LIMIT:].decode(
            errors="replace"
        )
        if not self._stop.is_set():
            self._report(pod, started, code, "Completed" if code == 0 else "Error", message)
        shutil.rmtree(workdir, ignore_errors=True)

    def _mount(
        self, pod: dict[str, Any], container: dict[str, Any], started: str
    ) -> Volumes | None:
        """The container's volumes once every one can be mounted; None when the pod is deleted
        or the agent stops first. Until then, as a real kubelet: the pod Pending with its
        container in ContainerCreating, a FailedMount event per volume that cannot be mounted
        (counted up on each retry), and the mount retried with backoff."""
        key = _key(pod)
        fetch = self._fetch(pod["metadata"]["namespace"])
        woken = threading.Event()
        delay = MOUNT_RETRY_FIRST
        try:
            volumes = pod_volumes(pod, container, fetch)
            if volumes.failures:
                self._report_creating(pod, started)
            while volumes.failures:
                with self._lock:
                    if self._stop.is_set():
                        return None
                    self._mount_waits[key] = woken
                for message in volumes.failures:
                    self._events.warning(pod, MOUNT_FAILED, message)
                # The pod's deletion wakes the wait; a deletion the watch missed (it restarts
                # every few seconds) is found by asking.
                if woken.wait(delay) or not self._exists(pod):
                    return None
                delay = min(delay * 2, MOUNT_RETRY_CAP)
                volumes = pod_volumes(pod, container, fetch)
            return volumes
        finally:
            with self._lock:
                self._mount_waits.pop(key, None)
            self._events.forget(pod)

    def _fetch(self, namespace: str) -> Fetch:
        """Reads the namespace's Secrets and ConfigMaps for `pod_volumes`."""
        core = client.CoreV1Api(self.api)

        def fetch(kind: str, name: str) -> dict[str, bytes] | None:
            try:
                if kind == SECRET:
                    secret = core.read_namespaced_secret(name, namespace)
                    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
                cm = core.read_namespaced_config_map(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                # Retried like any mount failure; not "not found", so not taken as final.
                raise VolumeError(f'failed to get {kind} "{name}": {exc.reason}') from exc
            return {
                **{k: v.encode() for k, v in (cm.data or {}).items()},
                **{k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()},
            }

        return fetch

    def _exists(self, pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        try:
            found = client.CoreV1Api(self.api).read_namespaced_pod(meta["name"], meta["namespace"])
        except ApiException as exc:
            return bool(exc.status != 404)  # when it cannot tell, the next retry asks again
        current = found.metadata
        return bool(current and current.uid == meta.get("uid") and not current.deletion_timestamp)

    def _container_env(
        self, pod: dict[str, Any], container: dict[str, Any], mounts: Mapping[str, str]
    ) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = _rewrite(item["value"], mounts)
            elif "fieldRef" in (item.get("valueFrom") or {}):
                env[item["name"]] = _field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        return env

    # ------------------------------------------------------------------ status
    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Report the pod's status; while the API server (or its etcd) is away, try again
        until it answers, as a real kubelet's status manager does: a pod that ended during an
        outage must not stay Running for ever."""
        meta = pod["metadata"]
        delay = 0.5
        while True:
            try:
                client.CoreV1Api(self.api).patch_namespaced_pod_status(
                    meta["name"], meta["namespace"], {"status": status}
                )
                return
            except ApiException as exc:
                if exc.status is not None and 0 < exc.status < 500:
                    if exc.status != 404:
                        log.warning(
                            "status of %s/%s: %s", meta["namespace"], meta["name"], exc.reason
                        )
                    return
                problem = str(exc.reason)
            except urllib3.exceptions.HTTPError as exc:  # no connection to the API server
                problem = str(exc)
            log.info(
                "status of %s/%s not reported yet (%s)", meta["namespace"], meta["name"], problem
            )
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, 5.0)

    def _report_creating(self, pod: dict[str, Any], started: str) -> None:
        self._patch_status(pod, pod_status.creating(pod, started))

    def _report_running(self, pod: dict[str, Any], started: str) -> None:
        self._patch_status(pod, pod_status.running(pod, started))

    def _report(
        self, pod: dict[str, Any], started: str, code: int, reason: str, message: str
    ) -> None:
        self._patch_status(pod, pod_status.terminated(pod, started, code, reason, message))


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _field(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API field: `metadata.name`, or `metadata.annotations['key']` (how an Indexed
    Job's pods get JOB_COMPLETION_INDEX)."""
    keyed = re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path)
    if keyed:
        return str(((pod.get("metadata") or {}).get(keyed[1]) or {}).get(keyed[2], ""))
    section, _, attr = path.partition(".")
    return str((pod.get(section) or {}).get(attr, ""))


def _rewrite(value: str, mounts: Mapping[str, str]) -> str:
    # Longest mount path first, so /etc/lightsout/credentials wins over /etc/lightsout.
    for path in sorted(mounts, key=len, reverse=True):
        if value == path or value.startswith(path.rstrip("/") + "/"):
            return mounts[path] + value[len(path) :]
    return value


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
