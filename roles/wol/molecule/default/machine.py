"""A Wake-on-LAN "machine" for the molecule scenario (loopback only).

Listens for UDP datagrams on 127.0.0.1 (a free port, written to PORT_FILE), records each one
as a JSON line in RECORD (time, source, hex payload), and when one is a magic packet for MAC
(6 x 0xFF then 16 x the MAC in its first 102 bytes) while the machine is off, "powers on":
starts the OpenSSH server of SSHD_CONFIG, whose port is the machine's probe. The shutdown
command run over SSH stops that sshd again ("powers off").

usage: machine.py PORT_FILE RECORD MAC SSHD_CONFIG SSHD_PID_FILE SSHD_LOG
"""

import json
import os
import socket
import subprocess
import sys
import time


def is_running(pid_file):
    try:
        with open(pid_file) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def main(port_file, record, mac, sshd_config, sshd_pid_file, sshd_log):
    magic = b"\xff" * 6 + bytes.fromhex(mac.replace(":", "").replace("-", "")) * 16
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    with open(port_file + ".tmp", "w") as handle:
        handle.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    while True:
        data, source = sock.recvfrom(4096)
        with open(record, "a") as handle:
            handle.write(json.dumps({"time": time.time(), "source": list(source), "hex": data.hex()}) + "\n")
        if data[:102] == magic and not is_running(sshd_pid_file):
            subprocess.run(["/usr/sbin/sshd", "-f", sshd_config, "-E", sshd_log], check=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
