#!/usr/bin/python
# Copyright Lights-Out authors
# SPDX-License-Identifier: Apache-2.0
"""Read-only IPMI power state, for the ipmi_power role.

community.general has ipmi_power and ipmi_boot, which change things, but no module that only
reads: ipmi_power in check mode tells "would change" through `changed`, which a task cannot
both read and report as unchanged. This module reads with the same client (pyghmi) and
never changes anything.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: lightsout_ipmi_status
short_description: Read a machine's power state from its BMC over IPMI-over-LAN
description:
  - Opens an IPMI 2.0 (RMCP+) session with pyghmi, like community.general.ipmi_power, and
    returns the chassis power state. Never changes anything.
options:
  host:
    description: Host name or IP address of the BMC.
    type: str
    required: true
  port:
    description: UDP port of the BMC.
    type: int
    default: 623
  username:
    description: BMC account name.
    type: str
    required: true
  password:
    description: BMC account password.
    type: str
    required: true
requirements:
  - pyghmi
author:
  - Lights-Out authors
"""

EXAMPLES = r"""
- name: Read the power state
  lightsout_ipmi_status:
    host: 10.0.0.22
    username: admin
    password: "{{ bmc_password }}"
  register: power
"""

RETURN = r"""
powerstate:
  description: The chassis power state.
  returned: success
  type: str
  sample: "on"
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from pyghmi.ipmi import command
except ImportError:
    PYGHMI_ERROR = traceback.format_exc()
    command = None
else:
    PYGHMI_ERROR = None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            port=dict(type="int", default=623),
            username=dict(type="str", required=True, no_log=True),
            password=dict(type="str", required=True, no_log=True),
        ),
        supports_check_mode=True,
    )
    if command is None:
        module.fail_json(msg=missing_required_lib("pyghmi"), exception=PYGHMI_ERROR)
    params = module.params
    try:
        session = command.Command(
            bmc=params["host"],
            userid=params["username"],
            password=params["password"],
            port=params["port"],
        )
        power = session.get_power()
    except Exception as exc:  # pyghmi raises IpmiException, socket errors, …
        reason = str(exc).strip()
        # pyghmi's IpmiException carries no text when the BMC never answered.
        module.fail_json(msg=reason if reason and reason != "None" else "no answer")
    if "error" in power:
        module.fail_json(msg=str(power["error"]))
    module.exit_json(changed=False, powerstate=power["powerstate"])


if __name__ == "__main__":
    main()
