"""How many requests a flapping BMC receives (`planning.machine.outages.outage_requests` and
`redfish_power_on_requests`): the Python figures against the retry settings and task files of
roles/redfish_power they stand for, walked here independently of the formula."""

from __future__ import annotations

import re
from typing import Any

import jinja2
import pytest
import yaml

from lightsout.execution.jobs import JobRequest
from lightsout.planning.machine import outages
from lightsout.planning.machine.common import retry_backoff
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

ROLE = ROOT / "roles/redfish_power"
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")
#: The one way the role sends a request to the BMC (roles/http_request's action).
REQUEST = "http_request"
#: Modules that act on the runner only: no request to the BMC.
LOCAL = frozenset(
    {
        "ansible.builtin.assert",
        "ansible.builtin.debug",
        "ansible.builtin.fail",
        "ansible.builtin.set_fact",
        "ansible.builtin.stat",
    }
)
#: Conditions a power-on never meets: another state's steps, and the systems listing
#: (resolve_search.yml) a BMC that resolves the system id directly (the bound's premise) never
#: reaches.
NOT_ON = (
    "redfish_power_state == 'off'",
    "redfish_power_state == 'status'",
    "__redfish_power_direct.status != 200",
)
PXE = "redfish_power_boot_override == 'pxe'"


def role_defaults() -> dict[str, Any]:
    defaults: dict[str, Any] = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    return defaults


class PowerOnWalk:
    """The most requests the role's task files can send for a power-on: every request task on
    the path counted as often as its retries let it run, every include followed."""

    def __init__(self, *, pxe: bool) -> None:
        self.pxe = pxe
        self.derived: dict[str, str] = yaml.safe_load((ROLE / "vars/main.yml").read_text())
        self.jinja = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=True)

    def render(self, text: str, context: dict[str, Any]) -> int:
        values = dict(context)
        if "_redfish_power_wait_attempts" in text:
            values["_redfish_power_wait_attempts"] = self.render(
                self.derived["_redfish_power_wait_attempts"], context
            )
        return int(self.jinja.from_string(text).render(values))

    def skipped(self, task: dict[str, Any]) -> bool:
        when = task.get("when", [])
        conditions = " and ".join(when) if isinstance(when, list) else str(when)
        if PXE in conditions and not self.pxe:
            return True
        return any(condition in conditions for condition in NOT_ON)

    def file(self, name: str, context: dict[str, Any]) -> int:
        tasks = yaml.safe_load((ROLE / "tasks" / name).read_text())
        return sum(self.task(task, context) for task in tasks)

    def task(self, task: dict[str, Any], context: dict[str, Any]) -> int:
        if self.skipped(task):
            return 0
        if "block" in task:
            parts = task["block"] + task.get("rescue", []) + task.get("always", [])
            return sum(self.task(inner, context) for inner in parts)
        # An include's figures (a wait's seconds); its other vars name states, not counts.
        inner_vars = {
            key: self.render(str(value), context) if "{{" in str(value) else value
            for key, value in (task.get("vars") or {}).items()
            if key.endswith("_seconds")
        }
        for include in INCLUDES:
            if include in task:
                # A loop over an include: `range(N) | list`, N from the role's settings.
                loop = re.fullmatch(
                    r"\{\{\s*range\((.+)\)\s*\|\s*list\s*\}\}", task.get("loop", "")
                )
                assert loop or "loop" not in task, f"{task['name']}: a loop the walk cannot count"
                times = self.render("{{ " + loop.group(1) + " }}", context) if loop else 1
                # A file named after a setting (power_{{ redfish_power_state }}.yml).
                name = self.jinja.from_string(task[include]).render(context)
                return times * self.file(name, {**context, **inner_vars})
        if REQUEST not in task:
            # Modules are dotted (a role's own action is not, and the request is the only one).
            unknown = {key for key in task if "." in key} - LOCAL
            assert not unknown, f"{task['name']}: {unknown} may send requests the walk ignores"
            return 0
        assert "loop" not in task, f"{task['name']}: a loop on the power-on path"
        if "retries" not in task:
            return 1
        retries = self.render(task["retries"], context)
        until = str(task["until"])
        # wait.yml stops itself at its last read ("attempts >= the same figure as retries").
        capped = "attempts" in until and re.search(r"\{\{\s*(\w+)", task["retries"])
        if capped and capped.group(1) in until:
            return retries
        return 1 + retries  # Ansible's `retries` counts the runs after the first


def test_the_retry_settings_are_the_ones_the_role_and_the_playbooks_use() -> None:
    """The Jobs run the role with playbooks/vars/drivers.yml's values where it maps a setting
    (with a default: no Node field sets them), else with the role's defaults; both must be the
    Python constants."""
    python = {
        "transition_timeout": outages.REDFISH_TRANSITION_TIMEOUT_SECONDS,
        "poll_interval": outages.REDFISH_POLL_INTERVAL_SECONDS,
        "busy_retries": outages.REDFISH_BUSY_RETRIES,
        "power_on_attempts": outages.REDFISH_POWER_ON_ATTEMPTS,
    }
    defaults = role_defaults()
    drivers = (ROOT / "playbooks/vars/drivers.yml").read_text()
    for name, value in python.items():
        assert defaults[f"redfish_power_{name}"] == value, name
        mapped = re.search(rf"^redfish_power_{name}: (.*)$", drivers, re.MULTILINE)
        if mapped is not None:
            passed = re.search(rf"lightsout_redfish\.{name} \| default\((\d+)\)", mapped[1])
            assert passed is not None and int(passed[1]) == value, mapped[0]


@pytest.mark.parametrize("pxe", [False, True])
def test_the_power_on_bound_is_what_the_roles_tasks_can_send(pxe: bool) -> None:
    walked = PowerOnWalk(pxe=pxe).file("main.yml", {**role_defaults(), "redfish_power_state": "on"})
    assert outages.redfish_power_on_requests(pxe=pxe) == walked


def test_a_power_on_run_sends_at_most_140_requests_178_with_pxe() -> None:
    """login 1 + read 1 + PowerState reads while a power-off lands (ceil(120 / 5) + 1 = 25) +
    2 power-on attempts of an order sent at most 1 + 5 times and two waits of 25 reads (56
    each) + logout 1; with PXE the boot override on the system and on its settings object,
    each an ETag read and 3 PATCHes of at most 6 sends (38)."""
    assert outages.redfish_power_on_requests() == 140
    assert outages.redfish_power_on_requests(pxe=True) == 178


@pytest.mark.parametrize(
    ("window", "requests"),
    # Attempts start at 0, 30, 90, 210 s; + the one after the outage; 2 pods of 140 requests.
    [(1, 2 * 280), (90, 3 * 280), (91, 4 * 280), (300, 5 * 280)],
)
def test_an_outage_costs_its_attempts_and_the_one_after_each_at_most_2_pods(
    window: float, requests: int
) -> None:
    pods = JobRequest.backoff_limit + 1  # the default
    assert pods == 2
    per_pod = outages.redfish_power_on_requests()
    bound = outages.outage_requests(window, retry_backoff, pods=pods, per_pod=per_pod)
    assert bound == requests


def test_a_shorter_backoff_allows_more_requests() -> None:
    """The bound follows the backoff it is given: every 10 s, a 35-second outage lets 4
    attempts start (0, 10, 20, 30 s), then 1 more."""
    assert outages.outage_requests(35, lambda _attempt: 10, pods=1, per_pod=3) == 5 * 3


def test_the_walk_sees_a_request_added_to_the_role() -> None:
    """The walk is what keeps the formula honest: one more request task on the path is
    counted."""
    walk = PowerOnWalk(pxe=False)
    extra = {"name": "Read once more", REQUEST: {"url": "x"}}
    block = {"name": "b", "block": [extra], "always": [extra]}
    assert walk.task(block, role_defaults()) == 2
    for other in ("community.general.redfish_command", "ansible.builtin.uri"):
        with pytest.raises(AssertionError, match="may send requests"):
            walk.task({"name": "Other", other: {}}, role_defaults())
