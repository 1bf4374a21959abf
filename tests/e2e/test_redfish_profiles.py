"""The Redfish driver against BMCs that behave like real vendors' (iDRAC, iLO, AMI, ...).

One emulator holds one system per vendor profile (`lightsout_lab.redfish_profiles`). One
ansible-runner play drives all of them at once with the real `redfish_power` role (one host per
system, in parallel): a power-on with a one-time PXE boot, then a power-off. Each row checks what
reached its BMC: exactly one accepted order of each kind (or the escalation's two, or a power-on
ordered again after the host fell back to Off), busy answers retried, iDRAC's 409 "already
powered ON" taken as success, the boot override PATCHed with the ETag rules the profile wants
(the refused If-Match forms, then the accepted one), and every Redfish session the role opened
deleted again. One more play drives a host that never completes a power-on: the run fails
saying so after two orders. (Sessions over power cycles through the operator against the
sessions-only BMC: test_power_redfish.py. The runner's playbooks around the role, and its
report of a forced power-off as forced_after_seconds, are proven in test_runner_redfish.py.)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from lightsout_lab.redfish_profiles import PROFILES, SESSIONS
from lightsout_lab.sushy import FakeSystem, SushyEmulator
from tests.harness.runner import ROOT

#: One worker runs every row: they share the module's one play against one emulator, which
#: each worker would otherwise run again.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("redfish-profiles")]

#: Seconds an OS that obeys gets to shut down (orders land 1-3 s late here).
GRACEFUL_TIMEOUT = 20
#: Seconds an OS that ignores the request gets before the power is forced off.
IGNORED_TIMEOUT = 3


@dataclasses.dataclass(frozen=True)
class Row:
    """One vendor profile and what the driver must send it."""

    profile: str
    on: str = "On"
    graceful: str = "GracefulShutdown"
    ignores_acpi: bool = False
    already_on: bool = False
    #: Power-ons the BMC accepted and the host did not complete before one did.
    fell_back: int = 0
    #: The answers to the boot override's PATCHes, in order.
    boots: tuple[int, ...] = (204,)

    @property
    def off_orders(self) -> list[str]:
        return [self.graceful, "ForceOff"] if self.ignores_acpi else [self.graceful]


ROWS = [
    # Redundant On: a power-on the BMC already started answers 409 "already powered ON".
    Row("idrac", already_on=True),
    # No GracefulShutdown: the soft-off is a PushPowerButton press, which this OS ignores.
    Row("ilo", graceful="PushPowerButton", ignores_acpi=True),
    Row("ami"),
    # Weak ETag refused (412), its strong form taken.
    Row("etag-strict", boots=(412, 204)),
    # Every If-Match refused (412): as read, strong, then none, which is taken.
    Row("no-if-match", boots=(412, 412, 204)),
    # The first power-on falls back to Off (PoweringOn, then Off): ordered once more.
    Row("falls-back-once", fell_back=1),
    Row("sessions-only"),
    # The PATCH on the ComputerSystem is refused: it goes to the settings object.
    Row("idrac10", boots=(400, 204)),
]
#: Every power-on of this one falls back: not a row, the run must fail (see its test).
NEVER_ON = FakeSystem(uuid=str(uuid.uuid4()), name="box-falls-back", profile="falls-back")
SYSTEMS = {
    row.profile: FakeSystem(
        uuid=str(uuid.uuid4()),
        name=f"box-{row.profile}",
        profile=row.profile,
        graceful_shutdown="ignore" if row.ignores_acpi else "obey",
    )
    for row in ROWS
}


@dataclasses.dataclass
class Driven:
    """The emulator after the role powered every system on (PXE once) and off again."""

    bmc: SushyEmulator
    facts: dict[str, dict[str, Any]]  # profile -> the role's result facts of each step


def run_play(
    tmp_path: Path,
    bmc: SushyEmulator,
    hosts: dict[str, dict[str, Any]],
    tasks: list[Any],
    *,
    failures: list[str] | None = None,
) -> dict[str, Any]:
    """Run `tasks` on `hosts` (local, in parallel) in one ansible-runner play; return the
    values the play reported with set_stats. With `failures`, the play is expected to fail:
    the failed tasks' messages are appended to it."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    playbook = project / f"play-{uuid.uuid4().hex[:6]}.yml"
    play = {"name": "Drive the BMC", "hosts": "all", "gather_facts": False, "tasks": tasks}
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "redfish_power_endpoint": bmc.endpoint,
        "redfish_power_username": bmc.username,
        "redfish_power_password": bmc.password,
        "redfish_power_ca_path": str(bmc.ca_path),
        "redfish_power_transition_timeout": 30,
        "redfish_power_poll_interval": 1,
        "redfish_power_busy_delay": 1,
    }
    result = ansible_runner.run(
        private_data_dir=str(tmp_path),
        playbook=str(playbook),
        inventory={"all": {"hosts": hosts, "vars": common}},
        envvars={
            "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        },
        forks=len(hosts),
        quiet=True,
    )
    with result.stdout as handle:
        output = handle.read()
    if failures is not None:
        assert result.rc != 0, output[-8000:]
        failed = [e for e in result.events if e.get("event") == "runner_on_failed"]
        failures.extend(str(e["event_data"]["res"].get("msg", "")) for e in failed)
        return {}
    assert result.rc == 0, output[-8000:]
    stats = [e for e in result.events if e.get("event") == "playbook_on_stats"]
    data: dict[str, Any] = stats[-1]["event_data"].get("artifact_data", {})
    return data


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    with SushyEmulator([*SYSTEMS.values(), NEVER_ON], landing_seconds=(1, 3)) as bmc:
        bmc.start_unseen_power_on(SYSTEMS["idrac"].uuid)
        hosts = {
            row.profile: {
                "redfish_power_system_id": SYSTEMS[row.profile].uuid,
                "redfish_power_graceful_timeout": (
                    IGNORED_TIMEOUT if row.ignores_acpi else GRACEFUL_TIMEOUT
                ),
            }
            for row in ROWS
        }
        role = "ansible.builtin.include_role"
        # The role's result facts after a step, as a Jinja expression.
        step = (
            "{'changed': redfish_power_changed, 'state': redfish_power_observed_state,"
            " 'forced_after': redfish_power_forced_after}"
        )
        tasks = [
            {
                "name": "Power on, booting from the network once",
                role: {"name": "redfish_power"},
                "vars": {"redfish_power_state": "on", "redfish_power_boot_override": "pxe"},
            },
            {
                "name": "Keep the result",
                "ansible.builtin.set_fact": {"on_result": "{{ " + step + " }}"},
            },
            {
                "name": "Power off",
                role: {"name": "redfish_power"},
                "vars": {"redfish_power_state": "off"},
            },
            {
                "name": "Report both",
                # Keyed by host inside one stat: a stat's own name must be an identifier.
                "ansible.builtin.set_stats": {
                    "data": {
                        "rows": "{{ {inventory_hostname: {'on': on_result, 'off': " + step + "}} }}"
                    }
                },
            },
        ]
        facts = run_play(tmp_path_factory.mktemp("profiles"), bmc, hosts, tasks)
        yield Driven(bmc, facts["rows"])


@pytest.mark.parametrize("row", ROWS, ids=[row.profile for row in ROWS])
def test_power_on_with_pxe_and_off(driven: Driven, row: Row) -> None:
    bmc, system, profile = driven.bmc, SYSTEMS[row.profile], PROFILES[row.profile]
    on, off = driven.facts[row.profile]["on"], driven.facts[row.profile]["off"]
    assert on["state"] == "On"
    assert off["state"] == "Off"
    assert bmc.power_state(system.uuid) == "Off"

    boots = bmc.boot_requests(system.uuid)
    assert tuple(r.status for r in boots) == row.boots
    assert all(r.body["Boot"]["BootSourceOverrideTarget"] == "Pxe" for r in boots)

    orders = bmc.power_requests(system.uuid)
    busy = [400] if profile.busy else []
    on_orders = [r for r in orders if r.reset_type == row.on]
    if row.already_on:
        # Busy once, then 409: nothing was ordered, and the machine came up all the same.
        assert [r.status for r in on_orders] == [400, 409]
    else:
        # A power-on that fell back is ordered again once it read Off, never before.
        assert [r.status for r in on_orders] == [*busy, 204] * (1 + row.fell_back)
    off_orders = [r for r in orders if r.reset_type != row.on]
    assert [r.reset_type for r in off_orders if r.status == 204] == row.off_orders
    assert [r.status for r in off_orders] == [*busy, 204] * len(row.off_orders)
    assert off["forced_after"] == (IGNORED_TIMEOUT if row.ignores_acpi else None)


def test_every_session_was_deleted(driven: Driven) -> None:
    made = [r for r in driven.bmc.requests() if r.path == SESSIONS and r.method == "POST"]
    assert len(made) == 2 * len(ROWS)  # each role run logged in once...
    assert driven.bmc.live_sessions() == 0  # ...and out again


def test_a_host_that_never_completes_its_power_on_fails_clearly(
    tmp_path: Path, driven: Driven
) -> None:
    """Every power-on falls back to Off: two orders (the second only after the first fell
    back), then the run fails saying what happened; the session is deleted all the same."""
    bmc = driven.bmc
    hosts = {"never-on": {"redfish_power_system_id": NEVER_ON.uuid}}
    tasks = [
        {
            "name": "Power on",
            "ansible.builtin.include_role": {"name": "redfish_power"},
            "vars": {"redfish_power_state": "on"},
        }
    ]
    failures: list[str] = []
    run_play(tmp_path, bmc, hosts, tasks, failures=failures)
    said = " ".join(failures)
    assert f"System {NEVER_ON.uuid} on {bmc.endpoint} did not power on" in said, failures
    assert "2 time(s) the BMC accepted the power-on, PowerState went PoweringOn" in said
    assert [(r.reset_type, r.status) for r in bmc.power_requests(NEVER_ON.uuid)] == [
        ("On", 204),
        ("On", 204),
    ]
    assert bmc.power_state(NEVER_ON.uuid) == "Off"
    assert bmc.live_sessions() == 0
