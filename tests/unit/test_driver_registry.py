"""The driver registry is the one place a driver is declared: what is derived from it matches it.

The CRD's `spec.driver`, the Secrets checked before a Job (`state/references.py`), the playbooks'
role map (the generated block of playbooks/vars/drivers.yml), the role itself (its argument
specs and state input) and the lab's emulator are each held against `DRIVERS` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.models.crd import crd_objects
from lightsout.models.drivers import (
    DRIVER_KINDS,
    DRIVERS,
    KIND_CHOICES_MARKER,
    REGISTRY,
    NodeDriver,
    playbook_vars,
    role_kinds,
    with_kind_choices,
    with_playbook_vars,
)
from lightsout.models.enums import Action
from lightsout.state.references import unresolved
from lightsout_lab.emulators import EMULATORS

ROOT = Path(__file__).resolve().parents[2]
DRIVERS_YML = ROOT / "playbooks" / "vars" / "drivers.yml"


def test_the_playbooks_role_map_is_the_registrys() -> None:
    text = DRIVERS_YML.read_text()
    assert with_playbook_vars(text) == text, "run `make crds` to regenerate drivers.yml's block"
    loaded = yaml.safe_load(text)
    assert loaded["lightsout_driver_roles"] == {d.kind: d.role for d in DRIVERS}
    assert loaded["lightsout_ephemeral_drivers"] == ["proxmox"]
    assert loaded["lightsout_password_drivers"] == ["redfish", "ipmi"]
    assert loaded["lightsout_off_confirming_drivers"] == ["redfish", "ipmi"]


def test_a_role_serving_several_drivers_offers_the_registrys_kinds() -> None:
    """plug_power's `plug_power_kind` choices are the registry's plug drivers (`make crds`
    writes them), so a new vendor is not also a hand-edited list in the role."""
    specs = ROOT / "roles" / "plug_power" / "meta" / "argument_specs.yml"
    text = specs.read_text()
    assert KIND_CHOICES_MARKER in text
    assert with_kind_choices(text, "plug_power") == text, "run `make crds`"
    options = yaml.safe_load(text)["argument_specs"]["main"]["options"]
    assert options["plug_power_kind"]["choices"] == role_kinds("plug_power")
    assert {"shelly", "tasmota", "homeassistant"} <= set(role_kinds("plug_power"))
    # A registry with a fourth vendor rewrites the line; the rest of the file is untouched.
    line = f"choices: [{', '.join(role_kinds('plug_power'))}]"
    renamed = text.replace(line, "choices: [shelly]")
    assert renamed != text
    assert with_kind_choices(renamed, "plug_power") == text


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.kind)
def test_each_driver_has_its_role_with_a_state_input(driver: Any) -> None:
    specs = yaml.safe_load(
        (ROOT / "roles" / driver.role / "meta" / "argument_specs.yml").read_text()
    )
    options = specs["argument_specs"]["main"]["options"]
    assert f"{driver.role}_state" in options
    assert (ROOT / "roles" / driver.role / "defaults" / "main.yml").is_file()


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.kind)
def test_a_driver_inspects_when_its_role_reports_what_the_machine_is(driver: Any) -> None:
    """`inspects` (what the replay's checks report too) matches the role: it sets
    `<role>_inspected` to something other than null somewhere in its tasks."""
    tasks = (ROOT / "roles" / driver.role / "tasks").glob("*.yml")
    sets = [
        line
        for path in tasks
        for line in path.read_text().splitlines()
        if line.strip().startswith(f"{driver.role}_inspected:")
        and line.split(":", 1)[1].strip() != "null"
    ]
    assert bool(sets) == driver.inspects, sets


def test_every_driver_is_emulated_in_the_lab() -> None:
    assert set(EMULATORS) == set(DRIVER_KINDS)


def test_the_crd_offers_one_block_per_driver_with_its_model() -> None:
    schema = crd_objects()[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    driver = schema["properties"]["spec"]["properties"]["driver"]
    assert list(driver["properties"]) == list(DRIVER_KINDS)
    for entry in DRIVERS:
        assert NodeDriver.model_fields[entry.kind].description == entry.description
    assert driver["x-kubernetes-validations"][0]["rule"].count("has(self.") == len(DRIVERS)


def test_drivers_declare_their_traits() -> None:
    # A plug cuts the power: only its OS's shutdown over SSH is graceful, never the plug itself.
    assert {d.kind for d in DRIVERS if not d.graceful} == set(role_kinds("plug_power"))
    assert {"shelly", "tasmota", "homeassistant"} <= set(role_kinds("plug_power"))
    assert [d.kind for d in DRIVERS if d.ephemeral] == ["proxmox"]
    assert all({Action.STARTUP, Action.SHUTDOWN, Action.HEALTHCHECK} <= d.actions for d in DRIVERS)
    assert playbook_vars()["lightsout_password_drivers"] == ["redfish", "ipmi"]


SSH = {"host": "192.0.2.9", "user": "ops", "privateKeySecretRef": {"name": "box-ssh"}}
BLOCKS: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
    "redfish": ({"credentialsSecretRef": {"name": "bmc"}}, "bmc", ("username", "password")),
    "ipmi": (
        {"credentialsSecretRef": {"name": "bmc", "usernameKey": "u"}},
        "bmc",
        ("u", "password"),
    ),
    "wol": ({"ssh": SSH}, "box-ssh", ("ssh-privatekey",)),
    "proxmox": (
        {"credentialsSecretRef": {"name": "pve", "tokenIdKey": "id", "tokenSecretKey": "secret"}},
        "pve",
        ("id", "secret"),
    ),
    "shelly": ({"ssh": SSH}, "box-ssh", ("ssh-privatekey",)),
    "tasmota": ({"ssh": SSH}, "box-ssh", ("ssh-privatekey",)),
    "homeassistant": (
        {"ssh": SSH, "tokenSecretRef": {"name": "box-ssh"}},
        "box-ssh",
        ("ssh-privatekey", "token"),
    ),
}


def test_every_driver_is_covered_here() -> None:
    assert set(BLOCKS) == set(REGISTRY)


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_a_missing_key_of_the_drivers_secret_holds_the_machine_back(kind: str) -> None:
    block, name, keys = BLOCKS[kind]
    node = {
        "metadata": {"namespace": "lab", "name": "m"},
        "spec": {"group": "g", "driver": {kind: block}},
    }
    held = {name: frozenset(keys[:-1])}
    found = unresolved(node, {"spec": {}}, "startup", held.get, lambda _n: frozenset())
    assert found is not None
    assert found.message.startswith(
        f"{REGISTRY[kind].secrets(block)[0].what} lab/{name} has no key"
    )
    assert repr(keys[-1]) in found.message
    assert (
        unresolved(
            node, {"spec": {}}, "startup", {name: frozenset(keys)}.get, lambda _n: frozenset()
        )
        is None
    )
