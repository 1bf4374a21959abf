"""`lightsout healthcheck NODE | --group G`: run a Group's health check now and print it. Pure.

`cli.py` makes a Job from the Group's health-check CronJob (as `kubectl create job --from=…`
does: the same pods, the same playbooks, the same credentials), waits until each of its pods has
ended, and hands the pods to `report`, which reads each machine's result from its pod's
termination message the way the operator does (`execution.health.pod_record`) and words it.
The operator records the same results into the Nodes' status, as for a scheduled run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightsout.commands.logs import job_result
from lightsout.execution import health
from lightsout.models.enums import OperationResult
from lightsout.planning.machine import healthjudge

Obj = Mapping[str, Any]


def results(pods: Iterable[Obj]) -> dict[str, Obj]:
    """Each machine's result record, by machine name (the newest when a pod was retried)."""
    found: dict[str, Obj] = {}
    for name, data in filter(None, map(health.pod_record, pods)):  # the pods that left one
        if name not in found or str(data["started"]) > str(found[name]["started"]):
            found[name] = data
    return found


def line(name: str, record: Obj) -> str:
    if record.get("result") == OperationResult.SUCCEEDED:
        return f"{name}: Healthy, power {record.get('powerState') or 'Unknown'}"
    message = str(record.get("message") or "")
    return f"{name}: Unhealthy, {healthjudge.classify(message)}: {message}"


def report(pods: Iterable[Obj], only: list[str] | None, count: int) -> tuple[list[str], bool]:
    """(one line per machine, all of them healthy): the machines named in `only`, else every
    machine of the run (`count` of them; those whose pod left no result are counted)."""
    found = results(pods)
    names = only if only is not None else sorted(found)
    lines = [
        line(name, found[name]) if name in found else f"{name}: no result (its pod did not run)"
        for name in names
    ]
    missing = 0 if only is not None else count - len(found)
    if missing > 0:
        lines.append(f"{missing} machine(s) of the Group left no result (their pods did not run)")
    healthy = missing <= 0 and all(
        name in found and found[name].get("result") == OperationResult.SUCCEEDED for name in names
    )
    return lines, healthy


def finished(job: Obj, pods: Iterable[Obj], machines: int) -> bool:
    """The run is over: the Job ended, or every machine's pod left its result."""
    return job_result(job) != "Running" or len(results(pods)) >= machines
