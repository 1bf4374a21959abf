#!/usr/bin/python
"""The hosts of a Proxmox VE cluster with their status and memory, for clone placement.

Used by roles/proxmox_vm (tasks/clone.yml). community.proxmox.proxmox_node_info also asks
every host for its network and version, which fails as soon as one host is offline (HTTP
595) - and homelab hosts are often powered off. This module makes ONE cluster-wide read,
GET /cluster/resources?type=node, which lists offline hosts too. Authentication and TLS
options are community.proxmox's own (same names, same behaviour).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.community.proxmox.plugins.module_utils.proxmox import (  # type: ignore[import-untyped]
    ProxmoxAnsible,
    create_proxmox_module,
)

DOCUMENTATION = r"""
module: proxmox_vm_hosts_info
short_description: List the hosts of a Proxmox VE cluster with their status and memory.
description:
  - Reads C(GET /cluster/resources?type=node) once; offline hosts are listed with
    C(status=offline) and no usage figures.
options: {}
# The authentication and TLS options (api_host, api_user, api_token_id, ca_path, ...).
extends_documentation_fragment:
  - community.proxmox.proxmox.documentation
author: Lights-Out authors
"""

RETURN = r"""
proxmox_hosts:
  description: One entry per host.
  returned: success
  type: list
  elements: dict
  sample:
    - {node: pve1, status: online, mem: 2147483648, maxmem: 8589934592, cpu: 0.02, maxcpu: 4}
"""

FIELDS = ("node", "status", "mem", "maxmem", "cpu", "maxcpu")


def main() -> None:
    module = create_proxmox_module({}, supports_check_mode=True)
    proxmox = ProxmoxAnsible(module)
    try:
        resources: list[dict[str, Any]] = proxmox.proxmox_api.cluster.resources.get(type="node")
    except Exception as exc:  # proxmoxer raises several kinds: report them all
        module.fail_json(msg=f"Reading the cluster's hosts failed: {exc}")
    hosts = [
        {key: item[key] for key in FIELDS if key in item}
        for item in resources
        if item.get("type", "node") == "node"
    ]
    module.exit_json(changed=False, proxmox_hosts=sorted(hosts, key=lambda h: str(h.get("node"))))


if __name__ == "__main__":
    main()
