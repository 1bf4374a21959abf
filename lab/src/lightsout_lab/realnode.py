"""A real node for the local cluster: containerd + runc + a real kubelet, and the built images.

The stand-in kubelet (`lightsout_lab.kubelet`) runs action pods as host subprocesses; this one
runs them as containers of the runner image, the way a user's cluster does. Used by the
end-to-end tests that must prove what only a real node shows (tests/e2e/test_real_kubelet.py).
What worked on this machine, and its traps, is recorded in ../shared/research/real-node.md.

- ``build_images(*names)`` — `make images` (tools/images/build.sh): docker-archive tars of the
  operator and runner images, cached by content, with their tags.
- ``RealNode(cluster, directory, images=[...]).start()`` — starts containerd (Debian's package,
  own config, root, state and socket under ``directory``, ``restrict_oom_score_adj`` because
  root here lacks CAP_SYS_RESOURCE), loads a locally built pause image and the given image
  tars into it, starts the kubelet built with the control plane and waits until its Node is
  Ready. The Node is labelled and tainted `lightsout.dev/runner=real`: only pods that select
  it land there (``PLACEMENT``/``PLACEMENT_ENV``), never the stand-in's or kwok's.
  ``stop()`` ends the kubelet, the containers, containerd and their mounts.

Pods off the host network sit on a bridge whose host side is their gateway. What kube-proxy
would do for them, for the one Service in-cluster clients need, is done here by one DNAT rule:
the `kubernetes` Service's address and port, arriving from the bridge, go to the API server on
127.0.0.1 (allowed by the bridge's ``route_localnet``). That is how the operator's pod reaches
the API server with in-cluster config, as in any cluster.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from lightsout_lab.binaries import find_binaries, repo_root
from lightsout_lab.cluster import SERVICE_CIDR, Cluster
from lightsout_lab.process import free_port, read_log, spawn, terminate

RUNNER_LABEL = "lightsout.dev/runner"
LABEL_VALUE = "real"
#: Where action Jobs go to run on the real node (a nodeSelector and the taint's toleration).
PLACEMENT: dict[str, Any] = {
    "node_selector": {RUNNER_LABEL: LABEL_VALUE},
    "tolerations": [{"key": RUNNER_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}
#: The same as operator settings (see lightsout.config).
PLACEMENT_ENV = {
    "LIGHTSOUT_JOB_NODE_SELECTOR": f"{RUNNER_LABEL}={LABEL_VALUE}",
    "LIGHTSOUT_JOB_TOLERATIONS": RUNNER_LABEL,
}
PAUSE_IMAGE = "localhost/lightsout/pause:1"
CNI_BIN_DIR = Path("/usr/lib/cni")
BRIDGE = "lightsout0"
POD_SUBNET = "10.244.250.0/24"
#: The real node's addresses, as the lab (its cloud controller) sets them.
LOOPBACK_ADDRESSES = [{"type": "InternalIP", "address": "127.0.0.1"}]
#: The taint a kubelet with an external cloud provider registers with until it is initialised.
UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
#: The `kubernetes` Service: the first address of the service range, port 443.
API_SERVICE = (str(ipaddress.ip_network(SERVICE_CIDR)[1]), 443)
K8S_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI plugin
#: One real node per host: the bridge, its subnet and the DNAT rule are fixed, so a second
#: RealNode (another test process, another worktree) waits on this lock until the first stops.
HOST_LOCK = Path("/run/lightsout-real-node.lock")  # root-only, like the bridge

# Sleeps until told to stop and reaps the children a shared PID namespace hands it.
_PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
static void quit(int s) { (void)s; _exit(0); }
int main(void) {
    signal(SIGINT, quit); signal(SIGTERM, quit); signal(SIGCHLD, reap);
    for (;;) pause();
}
"""


class RealNodeError(RuntimeError):
    """The real node could not be started; the message carries the failing log's tail."""


@dataclass(frozen=True)
class ImageArchive:
    """One image built by `make images`: its tag and its docker-archive tar."""

    name: str
    tag: str
    path: Path


def build_images(*names: str) -> dict[str, ImageArchive]:
    """Build (or find in the cache) the named images; all of them when none is named."""
    script = repo_root() / "tools" / "images" / "build.sh"
    proc = subprocess.run(
        ["bash", str(script), *names], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RealNodeError(f"make images failed:\n{proc.stderr[-4000:]}")
    built = {}
    for line in proc.stdout.splitlines():
        name, tag, path = line.split()
        built[name] = ImageArchive(name, tag, Path(path))
    return built


@dataclass
class RealNode:
    """containerd and a kubelet rooted in `directory`, registering `node_name` to `cluster`."""

    cluster: Cluster
    directory: Path
    images: Sequence[Path] = ()
    node_name: str = "lightsout-real"
    #: The kubelet's own --node-labels and registerWithTaints (a Lights-Out action-Job runner
    #: by default; a managed machine's kubelet in tests/e2e/test_startup_taint.py).
    node_labels: Mapping[str, str] = field(default_factory=lambda: {RUNNER_LABEL: LABEL_VALUE})
    register_with_taints: Sequence[Mapping[str, str]] = (
        {"key": RUNNER_LABEL, "value": LABEL_VALUE, "effect": "NoSchedule"},
    )
    #: Seconds from the kubelet's start to its Node's Ready condition (set by start()).
    ready_seconds: float = 0.0
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _lock: int | None = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> Self:
        packages = subprocess.run(
            ["bash", str(repo_root() / "tools" / "ci" / "system-packages.sh"), "node"],
            capture_output=True,
            text=True,
            check=False,
        )
        if packages.returncode != 0:
            raise RealNodeError(f"installing containerd failed:\n{packages.stderr[-2000:]}")
        kubelet = find_binaries() / "kubelet"
        if not kubelet.exists():
            raise RealNodeError(f"{kubelet} missing: run tools/controlplane/build.sh")
        self.logs.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(HOST_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # blocks while another real node runs
        try:
            self._start_containerd(timeout)
            _weigh_containers_as_a_node()
            self._route_api_service(add=True)
            self.import_images([self._pause_archive(), *self.images])
            started = time.monotonic()
            self._spawn("kubelet", [str(kubelet), *self._kubelet_args()])
            self._wait_ready(started + timeout)
            self.ready_seconds = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kubelet, then every container, then containerd; unmount what they mounted, remove
        the Node and the unpacked images (the logs stay)."""
        kubelet = self._procs.pop("kubelet", None)
        terminate(kubelet)
        if "containerd" in self._procs:
            self._remove_containers()
        terminate(self._procs.pop("containerd", None))
        self._kill_shims()
        self._route_api_service(add=False)
        _unmount_under(self.directory)
        shutil.rmtree(self.directory / "containerd", ignore_errors=True)
        if kubelet is not None:
            self.cluster.kubectl("delete", "node", self.node_name, "--wait=false", check=False)
        if self._lock is not None:
            os.close(self._lock)  # releases the host lock
            self._lock = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ images
    def ctr(self, *args: str, timeout: float = 300) -> str:
        """Run containerd's `ctr` in the CRI namespace of this node; its output."""
        proc = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", K8S_NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def import_images(self, archives: Iterable[Path]) -> None:
        for archive in archives:
            self.ctr("images", "import", str(archive))

    def image_refs(self) -> list[str]:
        return self.ctr("images", "ls", "--quiet").split()

    def container_log(self, namespace: str, pod: str) -> str:
        """What a pod's containers printed, from the kubelet's pod log directory."""
        found = sorted((self.directory / "pod-logs").glob(f"{namespace}_{pod}_*/*/*.log"))
        return "".join(read_log(path) for path in found)

    def _pause_archive(self) -> Path:
        """A docker-archive tar of a one-binary pause image, compiled here (gcc -static)."""
        work = self.directory / "pause"
        work.mkdir(exist_ok=True)
        source = work / "pause.c"
        source.write_text(_PAUSE_C)
        binary = work / "pause"
        subprocess.run(
            ["gcc", "-static", "-Os", "-s", "-o", str(binary), str(source)],
            check=True,
            capture_output=True,
        )
        return write_docker_archive(work / "pause.tar", PAUSE_IMAGE, {"pause": binary}, ["/pause"])

    # ------------------------------------------------------------------ containerd
    def _start_containerd(self, timeout: float) -> None:
        config = self.directory / "containerd.toml"
        config.write_text(self._containerd_config())
        (self.directory / "cni").mkdir(exist_ok=True)
        (self.directory / "cni" / "10-lightsout.conflist").write_text(json.dumps(_cni_config()))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            if self.socket.exists():
                try:
                    self.ctr("version", timeout=10)
                    return
                except RealNodeError:
                    pass
            if time.monotonic() > deadline:
                raise RealNodeError(f"containerd did not answer:\n{self.log_tail('containerd')}")
            time.sleep(0.2)

    def _containerd_config(self) -> str:
        d = self.directory
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{d / "containerd" / "root"}"
state = "{d / "containerd" / "state"}"

[grpc]
  address = "{self.socket}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and without this every
  # sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d / "cni"}"
"""

    def _remove_containers(self) -> None:
        try:
            ids = self.ctr("containers", "ls", "--quiet", timeout=30).split()
        except (RealNodeError, subprocess.TimeoutExpired):
            return
        for cid in ids:
            for args in (("tasks", "delete", "--force", cid), ("containers", "delete", cid)):
                with contextlib.suppress(RealNodeError, subprocess.TimeoutExpired):
                    self.ctr(*args, timeout=30)

    def _kill_shims(self) -> None:
        """The runc shims containerd started for this node (they outlive it by design)."""
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and marker in argv:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)

    # ------------------------------------------------------------------ network
    def _drop_stale_api_routes(self) -> None:
        """Delete the DNAT rules of real nodes that are gone: one real node runs at a time
        (`HOST_LOCK`), so any rule found before this one adds its own was left by a run killed
        before it could clean up, and, coming first, it would send the pods' API traffic to
        that run's dead API server."""
        listed = subprocess.run(
            ["iptables", "-t", "nat", "-S", "PREROUTING"],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in listed.stdout.splitlines():
            if line.startswith("-A PREROUTING ") and "lightsout real node " in line:
                subprocess.run(
                    ["iptables", "-t", "nat", "-D", *shlex.split(line)[1:]],
                    capture_output=True,
                    check=False,
                )

    def _route_api_service(self, *, add: bool) -> None:
        """Add (or remove) the DNAT rule that makes the `kubernetes` Service reach the API
        server from pods on the bridge (kube-proxy's job, for this one Service)."""
        if add:
            # The bridge plugin adopts an existing bridge; made first so that its
            # route_localnet can be set before any pod talks.
            subprocess.run(
                ["ip", "link", "add", BRIDGE, "type", "bridge"], capture_output=True, check=False
            )
            Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n")
        host, port = API_SERVICE
        if add:
            self._drop_stale_api_routes()
        rule = [
            "PREROUTING", "-i", BRIDGE, "-d", f"{host}/32", "-p", "tcp", "--dport", str(port),
            "-m", "comment", "--comment", f"lightsout real node {self.directory}",
            "-j", "DNAT", "--to-destination", f"127.0.0.1:{self.cluster.ports['apiserver']}",
        ]  # fmt: skip
        proc = subprocess.run(
            ["iptables", "-t", "nat", "-A" if add else "-D", *rule],
            capture_output=True,
            text=True,
            check=False,
        )
        if add and proc.returncode != 0:
            raise RealNodeError(f"iptables: {proc.stderr.strip()}")

    # ------------------------------------------------------------------ kubelet
    def _kubelet_args(self) -> list[str]:
        config = self.directory / "kubelet.json"
        config.write_text(json.dumps(self._kubelet_config(), indent=2))
        return [
            f"--config={config}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--hostname-override={self.node_name}",
            # The kubelet refuses to advertise 127.0.0.1 itself (--node-ip: "nodeIP can't be
            # loopback address"). With an external cloud provider it advertises only its
            # hostname until a cloud controller sets the addresses, then keeps those: the lab
            # plays that controller (_act_as_cloud_controller), so the Node's one address is
            # 127.0.0.1 and the API server reaches the kubelet there for logs. The host's other
            # addresses are never advertised.
            "--cloud-provider=external",
            f"--root-dir={self.directory / 'kubelet'}",
            *(
                [f"--node-labels={','.join(f'{k}={v}' for k, v in self.node_labels.items())}"]
                if self.node_labels
                else []
            ),
            "--v=1",
        ]

    def _kubelet_config(self) -> dict[str, Any]:
        """What worked on this machine (research/real-node.md): cgroup v1, cgroupfs, no QoS."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": free_port("127.0.0.1"),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port("127.0.0.1"),
            # Loopback only: the API server (for logs and exec) is the only client.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failCgroupV1": False,
            "failSwapOn": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "localStorageCapacityIsolation": False,
            "makeIPTablesUtilChains": False,
            "podLogsDir": str(self.directory / "pod-logs"),
            "registerWithTaints": [dict(taint) for taint in self.register_with_taints],
        }

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self.cluster.kubectl("get", "node", self.node_name, "-o", "json", check=False)
            if proc.returncode == 0:
                node = json.loads(proc.stdout)
                initialised = self._act_as_cloud_controller(node)
                conditions = node.get("status", {}).get("conditions", [])
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                if ready and initialised:
                    return
            time.sleep(0.5)
        raise RealNodeError(f"Node {self.node_name} not Ready:\n{self.log_tail('kubelet')}")

    def _act_as_cloud_controller(self, node: dict[str, Any]) -> bool:
        """What a cloud controller manager does for a kubelet with `--cloud-provider=external`:
        set the Node's addresses (127.0.0.1 alone, where the kubelet listens; no Hostname
        address, which the API server would try first and fail to resolve) and lift the
        `uninitialized` taint the kubelet registered with. True when `node` already shows both
        done; the taints are replaced only if unchanged since read (a JSON patch `test`)."""
        done = True
        if node.get("status", {}).get("addresses") != LOOPBACK_ADDRESSES:
            done = False
            patch = {"status": {"addresses": LOOPBACK_ADDRESSES}}
            self.cluster.kubectl(
                "patch", "node", self.node_name, "--subresource=status", "--type=merge",
                "-p", json.dumps(patch), check=False,
            )  # fmt: skip
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != UNINITIALIZED_TAINT]
        if kept != taints:
            done = False
            ops = [
                {"op": "test", "path": "/spec/taints", "value": taints},
                {"op": "replace", "path": "/spec/taints", "value": kept},
            ]
            self.cluster.kubectl(
                "patch", "node", self.node_name, "--type=json", "-p", json.dumps(ops), check=False
            )
        return done

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        self._procs[name] = spawn(argv, self.logs / f"{name}.log", self.directory)

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RealNodeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        return "\n".join(read_log(self.logs / f"{name}.log").splitlines()[-lines:])


def write_docker_archive(
    path: Path, tag: str, files: dict[str, Path], entrypoint: list[str]
) -> Path:
    """A one-layer image as `docker save` writes it (what `ctr images import` reads)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name, source in sorted(files.items()):
            info = tar.gettarinfo(str(source), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with source.open("rb") as handle:
                tar.addfile(info, handle)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]
    ).encode()
    with tarfile.open(path, mode="w") as tar:
        for name, data in (
            ("layer.tar", layer_bytes),
            (config_name, config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _cni_config() -> dict[str, Any]:
    """A bridge for pods without hostNetwork. Its host side is their gateway (the kubelet probes
    them, they reach the API server through it); no masquerade: they reach nothing outside the
    node (action Jobs that talk to loopback emulators use hostNetwork)."""
    return {
        "cniVersion": "1.0.0",
        "name": "lightsout",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    # Only the Service range goes to the gateway (no default route).
                    "routes": [{"dst": SERVICE_CIDR}],
                },
            },
            {"type": "loopback"},
        ],
    }


def _weigh_containers_as_a_node() -> None:
    """Give containerd's parent cgroup of containers the CPU weight a kubelet gives its pods'
    cgroup (1024 shares per CPU). Without QoS cgroups (cgroup v1 here) the containers sit under
    `/k8s.io` with the weight of one host process; on a busy shared machine that starves the
    operator's pods until their probes kill them."""
    group = Path("/sys/fs/cgroup/cpu") / K8S_NAMESPACE
    with contextlib.suppress(OSError):
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(f"{1024 * (os.cpu_count() or 1)}\n")


def _unmount_under(directory: Path) -> None:
    """Unmount every mount below `directory`, deepest first (kubelet and containerd leave
    tmpfs, overlay and bind mounts there)."""
    prefix = str(directory.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = sorted(
        {
            line.split()[4].replace("\\040", " ")
            for line in lines
            if line.split()[4] == prefix or line.split()[4].startswith(prefix + "/")
        },
        key=len,
        reverse=True,
    )
    for point in points:
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
