"""A machine behind an emulated smart plug, for the molecule scenario (loopback only).

Starts the lab's ``PlugMachine`` (lightsout_lab/plugs.py) in front of an ``SshMachine`` (an
OpenSSH server on 127.0.0.1 that is the machine's probe; off at first), with its Shelly,
Tasmota and Home Assistant front-ends (lightsout_lab/plug_apis.py) on free loopback ports.
Writes how to reach everything to DIR/connection.json, and rewrites DIR/orders.json (every
relay order: on, machine state, watts, shutdown requests) and DIR/shutdowns (how many shutdown
commands ran) as they change. Runs until killed.

usage: machine.py DIR TOKEN
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from lightsout_lab.plug_apis import HomeAssistant, ShellyPlug, TasmotaPlug
from lightsout_lab.plugs import PlugMachine
from lightsout_lab.sshd import SshMachine


def write(path: Path, text: str) -> None:
    """Replace the file at once: the playbooks read these while they change."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main(workdir: str, token: str) -> None:
    out = Path(workdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with SshMachine("molecule", boot_seconds=1.0, shutdown_seconds=1.0) as box:
        plug = PlugMachine(box)
        with (
            ShellyPlug(plug) as shelly,
            TasmotaPlug(plug) as tasmota,
            HomeAssistant(plug, token=token) as ha,
        ):
            write(
                out / "connection.json",
                json.dumps(
                    {
                        "shelly": shelly.endpoint,
                        "tasmota": tasmota.endpoint,
                        "homeassistant": ha.endpoint,
                        "ssh_port": box.ssh.port,
                        "user": box.ssh.user,
                        "key": str(box.ssh.client_key_path),
                        "known_hosts": box.ssh.known_hosts_line,
                        "shutdown_command": box.shutdown_command,
                    }
                ),
            )
            while True:
                orders = [
                    {
                        "on": o.on,
                        "state": o.machine_state,
                        "watts": o.watts,
                        "shutdowns": o.shutdown_requests,
                        "source": o.source,
                    }
                    for o in plug.orders()
                ]
                write(out / "orders.json", json.dumps(orders))
                write(out / "shutdowns", str(box.shutdown_requests()))
                time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
