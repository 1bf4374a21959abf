"""`lightsout logs NODE [--action A]`: the playbook output of a machine's last action (or its
last action of one kind), read from the action Job's pod. Pure: `cli.py` lists the machine's
action Jobs and the chosen Job's pods, these functions choose, and `cli.py` prints the pod's
log (which the API server fetches from the pod's kubelet).

Action Jobs stay `jobs.ttlSeconds` (an hour by default) after they finish, so this shows the
actions of about the last hour; the Node's `status.lastOperation` keeps the outcome longer.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from lightsout.actuation.inputs import job_identity

Obj = dict[str, Any]


class ExitCode(IntEnum):
    """What `lightsout logs` exits with; scripts may rely on these."""

    PRINTED = 0
    #: The pod exists but its log cannot be read (its kubelet unreachable, container not started).
    UNAVAILABLE = 1
    #: No such Node, no action Job (of that kind) left, or the Job's pod is gone.
    NOT_FOUND = 3


def _created(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def last_job(jobs: list[Obj], action: str | None) -> Obj | None:
    """The newest action Job (of `action` when given): created last, then highest generation
    and attempt (creation times have one-second resolution)."""
    keyed = [
        ((_created(job), ident[1], ident[2]), job)
        for job in jobs
        if (ident := job_identity(job)) and (action is None or ident[0] == action)
    ]
    return max(keyed, key=lambda item: item[0])[1] if keyed else None


def last_pod(pods: list[Obj]) -> Obj | None:
    """The Job's newest pod: the last attempt when the Job retried."""
    return max(pods, key=_created) if pods else None


def job_result(job: Mapping[str, Any]) -> str:
    """Running, Succeeded or Failed, as the Job's conditions say."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return "Succeeded" if condition["type"] == "Complete" else "Failed"
    return "Running"


def header(job: Obj, pod: Obj) -> str:
    """One line naming what the log belongs to (printed on stderr, so stdout is the log)."""
    ident = job_identity(job)
    action = ident[0] if ident else "?"
    return (
        f"# {action} {job_result(job)}: job {job['metadata']['name']}, "
        f"pod {pod['metadata']['name']} (created {_created(pod)})"
    )


def _line(raw: str) -> str:
    """One of the runner's JSON log lines (`lightsout.runner.log`) as a person reads it."""
    import json

    try:
        record = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(record, dict) or "event" not in record:
        return raw
    ts = str(record.pop("ts", ""))[11:19]
    level, event = record.pop("level", ""), record.pop("event")
    if event == "task":
        task = f"{record.pop('role')} : {record['task']}" if "role" in record else record["task"]
        status = str(record.get("status", ""))
        text = f"{status.upper() if status in ('failed', 'unreachable') else status:<10}{task}"
        if record.get("msg"):
            text += f": {record['msg']}" + (" (ignored)" if record.get("ignored") else "")
        return f"{ts}  {text}"
    if event == "play":
        return f"{ts}  PLAY      {record.get('play')}"
    if event == "stats":
        return f"{ts}  RECAP     " + " ".join(f"{k}={v}" for k, v in record.items())
    fields = " ".join(f"{k}={v}" for k, v in record.items())
    return f"{ts}  {event.upper() if level == 'error' else event:<10}{fields}"


def render(output: bytes) -> str:
    """The pod's log, each runner JSON line made readable; other lines as they are."""
    return "".join(_line(raw) + "\n" for raw in output.decode(errors="replace").splitlines())
