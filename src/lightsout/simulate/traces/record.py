"""What `lightsout trace record` observed in a live cluster, turned into a trace.

Pure: the recorder (`lightsout.commands.record`) watches pods and Jobs and lists the machines
and CronJobs through `lightsout.k8s.people`, and when it stops hands the objects (plain dicts
as the API returns them) to `build`, which makes the `trace.Trace` that `trace.write` writes
in the one documented format (docs/simulator.md, "Recording a live cluster"):

- the Lights-Out `Group`s and `Node`s as manifests (spec, name, namespace, labels; no status),
  each machine's durations from its `status.learned` when the operator has learned them, and
  in each Node's spec what the operator measured in place of what was declared
  (`node_spec_as_measured`: the learned draw in `spec.power`, the inspected capacity in
  `spec.resources` when none was declared), so the replay plans and counts with them;
- the `batch/v1` CronJobs as they are in the cluster, their pod template reduced to what
  scheduling reads, and each one's run time from the runs seen (pods of a Job owned by it);
- every other pod as a trace line: arrival from `creationTimestamp`, run time from its first
  container's start to its end as observed, the scheduling part of its spec, its origin; a
  pod of a deferrable Job (`lightsout.dev/finish-by` or `/max-delay`) also its Job's deferral
  annotations and Kueue queue label (`jobAnnotations`, `jobLabels`), arriving when its Job was
  created, so the replay holds the Job as the webhook did (a CronJob's Job template keeps the
  same annotations and label).

Only scheduling fields are kept of any pod spec (containers' names and resources,
nodeSelector, tolerations, affinity, overhead), so no image, command, env value or volume of
the cluster's reaches a trace; Secrets are never read at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from lightsout.simulate.traces.trace import Durations, Trace, TracePod
from lightsout.state.measured import (
    declared_resources,
    expected_watts,
    gpu_names,
    inspected_resources,
    uses_inspected,
)
from lightsout.state.parse import (
    as_list,
    as_str,
    controller_kind,
    controller_name,
    dig,
    parse_time,
    str_map,
)
from lightsout.state.status import node_status
from lightsout.state.types import (
    EXPECTED_DURATION,
    FINISH_BY,
    KUEUE_QUEUE,
    MAX_DELAY,
    MIRROR_POD,
)

#: The label the operator puts on its own action Jobs and health-check CronJobs (the values of
#: `execution.jobs.LABEL_MANAGED_BY` / `MANAGED_BY`, which this pure package may not import; a
#: unit test keeps them equal): the simulator models those itself, so they are not workload.
OPERATOR_LABEL = "app.kubernetes.io/managed-by"
OPERATOR = "lightsout"
#: The label the Deployment controller puts on a ReplicaSet's pods (its name's suffix).
TEMPLATE_HASH = "pod-template-hash"

#: What scheduling reads of a pod spec (`state.parse.scheduling_requirements`) and of a
#: container (`state.parse.pod_requests`); nothing else of the cluster's is copied.
_SPEC_KEYS = ("nodeSelector", "tolerations", "affinity", "overhead")
_CONTAINER_KEYS = ("name", "resources", "restartPolicy")
_RESOURCE_KEYS = ("requests", "limits")
#: What is kept of a Job's (or a Job template's) metadata: what the deferrable-Jobs webhook and
#: the planner read (`state.admission`, `state.jobs`), nothing else of the cluster's.
_JOB_ANNOTATIONS = (FINISH_BY, MAX_DELAY, EXPECTED_DURATION)
_JOB_LABELS = (KUEUE_QUEUE,)


def scheduling_spec(spec: object) -> dict[str, Any]:
    """The part of a pod spec the planner and the simulator read, and nothing else."""
    out: dict[str, Any] = {}
    for key in ("initContainers", "containers"):
        containers = [_container(c) for c in as_list(dig(spec, key)) if isinstance(c, Mapping)]
        if containers:
            out[key] = containers
    for key in _SPEC_KEYS:
        value = dig(spec, key)
        if value:
            out[key] = value
    return out


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: container[k] for k in _CONTAINER_KEYS if k in container and k != "resources"}
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        kept = {k: resources[k] for k in _RESOURCE_KEYS if resources.get(k)}
        if kept:
            out["resources"] = kept
    return out


def is_operators(obj: object) -> bool:
    """The operator's own action Job pod, health-check CronJob or its run."""
    return bool(dig(obj, "metadata", "labels", OPERATOR_LABEL) == OPERATOR)


def admission_metadata(metadata: object) -> tuple[dict[str, str], dict[str, str]]:
    """(annotations, labels) of a Job's metadata that admission and the planner read."""
    annotations = str_map(dig(metadata, "annotations"))
    labels = str_map(dig(metadata, "labels"))
    return (
        {k: annotations[k] for k in _JOB_ANNOTATIONS if k in annotations},
        {k: labels[k] for k in _JOB_LABELS if k in labels},
    )


@dataclass(frozen=True, slots=True)
class DeferrableJob:
    """A Job that carries `lightsout.dev/finish-by` or `/max-delay`, as a trace line keeps it:
    what admission reads of it and when it was created (the replay holds it from then)."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None


def deferrable_job(job: object) -> DeferrableJob | None:
    """The Job's deferral, None when it carries neither deadline annotation (a Kueue-labelled
    one is kept: the replay decides, as the webhook does, that it is not held)."""
    metadata = dig(job, "metadata")
    annotations, labels = admission_metadata(metadata)
    if FINISH_BY not in annotations and MAX_DELAY not in annotations:
        return None
    return DeferrableJob(annotations, labels, parse_time(dig(metadata, "creationTimestamp")))


def job_cronjob(job: object) -> str | None:
    """The CronJob a Job belongs to (its runs, and `kubectl create job --from=cronjob/…`)."""
    metadata = dig(job, "metadata")
    return controller_name(metadata) if controller_kind(metadata) == "CronJob" else None


@dataclass(frozen=True, slots=True)
class Seen:
    """A pod as last observed, and when the recorder first saw it going (deletionTimestamp set
    or deleted): for a pod deleted while running, the end of its run."""

    pod: Mapping[str, Any]
    gone: datetime | None = None


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a pod came from: `cronjob` set for a CronJob's run (not a pod line)."""

    kind: str | None = None
    name: str | None = None
    cronjob: str | None = None


def origin(
    pod: Mapping[str, Any], cronjobs_of_jobs: Mapping[tuple[str, str], str | None]
) -> Origin:
    """A pod's origin from its ownerReferences: a Job (or, when the Job is a CronJob's, that
    CronJob), a Deployment's replica (kind ReplicaSet, the Deployment's name, as in the
    generated traces), another controller, or nothing (a bare pod)."""
    metadata = pod.get("metadata")
    kind = controller_kind(metadata)
    if kind is None:
        return Origin()
    name = controller_name(metadata) or ""
    if kind == "Job":
        namespace = as_str(dig(metadata, "namespace"), "default")
        cronjob = cronjobs_of_jobs.get((namespace, name))
        return Origin(kind, name, cronjob)
    suffix = "-" + as_str(dig(metadata, "labels", TEMPLATE_HASH))
    if kind == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
        name = name.removesuffix(suffix)  # `<deployment>-<hash>`: the Deployment's replica
    return Origin(kind, name)


def _container_times(pod: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """(first container start, last container finish: None unless every container ended)."""
    starts: list[datetime] = []
    ends: list[datetime | None] = []
    statuses = as_list(dig(pod, "status", "containerStatuses"))
    for status in statuses:
        running = dig(status, "state", "running")
        ended = dig(status, "state", "terminated")
        started = parse_time(dig(ended, "startedAt")) or parse_time(dig(running, "startedAt"))
        if started is not None:
            starts.append(started)
        ends.append(parse_time(dig(ended, "finishedAt")) if ended else None)
    done = bool(statuses) and all(e is not None for e in ends)
    finished = max(e for e in ends if e is not None) if done else None
    if not starts and dig(pod, "status", "phase") in ("Succeeded", "Failed"):
        starts = [t for t in (parse_time(dig(pod, "status", "startTime")),) if t is not None]
    return (min(starts) if starts else None), finished


def run_window(seen: Seen, start: datetime, end: datetime) -> tuple[float, float] | None:
    """(arrival, run seconds) within the recording from `start` to `end`, None for a pod whose
    run was over before the recording started.

    Arrival is `creationTimestamp` (0 for a pod created before the start). The run is from
    the first container's start to the end of the last one, or to when the pod was seen going
    while still running. Not over when the recording stops: a running pod's run is what it
    ran until then; a pod that never started runs from its arrival to the end (it was still
    asking for capacity then; how long it would have run is unknown)."""
    created = parse_time(dig(seen.pod, "metadata", "creationTimestamp")) or start
    arrival = max(0.0, (created - start).total_seconds())
    started, finished = _container_times(seen.pod)
    if finished is None and seen.gone is not None and started is not None:
        finished = seen.gone
    if finished is not None and finished <= start:
        return None
    if started is None:
        if seen.gone is not None:
            return (arrival, 0.0)  # deleted before it ever ran
        return (arrival, max(0.0, (end - start).total_seconds() - arrival))
    ran_from = max(started, start)
    ran_to = min(finished or end, end)
    return (arrival, max(0.0, (ran_to - ran_from).total_seconds()))


def trace_pod(
    seen: Seen, owner: Origin, start: datetime, end: datetime, job: DeferrableJob | None = None
) -> TracePod | None:
    """The pod's trace line; None when its run ended before the recording started. The pod
    of a deferrable Job `job` arrives when the Job was created (0 when before the start),
    not when it was released: the replay holds it from there."""
    window = run_window(seen, start, end)
    if window is None:
        return None
    metadata = seen.pod.get("metadata")
    at = window[0]
    if job is not None and job.created is not None:
        at = min(at, max(0.0, (job.created - start).total_seconds()))
    return TracePod(
        at=at,
        run_seconds=window[1],
        namespace=as_str(dig(metadata, "namespace"), "default") or "default",
        name=as_str(dig(metadata, "name")),
        spec=scheduling_spec(seen.pod.get("spec")),
        owner_kind=owner.kind,
        owner_name=owner.name,
        job_annotations=dict(job.annotations) if job is not None else {},
        job_labels=dict(job.labels) if job is not None else {},
    )


def is_workload(pod: Mapping[str, Any]) -> bool:
    """Pods the planner schedules: not a DaemonSet's or a mirror pod (they run on every node
    and are no demand), not the operator's own Jobs' (the simulator runs those itself)."""
    mirror = MIRROR_POD in (dig(pod, "metadata", "annotations") or {})
    daemonset = controller_kind(pod.get("metadata")) == "DaemonSet"
    return not (mirror or is_operators(pod) or daemonset)


def machine_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Group or Node as one would apply it: apiVersion, kind, name, namespace, labels, spec
    (a Node's as measured: `node_spec_as_measured`)."""
    metadata: dict[str, Any] = {"name": as_str(dig(obj, "metadata", "name"))}
    for key in ("namespace", "labels"):
        value = dig(obj, "metadata", key)
        if value:
            metadata[key] = value
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": metadata,
        "spec": node_spec_as_measured(obj) if obj.get("kind") == "Node" else obj.get("spec") or {},
    }


def node_spec_as_measured(node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node's spec with what `state.measured` prefers written in: the draw learned from
    measured watts in place of the declared `spec.power` watts, and the inspected cpu, memory
    (and GPUs) in `spec.resources` unless the declared ones are pinned (a replay has no status
    to read them from)."""
    spec = dict(node.get("spec") or {})
    on, idle, off = expected_watts(node)
    # A measured figure next to a declared one may break the spec's order (off <= idle <= on),
    # which the replay's validation enforces as the API server does: clamp as `Draw` does.
    if on is not None and idle is not None:
        idle = min(idle, on)
    if off is not None:
        off = min([off, *(v for v in (idle, on) if v is not None)])
    power = dict(spec.get("power") or {})
    for key, value in (("onWatts", on), ("idleWatts", idle), ("offWatts", off)):
        if value is not None:
            power[key] = value
    if power:
        spec["power"] = power
    inspected = node_status(node).inspected
    declared = spec.get("resources")
    if (
        inspected is not None
        and inspected_resources(inspected)
        and (declared_resources(declared) is None or uses_inspected(declared))
    ):
        resources = (
            dict(declared) if isinstance(declared, Mapping) and declared_resources(declared) else {}
        )
        resources |= {"cpu": str(inspected["cpu"]), "memory": str(inspected["memory"])}
        names, gpus = gpu_names(resources.get("extended")), inspected.get("gpus")
        if len(names) == 1 and isinstance(gpus, int):
            resources["extended"] = {**resources["extended"], names[0]: str(gpus)}
        spec["resources"] = resources
    return spec


def learned_durations(node: Mapping[str, Any]) -> Durations | None:
    """The machine's true durations from `status.learned`, None when nothing is learned yet.

    The learned boot time runs from the power-on Job's start to Ready, so it is written as the
    boot with a power-on Job of 0 s (the replay's power-on to Ready is the same); what is not
    learned keeps the format's default."""
    learned = node_status(node).learned
    boot, shutdown = learned.boot_seconds, learned.shutdown_seconds
    if boot is None and shutdown is None:
        return None
    durations = Durations()
    if boot is not None:
        durations = replace(durations, power_on_seconds=0.0, boot_seconds=float(boot))
    if shutdown is not None:
        durations = replace(durations, shutdown_seconds=float(shutdown))
    return durations


def recorded_truth(node: Mapping[str, Any]) -> Durations | None:
    """What the live cluster measured of the machine, as the trace's truth: its learned
    durations, and once a meter taught any of its draw, the draw the operator plans with
    (learned, else declared: `state.measured.expected_watts`), and what its controller reported
    it is (`status.inspected`). None when nothing was measured."""
    durations = learned_durations(node)
    learned = node_status(node).learned
    watts = expected_watts(node)
    metered = any(
        w is not None for w in (learned.off_watts, learned.idle_watts, learned.busy_watts)
    )
    draw = (watts.on, watts.idle, watts.off)
    inspected = node_status(node).inspected
    reported = (
        {k: v for k, v in inspected.items() if k in ("cpu", "memory", "architecture", "gpus")}
        if isinstance(inspected, Mapping)
        else None
    )
    known = metered and all(w is not None for w in draw)
    if durations is None and not known and not reported:
        return None
    return replace(
        durations or Durations(),
        watts=(float(draw[0] or 0), float(draw[1] or 0), float(draw[2] or 0)) if known else None,
        inspected=reported or None,
    )


def cronjob_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The CronJob as in the cluster (schedule, timeZone, suspend, concurrencyPolicy, …) with
    its pod template reduced to `scheduling_spec`, of its Job template's metadata only what
    `admission_metadata` keeps (a deferrable one's annotations), and no status or server-set
    metadata."""
    manifest = machine_manifest(obj)
    spec = dict(manifest["spec"])
    job = dict(dig(spec, "jobTemplate") or {})
    job_spec = dict(job.get("spec") or {})
    template = dict(job_spec.get("template") or {})
    template["spec"] = scheduling_spec(template.get("spec"))
    template.pop("metadata", None)
    job_spec["template"] = template
    job["spec"] = job_spec
    annotations, labels = admission_metadata(job.pop("metadata", None))
    kept = {"annotations": annotations, "labels": labels}
    if annotations or labels:
        job = {"metadata": {k: v for k, v in kept.items() if v}, **job}
    spec["jobTemplate"] = job
    return {**manifest, "apiVersion": "batch/v1", "kind": "CronJob", "spec": spec}


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return f"{as_str(dig(metadata, 'namespace'), 'default')}/{as_str(dig(metadata, 'name'))}"


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the recorder collected, at its stop."""

    start: datetime
    end: datetime
    #: Lights-Out Groups and Nodes as listed (with status).
    machines: tuple[Mapping[str, Any], ...]
    cronjobs: tuple[Mapping[str, Any], ...]
    pods: tuple[Seen, ...]
    #: (namespace, Job name) → the CronJob that owns the Job, or None.
    cronjobs_of_jobs: Mapping[tuple[str, str], str | None]
    #: (namespace, Job name) → its deferral, for the Jobs that carry one.
    deferrable_jobs: Mapping[tuple[str, str], DeferrableJob] = field(default_factory=dict)


def build(name: str, observed: Observed, description: str = "") -> Trace:
    """The trace of what was observed from `observed.start` to `observed.end`."""
    start, end = observed.start, observed.end
    pods: list[TracePod] = []
    runs: dict[str, list[float]] = {}
    for seen in observed.pods:
        if not is_workload(seen.pod):
            continue
        owner = origin(seen.pod, observed.cronjobs_of_jobs)
        if owner.cronjob is not None:
            started, finished = _container_times(seen.pod)
            if started is not None and finished is not None:
                key = f"{as_str(dig(seen.pod, 'metadata', 'namespace'))}/{owner.cronjob}"
                runs.setdefault(key, []).append((finished - started).total_seconds())
            continue
        namespace = as_str(dig(seen.pod, "metadata", "namespace"), "default")
        job = (
            observed.deferrable_jobs.get((namespace, owner.name or ""))
            if owner.kind == "Job"
            else None
        )
        line = trace_pod(seen, owner, start, end, job)
        if line is not None:
            pods.append(line)
    cronjobs = [cronjob_manifest(c) for c in observed.cronjobs if not is_operators(c)]
    kept = {_key(c) for c in cronjobs}
    durations = {
        as_str(dig(m, "metadata", "name")): d
        for m in observed.machines
        if m.get("kind") == "Node" and (d := recorded_truth(m)) is not None
    }
    return Trace(
        name=name,
        start=start,
        duration_seconds=round(max(0.0, (end - start).total_seconds()), 3),
        machines=tuple(machine_manifest(m) for m in observed.machines),
        cronjobs=tuple(cronjobs),
        pods=tuple(pods),
        durations=durations,
        # The median of the runs that finished while recording (a CronJob none of whose
        # runs finished keeps the format's default).
        cron_run_seconds={
            key: round(statistics.median(seconds), 3)
            for key, seconds in runs.items()
            if key in kept
        },
        description=description,
    )


def machines_without_durations(observed: Observed) -> list[str]:
    """Names of the machines whose durations are the format's defaults (nothing learned)."""
    return sorted(
        as_str(dig(m, "metadata", "name"))
        for m in observed.machines
        if m.get("kind") == "Node" and learned_durations(m) is None
    )
