"""A fake Proxmox VE cluster: fakepve served over TLS on a free loopback port.

Who uses it: the e2e tests of the runner (tests/e2e/test_runner_proxmox.py) and of the
operator with Proxmox machines, ``lightsout-lab demo``'s Proxmox VM
(``lightsout_lab.extras``); anyone who needs a Proxmox API on 127.0.0.1.

What it gives you:

- ``FakePveCluster(guests=[Guest(...)], ...)`` - a context manager serving fakepve's
  ``FakePve`` on its own event loop in a daemon thread (as fakepve's pytest fixture does), on
  127.0.0.1 with a port the system picks, over HTTPS with a fresh self-signed certificate
  (``ca_path``), password login (``username``/``password``) and, optionally, an API token
  (``token_id``/``token_secret``). Tasks finish at once unless ``time_scale`` is set.
- ``power_reader(vmid=…)`` / ``power_reader(tag=…)`` - a callable for the machine simulator
  (``lightsout_lab.machines``): ``On`` while the VM (or the one VM carrying the tag,
  e.g. an ephemeral machine's ``lightsout-node.<namespace>.<name>``) runs, ``Off`` when it is
  stopped or does not exist; read through the API like every other check here.
- ``vm(vmid)`` / ``status(vmid)`` / ``exists(vmid)`` / ``vms()`` - what the API shows,
  read through proxmoxer with ``verify=`` the CA path (the environment may export
  ``REQUESTS_CA_BUNDLE``, which would override a session-wide setting).
- ``tasks(...)`` / ``count(...)`` - every Proxmox task the clients started (qmstart,
  qmshutdown, qmstop, qmclone, qmdestroy, ...) with its exit status, and ``requests(...)``,
  every HTTP request (secrets redacted by fakepve). Faults: ``pve`` is fakepve's ``FakePve``
  (``pve.fail(...)``, ``pve.snapshot_lock(vmid)``, ``pve.set_node_offline(node)``, ...);
  coroutines such as ``pve.backup(vmid)`` run with ``call(...)``.

Example::

    with FakePveCluster([Guest(100, "vm-a", status="stopped")]) as pve:
        run_startup(endpoint=pve.endpoint, ca=pve.ca_path, password=pve.password)
        assert pve.status(100) == "running"
        assert pve.count("qmstart", vmid=100) == 1
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from lightsout_lab.process import WorkdirService

HOST = "127.0.0.1"
START_TIMEOUT = 30.0
T = TypeVar("T")

#: Proxmox task types of the power and lifecycle actions, for ``count``.
START, SHUTDOWN, STOP, CLONE, DESTROY = "qmstart", "qmshutdown", "qmstop", "qmclone", "qmdestroy"


@dataclass(frozen=True)
class Guest:
    """One QEMU VM of the fake cluster (what fakepve's guests file holds).

    ``tags`` are Proxmox tags (stored ``a;b``). Faults: ``lock`` (e.g. ``"backup"``),
    ``start_error`` (the start task fails with it), ``shutdown_secs`` (how long the guest
    takes to power off after ACPI; longer than the shutdown timeout = a hung guest).
    """

    vmid: int
    name: str
    node: str = "pve1"
    status: str = "stopped"
    template: bool = False
    cores: int = 1
    memory_mib: int = 1024
    tags: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    lock: str | None = None
    start_error: str | None = None
    shutdown_secs: float = 0
    acpi: bool = True

    def full_config(self) -> dict[str, Any]:
        """The VM's Proxmox config: cores, memory, a disk and a NIC, the tags, then ``config``."""
        disk = "base" if self.template else "vm"
        out: dict[str, Any] = {
            "cores": self.cores,
            "memory": self.memory_mib,
            "scsi0": f"local-lvm:{disk}-{self.vmid}-disk-0,size=8G",
            "net0": f"virtio=BC:24:11:{self.vmid // 10000 % 100:02X}:{self.vmid // 100 % 100:02X}:"
            f"{self.vmid % 100:02X},bridge=vmbr0",
        }
        if self.tags:
            out["tags"] = ";".join(self.tags)
        out.update(self.config)
        return out


def _keeping_uploads(base: type[Any]) -> type[Any]:
    """fakepve's ``FakePve`` that keeps the bytes of every uploaded file, by file name.

    fakepve handles an upload for real (multipart parsing, content-type and storage checks, the
    imgcopy task, the volume in the storage's listing, its deletion) but stores only the file's
    name and size, and keeps the last upload's fields in ``uploaded``. Keeping each upload's
    bytes lets a test read an ISO back as a VM would boot it; whether the volume still exists
    is always asked of the API (``FakePveCluster.iso_bytes``).
    """

    class KeepingUploads(base):  # type: ignore[misc]
        @property
        def uploaded(self) -> Any:
            return self.__dict__.get("_last_upload")

        @uploaded.setter
        def uploaded(self, fields: Any) -> None:
            self.__dict__["_last_upload"] = fields
            if fields and "filename" in fields:
                self.upload_bytes[str(fields["filename"])] = bytes(fields.get("data") or b"")

        @property
        def upload_bytes(self) -> dict[str, bytes]:
            kept: dict[str, bytes] = self.__dict__.setdefault("_upload_bytes", {})
            return kept

    return KeepingUploads


class FakePveError(RuntimeError):
    """The fake could not be started or answered unexpectedly."""


class FakePveCluster(WorkdirService):
    """fakepve in a thread of this process; use it as a context manager.

    Args:
        guests: the VMs of the cluster (their nodes are created; see also ``nodes``).
        nodes: more (empty) hosts, e.g. ``("pve1", "pve2")``.
        username / password: the password login it accepts.
        token_id / token_secret: an API token it accepts as well (``user@realm!name``).
        time_scale: real seconds per Proxmox second; 0 ends every task before it answers.
        workdir: where the certificate goes (default: a temp dir, removed on stop).
    """

    error = FakePveError
    not_started = "fakepve not started"
    workdir_prefix = "fakepve-"

    def __init__(
        self,
        guests: Iterable[Guest] = (),
        *,
        nodes: Iterable[str] = (),
        username: str = "root@pam",
        password: str = "lights-out-pve-password",
        token_id: str | None = None,
        token_secret: str | None = None,
        time_scale: float = 0.0,
        workdir: Path | None = None,
    ) -> None:
        self.guests = tuple(guests)
        self.nodes = tuple(nodes)
        self.username = username
        self.password = password
        self.token_id = token_id
        self.token_secret = token_secret
        self.time_scale = time_scale
        self.host = HOST
        self.port = 0
        super().__init__(workdir)
        self._pve: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def pve(self) -> Any:
        """fakepve's ``FakePve`` (state, faults, request log); see its docstrings."""
        if self._pve is None:
            raise FakePveError("fakepve not started")
        return self._pve

    @property
    def endpoint(self) -> str:
        """The API URL, e.g. ``https://127.0.0.1:40123`` (what a Node's spec names)."""
        return f"https://{self.host}:{self.port}"

    @property
    def ca_path(self) -> Path:
        """PEM file to trust for the fake's self-signed certificate."""
        return self.workdir / "fakepve.crt"

    def start(self) -> Self:
        """Serve the fake; return once it listens."""
        if self._pve is not None:
            raise FakePveError("fakepve already started")
        from fakepve import FakePve  # type: ignore[import-untyped]
        from fakepve.certs import make_cert  # type: ignore[import-untyped]

        self._make_workdir()
        certfile, keyfile, _ = make_cert(str(self.workdir), hosts=(self.host,))
        pve = _keeping_uploads(FakePve)(
            user=self.username, password=self.password, host=self.host, port=0
        )
        pve.time_scale = self.time_scale
        for node in self.nodes:
            pve.add_node(node)
        for guest in self.guests:
            vm = pve.add_vm(
                guest.vmid,
                guest.name,
                node=guest.node,
                status=guest.status,
                config=guest.full_config(),
                template=guest.template,
                lock=guest.lock,
            )
            vm.acpi = guest.acpi
            vm.shutdown_secs = guest.shutdown_secs
            vm.start_error = guest.start_error
        if self.token_id:
            pve.apitokens[self.token_id] = self.token_secret or ""
        self._pve = pve
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="fakepve", daemon=True)
        self._thread.start()
        try:
            self.call(pve.start(certfile, keyfile))
        except BaseException:
            self.stop()
            raise
        self.port = int(pve.port)
        return self

    def stop(self) -> None:
        """Stop serving and remove the temp dir (when the harness made it)."""
        loop, thread, pve = self._loop, self._thread, self._pve
        if loop is not None and thread is not None:
            if pve is not None and pve.runner is not None:
                with contextlib.suppress(Exception):  # stopping anyway
                    self.call(pve.stop())
            loop.call_soon_threadsafe(loop.stop)
            thread.join(START_TIMEOUT)
            if not thread.is_alive():
                loop.close()
        self._loop = self._thread = None
        self._pve = None
        self._remove_workdir()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT) -> T:
        """Run a coroutine of the fake (``pve.backup(vmid)``, ...) on its loop; its result."""
        if self._loop is None:
            coro.close()
            raise FakePveError("fakepve not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _run_loop(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    # ----------------------------------------------------------------------------- API reads

    def api(self) -> Any:
        """A proxmoxer client logged in with the password, verifying TLS with ``ca_path``."""
        from proxmoxer import ProxmoxAPI

        # verify_ssl is passed with every request, so REQUESTS_CA_BUNDLE cannot override it.
        return ProxmoxAPI(
            self.host,
            port=self.port,
            user=self.username,
            password=self.password,
            verify_ssl=str(self.ca_path),
            timeout=10,
        )

    def vms(self) -> list[dict[str, Any]]:
        """Every QEMU VM as ``/cluster/resources`` lists it (vmid, name, node, status, tags)."""
        resources: list[dict[str, Any]] = self.api().cluster.resources.get(type="vm")
        return sorted(
            (r for r in resources if r.get("type") == "qemu"), key=lambda r: int(r["vmid"])
        )

    def vm(self, vmid: int) -> dict[str, Any] | None:
        """The VM as the API shows it, with its ``config`` (None when it does not exist)."""
        api = self.api()
        for item in api.cluster.resources.get(type="vm"):
            if int(item["vmid"]) == vmid and item.get("type") == "qemu":
                found: dict[str, Any] = dict(item)
                found["config"] = api.nodes(item["node"]).qemu(vmid).config.get()
                return found
        return None

    def exists(self, vmid: int) -> bool:
        """True when the cluster has a VM with this id."""
        return any(int(vm["vmid"]) == vmid for vm in self.vms())

    def status(self, vmid: int) -> str | None:
        """``running``, ``stopped``, ... (None when the VM does not exist)."""
        vm = self.vm(vmid)
        return None if vm is None else str(vm["status"])

    def tags(self, vmid: int) -> list[str]:
        """The VM's tags, sorted (empty when it has none or does not exist)."""
        vm = self.vm(vmid)
        raw = str(((vm or {}).get("config") or {}).get("tags") or "")
        return sorted({t for t in raw.replace(",", ";").replace(" ", ";").split(";") if t})

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        """VMs carrying ``tag`` (as ``vms()`` lists them)."""
        return [
            vm
            for vm in self.vms()
            if tag in str(vm.get("tags") or "").replace(",", ";").replace(" ", ";").split(";")
        ]

    def power_reader(self, *, vmid: int | None = None, tag: str | None = None) -> Callable[[], str]:
        """``On``/``Off`` of one VM, by id or by tag, for the machine simulator."""
        if (vmid is None) == (tag is None):
            raise ValueError("give vmid or tag")

        def read() -> str:
            found = (
                [vm for vm in self.vms() if int(vm["vmid"]) == vmid]
                if vmid is not None
                else self.tagged(str(tag))
            )
            return "On" if any(vm.get("status") == "running" for vm in found) else "Off"

        return read

    # ------------------------------------------------------------------ what the clients did

    def tasks(
        self, task_type: str | None = None, *, vmid: int | None = None
    ) -> list[dict[str, Any]]:
        """Proxmox tasks started so far, oldest first: type, id, node, status, exitstatus, log.

        ``vmid`` matches the id the task names: the VM for start/shutdown/stop/destroy, the
        *template* for a clone (Proxmox names the source).
        """
        return [
            {key: value for key, value in task.items() if key != "log"} | {"log": list(task["log"])}
            for task in list(self.pve.tasklog)
            if (task_type is None or task["type"] == task_type)
            and (vmid is None or task["id"] == str(vmid))
        ]

    def count(self, task_type: str, *, vmid: int | None = None, ok_only: bool = False) -> int:
        """How many tasks of this type were started (``ok_only``: that ended OK)."""
        return sum(
            1
            for task in self.tasks(task_type, vmid=vmid)
            if not ok_only or task.get("exitstatus") == "OK"
        )

    def requests(self, method: str | None = None, contains: str = "") -> list[tuple[str, str]]:
        """(method, path) of every HTTP request that reached the fake, oldest first."""
        return [
            (str(m), str(p))
            for m, p, _body in list(self.pve.requests)
            if (method is None or m == method) and contains in p
        ]

    def isos(self, storage: str = "local") -> list[str]:
        """Volume ids of the ISO images on a storage of every host, as the API lists them."""
        api = self.api()
        return sorted(
            str(item["volid"])
            for host in api.nodes.get()
            for item in api.nodes(host["node"]).storage(storage).content.get(content="iso")
        )

    def iso_bytes(self, volid: str) -> bytes | None:
        """The bytes uploaded for an ISO volume (``local:iso/x.iso``) while the API lists it."""
        storage, _, volname = volid.partition(":")
        if volid not in self.isos(storage):
            return None
        uploads: dict[str, bytes] = self.pve.upload_bytes
        return uploads.get(volname.removeprefix("iso/"))

    def attached_iso(self, tag: str) -> bytes | None:
        """The ISO on the CD-ROM (ide2) of the running VM carrying ``tag``: what it boots with."""
        for vm in self.tagged(tag):
            if vm.get("status") != "running":
                continue
            found = self.vm(int(vm["vmid"]))
            drive = str(((found or {}).get("config") or {}).get("ide2") or "")
            volid = drive.split(",", 1)[0]
            if "media=cdrom" in drive and ":iso/" in volid:
                return self.iso_bytes(volid)
        return None

    def summary(self) -> dict[str, Any]:
        """A printable picture: each VM's id/name/node/status/tags and the task counts."""
        counts: dict[str, int] = {}
        for task in self.tasks():
            counts[task["type"]] = counts.get(task["type"], 0) + 1
        return {
            "vms": [
                {k: vm.get(k) for k in ("vmid", "name", "node", "status", "tags")}
                for vm in self.vms()
            ],
            "tasks": counts,
        }
