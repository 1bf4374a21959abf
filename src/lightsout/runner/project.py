"""Which playbook runs, and the ansible-runner private data dir it runs in.

Called by `lightsout.runner.main`. The shipped playbooks (image: /opt/lightsout/playbooks) are
copied into `<private>/project`, then the user's overlay (a ConfigMap mounted at
/etc/lightsout/overlay; keys may be mapped to sub-paths such as `roles/x/tasks/main.yml`) is
copied over them: a file of the overlay wins over the shipped file of the same name, and an
overlay playbook can use the shipped `tasks/` and `vars/`. Roles: `project/roles` (from the
overlay) comes before the shipped roles in ANSIBLE_ROLES_PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

PLAYBOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.ya?ml$")


class ProjectError(ValueError):
    """The playbook or the extravars cannot be used."""


@dataclass(frozen=True)
class PlaybookChoice:
    """The playbook file name to run and where it comes from."""

    name: str
    source: Literal["overlay", "shipped"]
    path: Path


def playbook_name(action: str, override: str | None) -> str:
    """`override` (a Node's per-action playbook) if given, else `<action>.yml`; validated."""
    name = override or f"{action}.yml"
    if not PLAYBOOK_NAME.match(name):
        raise ProjectError(
            f"playbook name {name!r} must be a plain .yml/.yaml file name (no directories)"
        )
    return name


def resolve_playbook(
    action: str, override: str | None, *, overlay_dir: Path, playbook_dir: Path
) -> PlaybookChoice:
    """Find the playbook: the overlay's file of that name wins over the shipped one."""
    name = playbook_name(action, override)
    for source, directory in (("overlay", overlay_dir), ("shipped", playbook_dir)):
        candidate = directory / name
        if candidate.is_file():
            return PlaybookChoice(name, source, candidate)  # type: ignore[arg-type]
    raise ProjectError(
        f"no playbook {name!r} for action {action!r}: not in the overlay {overlay_dir} "
        f"nor in the shipped playbooks {playbook_dir}"
    )


def load_extravars(
    path: Path,
    *,
    action: str,
    credentials_dir: Path,
    ca_dir: Path | None = None,
    join_dir: Path | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Read the extravars JSON; the runner's own action and credentials dir win.

    Returns the extravars and notes about values it overrode (for the log).
    """
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ProjectError(f"extravars file {path} not found") from exc
    except (OSError, ValueError) as exc:
        raise ProjectError(f"extravars file {path} is not readable JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProjectError(f"extravars file {path} must hold a JSON object")
    notes: list[str] = []
    given = raw.get("lightsout_action")
    if given is not None and given != action:
        notes.append(f"lightsout_action {given!r} replaced by LIGHTSOUT_ACTION {action!r}")
    raw["lightsout_action"] = action
    raw["lightsout_credentials_dir"] = str(credentials_dir)
    for key, directory in (("lightsout_ca_dir", ca_dir), ("lightsout_join_dir", join_dir)):
        if directory is not None:
            raw[key] = str(directory)
    return raw, notes


def _copy_tree(source: Path, target: Path) -> None:
    """Copy files under `source` onto `target`, following symlinks, skipping dot entries.

    Kubernetes volume mounts hold `..data` and `..<timestamp>` entries next to the real keys.
    """
    for entry in sorted(source.iterdir()):
        if entry.name.startswith("."):
            continue
        destination = target / entry.name
        if entry.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            _copy_tree(entry, destination)
        elif entry.is_file():
            shutil.copyfile(entry, destination)


def prepare_private_data_dir(
    private_dir: Path,
    *,
    playbook_dir: Path,
    overlay_dir: Path,
    interpreter: str,
) -> Path:
    """Lay out ansible-runner's private data dir; return the project dir."""
    project = private_dir / "project"
    project.mkdir(parents=True, exist_ok=True)
    for source in (playbook_dir, overlay_dir):  # the overlay's files win: copied last
        if source.is_dir():
            _copy_tree(source, project)
    inventory = private_dir / "inventory"
    inventory.mkdir(exist_ok=True)
    (inventory / "hosts").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={interpreter}\n"
    )
    return project


def ansible_env(
    scratch: Path, *, roles_path: list[Path], base_env: Mapping[str, str]
) -> dict[str, str]:
    """Environment for ansible-playbook: roles, and no write outside the scratch dir.

    The pod's root filesystem is read-only: Ansible's home, temp dirs and caches all go under
    `scratch`, and HOME too unless the current one is writable.
    """
    home = Path(base_env.get("HOME") or "/nonexistent")
    tmp = _tmpdir(scratch, base_env)
    env = {
        "ANSIBLE_ROLES_PATH": ":".join(str(p) for p in roles_path),
        "ANSIBLE_HOME": str(scratch / "ansible"),
        "ANSIBLE_LOCAL_TEMP": str(scratch / "tmp" / "local"),
        "ANSIBLE_REMOTE_TEMP": str(scratch / "tmp" / "remote"),
        # Sockets live here (ssh ControlPath, persistent connections): keep the path short.
        "ANSIBLE_PERSISTENT_CONTROL_PATH_DIR": str(tmp / "cp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "TMPDIR": str(tmp),
    }
    if not _writable(home):
        env["HOME"] = str(scratch / "home")
    return env


#: Ansible's controller listens on an AF_UNIX socket under TMPDIR (`pymp-*/listener-*`, ~35
#: more bytes) and such paths must stay under 108 bytes.
MAX_TMPDIR = 64


def _tmpdir(scratch: Path, base_env: Mapping[str, str]) -> Path:
    """`scratch/tmp`, unless that path is too long for a socket: then the usual TMPDIR."""
    own = scratch / "tmp"
    if len(str(own)) <= MAX_TMPDIR:
        return own
    usual = Path(base_env.get("TMPDIR") or tempfile.gettempdir())
    if len(str(usual)) <= MAX_TMPDIR and _writable(usual):
        return usual
    return own


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def make_dirs(env: Mapping[str, str]) -> None:
    """Create the directories `ansible_env` points at."""
    for key in (
        "ANSIBLE_HOME",
        "ANSIBLE_LOCAL_TEMP",
        "ANSIBLE_REMOTE_TEMP",
        "XDG_CACHE_HOME",
        "TMPDIR",
        "HOME",
        "ANSIBLE_PERSISTENT_CONTROL_PATH_DIR",
    ):
        if key in env:
            Path(env[key]).mkdir(parents=True, exist_ok=True)
