"""`python -m lightsout.runner`: run the action's playbook and write the Job's result.

The sequence: read the settings (env), build the redactor from the credentials dir, resolve
the playbook (overlay first), lay out the private data dir in the scratch dir, run
ansible-runner without process isolation, then write ONE JSON object to the result path
(the termination message) and exit 0 (Succeeded) or 1 (Failed). Any error of the runner
itself is a Failed result too, never a traceback without a result.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from lightsout.runner import indexed
from lightsout.runner.config import ConfigError, RunnerConfig
from lightsout.runner.log import JsonLogger
from lightsout.runner.project import (
    ProjectError,
    ansible_env,
    load_extravars,
    make_dirs,
    prepare_private_data_dir,
    resolve_playbook,
)
from lightsout.runner.redact import Redactor, read_secret_dir
from lightsout.runner.result import EventCollector, RunResult, build_result, render_result


def run_action(config: RunnerConfig, logger: JsonLogger, scratch: Path) -> RunResult:
    """Run the playbook for `config.action` in `scratch`; never raises for playbook failures."""
    import ansible_runner  # heavy; and only this function needs it

    choice = resolve_playbook(
        config.action,
        config.playbook,
        overlay_dir=config.overlay_dir,
        playbook_dir=config.playbook_dir,
    )
    extravars, notes = load_extravars(
        config.extravars_path,
        action=config.action,
        credentials_dir=config.credentials_dir,
        ca_dir=config.ca_dir,
        join_dir=config.join_dir,
    )
    for note in notes:
        logger.log("extravars", level="warning", note=note)
    private = scratch / "private"
    project = prepare_private_data_dir(
        private,
        playbook_dir=config.playbook_dir,
        overlay_dir=config.overlay_dir,
        interpreter=sys.executable,
    )
    envvars = ansible_env(
        scratch, roles_path=[project / "roles", config.roles_dir], base_env=os.environ
    )
    # ansible-runner spawns ansible-playbook by name: make sure this interpreter's one is found.
    envvars["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    )
    make_dirs(envvars)
    logger.log(
        "start",
        action=config.action,
        playbook=choice.name,
        source=choice.source,
        driver=extravars.get("lightsout_driver"),
        node=extravars.get("lightsout_node"),
    )
    collector = EventCollector(on_event=logger.ansible_event)
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook=choice.name,
        extravars=extravars,
        envvars=envvars,
        event_handler=collector,
        ident="run",
        quiet=True,
        process_isolation=False,
    )
    return build_result(collector, status=str(runner.status), rc=runner.rc, playbook=choice.name)


def write_result(path: Path, text: str, logger: JsonLogger) -> None:
    try:
        with path.open("w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        logger.log("result-not-written", level="error", path=str(path), error=str(exc))


def main(env: Mapping[str, str] | None = None) -> int:
    """Entry point; returns the process exit code (0 Succeeded, 1 Failed).

    In a pod of a Group's health-check Job (`LIGHTSOUT_MACHINES_DIR` set) the pod checks the
    machine of its completion index, names it in `values.node`, and exits 0 whenever it wrote
    that machine's result: a machine found unhealthy is a finding, not a failed pod, and must
    not fail the other machines' pods of the Job.
    """
    env = os.environ if env is None else env
    logger = JsonLogger()
    node: str | None = None
    try:
        if env.get(indexed.MACHINES_DIR_ENV):
            env, node = indexed.machine_env(env)
        config = RunnerConfig.from_env(env)
    except ConfigError as exc:
        result = RunResult("Failed", None, str(exc))
        path = Path(env.get("LIGHTSOUT_RESULT_PATH") or "/dev/termination-log")
        logger.log("result", level="error", result=result.result, message=result.message)
        write_result(path, render_result(result), logger)
        return 1

    secrets = read_secret_dir(config.credentials_dir)
    for name in ("token", "k3s-token"):
        token = config.join_dir / name if config.join_dir is not None else None
        if token is not None and token.is_file():
            # A join token is a credential too: never in the Job's log (the CA and the API
            # endpoint beside it are not secret).
            secrets.append(token.read_text().strip())
    redactor = Redactor.from_values(secrets)
    logger.redactor = redactor
    if config.work_dir is not None:
        # The pod's /tmp is an empty emptyDir: the runner's own subdirectory starts absent.
        config.work_dir.mkdir(parents=True, exist_ok=True)
    # A short prefix: Ansible puts a socket under it (see project.MAX_TMPDIR).
    scratch = Path(tempfile.mkdtemp(prefix="lo-", dir=config.work_dir))
    try:
        result = run_action(config, logger, scratch)
    except ProjectError as exc:
        result = RunResult("Failed", None, str(exc))
    except Exception as exc:  # the Job must still report why
        result = RunResult("Failed", None, f"runner error: {type(exc).__name__}: {exc}")
    finally:
        if not config.keep_work_dir:
            shutil.rmtree(scratch, ignore_errors=True)

    values = redactor.obj(result.values)
    if node is not None:
        values["node"] = node
    result = RunResult(
        result.result,
        redactor.text(result.failed_task) if result.failed_task is not None else None,
        redactor.text(result.message),
        values,
    )
    logger.log(
        "result",
        level="info" if result.succeeded else "error",
        result=result.result,
        failedTask=result.failed_task,
        message=result.message,
        values=result.values,
    )
    write_result(config.result_path, render_result(result), logger)
    return 0 if result.succeeded or node is not None else 1
