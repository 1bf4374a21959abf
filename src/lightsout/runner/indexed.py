"""One pod of a Group's health-check Job: which machine this pod checks, and with what.

The health-check CronJob (`lightsout.execution.health`) runs an Indexed Job with one pod per
machine of the Group, so each machine writes its own result to its own termination message
(no 4 KiB limit shared by 100 machines). Every pod has the same spec; what differs is the
completion index Kubernetes gives each pod (`JOB_COMPLETION_INDEX`). `runner.main` calls
`machine_env` first: it reads the machine list mounted from the Group's ConfigMap
(`LIGHTSOUT_MACHINES_DIR/machines.json`, entry N for index N) and turns that machine's entry
into the ordinary single-action settings: its extravars file (`N.json` beside the list), and
its credentials, CA and playbook directories, chosen among the Secrets and ConfigMaps mounted
into every pod of the Job (`LIGHTSOUT_CREDENTIALS_DIR_<k>`, `LIGHTSOUT_CA_DIR_<k>`,
`LIGHTSOUT_OVERLAY_DIR_<k>`). A Job checking only some of the machines (the first check of new
ones) names them in `LIGHTSOUT_CHECK_ONLY`, comma-separated: index N then checks the N-th name
(by name, not by position, since the list may be rewritten before the pod starts). Pure apart
from reading that one file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lightsout.runner.config import ConfigError

MACHINES_DIR_ENV = "LIGHTSOUT_MACHINES_DIR"
INDEX_ENV = "JOB_COMPLETION_INDEX"
MACHINES_FILE = "machines.json"
CHECK_ONLY_ENV = "LIGHTSOUT_CHECK_ONLY"
#: The entry's keys naming a mounted volume, and the variable each becomes.
VOLUME_ENV = {
    "credentials": "LIGHTSOUT_CREDENTIALS_DIR",
    "ca": "LIGHTSOUT_CA_DIR",
    "overlay": "LIGHTSOUT_OVERLAY_DIR",
}


def machine_env(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(the environment of this pod's one machine, the machine's name); ConfigError if none."""
    directory = Path(env[MACHINES_DIR_ENV])
    try:
        index = int(env.get(INDEX_ENV, ""))
    except ValueError as exc:
        raise ConfigError(f"{INDEX_ENV} is not a completion index: {env.get(INDEX_ENV)!r}") from exc
    listing = directory / MACHINES_FILE
    try:
        machines = json.loads(listing.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the machine list {listing} is unreadable: {exc}") from exc
    if not isinstance(machines, list):
        raise ConfigError(f"the machine list {listing} is not a list")
    only = [name for name in env.get(CHECK_ONLY_ENV, "").split(",") if name]
    if only:
        if not 0 <= index < len(only):
            raise ConfigError(f"no machine at index {index} of {CHECK_ONLY_ENV}")
        names = [e.get("node") if isinstance(e, Mapping) else None for e in machines]
        if only[index] not in names:
            # The machine left the Group after this Job was created: nothing to check.
            raise ConfigError(f"{only[index]} is no longer in the Group's machine list")
        index = names.index(only[index])
    if not 0 <= index < len(machines):
        # The Group shrank after this Job was created: nothing to check at this index.
        raise ConfigError(f"no machine at index {index} of the Group's machine list")
    entry = machines[index]
    if not isinstance(entry, Mapping) or not isinstance(entry.get("node"), str):
        raise ConfigError(f"entry {index} of the machine list names no machine")
    out = {k: v for k, v in env.items() if not k.startswith(tuple(VOLUME_ENV.values()))}
    out["LIGHTSOUT_EXTRAVARS"] = str(directory / f"{index}.json")
    for key, variable in VOLUME_ENV.items():
        slot = entry.get(key)
        if slot is not None:
            mounted = env.get(f"{variable}_{slot}")
            if not mounted:
                raise ConfigError(f"{variable}_{slot} is not set for {entry['node']}")
            out[variable] = mounted
    if isinstance(entry.get("playbook"), str) and entry["playbook"]:
        out["LIGHTSOUT_PLAYBOOK"] = entry["playbook"]
    return out, entry["node"]
