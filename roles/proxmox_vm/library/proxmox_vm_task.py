#!/usr/bin/python
"""Run one Proxmox VE VM action as a task and wait until the task ends, failed or not.

Used by roles/proxmox_vm (tasks/start.yml, stop.yml, destroy.yml, clone_attempt.yml) in place
of community.proxmox.proxmox_kvm for the actions that start a Proxmox task. proxmox_kvm
waits for a task until it ends *with exit status OK*: a task that has already failed (QEMU
exited, the config lock was held, the storage is down) is waited for until the module's
timeout, and only "Reached timeout" is said. This module starts the task, then reads
GET /nodes/{node}/tasks/{upid}/status until `status` is `stopped` and reports `exitstatus`
at once; the timeout is only for a task that really hangs. Authentication and TLS options
are community.proxmox's own (same names, same behaviour).
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.community.proxmox.plugins.module_utils.proxmox import (  # type: ignore[import-untyped]
    ProxmoxAnsible,
    create_proxmox_module,
)

DOCUMENTATION = r"""
module: proxmox_vm_task
short_description: Start, shut down, destroy or clone a Proxmox VE VM and wait for its task.
description:
  - Sends one request that starts a Proxmox task (C(POST .../status/start),
    C(POST .../status/shutdown), C(DELETE /nodes/{node}/qemu/{vmid}), C(POST .../clone)),
    then polls C(GET /nodes/{node}/tasks/{upid}/status) until the task is stopped.
  - Fails as soon as the task ends with an exit status other than C(OK) (or C(WARNINGS ...)),
    with that exit status; fails after O(timeout) seconds when the task is still running.
  - Sends nothing in check mode.
options:
  node:
    description: The host the VM lives on (the request goes to it).
    type: str
    required: true
  vmid:
    description: The VM (for C(clone), the template or VM to clone).
    type: int
    required: true
  action:
    description: What to do.
    type: str
    required: true
    choices: [start, shutdown, destroy, clone]
  params:
    description: >-
      The request's parameters as the Proxmox API names them, e.g. C({forceStop: 1, timeout: 120})
      for C(shutdown), C({purge: 1}) for C(destroy), C({newid: 201, name: worker-7, full: 1}) for
      C(clone). Booleans are sent as 0 or 1.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the task to end.
    type: int
    default: 120
  poll_interval:
    description: Longest pause, in seconds, between two reads of the task's status.
    type: int
    default: 2
# The authentication and TLS options (api_host, api_user, api_token_id, ca_path, ...).
extends_documentation_fragment:
  - community.proxmox.proxmox.documentation
author: Lights-Out authors
"""

RETURN = r"""
task_started:
  description: Whether Proxmox accepted the request and started a task (false - the API refused it).
  returned: always
  type: bool
upid:
  description: The task's id.
  returned: when a task was started
  type: str
task_node:
  description: The host the task runs on.
  returned: when a task was started
  type: str
task_status:
  description: C(stopped) when the task ended, C(running) when the timeout passed first.
  returned: when a task was started
  type: str
exitstatus:
  description: The task's exit status (C(OK), C(WARNINGS n), or the error); empty while running.
  returned: when a task was started
  type: str
log:
  description: The task log's last lines (at most 20).
  returned: when a task was started
  type: list
  elements: str
"""

LOG_LINES = 20
FIRST_PAUSE = 0.25


def request(api: Any, node: str, vmid: int, action: str, params: dict[str, Any]) -> str:
    """Send the request that starts the task; its UPID."""
    vm = api.nodes(node).qemu(vmid)
    if action == "start":
        return str(vm.status.start.post(**params))
    if action == "shutdown":
        return str(vm.status.shutdown.post(**params))
    if action == "clone":
        return str(vm.clone.post(**params))
    return str(vm.delete(**params))


def ended_ok(exitstatus: str) -> bool:
    # PVE ends a task that logged warnings with "WARNINGS: n": it did its job.
    return exitstatus == "OK" or exitstatus.startswith("WARN")


def main() -> None:
    module = create_proxmox_module(
        {
            "node": {"type": "str", "required": True},
            "vmid": {"type": "int", "required": True},
            "action": {
                "type": "str",
                "required": True,
                "choices": ["start", "shutdown", "destroy", "clone"],
            },
            "params": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 120},
            "poll_interval": {"type": "int", "default": 2},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=True, task_started=False)
    proxmox = ProxmoxAnsible(module)
    api = proxmox.proxmox_api
    params = {
        k: int(v) if isinstance(v, bool) else v for k, v in p["params"].items() if v is not None
    }
    try:
        upid = request(api, p["node"], p["vmid"], p["action"], params)
    except Exception as exc:  # proxmoxer raises several kinds: all are "the API refused it"
        module.fail_json(msg=str(exc), task_started=False)
    # The UPID names the host that runs the task (UPID:node:pid:...).
    task_node = upid.split(":")[1] if upid.startswith("UPID:") else p["node"]
    task = api.nodes(task_node).tasks(upid)
    deadline = time.monotonic() + p["timeout"]
    pause = FIRST_PAUSE
    while True:
        try:
            status = task.status.get()
        except Exception as exc:  # a read failed: the task may still run, so say which
            module.fail_json(
                msg=f"reading the status of task {upid} failed: {exc}",
                task_started=True,
                upid=upid,
                task_node=task_node,
                task_status="unknown",
                exitstatus="",
                log=[],
            )
        if status.get("status") == "stopped" or time.monotonic() >= deadline:
            break
        # Short pauses first: most tasks end within a second or two.
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(pause * 2, float(p["poll_interval"]))
    try:
        log = [str(line.get("t", "")) for line in task.log.get(limit=500)][-LOG_LINES:]
    except Exception:  # the log only adds detail to the result
        log = []
    exitstatus = str(status.get("exitstatus") or "")
    result = {
        "task_started": True,
        "upid": upid,
        "task_node": task_node,
        "task_status": str(status.get("status")),
        "exitstatus": exitstatus,
        "log": log,
    }
    if status.get("status") != "stopped":
        module.fail_json(
            msg=f"task {upid} still running after {p['timeout']} s", changed=True, **result
        )
    if not ended_ok(exitstatus):
        module.fail_json(msg=f"task {upid} ended with '{exitstatus}'", changed=True, **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
