"""Real IPMI BMCs on loopback: OpenIPMI's ``ipmi_sim``, one process per machine, on 127.0.0.1.

Who uses it: the e2e tests of the runner (``tests/e2e/test_runner_ipmi.py``) and of the
operator (IPMI "machines" for startup/shutdown/healthcheck Jobs), ``lightsout-lab demo``'s IPMI
server (``lightsout_lab.extras``), and anyone who needs a BMC speaking IPMI-over-LAN
(RMCP+, cipher suite 3) on loopback.

What it gives you:

- ``IpmiSim([IpmiMachine("node-1"), IpmiMachine("node-2", power_state="On")])`` (or a single
  ``IpmiMachine``) — a context manager that starts one ``ipmi_sim`` per machine, each on a free
  loopback UDP port, with one admin user (``username``/``password``). ``sim["node-1"]`` (or
  ``sim.bmc`` when there is one) is that machine's ``IpmiBmc``.
- The chassis is a shell program (``chassis.sh``) that ipmi_sim runs for every chassis
  request; it keeps the machine in files, so callers read and set the power state without
  IPMI: ``bmc.power_state()``, ``bmc.set_power_state("On")``, ``bmc.boot_device()``.
- ``bmc.soft_shutdown = "ignore"`` makes the machine's "OS" ignore ACPI soft-offs (the
  default, ``"obey"``, powers it off at once), to exercise forced power-off.
- ``bmc.commands()`` / ``bmc.power_commands()`` / ``bmc.count_power_commands(...)`` — every
  order the chassis received (``power 1``, ``power 0``, ``shutdown 1``, ``boot pxe`` …), in
  order. Reads are not recorded, and the harness' own ``set_power_state`` is not an order.
- ``bmc.power_reader()`` — a callable returning ``"On"``/``"Off"`` for the machine simulator
  (``lightsout_lab.machines``).
- ``bmc.ipmitool("chassis", "power", "status")`` — ask the BMC with an independent client.

Example::

    with IpmiSim(IpmiMachine("node-1")) as sim:
        run_startup(host=sim.bmc.host, port=sim.bmc.port, password=sim.password)
        assert sim.bmc.power_state() == "On"
        assert sim.bmc.count_power_commands("power", "1") == 1
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, Self

from lightsout_lab import process

PowerState = Literal["On", "Off"]
SoftShutdown = Literal["obey", "ignore"]

#: Orders that change (or ask to change) the power: ``power 0|1``, ``shutdown 1``, ``reset 1``.
POWER_ITEMS: frozenset[str] = frozenset({"power", "shutdown", "reset"})

#: ipmi_sim's chassis control program. ipmi_sim appends ``get ITEM…`` / ``set ITEM VALUE…`` /
#: ``check …`` to the configured command (``chassis.sh STATE_DIR 0x20``); ``get`` answers
#: ``ITEM:VALUE`` lines. Every ``set`` is appended to ``STATE_DIR/commands.log``.
CHASSIS_SCRIPT = r"""#!/bin/sh
state=$1
op=$3
shift 3
read_file() { cat "$state/$1" 2>/dev/null || printf '%s\n' "$2"; }
write_file() { printf '%s\n' "$2" > "$state/$1.tmp" && mv "$state/$1.tmp" "$state/$1"; }
case "$op" in
  get)
    for item in "$@"; do
      case "$item" in
        power) printf 'power:%s\n' "$(read_file power 0)" ;;
        boot) printf 'boot:%s\n' "$(read_file boot default)" ;;
      esac
    done
    ;;
  set)
    while [ $# -ge 2 ]; do
      item=$1
      value=$2
      shift 2
      printf '%s %s %s\n' "$(date +%s.%N)" "$item" "$value" >> "$state/commands.log"
      case "$item" in
        power) write_file power "$value" ;;
        boot) write_file boot "$value" ;;
        shutdown)
          if [ "$value" = 1 ] && [ "$(read_file soft_shutdown obey)" = obey ]; then
            write_file power 0
          fi
          ;;
      esac
    done
    ;;
esac
exit 0
"""

_EMU = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
mc_enable 0x20
"""


class IpmiSimError(RuntimeError):
    """ipmi_sim could not be started or a state file is unreadable."""


@dataclasses.dataclass(frozen=True)
class IpmiMachine:
    """One machine behind its own simulated BMC."""

    name: str
    power_state: PowerState = "Off"
    soft_shutdown: SoftShutdown = "obey"
    boot_device: str = "default"


@dataclasses.dataclass(frozen=True)
class ChassisCommand:
    """One order the chassis received, e.g. ``power 1`` or ``boot pxe``."""

    time: float
    item: str
    value: str

    def __str__(self) -> str:
        return f"{self.item} {self.value}"


class IpmiBmc:
    """One running ipmi_sim and the machine behind it (made by ``IpmiSim``)."""

    def __init__(self, machine: IpmiMachine, workdir: Path, username: str, password: str) -> None:
        self.machine = machine
        self.name = machine.name
        self.workdir = workdir
        self.username = username
        self.password = password
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: io.BufferedWriter | None = None

    # ------------------------------------------------------------------------- the machine

    @property
    def state_dir(self) -> Path:
        """The chassis' files: power, boot, soft_shutdown, commands.log."""
        return self.workdir / "chassis"

    def power_state(self) -> PowerState:
        """``On`` or ``Off``, from the chassis' file (what the BMC reports)."""
        return "On" if self._read("power", "0") == "1" else "Off"

    def set_power_state(self, state: PowerState) -> None:
        """Put the machine in a state (not recorded as an order)."""
        self._write("power", "1" if state == "On" else "0")

    def power_reader(self) -> Callable[[], str]:
        """A callable reading the power state (for the machine simulator)."""
        return self.power_state

    def boot_device(self) -> str:
        """The boot device last set: ``pxe`` after a one-time network boot, else ``default``."""
        return self._read("boot", "default")

    @property
    def soft_shutdown(self) -> SoftShutdown:
        """``obey``: an ACPI soft-off powers the machine off at once; ``ignore``: nothing."""
        return "ignore" if self._read("soft_shutdown", "obey") == "ignore" else "obey"

    @soft_shutdown.setter
    def soft_shutdown(self, value: SoftShutdown) -> None:
        self._write("soft_shutdown", value)

    def commands(self) -> list[ChassisCommand]:
        """Every order the chassis received, oldest first."""
        try:
            lines = (self.state_dir / "commands.log").read_text().splitlines()
        except OSError:
            return []
        out: list[ChassisCommand] = []
        for line in lines:
            parts = line.split()
            if len(parts) == 3:
                out.append(ChassisCommand(float(parts[0]), parts[1], parts[2]))
        return out

    def power_commands(self) -> list[ChassisCommand]:
        """Orders that change the power: ``power``, ``shutdown`` (soft-off), ``reset``."""
        return [c for c in self.commands() if c.item in POWER_ITEMS]

    def count_power_commands(self, item: str | None = None, value: str | None = None) -> int:
        """How many power orders matched, e.g. ``("power", "1")`` for power-ons."""
        return sum(
            1
            for c in self.power_commands()
            if (item is None or c.item == item) and (value is None or c.value == value)
        )

    def clear_commands(self) -> None:
        """Forget the orders recorded so far."""
        (self.state_dir / "commands.log").write_text("")

    def ipmitool(self, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``ipmitool -I lanplus … ARGS`` against this BMC (the password via the env)."""
        return subprocess.run(
            [
                "ipmitool",
                "-I",
                "lanplus",
                "-H",
                self.host,
                "-p",
                str(self.port),
                "-U",
                self.username,
                "-E",
                "-C",
                "3",
                *args,
            ],
            env={**os.environ, "IPMI_PASSWORD": self.password if password is None else password},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def log_text(self) -> str:
        """ipmi_sim's output so far (for assertion messages)."""
        return process.read_log(self.workdir / "sim.log")

    # ---------------------------------------------------------------------------- lifecycle

    def start(self, start_timeout: float) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        (self.workdir / "sim-state").mkdir()
        script = self.workdir / "chassis.sh"
        script.write_text(CHASSIS_SCRIPT)
        script.chmod(0o700)
        (self.workdir / "bmc.emu").write_text(_EMU)
        self.set_power_state(self.machine.power_state)
        self.soft_shutdown = self.machine.soft_shutdown
        self._write("boot", self.machine.boot_device)
        self.clear_commands()

        def start_on(port: int) -> None:
            self.port = port
            self._write_lan_conf()
            self._launch()
            self._wait_ready(start_timeout)

        process.start_on_free_port(
            self.host,
            start_on,
            self.stop,
            error=IpmiSimError,
            what=f"ipmi_sim for {self.name}",
            log=self.log_text,
            kind=socket.SOCK_DGRAM,
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        process.terminate(proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _write_lan_conf(self) -> None:
        chassis = f"{self.workdir / 'chassis.sh'} {self.state_dir} 0x20"
        text = f"""name "{self.name}"
set_working_mc 0x20
  startlan 1
    addr {self.host} {self.port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{chassis}"
  user 2 true "{self.username}" "{self.password}" admin 10 none md2 md5 straight
"""
        (self.workdir / "lan.conf").write_text(text)

    def _launch(self) -> None:
        if self._log is not None:
            self._log.close()
        self._log = (self.workdir / "sim.log").open("ab")
        self._proc = subprocess.Popen(
            [
                "ipmi_sim",
                "-n",
                "-c",
                str(self.workdir / "lan.conf"),
                "-f",
                str(self.workdir / "bmc.emu"),
                "-s",
                str(self.workdir / "sim-state"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_ready(self, timeout: float) -> None:
        def probe() -> str | None:
            answer = self.ipmitool("chassis", "power", "status")
            return None if answer.returncode == 0 else answer.stderr.strip()

        process.wait_ready(self._proc, probe, timeout, error=IpmiSimError, what="ipmi_sim")

    def _read(self, name: str, default: str) -> str:
        try:
            return (self.state_dir / name).read_text().strip() or default
        except FileNotFoundError:
            return default
        except OSError as exc:
            raise IpmiSimError(f"cannot read {name} of {self.name}: {exc}") from exc

    def _write(self, name: str, value: str) -> None:
        tmp = self.state_dir / f".{name}.harness"
        tmp.write_text(value + "\n")
        tmp.replace(self.state_dir / name)


class IpmiSim(process.WorkdirService):
    """One ipmi_sim per machine; a context manager.

    Args:
        machines: one ``IpmiMachine`` or several (names must differ).
        username / password: the BMC account (IPMI: at most 16 / 20 bytes).
        workdir: where each BMC's files go (default: a temp dir, removed on stop).
        start_timeout: seconds to wait for each simulator to answer.
    """

    error = IpmiSimError
    not_started = "simulator not started"
    workdir_prefix = "ipmi-sim-"

    def __init__(
        self,
        machines: IpmiMachine | Iterable[IpmiMachine],
        *,
        username: str = "admin",
        password: str = "lightsout-ipmi-pw",
        workdir: Path | None = None,
        start_timeout: float = 15.0,
    ) -> None:
        self.machines = (machines,) if isinstance(machines, IpmiMachine) else tuple(machines)
        if not self.machines:
            raise ValueError("IpmiSim needs at least one IpmiMachine")
        names = [m.name for m in self.machines]
        if len(set(names)) != len(names):
            raise ValueError(f"machine names must differ: {names}")
        if len(username.encode()) > 16 or len(password.encode()) > 20:
            raise ValueError("IPMI user names have at most 16 bytes, passwords at most 20")
        self.username = username
        self.password = password
        self.start_timeout = start_timeout
        super().__init__(workdir)
        self.bmcs: dict[str, IpmiBmc] = {}

    @property
    def bmc(self) -> IpmiBmc:
        """The only BMC (when there is exactly one machine)."""
        if len(self.bmcs) != 1:
            raise IpmiSimError(f"{len(self.bmcs)} BMCs: pick one with sim[name]")
        return next(iter(self.bmcs.values()))

    def __getitem__(self, name: str) -> IpmiBmc:
        return self.bmcs[name]

    def __iter__(self) -> Iterator[IpmiBmc]:
        return iter(self.bmcs.values())

    def start(self) -> Self:
        if shutil.which("ipmi_sim") is None or shutil.which("ipmitool") is None:
            raise IpmiSimError("ipmi_sim and ipmitool are needed (tools/ci/system-packages.sh)")
        self._make_workdir()
        try:
            for machine in self.machines:
                bmc = IpmiBmc(machine, self.workdir / machine.name, self.username, self.password)
                self.bmcs[machine.name] = bmc
                bmc.start(self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for bmc in self.bmcs.values():
            bmc.stop()
        self._remove_workdir()
