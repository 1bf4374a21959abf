"""The extravars contract between the operator and the shipped playbooks (pure).

Called by the actuator when it builds an action Job. The machine's parameters become extravars
(see playbooks/README.md); credentials never do: only Secret *names* and *key names* leave this
module, and the Job mounts that Secret as files under `lightsout_credentials_dir`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightsout.models.common import CaSecretRef
from lightsout.models.drivers import PlugDriver, ProxmoxDriver, RedfishDriver, WoLDriver
from lightsout.models.enums import Action
from lightsout.models.node import NodeSpec
from lightsout.state.measured import expected_watts

CREDENTIALS_DIR = "/etc/lightsout/credentials"
#: The CA file name the playbooks look for without a CA Secret too (the model's default key).
DEFAULT_CA_KEY = str(CaSecretRef.model_fields["key"].default)
#: The draw under which a plug machine counts as off when neither the driver block nor the
#: power profile says better: above a standby draw (1-3 W), under any machine's idle draw.
DEFAULT_PLUG_OFF_WATTS = 5.0


def credentials_secret(spec: NodeSpec) -> tuple[str | None, str | None]:
    """(credentials Secret name, CA Secret name) referenced by the driver block."""
    block = spec.driver.config
    if isinstance(block, WoLDriver | PlugDriver):
        # A plug driver's Home Assistant token lives in that same Secret (the model says so).
        return block.ssh.private_key_secret_ref.name, None
    tls = block.tls if isinstance(block, RedfishDriver | ProxmoxDriver) else None
    ca = tls.ca_secret_ref if tls is not None else None
    return block.credentials_secret_ref.name, ca.name if ca is not None else None


def _redfish(block: RedfishDriver) -> dict[str, Any]:
    ca, ref = block.tls.ca_secret_ref, block.credentials_secret_ref
    return {
        "endpoint": block.endpoint,
        "system_id": block.system_id,
        "validate_certs": not block.tls.insecure_skip_verify,
        # The file name only: the runner knows where the CA Secret is mounted.
        "ca_key": ca.key if ca is not None else DEFAULT_CA_KEY,
        "boot_override": block.boot_override.lower(),
        "graceful_timeout": block.graceful_shutdown_seconds,
        "username_key": ref.username_key,
        "password_key": ref.password_key,
    }


def plug_off_watts(node: Mapping[str, Any], block: PlugDriver) -> float:
    """The draw under which a plug machine counts as off: the block's threshold, else halfway
    between its off draw (else 0) and its idle draw, each as learned from what the plug
    measured (`status.learned`), else as declared in `spec.power`; else the default."""
    if block.off_watts_threshold is not None:
        return block.off_watts_threshold
    watts = expected_watts(node)
    if watts.idle is not None:
        return round(((watts.off or 0.0) + watts.idle) / 2, 1)
    return DEFAULT_PLUG_OFF_WATTS


def action_extravars(node: Mapping[str, Any], spec: NodeSpec, action: Action) -> dict[str, Any]:
    """Extravars of one action on one machine; contains no credential value."""
    kind, block = spec.driver.kind, spec.driver.config
    out: dict[str, Any] = {
        "lightsout_node": {
            "name": node["metadata"]["name"],
            "namespace": node["metadata"]["namespace"],
            "kubernetes_node_name": spec.kubernetes_node_name,
        },
        "lightsout_group": spec.group,
        "lightsout_action": str(action),
        "lightsout_driver": str(kind),
        "lightsout_credentials_dir": CREDENTIALS_DIR,
    }
    if isinstance(block, RedfishDriver):
        out["lightsout_redfish"] = _redfish(block)
        return out
    # Other drivers pass their block as the API server stores it (defaults filled in): its
    # Secret references hold only names (which Secret, which key = which mounted file).
    params = block.to_dict()
    if isinstance(block, WoLDriver | PlugDriver):
        # A Wake-on-LAN machine has no BMC to ask: the playbook waits on the probe port,
        # and must give up inside the Job's deadline (timeout + 120 s) to say why itself.
        params["bootTimeoutSeconds"] = spec.power.boot_timeout_seconds
        params["shutdownTimeoutSeconds"] = spec.power.shutdown_timeout_seconds
    if isinstance(block, PlugDriver):
        params["offWattsThreshold"] = plug_off_watts(node, block)
    out[f"lightsout_{kind}"] = params
    return out
