"""Health checks: each Group's CronJob and machine list (built here), and its pods' results
filed under the machines they checked.

Two callers:
- the Group pass of the work queue (`handlers/node.py` → `sync_cronjob` in
  `execution.healthsync`) builds, with `build_health_objects`, one CronJob per Group whose
  `spec.healthCheck.enabled` is true, and the ConfigMap listing the Group's machines;
- the health-result watch cache (`handlers/node.py`) files each finished pod of those Jobs under
  the machine it names (`pod_record`); a machine's reconcile pass takes the newest (`newest`),
  and `planning.machine.healthjudge` says what it means for the machine, the same in the replay.

The CronJob runs an Indexed Job: one pod per machine (completion index N checks entry N of the
machine list), each in the same locked-down pod as an action Job (`jobs.locked_down_pod`), each
writing its own machine's result to its own termination message, so 100 machines never share a
4 KiB message. The pods mount the Secrets (and CA Secrets, playbook ConfigMaps) of the Group's
machines only, each at its own path; `lightsout.runner.indexed` picks the one its machine names.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightsout import API_GROUP, API_VERSION
from lightsout.actuation.inputs import InvalidSpecError, node_spec
from lightsout.config import OperatorConfig
from lightsout.execution.extravars import action_extravars, credentials_secret
from lightsout.execution.jobs import (
    CONTAINER_NAME,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    RUNNER_ENV,
    configured_pod,
    locked_down_pod,
    owner_reference,
    refuse_credentials,
)
from lightsout.execution.naming import dns_label, label_value, stable_hash
from lightsout.execution.results import parse_runner_result
from lightsout.models.enums import Action
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.state.parse import parse_time
from lightsout.state.status import node_status

COMPONENT = "healthcheck"
LABEL_GROUP = "lightsout.dev/group"
ANNOTATION_SPEC_HASH = "lightsout.dev/spec-hash"
MACHINES_DIR = "/etc/lightsout/machines"
MACHINES_FILE = "machines.json"
#: Names the machines a first-check Job checks (read by `lightsout.runner.indexed`).
CHECK_ONLY_ENV = "LIGHTSOUT_CHECK_ONLY"
#: The whole Job (every machine of the Group) must end within this.
DEADLINE_SECONDS = 900
#: A run that could not start within this after its scheduled time is skipped, not run late.
STARTING_DEADLINE_SECONDS = 300
#: CronJob names are held to 52 characters (the controller appends an 11-character suffix).
CRONJOB_NAME_MAX = 52


# ---------------------------------------------------------------- the CronJob and ConfigMap
def cronjob_name(group: str) -> str:
    """`lo-health-<group>` (a hash instead of the Group's name when that is too long)."""
    name = dns_label("lo-health-", group)
    return name if len(name) <= CRONJOB_NAME_MAX else f"lo-health-{stable_hash(group, 16)}"


def labels_for(group: str) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: COMPONENT,
        LABEL_GROUP: label_value(group),
    }


@dataclass(frozen=True)
class HealthObjects:
    """What one Group's health check consists of; `spec_hash` changes with any of it."""

    configmap: dict[str, Any]
    cronjob: dict[str, Any]
    spec_hash: str


def _slots(names: Sequence[str | None]) -> dict[str, int]:
    return {name: index for index, name in enumerate(sorted({n for n in names if n}))}


def build_health_objects(
    group: Mapping[str, Any],
    spec: GroupSpec,
    machines: Sequence[tuple[Mapping[str, Any], NodeSpec]],
    config: OperatorConfig,
) -> HealthObjects:
    """The ConfigMap listing the Group's machines (each with its parsed spec) and the CronJob
    checking them."""
    meta = group["metadata"]
    gname, namespace = str(meta["name"]), str(meta["namespace"])
    group_overlay = spec.playbooks.config_map_name if spec.playbooks else None
    members = sorted(machines, key=lambda m: str(m[0]["metadata"]["name"]))
    refs = []
    for _machine, machine_spec in members:
        secret, ca = credentials_secret(machine_spec)
        playbooks = machine_spec.playbooks
        overlay = (playbooks.config_map_name if playbooks else None) or group_overlay
        refs.append((secret, ca, overlay, playbooks.healthcheck if playbooks else None))
    secrets = _slots([r[0] for r in refs])
    cas = _slots([r[1] for r in refs])
    overlays = _slots([r[2] for r in refs])
    entries: list[dict[str, Any]] = []
    data: dict[str, str] = {}
    for index, ((machine, machine_spec), (secret, ca, overlay, playbook)) in enumerate(
        zip(members, refs, strict=True)
    ):
        extravars = action_extravars(machine, machine_spec, Action.HEALTHCHECK)
        refuse_credentials(extravars, f"{machine['metadata']['name']}.extravars")
        data[f"{index}.json"] = json.dumps(extravars, sort_keys=True, indent=2)
        entries.append(
            {
                "node": str(machine["metadata"]["name"]),
                "credentials": secrets.get(secret) if secret else None,
                "ca": cas.get(ca) if ca else None,
                "overlay": overlays.get(overlay) if overlay else None,
                "playbook": playbook,
            }
        )
    data[MACHINES_FILE] = json.dumps(entries, sort_keys=True, indent=2)
    name = cronjob_name(gname)
    labels = labels_for(gname)
    owner = owner_reference(f"{API_GROUP}/{API_VERSION}", "Group", gname, str(meta.get("uid", "")))
    volumes: list[dict[str, Any]] = [
        {"name": "machines", "configMap": {"name": name, "defaultMode": 0o444}}
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "machines", "mountPath": MACHINES_DIR, "readOnly": True}
    ]
    env = {"LIGHTSOUT_ACTION": COMPONENT, "LIGHTSOUT_MACHINES_DIR": MACHINES_DIR, **RUNNER_ENV}
    for kind, slots, source, mode in (
        ("credentials", secrets, "secret", 0o440),
        ("ca", cas, "secret", 0o444),
        ("overlay", overlays, "configMap", 0o444),
    ):
        for ref_name, slot in slots.items():
            volume = f"{kind}-{slot}"
            path = f"/etc/lightsout/{volume}"
            named = "secretName" if source == "secret" else "name"
            volumes.append({"name": volume, source: {named: ref_name, "defaultMode": mode}})
            mounts.append({"name": volume, "mountPath": path, "readOnly": True})
            env[f"LIGHTSOUT_{kind.upper()}_DIR_{slot}"] = path
    pod = locked_down_pod(
        config.runner_image,
        configured_pod(config, magic_packets=any(m.driver.sends_magic_packets for _, m in members)),
        [{"name": key, "value": value} for key, value in env.items()],
        volumes,
        mounts,
    )
    count = max(len(members), 1)
    job_spec = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": min(count, spec.health_check.parallelism),
        # The runner exits 0 whenever it wrote its machine's result: a pod fails only when it
        # could not run, and one such pod must not stop the other machines' checks.
        "backoffLimitPerIndex": 1,
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "podReplacementPolicy": "Failed",
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    metadata = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]}
    cronjob: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": dict(metadata),
        "spec": {
            "schedule": spec.health_check.schedule,
            "suspend": not machines,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": STARTING_DEADLINE_SECONDS,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"labels": labels}, "spec": job_spec},
        },
    }
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": dict(metadata),
        "data": data,
    }
    digest = stable_hash(json.dumps([configmap, cronjob], sort_keys=True), 16)
    for obj in (configmap, cronjob):
        obj["metadata"]["annotations"] = {ANNOTATION_SPEC_HASH: digest}
    return HealthObjects(configmap, cronjob, digest)


def job_from_cronjob(cronjob: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A Job made from the CronJob's template now, as `kubectl create job --from=cronjob/…`."""
    meta = cronjob["metadata"]
    template = cronjob["spec"]["jobTemplate"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
            "ownerReferences": [
                owner_reference("batch/v1", "CronJob", meta["name"], meta.get("uid", ""))
            ],
        },
        "spec": template["spec"],
    }


def entry_hashes(configmap: Mapping[str, Any]) -> dict[str, str]:
    """Each machine's entry in a health-check ConfigMap (its extravars), hashed, by name."""
    data = configmap.get("data") or {}
    listed = json.loads(data.get(MACHINES_FILE) or "[]")
    return {
        str(entry["node"]): stable_hash(data.get(f"{index}.json", ""), 16)
        for index, entry in enumerate(listed)
    }


def needing_first_check(
    machines: Sequence[tuple[Mapping[str, Any], NodeSpec]],
    before: Mapping[str, str] | None,
    after: Mapping[str, str],
    asked: Mapping[str, str],
) -> list[str]:
    """The machines to check now rather than at the next scheduled run: listed and never
    checked, or (when this operator wrote the list before) new to it or with a changed entry;
    not one whose check was already asked for with the entry it has now (`asked`)."""
    names = []
    for machine, _spec in machines:
        name = str(machine["metadata"]["name"])
        if name not in after or asked.get(name) == after[name]:
            continue
        never = not node_status(machine).last_health_check
        if never or (before is not None and before.get(name) != after[name]):
            names.append(name)
    return sorted(names)


def first_check_job(
    cronjob: Mapping[str, Any], spec_hash: str, names: Sequence[str]
) -> dict[str, Any]:
    """The Job checking `names` (new or edited machines of the Group) now, one pod each, named
    after the machine list's hash (one Job per list, also across operator restarts). Only those
    machines: ten Nodes applied one after the other make ten pods, not one to ten each."""
    name = f"{str(cronjob['metadata']['name'])[:CRONJOB_NAME_MAX]}-{spec_hash[:8]}"
    job = job_from_cronjob(cronjob, name)
    spec = copy.deepcopy(job["spec"])
    spec["completions"] = len(names)
    # The Group's parallelism, which the CronJob's Job already holds (capped by its machines).
    spec["parallelism"] = min(len(names), int(spec.get("parallelism") or 1))
    for container in spec["template"]["spec"]["containers"]:
        container["env"] = [
            *container.get("env", []),
            {"name": CHECK_ONLY_ENV, "value": ",".join(names)},
        ]
    return {**job, "spec": spec}


# ---------------------------------------------------------------- results
def pod_record(pod: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(machine name, the small record the watch cache keeps) of a finished health-check pod."""
    meta = pod.get("metadata") or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ours: Mapping[str, Any] = next((s for s in statuses if s.get("name") == CONTAINER_NAME), {})
    terminated = (ours.get("state") or {}).get("terminated")
    if not terminated:
        return None
    runner, problem = parse_runner_result(terminated.get("message"))
    if runner is None:
        return None
    node = runner.values.get("node")
    if not isinstance(node, str) or not node:
        return None
    labels = meta.get("labels") or {}
    record = {
        "pod": meta.get("name"),
        "job": labels.get("batch.kubernetes.io/job-name") or labels.get("job-name"),
        "group": labels.get(LABEL_GROUP),
        "started": terminated.get("startedAt"),
        "finished": terminated.get("finishedAt"),
        "result": str(runner.result),
        "message": runner.message or problem,
        "powerState": runner.values.get("power_state"),
        # What the driver measured and inspected, when it reports them
        # (`planning.machine.inspection`).
        "driver": runner.values.get("driver"),
        "powerWatts": runner.values.get("power_watts"),
        "powerSource": runner.values.get("power_source"),
        "inspected": runner.values.get("inspected"),
    }
    return node, record


def newest(records: Sequence[Mapping[str, Any]], group: str) -> Mapping[str, Any] | None:
    """The newest record of a check run by the machine's own Group's Job."""
    own = [r for r in records if r.get("group") == label_value(group) and parse_time(r["started"])]
    return max(own, key=lambda r: (str(r["started"]), str(r.get("pod"))), default=None)


def checkable(
    machines: Sequence[Mapping[str, Any]], problem: Callable[[Mapping[str, Any]], Any]
) -> list[Mapping[str, Any]]:
    """The machines the check's pods can run for: those whose Secrets and ConfigMaps all exist
    (a pod mounting a missing one would never start, and would hold up the whole Job)."""
    return [m for m in machines if problem(m) is None]


def readable(
    machines: Sequence[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], NodeSpec]]:
    """The machines with their specs read, those whose spec does not read left out (each
    machine's own pass reports it)."""
    found = []
    for machine in machines:
        with contextlib.suppress(InvalidSpecError):
            found.append((machine, node_spec(machine)))
    return found
