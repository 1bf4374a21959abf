"""Run the action Job's entrypoint, `python -m lightsout.runner`, as the Job's container does.

Shared by the runner-level e2e tests of every driver: lays out the Job's files (extravars file,
credentials directory, optional CA and overlay directories, termination-message file) in a temp
directory, runs the runner once as a subprocess with the shipped playbooks and roles, and
returns what it printed and wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunnerRun:
    """One finished run of the runner."""

    returncode: int
    stdout: str
    stderr: str
    result_text: str

    @property
    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.result_text)
        return data

    @property
    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = self.result["values"]
        return values

    def explain(self) -> str:
        return f"rc={self.returncode}\nresult={self.result_text}\nstdout:\n{self.stdout[-6000:]}"


def run_runner(
    tmp_path: Path,
    action: str,
    extravars: Mapping[str, Any],
    credentials: Mapping[str, str],
    *,
    credential_modes: Mapping[str, int] | None = None,
    ca: Mapping[str, str] | None = None,
    overlay: Mapping[str, str] | None = None,
) -> RunnerRun:
    """Lay out the Job's files under tmp_path and run the runner once.

    extravars are the Job's extra vars without `lightsout_action`, which is added from action.
    credentials and ca map file names to contents, as the Secrets are mounted; credential_modes
    sets a file's mode where the mount's matters. The overlay directory is created only when
    overlay is given (even empty); otherwise the runner is pointed at a directory that is absent.
    """
    job = tmp_path / f"job-{action}-{uuid.uuid4().hex[:6]}"
    credentials_dir = job / "credentials"
    credentials_dir.mkdir(parents=True)
    for name, text in credentials.items():
        (credentials_dir / name).write_text(text)
    for name, mode in (credential_modes or {}).items():
        (credentials_dir / name).chmod(mode)
    overlay_dir = job / "overlay"
    if overlay is not None:
        overlay_dir.mkdir()
        for name, text in overlay.items():
            (overlay_dir / name).write_text(text)
    (job / "extravars.json").write_text(json.dumps({**extravars, "lightsout_action": action}))
    result_path = job / "termination-log"
    work = job / "scratch"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "LIGHTSOUT_ACTION": action,
        "LIGHTSOUT_EXTRAVARS": str(job / "extravars.json"),
        "LIGHTSOUT_CREDENTIALS_DIR": str(credentials_dir),
        "LIGHTSOUT_PLAYBOOK_DIR": str(ROOT / "playbooks"),
        "LIGHTSOUT_ROLES_DIR": str(ROOT / "roles"),
        "LIGHTSOUT_OVERLAY_DIR": str(overlay_dir),
        "LIGHTSOUT_RESULT_PATH": str(result_path),
        "LIGHTSOUT_WORK_DIR": str(work),
    }
    if ca is not None:
        ca_dir = job / "ca"
        ca_dir.mkdir()
        for name, text in ca.items():
            (ca_dir / name).write_text(text)
        env["LIGHTSOUT_CA_DIR"] = str(ca_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "lightsout.runner"],
        env=env,
        cwd=job,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return RunnerRun(proc.returncode, proc.stdout, proc.stderr, result_path.read_text())
