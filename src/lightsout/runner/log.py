"""Single-line JSON logs on stdout for the Job's pod log, redacted (called by the runner).

One object per line: `ts`, `level`, `event`, then the event's fields. Secrets never appear:
every line goes through the `Redactor` built from the credentials dir.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from lightsout.runner.redact import Redactor

#: ansible-runner events worth a log line, and the status they mean.
_TASK_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class JsonLogger:
    """Writes redacted JSON lines to `stream` (stdout by default)."""

    redactor: Redactor = field(default_factory=Redactor)
    stream: TextIO | None = None

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        record = {
            "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "level": level,
            "event": event,
            **fields,
        }
        line = json.dumps(self.redactor.obj(record), ensure_ascii=False, default=str)
        out = self.stream or sys.stdout
        out.write(line + "\n")
        out.flush()

    def ansible_event(self, event: Mapping[str, Any]) -> None:
        """One line per task result and per play; quiet about everything else."""
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.log("play", play=data.get("play"))
        elif kind in _TASK_EVENTS:
            res = data.get("res") or {}
            status = _TASK_EVENTS[str(kind)]
            if status == "ok" and res.get("changed"):
                status = "changed"
            fields: dict[str, Any] = {"task": data.get("task"), "status": status}
            if data.get("role"):
                fields["role"] = data["role"]
            if status in {"failed", "unreachable"}:
                fields["msg"] = str(res.get("msg") or "")[:1000]
                fields["ignored"] = bool(data.get("ignore_errors"))
            self.log("task", level="error" if status == "failed" else "info", **fields)
        elif kind == "playbook_on_stats":
            counts: dict[str, Any] = {key: data.get(key) for key in ("failures", "changed", "ok")}
            self.log("stats", **counts)
