"""The runner's pure helpers: settings, redaction, playbook resolution, events → result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightsout.runner.config import ConfigError, RunnerConfig
from lightsout.runner.project import (
    MAX_TMPDIR,
    ProjectError,
    ansible_env,
    load_extravars,
    prepare_private_data_dir,
    resolve_playbook,
)
from lightsout.runner.redact import MASK, Redactor, read_secret_dir, secret_variants
from lightsout.runner.result import (
    RESULT_LIMIT,
    EventCollector,
    RunResult,
    build_result,
    failure_message,
    render_result,
)
from lightsout.text import MARK

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------------------ config


def test_config_defaults_are_the_job_paths() -> None:
    config = RunnerConfig.from_env({"LIGHTSOUT_ACTION": "startup"})
    assert config.action == "startup"
    assert config.extravars_path == Path("/etc/lightsout/extravars.json")
    assert config.credentials_dir == Path("/etc/lightsout/credentials")
    assert config.playbook_dir == Path("/opt/lightsout/playbooks")
    assert config.roles_dir == Path("/opt/lightsout/roles")
    assert config.overlay_dir == Path("/etc/lightsout/overlay")
    assert config.result_path == Path("/dev/termination-log")
    assert config.playbook is None
    assert config.work_dir is None


def test_config_reads_every_variable() -> None:
    config = RunnerConfig.from_env(
        {
            "LIGHTSOUT_ACTION": "shutdown",
            "LIGHTSOUT_EXTRAVARS": "/x/ev.json",
            "LIGHTSOUT_CREDENTIALS_DIR": "/x/creds",
            "LIGHTSOUT_PLAYBOOK_DIR": "/x/pb",
            "LIGHTSOUT_ROLES_DIR": "/x/roles",
            "LIGHTSOUT_OVERLAY_DIR": "/x/overlay",
            "LIGHTSOUT_PLAYBOOK": "mine.yml",
            "LIGHTSOUT_RESULT_PATH": "/x/result",
            "LIGHTSOUT_WORK_DIR": "/x/work",
        }
    )
    assert config.playbook == "mine.yml"
    assert config.work_dir == Path("/x/work")
    assert config.result_path == Path("/x/result")


@pytest.mark.parametrize("action", ["", "Startup", "../etc", "start up", "x" * 80])
def test_config_refuses_a_bad_action(action: str) -> None:
    with pytest.raises(ConfigError, match="LIGHTSOUT_ACTION"):
        RunnerConfig.from_env({"LIGHTSOUT_ACTION": action})


# --------------------------------------------------------------------------------- redaction


def test_redactor_masks_raw_stripped_and_escaped_forms() -> None:
    redactor = Redactor.from_values(['p@ss w"rd\n'])
    assert redactor.text('login with p@ss w"rd failed') == f"login with {MASK} failed"
    assert redactor.text('{"password": "p@ss w\\"rd"}') == f'{{"password": "{MASK}"}}'
    assert redactor.text("url?pw=p%40ss%20w%22rd") == f"url?pw={MASK}"
    assert redactor.text("nothing secret here") == "nothing secret here"


def test_redactor_masks_lines_of_a_multiline_secret() -> None:
    key = "-----BEGIN KEY-----\nAAAABBBBCCCCDDDD\nshort\n-----END KEY-----\n"
    redactor = Redactor.from_values([key])
    assert MASK in redactor.text("bad line AAAABBBBCCCCDDDD here")
    assert redactor.text("a short word") == "a short word"


def test_redactor_prefers_the_longest_secret() -> None:
    redactor = Redactor.from_values(["admin", "admin-password"])
    assert redactor.text("admin-password") == MASK


def test_redactor_walks_json_like_values() -> None:
    redactor = Redactor.from_values(["s3cret"])
    data: Any = {"a": ["x s3cret", 1, True, None], "s3cret": {"b": "s3cret"}}
    assert redactor.obj(data) == {"a": [f"x {MASK}", 1, True, None], MASK: {"b": MASK}}


def test_secret_variants_ignore_empty_values() -> None:
    assert secret_variants("") == set()
    assert secret_variants("\n") == set()


def test_read_secret_dir_skips_kubernetes_internals(tmp_path: Path) -> None:
    data = tmp_path / "..2026_01_01"
    data.mkdir()
    (data / "password").write_text("pw")
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "password").symlink_to("..data/password")
    (tmp_path / "username").write_text("admin")
    assert sorted(read_secret_dir(tmp_path)) == ["admin", "pw"]
    assert read_secret_dir(tmp_path / "missing") == []


# ---------------------------------------------------------------------------------- playbooks


def _write(path: Path, text: str = "---\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_resolve_playbook_prefers_the_overlay(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    overlay = tmp_path / "overlay"
    _write(shipped / "startup.yml")
    _write(shipped / "shutdown.yml")
    _write(overlay / "startup.yml")
    choice = resolve_playbook("startup", None, overlay_dir=overlay, playbook_dir=shipped)
    assert (choice.name, choice.source) == ("startup.yml", "overlay")
    choice = resolve_playbook("shutdown", None, overlay_dir=overlay, playbook_dir=shipped)
    assert (choice.name, choice.source) == ("shutdown.yml", "shipped")


def test_resolve_playbook_uses_the_node_override(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    _write(overlay / "my-startup.yaml")
    choice = resolve_playbook(
        "startup", "my-startup.yaml", overlay_dir=overlay, playbook_dir=tmp_path / "none"
    )
    assert choice.name == "my-startup.yaml"
    assert choice.source == "overlay"


@pytest.mark.parametrize("name", ["../etc/passwd.yml", "sub/x.yml", ".hidden.yml", "x.json"])
def test_resolve_playbook_refuses_paths(tmp_path: Path, name: str) -> None:
    with pytest.raises(ProjectError, match="plain"):
        resolve_playbook("startup", name, overlay_dir=tmp_path, playbook_dir=tmp_path)


def test_resolve_playbook_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match=r"no playbook 'provision\.yml' for action 'provision'"):
        resolve_playbook("provision", None, overlay_dir=tmp_path, playbook_dir=tmp_path)


def test_prepare_private_data_dir_lays_overlay_over_shipped(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    _write(shipped / "startup.yml", "shipped")
    _write(shipped / "vars" / "drivers.yml", "shipped vars")
    # A ConfigMap mount: keys are symlinks into ..data.
    overlay = tmp_path / "overlay"
    _write(overlay / "..2026" / "startup.yml", "mine")
    _write(overlay / "..2026" / "roles" / "r" / "tasks" / "main.yml", "role")
    (overlay / "..data").symlink_to("..2026")
    (overlay / "startup.yml").symlink_to("..data/startup.yml")
    (overlay / "roles").symlink_to("..data/roles")
    project = prepare_private_data_dir(
        tmp_path / "private", playbook_dir=shipped, overlay_dir=overlay, interpreter="/py"
    )
    assert (project / "startup.yml").read_text() == "mine"
    assert (project / "vars" / "drivers.yml").read_text() == "shipped vars"
    assert (project / "roles" / "r" / "tasks" / "main.yml").read_text() == "role"
    assert not (project / "..data").exists()
    hosts = (tmp_path / "private" / "inventory" / "hosts").read_text()
    assert "ansible_connection=local" in hosts
    assert "ansible_python_interpreter=/py" in hosts


def test_load_extravars_sets_the_runner_values(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "ev.json",
        json.dumps({"lightsout_action": "shutdown", "lightsout_driver": "redfish"}),
    )
    extravars, notes = load_extravars(path, action="startup", credentials_dir=Path("/c"))
    assert extravars["lightsout_action"] == "startup"
    assert extravars["lightsout_credentials_dir"] == "/c"
    assert extravars["lightsout_driver"] == "redfish"
    assert notes and "replaced" in notes[0]


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_load_extravars_refuses_bad_files(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "ev.json", text)
    with pytest.raises(ProjectError, match="extravars"):
        load_extravars(path, action="startup", credentials_dir=Path("/c"))
    with pytest.raises(ProjectError, match="not found"):
        load_extravars(tmp_path / "missing.json", action="startup", credentials_dir=Path("/c"))


def test_ansible_env_keeps_ansible_in_the_scratch_dir(tmp_path: Path) -> None:
    missing_home = {"HOME": str(tmp_path / "no-such-home")}
    env = ansible_env(tmp_path, roles_path=[Path("/a"), Path("/b")], base_env=missing_home)
    assert env["ANSIBLE_ROLES_PATH"] == "/a:/b"
    for key in ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP", "HOME"):
        assert env[key].startswith(str(tmp_path)), key
    assert env["TMPDIR"].startswith(str(tmp_path)) or len(env["TMPDIR"]) <= MAX_TMPDIR


def test_ansible_env_keeps_socket_paths_short(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 80)
    env = ansible_env(deep, roles_path=[], base_env={"HOME": str(tmp_path), "TMPDIR": "/tmp"})
    assert len(env["TMPDIR"]) <= MAX_TMPDIR
    assert "HOME" not in env  # a writable HOME is kept


# ------------------------------------------------------------------------------- events/result


def _event(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": data}


STATS = _event(
    "playbook_on_stats",
    artifact_data={"lightsout": {"power_state": "On", "driver": "redfish", "changed": True}},
)


def test_collector_keeps_the_first_real_failure() -> None:
    collector = EventCollector()
    collector(_event("runner_on_failed", task="ignored one", ignore_errors=True, res={"msg": "x"}))
    collector(
        _event("runner_on_failed", task="Send", role="redfish_power", res={"msg": "HTTP 400"})
    )
    collector(_event("runner_on_failed", task="later", res={"msg": "later"}))
    assert collector.failed_task == "redfish_power : Send"
    assert collector.failure == "HTTP 400"


def test_collector_reads_set_stats_values() -> None:
    collector = EventCollector()
    collector(STATS)
    assert collector.values == {"power_state": "On", "driver": "redfish", "changed": True}


def test_collector_passes_every_event_on() -> None:
    seen: list[str] = []
    collector = EventCollector(on_event=lambda e: seen.append(str(e["event"])))
    assert collector(_event("runner_on_ok", task="t")) is True
    assert seen == ["runner_on_ok"]


def test_failure_message_falls_back_to_items_and_stderr() -> None:
    assert failure_message({"msg": " boom "}) == "boom"
    items = {"results": [{"failed": True, "msg": "a"}, {"failed": False, "msg": "ok"}]}
    assert failure_message(items) == "a"
    assert failure_message({"stderr": "trace"}) == "trace"
    assert failure_message({}) == "the task failed without a message"


def test_build_result_success() -> None:
    collector = EventCollector()
    collector(STATS)
    result = build_result(collector, status="successful", rc=0, playbook="startup.yml")
    assert result.succeeded
    assert result.failed_task is None
    assert result.values["power_state"] == "On"
    assert "power_state=On" in result.message


def test_build_result_failure_from_a_task() -> None:
    collector = EventCollector()
    collector(_event("runner_on_failed", task="Confirm", res={"msg": "still On"}))
    collector(STATS)
    result = build_result(collector, status="failed", rc=2, playbook="shutdown.yml")
    assert (result.result, result.failed_task, result.message) == ("Failed", "Confirm", "still On")
    assert result.values["power_state"] == "On"


def test_build_result_failure_before_any_task() -> None:
    collector = EventCollector()
    collector({"event": "verbose", "stdout": "[ERROR]: Syntax error in startup.yml"})
    result = build_result(collector, status="failed", rc=4, playbook="startup.yml")
    assert result.failed_task is None
    assert result.message == "[ERROR]: Syntax error in startup.yml"
    bare = build_result(EventCollector(), status="failed", rc=4, playbook="startup.yml")
    assert bare.message == "startup.yml ended with status failed (rc 4)"


def test_render_result_is_the_contract_shape() -> None:
    text = render_result(RunResult("Succeeded", None, "ok", {"changed": False}))
    assert json.loads(text) == {
        "result": "Succeeded",
        "failedTask": None,
        "message": "ok",
        "values": {"changed": False},
    }


@pytest.mark.parametrize("message", ["x" * 10000, "é" * 5000, '"\\' * 3000, "\x01" * 3000])
def test_render_result_fits_the_termination_message(message: str) -> None:
    text = render_result(RunResult("Failed", "t" * 1000, message, {"power_state": "On"}))
    assert len(text.encode()) <= RESULT_LIMIT
    doc = json.loads(text)
    # Cut in the middle: the start says what failed, the end what to do about it.
    assert MARK in doc["message"]
    assert doc["message"].startswith(message[:4]) and doc["message"].endswith(message[-4:])
    assert doc["values"] == {"power_state": "On"}
    assert len(doc["failedTask"]) <= 256


def test_render_result_drops_values_that_cannot_fit() -> None:
    result = RunResult("Succeeded", None, "fine", {"blob": "v" * 10000})
    doc = json.loads(render_result(result))
    assert doc["values"] == {"truncated": True}
    assert doc["message"] == "fine"
    assert len(render_result(result).encode()) <= RESULT_LIMIT


def test_render_result_keeps_the_values_the_operator_reads_when_the_rest_cannot_fit() -> None:
    node = "n" * 253
    values = {"node": node, "power_state": "On", "inventory": "v" * 10000}
    doc = json.loads(render_result(RunResult("Succeeded", None, "fine", values)))
    assert doc["values"] == {"node": node, "power_state": "On", "truncated": True}
    clone = {"vmid": 7003, "host": "pve2", "power_state": "On", "log": "v" * 10000}
    doc = json.loads(render_result(RunResult("Failed", "t", "half-way", clone)))
    assert doc["values"] == {"vmid": 7003, "host": "pve2", "power_state": "On", "truncated": True}
    forced = {"power_state": "Off", "forced_after_seconds": 120, "log": "v" * 10000}
    doc = json.loads(render_result(RunResult("Succeeded", None, "fine", forced)))
    assert doc["values"] == {"power_state": "Off", "forced_after_seconds": 120, "truncated": True}
    too_long = {"node": "n" * 5000, "inventory": "v" * 10000}
    doc = json.loads(render_result(RunResult("Succeeded", None, "fine", too_long)))
    assert doc["values"] == {"truncated": True}
