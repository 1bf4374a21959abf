"""A `Plan` as a person reads it: the text (and JSON) that `lightsout plan` prints. Pure.

Per Group: its policy line and notes, each machine (phase, desired power state, size, what the
planner thinks of it), the actions it would take and why; then every pending pod with the
machine it would get or the reason it gets none; then every suspended deferrable Job, released
now or held until when and why. `lightsout plan` feeds it the same snapshot the
operator would plan on, so what it prints is what the operator decides.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from lightsout.planning.autoscaler.decisions import Plan, PowerOn
from lightsout.state.types import Machine, ObjectKey, Snapshot


def render_text(snapshot: Snapshot, plan: Plan, now: datetime) -> str:
    lines = [f"Plan at {now.isoformat(timespec='seconds')}: {plan.summary or 'no decision'}"]
    if not plan.decided:
        return "\n".join(lines) + "\n"
    machines: dict[ObjectKey, list[Machine]] = defaultdict(list)
    for machine in snapshot.machines:
        machines[machine.group_key].append(machine)
    groups = {group.key for group in snapshot.groups} | set(machines)
    for key in sorted(groups):
        lines.extend(("", f"Group {key}"))
        notes = plan.explanations.groups.get(key) or (
            "group not found: its machines are left alone",
        )
        lines.extend(f"  {note}" for note in notes)
        members = sorted(machines.get(key, ()), key=lambda m: m.key)
        if members:
            width = max(len(m.key.name) for m in members)
            lines.append("  machines:")
            for machine in members:
                phase = str(machine.phase or "-")
                note = "; ".join(plan.explanations.machines.get(machine.key, ()))
                size = str(machine.resources) if machine.resources is not None else "unknown"
                lines.append(
                    f"    {machine.key.name:<{width}}  {phase:<12} desired {machine.desired:<3}  "
                    f"{size}"
                )
                if note:
                    lines.append(f"    {'':<{width}}  └ {note}")
        actions = [a for a in plan.actions if a.group == key]
        if actions:
            lines.append("  actions:")
            for action in actions:
                dry = " (dry run: not applied)" if action.dry_run else ""
                verb = "power on" if isinstance(action, PowerOn) else "power off"
                lines.append(f"    {verb} {action.machine.name}{dry}: {action.reason}")
    if plan.explanations.pods:
        lines.extend(("", "Pending pods:"))
        for key, notes in sorted(plan.explanations.pods.items()):
            lines.append(f"  {key}: {'; '.join(notes)}")
    if plan.releases or plan.waits:
        lines.extend(("", "Deferrable Jobs:"))
        for release in plan.releases:
            lines.append(f"  {release.job}: {release.reason}")
        for key, wait in sorted(plan.waits.items()):
            lines.append(f"  {key}: {wait.reason}")
    if snapshot.problems:
        lines.extend(("", "Objects skipped or read with defaults:"))
        lines.extend(f"  {problem}" for problem in snapshot.problems)
    return "\n".join(lines) + "\n"


def as_json(snapshot: Snapshot, plan: Plan, now: datetime) -> dict[str, Any]:
    return {
        "time": now.isoformat(),
        "decided": plan.decided,
        "summary": plan.summary,
        "groups": {str(k): list(v) for k, v in plan.explanations.groups.items()},
        "machines": [
            {
                "machine": str(m.key),
                "group": m.group,
                "phase": str(m.phase) if m.phase else None,
                "desired": str(m.desired),
                "size": m.resources.as_dict() if m.resources is not None else None,
                "notes": list(plan.explanations.machines.get(m.key, ())),
            }
            for m in sorted(snapshot.machines, key=lambda m: m.key)
        ],
        "actions": [
            {
                "action": "PowerOn" if isinstance(a, PowerOn) else "PowerOff",
                "machine": str(a.machine),
                "group": str(a.group),
                "reason": a.reason,
                "dryRun": a.dry_run,
                "pods": [str(p) for p in getattr(a, "pods", ())],
            }
            for a in plan.actions
        ],
        "pods": {str(k): list(v) for k, v in plan.explanations.pods.items()},
        "unneededSince": {str(k): v.isoformat() for k, v in plan.unneeded_since.items()},
        "jobs": [
            *({"job": str(r.job), "release": True, "reason": r.reason} for r in plan.releases),
            *(
                {"job": str(k), "release": False, "start": w.start.isoformat(), "reason": w.reason}
                for k, w in sorted(plan.waits.items())
            ),
        ],
        "problems": list(snapshot.problems),
    }


__all__ = ["as_json", "render_text"]
