#!/usr/bin/python
# Copyright Lights-Out authors
# SPDX-License-Identifier: Apache-2.0
"""The documentation of the `http_request` action (action_plugins/).

Like ansible.builtin.set_fact, the action does its work in Ansible's worker process and this
file only documents it: no module code is sent or run.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: http_request
short_description: One HTTP(S) request, answered like ansible.builtin.uri
description:
  - Sends one request from Ansible's worker process (no module process is started) and
    returns what ansible.builtin.uri returns for the same request and options.
options:
  url:
    description: The URL.
    type: str
    required: true
  method:
    description: The HTTP method.
    type: str
    default: GET
  headers:
    description: Request headers.
    type: dict
    default: {}
  body:
    description: The request body; with body_format json a structure sent as JSON.
    type: raw
  body_format:
    description: raw, or json (the body is serialised and Content-Type set when not given).
    type: str
    choices: [raw, json]
    default: raw
  validate_certs:
    description: Whether the server's certificate must validate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to validate the server's certificate against.
    type: path
  timeout:
    description: Socket timeout in seconds.
    type: int
    default: 30
  return_content:
    description: Whether the answer's body is returned as `content`.
    type: bool
    default: false
  status_code:
    description: The statuses that are success; any other sets failed.
    type: list
    elements: int
    default: [200]
author:
  - Lights-Out authors
"""

EXAMPLES = r"""
- name: Read the system
  http_request:
    url: https://bmc.example/redfish/v1/Systems/1
    headers: {Accept: application/json}
  register: system
"""

RETURN = r"""
status:
  description: The HTTP status, -1 when nothing answered.
  type: int
  returned: always
msg:
  description: What happened, in uri's words.
  type: str
  returned: always
json:
  description: The parsed body, when the answer is JSON.
  type: raw
  returned: when the answer is JSON
content:
  description: The answer's body, with return_content.
  type: str
  returned: with return_content
location:
  description: The Location header, made absolute.
  type: str
  returned: when the answer has one
"""
