"""What a playbook run produced, from ansible-runner's event stream, as ONE JSON object (pure).

`EventCollector` is the ansible-runner `event_handler`: it keeps the first failed task and its
message, the `set_stats` values (`artifact_data` of the `playbook_on_stats` event) and
Ansible's own error lines (a syntax error fails before any task). `build_result` turns that
into a `RunResult`, and `render_result` serialises it for the termination message, which
Kubernetes cuts at 4096 bytes: the message is shortened first so the JSON stays whole.
Called by `lightsout.runner.main`; the operator parses the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lightsout.text import MARK, clip_middle

#: Kubernetes keeps at most this many bytes of a termination message.
RESULT_LIMIT = 4096
#: A message longer than this is cut even when the whole result would fit.
MESSAGE_LIMIT = 2048
#: Values kept when the others cannot fit, the ones the operator reads: the machine a
#: health-check pod checked (without it no one can tell whose result it is, and the machine's
#: check never lands), the power state read, a clone's vmid and host (without them a clone
#: goes unrecorded) and how long the OS had before a forced power-off (the operator warns of
#: it), and whether the power was left on for the operator to confirm the OS is down. Kept
#: only as numbers or short strings (a name has at most 253 characters).
KEPT_VALUES = ("node", "power_state", "vmid", "host", "forced_after_seconds", "cut_pending")
_KEPT_MAX = 253
#: Values that are sentences of their own (what a power-off saw, in order): the operator quotes
#: them where they belong, so the one-line summary of the values leaves them out.
PROSE_VALUES = frozenset({"evidence", "forced_reason"})

Outcome = Literal["Succeeded", "Failed"]


@dataclass(frozen=True)
class RunResult:
    """The Job's result, as the operator reads it from the termination message."""

    result: Outcome
    failed_task: str | None
    message: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.result == "Succeeded"

    def to_dict(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "failedTask": self.failed_task,
            "message": self.message,
            "values": self.values,
        }


def failure_message(res: Mapping[str, Any]) -> str:
    """The most useful text of a failed task's `res`: msg, else the items' msgs, else stderr."""
    msg = res.get("msg")
    if isinstance(msg, str) and msg.strip():
        return msg.strip()
    results = res.get("results")
    if isinstance(results, list):
        item_msgs = [
            str(r["msg"]).strip()
            for r in results
            if isinstance(r, Mapping) and r.get("failed") and r.get("msg")
        ]
        if item_msgs:
            return "; ".join(dict.fromkeys(item_msgs))
    for key in ("stderr", "module_stderr", "reason", "exception"):
        text = res.get(key)
        if isinstance(text, str) and text.strip():
            return text.strip()
    return "the task failed without a message"


def task_label(data: Mapping[str, Any]) -> str | None:
    """`role : task` like Ansible prints it, or the task name alone outside roles."""
    task = str(data.get("task") or "").strip()
    role = str(data.get("role") or "").strip()
    if not task:
        return None
    return f"{role} : {task}" if role else task


@dataclass
class EventCollector:
    """ansible-runner `event_handler`; `on_event` also receives every event (for logging)."""

    on_event: Callable[[Mapping[str, Any]], None] | None = None
    failed_task: str | None = None
    failure: str | None = None
    stats: dict[str, Any] | None = None
    error_lines: list[str] = field(default_factory=list)

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind in {"runner_on_failed", "runner_on_unreachable"} and not data.get("ignore_errors"):
            if self.failed_task is None:
                self.failed_task = task_label(data)
                res = data.get("res")
                self.failure = failure_message(res if isinstance(res, Mapping) else {})
        elif kind == "playbook_on_stats":
            artifact = data.get("artifact_data")
            if isinstance(artifact, Mapping):
                self.stats = dict(artifact)
        elif kind in {"verbose", "error"} or not kind:
            for line in str(event.get("stdout") or "").splitlines():
                if line.strip().startswith(("ERROR!", "[ERROR]")) and len(self.error_lines) < 5:
                    self.error_lines.append(line.strip())
        if self.on_event is not None:
            self.on_event(event)
        return True  # keep ansible-runner's own artifacts

    @property
    def values(self) -> dict[str, Any]:
        """The playbook's `set_stats` data under `lightsout` (empty when not reported)."""
        reported = (self.stats or {}).get("lightsout")
        return dict(reported) if isinstance(reported, Mapping) else {}


def build_result(
    collector: EventCollector, *, status: str, rc: int | None, playbook: str
) -> RunResult:
    """Decide the outcome from ansible-runner's status/rc and what the events said."""
    values = collector.values
    if status == "successful" and rc == 0 and collector.failed_task is None:
        summary = ", ".join(
            f"{k}={v}"
            for k, v in values.items()
            if not isinstance(v, dict) and k not in PROSE_VALUES
        )
        message = f"{playbook} succeeded" + (f": {summary}" if summary else "")
        return RunResult("Succeeded", None, message, values)
    if collector.failure is not None:
        message = collector.failure
    elif collector.error_lines:
        message = " ".join(collector.error_lines)
    else:
        message = f"{playbook} ended with status {status} (rc {rc})"
    return RunResult("Failed", collector.failed_task, message, values)


def _dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def render_result(result: RunResult, limit: int = RESULT_LIMIT) -> str:
    """Serialise `result` as one JSON object of at most `limit` bytes.

    The message is cut first, in its middle (a failed task's message ends with what to do about
    it; JSON escaping can make it cost more than its UTF-8 length, so this loops); values too
    large to fit are replaced by `{"truncated": true}` and the `KEPT_VALUES` among them.
    """
    doc = result.to_dict()
    doc["message"] = clip_middle(result.message, MESSAGE_LIMIT)
    if result.failed_task is not None:
        doc["failedTask"] = clip_middle(result.failed_task, 256)
    _shrink_message(doc, limit)
    if len(_dump(doc)) > limit:
        kept = {
            key: value
            for key in KEPT_VALUES
            if isinstance(value := result.values.get(key), int)
            or (isinstance(value, str) and len(value) <= _KEPT_MAX)
        }
        doc["values"] = {**kept, "truncated": True}
        doc["message"] = clip_middle(result.message, MESSAGE_LIMIT)
        _shrink_message(doc, limit)
    return _dump(doc).decode()


def _shrink_message(doc: dict[str, Any], limit: int) -> None:
    """Cut the message until the document fits, in proportion to what its escaping costs."""
    while doc["message"] and (excess := len(_dump(doc)) - limit) > 0:
        raw = len(doc["message"].encode())
        escaped = len(_dump({"m": doc["message"]})) - len(_dump({"m": ""}))
        room = int(raw * (escaped - excess) / escaped) - len(MARK.encode()) - 1
        new = clip_middle(doc["message"], room) if room > len(MARK.encode()) else ""
        doc["message"] = new if len(new.encode()) < raw else ""
