"""A real Kubernetes control plane on loopback, for the demo, the tests and a person's kubectl.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and (optionally) kwok from
binaries built by `tools/controlplane/build.sh`, on free 127.0.0.1 ports with certificates made
on the spot, and writes an admin kubeconfig; kwok plays the pods' lives as
`lightsout_lab.kwok_stages` says. Used by the session fixture in `tests/conftest.py`,
by `lightsout-lab dev-cluster up|down|env` and by `lightsout-lab demo`. Every process runs in its
own session so `stop()` can kill whole process groups even after a test failed half-way.
`halt(name)` (SIGTERM, as a reboot stops it) or `kill(name)` (SIGKILL, a crash) and
`resume(name)` stop one component and start it again with the same arguments (same port, etcd's
data kept): what a control-plane node's reboot, an API server's crash or an etcd restart looks
like to the operator and to the machines' kubelets, which kwok plays and which keep their
heartbeats across it by themselves (`tests/e2e/test_control_plane_faults.py`).

kube-apiserver and kube-controller-manager look time zones up in `zoneinfo/` first (Go's
`ZONEINFO`), then in the system's database as usual: a test can put a made-up zone there (a
CronJob's `spec.timeZone`, `tests/e2e/test_cron_dst.py`) without touching any other zone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, config

from lightsout_lab import kwok_stages, process
from lightsout_lab.binaries import find_binaries
from lightsout_lab.bootstrap import KUBEADM_RBAC
from lightsout_lab.pki import Pki, create_pki

# The advertise address is only written into the `kubernetes` Service's endpoints; no traffic is
# sent to it. The API server refuses a loopback one, so a TEST-NET-1 address (RFC 5737) is used.
ADVERTISE_ADDRESS = "192.0.2.254"
SERVICE_CIDR = "10.0.0.0/24"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


class ClusterError(RuntimeError):
    """The control plane could not be started; the message carries the failing log's tail."""


@dataclass
class Cluster:
    """One local control plane rooted in `directory` (certs, etcd data, logs, kubeconfig)."""

    directory: Path
    with_kwok: bool = True
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    # Popen objects of processes this instance started, kept so they are reaped (and Python does
    # not warn about children still running when the object would be collected).
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    #: How each component was started (argv, environment), so `resume` starts it the same way.
    _launches: dict[str, tuple[list[str], Mapping[str, str] | None]] = field(
        default_factory=dict, repr=False
    )
    _pki: Pki | None = field(default=None, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def zoneinfo(self) -> Path:
        """Extra time zones (TZif files) the API server and the controller-manager can load."""
        return self.directory / "zoneinfo"

    @property
    def state_file(self) -> Path:
        return self.directory / "cluster.json"

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 180.0, attempts: int = 3) -> Cluster:
        """Lay out the directory, start every component and wait until the cluster serves.

        The ports are reserved outside the kernel's ephemeral range (``process.free_port``);
        should a component still find its port taken, the whole start is tried again on new
        ports (``attempts`` in all)."""
        for _ in range(attempts - 1):
            try:
                return self._start_once(timeout)
            except ClusterError as exc:
                if "address already in use" not in str(exc):
                    raise
                shutil.rmtree(self.directory / "etcd", ignore_errors=True)
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> Cluster:
        bins = find_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.zoneinfo.mkdir(exist_ok=True)
        self._pki = pki = create_pki(self.directory / "pki")
        self.ports = {
            name: process.free_port()
            for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler")
        }
        self._write_kubeconfig(pki)
        deadline = time.monotonic() + timeout
        try:
            self._spawn("etcd", [str(bins / "etcd"), *self._etcd_args()])
            # Go reads ZONEINFO before the system's zones: a name not found there is looked up
            # as usual, so only made-up zones come from it.
            zones = {**os.environ, "ZONEINFO": str(self.zoneinfo)}
            self._spawn(
                "kube-apiserver",
                [str(bins / "kube-apiserver"), *self._apiserver_args(pki)],
                env=zones,
            )
            self._wait_https("kube-apiserver", f"{self.server}/readyz", deadline, pki)
            self._spawn(
                "kube-controller-manager",
                [str(bins / "kube-controller-manager"), *self._controller_manager_args(pki)],
                env=zones,
            )
            self._spawn("kube-scheduler", [str(bins / "kube-scheduler"), *self._scheduler_args()])
            if self.with_kwok:
                self._spawn("kwok", [str(bins / "kwok"), *self._kwok_args()])
            self._wait_https(
                "kube-scheduler",
                f"https://127.0.0.1:{self.ports['scheduler']}/healthz",
                deadline,
                None,
            )
            self._wait_default_service_account(deadline)
            # What `kubeadm init` sets up for joining nodes.
            self.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(KUBEADM_RBAC)}),
            )
        except BaseException:
            self.stop()
            raise
        self._save_state()
        return self

    def stop(self) -> None:
        """Kill every component's process group; safe to call twice or after a failed start."""
        for pid in reversed(list(self.pids.values())):
            _kill_group(pid)
        for proc in self._procs.values():
            proc.wait()
        self.pids.clear()
        self._procs.clear()
        self._save_state()

    def halt(self, name: str) -> None:
        """Stop one component (`kube-apiserver`, `etcd`, ...) as a reboot would: its process
        group is sent SIGTERM (SIGKILL after 10 s); its port, certificates and (etcd) data stay
        for `resume`."""
        self._stop_component(name, grace=10.0)

    def kill(self, name: str) -> None:
        """Kill one component at once (SIGKILL to its process group), as a crash or the OOM
        killer would: no graceful shutdown, connections cut mid-request. Start it again with
        `resume`."""
        self._stop_component(name, grace=0.0)

    def _stop_component(self, name: str, grace: float) -> None:
        pid = self.pids.pop(name)
        _kill_group(pid, grace)
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.wait()
        self._save_state()

    def resume(self, name: str, timeout: float = 180.0) -> float:
        """Start a halted component again exactly as before; return once the API server is
        ready again (its `/readyz` checks etcd too), with the monotonic time it became so."""
        if name in self.pids:
            raise ClusterError(f"{name} is running")
        argv, env = self._launches[name]
        self._spawn(name, argv, env)
        self._save_state()
        assert self._pki is not None
        self._wait_https(name, f"{self.server}/readyz", time.monotonic() + timeout, self._pki)
        # kwok is left running, as a node's kubelet is through a control-plane restart: its
        # informers list and watch again, its Lease renewals are retried every renew interval.
        return time.monotonic()

    def destroy(self) -> None:
        """Stop and remove the directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        """Re-attach to a cluster started by another process (`lightsout-lab dev-cluster up`)."""
        data = json.loads((directory / "cluster.json").read_text())
        return cls(
            directory=directory,
            with_kwok=data["with_kwok"],
            ports=data["ports"],
            pids=data["pids"],
        )

    def running(self) -> bool:
        return bool(self.pids) and all(_alive(pid) for pid in self.pids.values())

    # ----------------------------------------------------------------- helpers for callers
    def api_client(self) -> client.ApiClient:
        """A Kubernetes API client authenticated as this cluster's admin."""
        made: client.ApiClient = config.new_client_from_config(config_file=str(self.kubeconfig))
        return made

    def env(self) -> dict[str, str]:
        """Environment for tools that should talk to this cluster (kubectl, the operator)."""
        bins = find_binaries()
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{bins}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the cluster's own kubectl; on failure with check=True, raise with its stderr."""
        bins = find_binaries()
        proc = subprocess.run(
            [str(bins / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def wait_established(self, crds: Sequence[str], timeout: float = 60.0) -> None:
        """Wait until every CRD named is Established. `kubectl wait --for=condition=...` fails
        at once instead of waiting when the CRD has no condition yet (".status.conditions
        accessor error: <nil>", seen on a loaded machine right after the apply: one cold CI
        lost every test of a worker to it), so this reads the condition until it is True."""
        path = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + timeout
        for name in crds:
            while True:
                got = self.kubectl("get", f"crd/{name}", "-o", f"jsonpath={path}", check=False)
                if got.returncode == 0 and got.stdout.strip() == "True":
                    break
                if time.monotonic() > deadline:
                    seen = got.stderr.strip() or got.stdout.strip() or "no condition yet"
                    raise ClusterError(f"CRD {name} not Established after {timeout:.0f}s: {seen}")
                time.sleep(0.2)

    # ----------------------------------------------------------------- internals
    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        proc = process.spawn(argv, self.logs / f"{name}.log", self.directory, env)
        self._launches[name] = (list(argv), env)
        self.pids[name] = proc.pid
        self._procs[name] = proc

    def _etcd_args(self) -> list[str]:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return [
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_args(self, pki: Pki) -> list[str]:
        return [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--cert-dir={self.directory / 'pki'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--secure-port={self.ports['apiserver']}",
            "--bind-address=127.0.0.1",
            f"--advertise-address={ADVERTISE_ADDRESS}",
            "--authorization-mode=Node,RBAC",
            # Clones join with kubeadm bootstrap tokens (lightsout_lab.bootstrap).
            "--enable-bootstrap-token-auth=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--service-account-issuer=https://127.0.0.1:{self.ports['apiserver']}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            # Nodes registered by the machine simulator carry their own Ready condition; the
            # not-ready taint this plugin adds would otherwise keep pods off them for ~1 min.
            "--disable-admission-plugins=TaintNodesByCondition",
            # No kube-proxy here: a Service's cluster IP leads nowhere, so admission webhooks
            # behind a Service (the chart's core-Node webhook) are called on one of its
            # endpoints instead (kube-apiserver `buildServiceResolver`: the endpoint resolver
            # with this flag, the cluster-IP one without). Pods are on the host's bridge.
            "--enable-aggregator-routing=true",
            "--event-ttl=1h",
        ]

    def _controller_manager_args(self, pki: Pki) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['controller-manager']}",
            f"--cert-dir={self.directory / 'kcm-certs'}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--use-service-account-credentials=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # tokencleaner deletes expired bootstrap tokens, as in a kubeadm cluster.
            "--controllers=*,tokencleaner,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
            # csrsigning signs the kubelet client certificates of joining nodes with the CA.
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            "--node-monitor-grace-period=40s",
        ]

    def _scheduler_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['scheduler']}",
            f"--cert-dir={self.directory / 'scheduler-certs'}",
        ]

    def _kwok_args(self) -> list[str]:
        config = self.directory / "kwok.yaml"
        config.write_text(kwok_stages.configuration())
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--server-address=127.0.0.1:0",
            f"--config={config}",
        ]

    def _write_kubeconfig(self, pki: Pki) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "lightsout-dev",
                    "cluster": {"server": self.server, "certificate-authority": str(pki.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(pki.admin_cert),
                        "client-key": str(pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": "lightsout-dev", "context": {"cluster": "lightsout-dev", "user": "admin"}}
            ],
            "current-context": "lightsout-dev",
        }
        # kubectl and the Python client both read JSON, which is a subset of YAML.
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    def _save_state(self) -> None:
        if self.directory.exists():
            state = {"with_kwok": self.with_kwok, "ports": self.ports, "pids": self.pids}
            self.state_file.write_text(json.dumps(state, indent=2))

    def _check_alive(self) -> None:
        for name, pid in self.pids.items():
            if not _alive(pid):
                raise ClusterError(f"{name} exited during start-up:\n{self._log_tail(name)}")

    def _log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _wait_https(self, name: str, url: str, deadline: float, pki: Pki | None) -> None:
        context = ssl.create_default_context()
        if pki is None:
            # Scheduler and controller-manager serve self-signed health endpoints on loopback.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.load_verify_locations(str(pki.ca_cert))
            context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise ClusterError(f"{name} not healthy at {url} ({last}):\n{self._log_tail(name)}")

    def _wait_default_service_account(self, deadline: float) -> None:
        # The controller-manager's serviceaccount controller creating `default` proves it runs.
        while time.monotonic() < deadline:
            self._check_alive()
            if self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise ClusterError(
            "kube-controller-manager did not create the default ServiceAccount:\n"
            + self._log_tail("kube-controller-manager")
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie child still answers kill(0); reap it if it is ours.
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0


def _kill_group(pid: int, grace: float = 10.0) -> None:
    """SIGTERM to the group, SIGKILL once `grace` seconds passed (at once when 0)."""
    if grace > 0:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
