"""The runner's settings, read from the Job container's environment (pure).

Called by `lightsout.runner.main`. The Job builder sets these variables; the defaults are the
paths the shipped runner image and the Job's mounts use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ACTION_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,62}$")

DEFAULT_EXTRAVARS = "/etc/lightsout/extravars.json"
DEFAULT_CREDENTIALS_DIR = "/etc/lightsout/credentials"
DEFAULT_PLAYBOOK_DIR = "/opt/lightsout/playbooks"
DEFAULT_ROLES_DIR = "/opt/lightsout/roles"
DEFAULT_OVERLAY_DIR = "/etc/lightsout/overlay"
DEFAULT_RESULT_PATH = "/dev/termination-log"


class ConfigError(ValueError):
    """The environment does not describe a runnable action."""


@dataclass(frozen=True)
class RunnerConfig:
    """Where everything is. `playbook` is the Node's override file name, if any."""

    action: str
    extravars_path: Path
    credentials_dir: Path
    #: Where the Node's CA Secret is mounted, when it names one.
    ca_dir: Path | None
    #: Where an Ephemeral clone's join credentials are mounted (provision with `join`).
    join_dir: Path | None
    playbook_dir: Path
    roles_dir: Path
    overlay_dir: Path
    playbook: str | None
    result_path: Path
    work_dir: Path | None
    keep_work_dir: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunnerConfig:
        """Read `LIGHTSOUT_*` variables; raise ConfigError when the action is missing or bad."""
        action = env.get("LIGHTSOUT_ACTION", "").strip()
        if not ACTION_PATTERN.match(action):
            raise ConfigError(
                f"LIGHTSOUT_ACTION must name an action such as startup or shutdown, got {action!r}"
            )
        work_dir = env.get("LIGHTSOUT_WORK_DIR", "").strip()
        return cls(
            action=action,
            extravars_path=Path(env.get("LIGHTSOUT_EXTRAVARS") or DEFAULT_EXTRAVARS),
            credentials_dir=Path(env.get("LIGHTSOUT_CREDENTIALS_DIR") or DEFAULT_CREDENTIALS_DIR),
            ca_dir=Path(env["LIGHTSOUT_CA_DIR"]) if env.get("LIGHTSOUT_CA_DIR") else None,
            join_dir=Path(env["LIGHTSOUT_JOIN_DIR"]) if env.get("LIGHTSOUT_JOIN_DIR") else None,
            playbook_dir=Path(env.get("LIGHTSOUT_PLAYBOOK_DIR") or DEFAULT_PLAYBOOK_DIR),
            roles_dir=Path(env.get("LIGHTSOUT_ROLES_DIR") or DEFAULT_ROLES_DIR),
            overlay_dir=Path(env.get("LIGHTSOUT_OVERLAY_DIR") or DEFAULT_OVERLAY_DIR),
            playbook=env.get("LIGHTSOUT_PLAYBOOK", "").strip() or None,
            result_path=Path(env.get("LIGHTSOUT_RESULT_PATH") or DEFAULT_RESULT_PATH),
            work_dir=Path(work_dir) if work_dir else None,
            keep_work_dir=env.get("LIGHTSOUT_KEEP_WORK_DIR", "") in {"1", "true", "yes"},
        )
