"""The extravars contract between the operator and the shipped playbooks (pure).

Called by the actuator when it builds an action Job. The machine's parameters become extravars
(see playbooks/README.md); credentials never do: only Secret *names* and *key names* leave this
module, and the Job mounts that Secret as files under `lightsout_credentials_dir`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CREDENTIALS_DIR = "/etc/lightsout/credentials"


def _driver(spec: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    for kind, block in (spec.get("driver") or {}).items():
        if isinstance(block, Mapping):
            return str(kind), block
    return "", {}


def credentials_secret(spec: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(credentials Secret name, CA Secret name) referenced by the driver block."""
    _, block = _driver(spec)
    ref = block.get("credentialsSecretRef") or (block.get("ssh") or {}).get("privateKeySecretRef")
    ca = ((block.get("tls") or {}).get("caSecretRef") or {}).get("name")
    return ((ref or {}).get("name"), ca)


def _redfish(block: Mapping[str, Any]) -> dict[str, Any]:
    tls = block.get("tls") or {}
    ref = block.get("credentialsSecretRef") or {}
    return {
        "endpoint": block.get("endpoint"),
        "system_id": block.get("systemId"),
        "validate_certs": not tls.get("insecureSkipVerify", False),
        # The file name only: the runner knows where the CA Secret is mounted.
        "ca_key": (tls.get("caSecretRef") or {}).get("key", "ca.crt"),
        "boot_override": str(block.get("bootOverride", "None")).lower(),
        "graceful_timeout": int(block.get("gracefulShutdownSeconds", 120)),
        "username_key": ref.get("usernameKey", "username"),
        "password_key": ref.get("passwordKey", "password"),
    }


def action_extravars(node: Mapping[str, Any], action: str) -> dict[str, Any]:
    """Extravars of one action on one machine; contains no credential value."""
    spec = node.get("spec") or {}
    kind, block = _driver(spec)
    out: dict[str, Any] = {
        "lightsout_node": {
            "name": node["metadata"]["name"],
            "namespace": node["metadata"]["namespace"],
            "kubernetes_node_name": spec.get("kubernetesNodeName"),
        },
        "lightsout_group": spec.get("group"),
        "lightsout_action": action,
        "lightsout_driver": kind,
        "lightsout_credentials_dir": CREDENTIALS_DIR,
    }
    if kind == "redfish":
        out["lightsout_redfish"] = _redfish(block)
    elif kind:
        # Other drivers pass their block through unchanged: its Secret references hold only
        # names (which Secret, which key = which mounted file), never a credential value.
        params = dict(block)
        if kind == "wol":
            # A Wake-on-LAN machine has no BMC to ask: the playbook waits on the probe port,
            # and must give up inside the Job's deadline (timeout + 120 s) to say why itself.
            power = spec.get("power") or {}
            params.setdefault("bootTimeoutSeconds", int(power.get("bootTimeoutSeconds", 600)))
            params.setdefault(
                "shutdownTimeoutSeconds", int(power.get("shutdownTimeoutSeconds", 300))
            )
        out[f"lightsout_{kind}"] = params
    return out
