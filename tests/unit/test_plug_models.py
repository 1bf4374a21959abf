"""The smart-plug driver blocks (shelly, tasmota, homeassistant): what they accept, what they
refuse with the CRD's words, the off-draw threshold the playbook gets, and the one Secret."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lightsout.execution import extravars
from lightsout.models.enums import Action
from lightsout.models.node import NodeSpec
from lightsout.state.references import unresolved

pytestmark = pytest.mark.unit

SSH = {"host": "192.0.2.30", "user": "ops", "privateKeySecretRef": {"name": "nuc-creds"}}
HA = {
    "endpoint": "http://homeassistant.local:8123",
    "switchEntity": "switch.rack",
    "powerSensorEntity": "sensor.rack_power",
    "tokenSecretRef": {"name": "nuc-creds"},
    "ssh": SSH,
}


def node(driver: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "nuc", "namespace": "lab"},
        "spec": {"group": "homelab", "kubernetesNodeName": "nuc", "driver": driver, **spec},
    }


def spec(n: dict[str, Any]) -> NodeSpec:
    return NodeSpec.model_validate(n["spec"])


@pytest.mark.parametrize(
    ("kind", "block"),
    [
        ("shelly", {"endpoint": "http://192.0.2.40", "ssh": SSH}),
        ("tasmota", {"endpoint": "https://plug.lan/", "relay": 2, "ssh": SSH}),
        ("homeassistant", HA),
    ],
)
def test_each_plug_block_is_a_driver_of_its_own_kind(kind: str, block: dict[str, Any]) -> None:
    driver = spec(node({kind: block})).driver
    assert driver.kind == kind
    assert driver.plug is driver.config
    assert driver.plug is not None and driver.plug.force is False
    assert not driver.sends_magic_packets


def test_wake_on_lan_after_switching_on_puts_the_job_on_the_host_network() -> None:
    block = {
        "endpoint": "http://192.0.2.40",
        "ssh": SSH,
        "wakeOnLan": {"macAddress": "aa-bb-cc-dd-ee-ff"},
    }
    driver = spec(node({"shelly": block})).driver
    assert driver.sends_magic_packets
    assert driver.plug is not None and driver.plug.wake_on_lan is not None
    assert driver.plug.wake_on_lan.delay_seconds == 10


@pytest.mark.parametrize(
    ("kind", "change", "words"),
    [
        ("shelly", {"endpoint": "192.0.2.40"}, "must be an http:// or https:// URL"),
        ("shelly", {"ssh": None}, "ssh"),
        ("homeassistant", {"tokenSecretRef": {"name": "other"}}, "must name the Secret of ssh"),
        ("homeassistant", {"switchEntity": "light.rack"}, "switchEntity"),
        ("tasmota", {"offWattsThreshold": -1}, "offWattsThreshold"),
    ],
)
def test_bad_plug_blocks_are_refused_naming_the_field(
    kind: str, change: dict[str, Any], words: str
) -> None:
    base = HA if kind == "homeassistant" else {"endpoint": "http://192.0.2.40", "ssh": SSH}
    block = {k: v for k, v in {**base, **change}.items() if v is not None}
    with pytest.raises(ValidationError, match=words):
        spec(node({kind: block}))


@pytest.mark.parametrize(
    ("threshold", "power", "expected"),
    [
        (3.0, {"idleWatts": 20, "offWatts": 2}, 3.0),  # the block's own figure wins
        (None, {"idleWatts": 20, "offWatts": 2}, 11.0),  # halfway between off and idle
        (None, {"idleWatts": 9}, 4.5),  # no standby figure: from 0
        (None, {}, extravars.DEFAULT_PLUG_OFF_WATTS),
    ],
)
def test_the_off_draw_threshold_the_playbook_gets(
    threshold: float | None, power: dict[str, Any], expected: float
) -> None:
    block = {"endpoint": "http://192.0.2.40", "ssh": SSH}
    if threshold is not None:
        block["offWattsThreshold"] = threshold
    n = node({"tasmota": block}, power={**power, "shutdownTimeoutSeconds": 60})
    out = extravars.action_extravars(n, spec(n), Action.SHUTDOWN)["lightsout_tasmota"]
    assert out["offWattsThreshold"] == expected
    assert (out["shutdownTimeoutSeconds"], out["bootTimeoutSeconds"]) == (60, 600)


def test_the_off_draw_threshold_follows_what_the_plug_measured() -> None:
    # Declared 20 W idle, 2 W off; the plug has measured 30 W idle and 4 W standby: the
    # threshold is halfway between what was measured (17 W), not between the declarations.
    n = node({"tasmota": {"endpoint": "http://192.0.2.40", "ssh": SSH}}, power={"idleWatts": 20})
    n["spec"]["power"]["offWatts"] = 2
    n["status"] = {"learned": {"idleWatts": 30.0, "offWatts": 4.0}}
    out = extravars.action_extravars(n, spec(n), Action.SHUTDOWN)["lightsout_tasmota"]
    assert out["offWattsThreshold"] == 17.0


def test_home_assistant_token_comes_from_the_ssh_keys_secret_and_never_its_value() -> None:
    n = node({"homeassistant": HA})
    out = extravars.action_extravars(n, spec(n), Action.STARTUP)
    assert out["lightsout_driver"] == "homeassistant"
    assert out["lightsout_homeassistant"]["tokenSecretRef"] == {"name": "nuc-creds", "key": "token"}
    assert extravars.credentials_secret(spec(n)) == ("nuc-creds", None)


def test_a_missing_token_key_holds_the_action_back_naming_it() -> None:
    n = node({"homeassistant": HA})
    group = {"metadata": {"name": "homelab"}, "spec": {}}
    held = {"nuc-creds": frozenset({"ssh-privatekey"})}
    problem = unresolved(n, group, "startup", held.get, {}.get)
    assert problem is not None and "'token'" in problem.message
    held = {"nuc-creds": frozenset({"ssh-privatekey", "token"})}
    assert unresolved(n, group, "startup", held.get, {}.get) is None
