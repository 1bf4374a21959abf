"""A trace checked as the API server would check its objects, before anything is replayed.

`validate(directory)` reads every file of a trace (`lightsout.simulate.traces.trace`) and returns
every problem, not just the first, each naming the file, the object (kind and name, or the
line of `pods.jsonl`) and the field, as `kubectl apply` with strict field validation would:

- Group and Node specs are read by the API models (`lightsout.models`, the CRDs' schema and
  their CEL rules' Python twins): unknown fields, bad quantities, `idleWatts` above `onWatts`;
- CronJobs' `schedule`, `timeZone` and `concurrencyPolicy` are read by `lightsout.state.cron`,
  the reader the replay and the operator use; their fields and pods' are checked by name;
- pods' requests, limits and overhead are read by `lightsout.state.resources.parse_amount`,
  which skips what is not a quantity (so `cpu: "24 cores"` would silently request nothing);
- names that refer to nothing: durations in `trace.yaml` for a machine or CronJob the trace
  does not have, a Node whose `spec.group` is no Group of the trace.

`lightsout trace validate DIR` prints them; `lightsout simulate` refuses a trace that has any.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from lightsout.models.base import RuleViolationError
from lightsout.models.group import SERIES_LABEL, GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.simulate.traces import yamlfile
from lightsout.simulate.traces.overrides import apply_overrides
from lightsout.simulate.traces.trace import (
    CRONJOBS_FILE,
    JOB_ANNOTATIONS,
    JOB_LABELS,
    MACHINES_FILE,
    PODS_FILE,
    SERIES_FILE,
    TRACE_FILE,
    WATTS_KEYS,
    TraceUps,
    snapshot_of,
)
from lightsout.state import cron
from lightsout.state.jobs import deferred_jobs
from lightsout.state.measured import inspected_resources
from lightsout.state.parse import (
    NODE_OPERATORS,
    TAINT_EFFECTS,
    as_list,
    dig,
    format_time,
    parse_time,
    str_map,
)
from lightsout.state.resources import parse_amount
from lightsout.state.types import deferrable

API_VERSION = "lightsout.dev/v1alpha1"
CRONJOB_API_VERSION = "batch/v1"
TRACE_KEYS = (
    "name",
    "description",
    "start",
    "durationSeconds",
    "seed",
    "machines",
    "cronjobs",
    "ups",
)
DURATION_KEYS = ("powerOnSeconds", "bootSeconds", "shutdownSeconds")
#: A machine's entry: its true durations, draw and what its controller reports it is.
MACHINE_KEYS = (*DURATION_KEYS, *WATTS_KEYS, "inspected", "unreachable")
INSPECTED_KEYS = ("cpu", "memory", "architecture", "gpus")
WINDOW_KEYS = ("atSeconds", "seconds")
CRON_RUN_KEYS = ("runSeconds",)
POD_KEYS = ("at", "runSeconds", "namespace", "name", "owner", JOB_ANNOTATIONS, JOB_LABELS, "spec")
OWNER_KEYS = ("kind", "name")
OBJECT_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")
CONFIGMAP_KEYS = ("apiVersion", "kind", "metadata", "data")
#: batch/v1 CronJobSpec's fields.
CRONJOB_SPEC_KEYS = (
    "schedule",
    "timeZone",
    "startingDeadlineSeconds",
    "concurrencyPolicy",
    "suspend",
    "jobTemplate",
    "successfulJobsHistoryLimit",
    "failedJobsHistoryLimit",
)
POD_TEMPLATE = "spec.jobTemplate.spec.template.spec"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a trace: where (file, object, field) and why."""

    file: str
    obj: str
    field: str
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, self.obj, self.field, self.message) if part)


@dataclass
class Summary:
    """What a trace holds, for the `valid` line."""

    machines: int = 0
    pods: int = 0
    cronjobs: int = 0


class _Found:
    """Problems of one file, each with its object."""

    def __init__(self, file: str, out: list[Problem]) -> None:
        self.file, self.out = file, out

    def add(self, obj: str, field: str, message: str) -> None:
        self.out.append(Problem(self.file, obj, field, message))


def validate(directory: Path | str, overrides: Sequence[str] = ()) -> list[Problem]:
    """Every problem of the trace in `directory` (none: it replays as written); `overrides`
    are `lightsout simulate --set` settings, applied to every Group before it is checked."""
    return check(directory, overrides)[0]


def check(directory: Path | str, overrides: Sequence[str] = ()) -> tuple[list[Problem], Summary]:
    """`validate`, plus what the trace holds."""
    root = Path(directory)
    out: list[Problem] = []
    summary = Summary()
    meta_path = root / TRACE_FILE
    if not meta_path.is_file():
        out.append(Problem(str(root), "", "", f"no {TRACE_FILE}: not a trace directory"))
        return out, summary
    meta = _trace_meta(_Found(str(meta_path), out), meta_path)
    series_maps = _configmaps(_Found(str(root / SERIES_FILE), out), root / SERIES_FILE)
    nodes = _machines(
        _Found(str(root / MACHINES_FILE), out), root / MACHINES_FILE, overrides, series_maps
    )
    crons = _cronjobs(_Found(str(root / CRONJOBS_FILE), out), root / CRONJOBS_FILE)
    summary.pods = _pods(str(root / PODS_FILE), out, root / PODS_FILE)
    summary.machines, summary.cronjobs = len(nodes), len(crons)
    found = _Found(str(meta_path), out)
    for name in _entries(meta, "machines"):
        if name not in nodes:
            found.add(
                f"machines.{name}",
                "",
                f"no Node {name!r} in {MACHINES_FILE} (Nodes: {_names(nodes)}): "
                "these durations would apply to nothing",
            )
    for key in _entries(meta, "cronjobs"):
        if key not in crons:
            found.add(
                f"cronjobs.{key}",
                "",
                f"no CronJob {key!r} (namespace/name) in {CRONJOBS_FILE} "
                f"(CronJobs: {_names(crons)}): this runSeconds would apply to nothing",
            )
    return out, summary


def _names(names: Sequence[str] | Mapping[str, Any]) -> str:
    return ", ".join(sorted(names)) or "none"


def _entries(meta: Mapping[str, Any], key: str) -> list[str]:
    value = meta.get(key)
    return [str(k) for k in value] if isinstance(value, Mapping) else []


def _unknown(
    found: _Found, obj: str, prefix: str, value: Mapping[Any, Any], known: Sequence[str]
) -> None:
    for key in value:
        if key not in known:
            found.add(obj, f"{prefix}{key}", f"unknown field (known: {', '.join(known)})")


def _number(
    found: _Found,
    obj: str,
    field: str,
    value: object,
    required: bool = True,
    *,
    unit: str = "seconds",
) -> None:
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        what = "missing" if value is None else f"got {value!r}"
        found.add(obj, field, f"must be a non-negative number of {unit} ({what})")


def _machine_truth(found: _Found, obj: str, value: Mapping[str, Any]) -> None:
    """A machine's entry beyond its durations: its true draw (all three figures or none), what
    its controller reports it is (read as a health check's `inspected`) and when it does not
    answer a check (`unreachable`)."""
    given = [key for key in WATTS_KEYS if key in value]
    if given and len(given) < len(WATTS_KEYS):
        missing = ", ".join(k for k in WATTS_KEYS if k not in given)
        found.add(obj, missing, f"{', '.join(given)} given: give all of {', '.join(WATTS_KEYS)}")
    for key in given:
        _number(found, obj, key, value.get(key), unit="watts")
    _windows(found, obj, value.get("unreachable"))
    inspected = value.get("inspected")
    if inspected is None:
        return
    if not isinstance(inspected, Mapping):
        found.add(obj, "inspected", f"must be an object ({', '.join(INSPECTED_KEYS)})")
        return
    _unknown(found, obj, "inspected.", inspected, INSPECTED_KEYS)
    if inspected_resources(inspected) is None:
        found.add(obj, "inspected", "must report at least cpu (an integer) and memory (e.g. 64Gi)")


def _windows(found: _Found, obj: str, windows: object) -> None:
    """`unreachable`: a list of `{atSeconds, seconds}`."""
    if windows is None:
        return
    if not isinstance(windows, list) or not all(isinstance(w, Mapping) for w in windows):
        found.add(obj, "unreachable", "must be a list of {atSeconds, seconds}")
        return
    for n, window in enumerate(windows):
        where = f"unreachable[{n}]"
        _unknown(found, obj, f"{where}.", window, WINDOW_KEYS)
        for key in WINDOW_KEYS:
            _number(found, obj, f"{where}.{key}", window.get(key))


# ------------------------------------------------------------------------------- trace.yaml
def _trace_meta(found: _Found, path: Path) -> Mapping[str, Any]:
    try:
        meta = yamlfile.load(path.read_text()) or {}
    except yaml.YAMLError as error:
        found.add("", "", f"not YAML ({error})")
        return {}
    if not isinstance(meta, Mapping):
        found.add("", "", "must be an object")
        return {}
    _unknown(found, "", "", meta, TRACE_KEYS)
    for key in ("name", "description"):
        if meta.get(key) is not None and not isinstance(meta.get(key), str):
            found.add("", key, f"must be a string, got {meta.get(key)!r}")
    seed = meta.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        found.add("", "seed", f"must be an integer, got {seed!r}")
    if parse_time(meta.get("start")) is None:
        found.add("", "start", f"must be an RFC 3339 time, got {meta.get('start')!r}")
    _number(found, "", "durationSeconds", meta.get("durationSeconds"))
    if meta.get("ups") is not None:
        for field, message in _spec_problems(TraceUps, meta["ups"], root="ups"):
            found.add("", field, message)
    for section, known, required in (
        ("machines", MACHINE_KEYS, False),
        ("cronjobs", CRON_RUN_KEYS, True),
    ):
        entries = meta.get(section)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            found.add("", section, "must be an object keyed by name")
            continue
        for name, value in entries.items():
            obj = f"{section}.{name}"
            if not isinstance(value, Mapping):
                found.add(obj, "", f"must be an object with {', '.join(known)}")
                continue
            _unknown(found, obj, "", value, known)
            for key in DURATION_KEYS if section == "machines" else known:
                _number(found, obj, key, value.get(key), required)
            if section == "machines":
                _machine_truth(found, obj, value)
    return meta


# ----------------------------------------------------------------------------- YAML streams
def _documents(found: _Found, path: Path) -> list[tuple[int, Mapping[str, Any]]]:
    """The file's documents with their 1-based index; the file may be absent."""
    if not path.exists():
        return []
    try:
        docs = [d for d in yamlfile.load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as error:
        found.add("", "", f"not YAML ({error})")
        return []
    out: list[tuple[int, Mapping[str, Any]]] = []
    for index, doc in enumerate(docs, start=1):
        if isinstance(doc, Mapping):
            out.append((index, doc))
        else:
            found.add(f"document {index}", "", "must be an object")
    return out


def _identity(
    found: _Found,
    index: int,
    doc: Mapping[str, Any],
    kinds: Sequence[str],
    api_version: str,
    *,
    keys: Sequence[str] = OBJECT_KEYS,
) -> tuple[str, str, str, str] | None:
    """The object's kind, namespace and name, and how a problem names it (`_label`); None
    (noted) when it has none readable."""
    where = f"document {index}"
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        found.add(where, "kind", f"must be {' or '.join(kinds)}, got {kind!r}")
        return None
    name, namespace = dig(doc, "metadata", "name"), dig(doc, "metadata", "namespace")
    if not isinstance(name, str) or not name:
        found.add(f"{kind} ({where})", "metadata.name", "required")
        return None
    if namespace is not None and not isinstance(namespace, str):
        found.add(f"{kind} {name}", "metadata.namespace", f"must be a string, got {namespace!r}")
        namespace = None
    obj = _label(kind, namespace or "", name)
    if doc.get("apiVersion") != api_version:
        found.add(obj, "apiVersion", f"must be {api_version}, got {doc.get('apiVersion')!r}")
    _unknown(found, obj, "", doc, keys)
    return kind, namespace or "", name, obj


def _label(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


# ---------------------------------------------------------------------------- machines.yaml
def _machines(
    found: _Found,
    path: Path,
    overrides: Sequence[str],
    series_maps: Sequence[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """Check the Groups and Nodes (and that the series a Group names read, from
    `series_maps`); returns the Nodes' names (each to its namespace)."""
    before = len(found.out)
    groups: dict[tuple[str, str], Mapping[str, Any]] = {}
    nodes: dict[str, tuple[str, Mapping[str, Any]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for index, doc in _documents(found, path):
        identity = _identity(found, index, doc, ("Group", "Node"), API_VERSION)
        if identity is None:
            continue
        kind, namespace, name, obj = identity
        # The replay keys machines, their durations and Groups by name alone.
        if (kind, name) in seen:
            found.add(
                obj, "metadata.name", f"a {kind} {name!r} is already document {seen[kind, name]}"
            )
            continue
        seen[kind, name] = index
        if kind == "Group":
            problems = _spec_problems(GroupSpec, doc.get("spec", {}))
            group = doc
            if not problems and overrides:
                try:
                    group = apply_overrides(doc, overrides)
                except ValueError as error:
                    found.add(obj, "", str(error))
                    continue
                problems = _spec_problems(GroupSpec, group.get("spec", {}))
                obj += " (with --set)"
            groups[namespace, name] = group
        else:
            problems = _spec_problems(NodeSpec, doc.get("spec"))
            nodes[name] = (namespace, doc)
        for field, message in problems:
            found.add(obj, field, message)
    hosts: dict[str, str] = {}
    for name, (namespace, doc) in nodes.items():
        obj = _label("Node", namespace, name)
        group = dig(doc, "spec", "group")
        if isinstance(group, str) and (namespace, group) not in groups:
            names = [n for ns, n in groups if ns == namespace]
            where = f"namespace {namespace} of the trace" if namespace else "the trace"
            found.add(obj, "spec.group", f"no Group {group!r} in {where} (Groups: {_names(names)})")
        host = dig(doc, "spec", "kubernetesNodeName")
        if isinstance(host, str) and host in hosts:
            found.add(obj, "spec.kubernetesNodeName", f"{host!r} is also Node {hosts[host]}'s")
        elif isinstance(host, str):
            hosts[host] = name
    if len(found.out) == before:
        # What the replay reads them with (`read_machines`): anything it would still refuse.
        snapshot = snapshot_of(groups.values(), (d for _, d in nodes.values()), series_maps)
        for problem in snapshot.problems:
            found.add("", "", problem)
        for read in snapshot.groups:
            if read.series_problem is not None:
                obj = _label("Group", read.key.namespace, read.key.name)
                field, _, message = read.series_problem.partition(": ")
                found.add(obj, field, f"{message} (in {SERIES_FILE})")
    return {name: namespace for name, (namespace, _) in nodes.items()}


def _spec_problems(
    model: type[BaseModel], spec: object, root: str = "spec"
) -> list[tuple[str, str]]:
    """What the model (the CRD's schema and CEL rules) refuses in `spec`: (field under `root`,
    message)."""
    if spec is None:
        return [(root, "required")]
    try:
        model.model_validate(spec)
    except ValidationError as error:
        return [_model_error(e, spec, root) for e in error.errors()]
    return []


def _model_error(error: Any, spec: object, root: str = "spec") -> tuple[str, str]:
    loc = [str(part) for part in error["loc"]]
    cause = (error.get("ctx") or {}).get("error")
    if error["type"] == "extra_forbidden":
        return _path(loc, root), "unknown field"
    if isinstance(cause, RuleViolationError):
        message = cause.rule.message
        if cause.rule.field_path:  # the rule names the offending field: `.idleWatts`
            loc += cause.rule.field_path.lstrip(".").split(".")
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
    value = _at(spec, loc)
    if value is not None and not isinstance(value, Mapping | list):
        message += f" (got {value!r})"
    return _path(loc, root), message


def _path(loc: Sequence[str], root: str = "spec") -> str:
    out = root
    for part in loc:
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _at(value: object, loc: Sequence[str]) -> object:
    for part in loc:
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


# --------------------------------------------------------------------------- configmaps.yaml
def _configmaps(found: _Found, path: Path) -> list[Mapping[str, Any]]:
    """Check the series ConfigMaps (each a v1 ConfigMap labelled `lightsout.dev/series`,
    its data strings); returns the readable ones. Whether a series reads is checked with the
    Group that names it (`_machines`)."""
    out: list[Mapping[str, Any]] = []
    for index, doc in _documents(found, path):
        identity = _identity(found, index, doc, ("ConfigMap",), "v1", keys=CONFIGMAP_KEYS)
        if identity is None:
            continue
        *_, obj = identity
        labels = dig(doc, "metadata", "labels")
        if not isinstance(labels, Mapping) or SERIES_LABEL not in labels:
            found.add(obj, "metadata.labels", f"must carry {SERIES_LABEL} (the series label)")
            continue
        data = doc.get("data")
        if not isinstance(data, Mapping) or not all(isinstance(v, str) for v in data.values()):
            found.add(obj, "data", "must map keys to strings (each a series)")
            continue
        out.append(doc)
    return out


# ---------------------------------------------------------------------------- cronjobs.yaml
def _cronjobs(found: _Found, path: Path) -> dict[str, int]:
    """Check the CronJobs; returns their `namespace/name` keys (as the replay keys them)."""
    keys: dict[str, int] = {}
    for index, doc in _documents(found, path):
        identity = _identity(found, index, doc, ("CronJob",), CRONJOB_API_VERSION)
        if identity is None:
            continue
        _, namespace, name, obj = identity
        key = f"{namespace or 'default'}/{name}"
        if key in keys:
            found.add(obj, "metadata.name", f"CronJob {key!r} is already document {keys[key]}")
            continue
        keys[key] = index
        spec = doc.get("spec")
        if not isinstance(spec, Mapping):
            found.add(obj, "spec", "required")
            continue
        _unknown(found, obj, "spec.", spec, CRONJOB_SPEC_KEYS)
        for field, kind in (("schedule", str), ("timeZone", str), ("suspend", bool)):
            value = spec.get(field)
            if value is not None and not isinstance(value, kind):
                found.add(obj, f"spec.{field}", f"must be a {kind.__name__}, got {value!r}")
        if not isinstance(spec.get("schedule"), str):
            if "schedule" not in spec:
                found.add(obj, "spec.schedule", "required")
            continue
        try:
            read = cron.read(doc)
        except cron.CronError as error:
            found.add(obj, "spec.concurrencyPolicy", str(error))
            continue
        for field, reader in (("schedule", cron.expression), ("timeZone", cron.zone)):
            try:
                reader(read)
            except cron.CronError as error:
                found.add(obj, f"spec.{field}", str(error))
        template = dig(spec, "jobTemplate", "spec", "template", "spec")
        if not isinstance(template, Mapping):
            found.add(obj, POD_TEMPLATE, "required: the pod each run creates")
            continue
        for field, message in pod_spec_problems(template):
            found.add(obj, f"{POD_TEMPLATE}.{field}", message)
        _held_job(found, obj, "spec.jobTemplate.metadata.annotations", read.job_annotations)
    return keys


def _held_job(found: _Found, obj: str, where: str, annotations: Mapping[str, str]) -> None:
    """Annotations `where` that make a deferrable Job, read as the planner reads its Jobs'
    (labels play no part: a Kueue-labelled Job is not held, but its annotations still read)."""
    if not deferrable(annotations, {}):
        return
    moment = format_time(datetime(2000, 1, 1, tzinfo=UTC))
    meta = {"name": "j", "creationTimestamp": moment, "annotations": dict(annotations)}
    (job,) = deferred_jobs([{"metadata": meta, "spec": {"suspend": True}}])
    if job.problem is not None:
        name, _, message = job.problem.partition(": ")
        found.add(obj, f"{where}.{name}", message)


# ------------------------------------------------------------------------------- pods.jsonl
def _pods(file: str, out: list[Problem], path: Path) -> int:
    """Check each line; returns how many pods there are."""
    if not path.exists():
        return 0
    count = 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        count += 1
        found = _Found(f"{file}:{number}", out)
        try:
            pod = json.loads(line)
        except json.JSONDecodeError as error:
            found.add("", "", f"not JSON ({error})")
            continue
        if not isinstance(pod, Mapping):
            found.add("", "", "must be a JSON object")
            continue
        name, namespace = pod.get("name"), pod.get("namespace")
        obj = "Pod"
        if isinstance(name, str) and name:
            obj = _label("Pod", namespace if isinstance(namespace, str) else "default", name)
        else:
            found.add(obj, "name", "required")
        if namespace is not None and not isinstance(namespace, str):
            found.add(obj, "namespace", f"must be a string, got {namespace!r}")
        _unknown(found, obj, "", pod, POD_KEYS)
        _number(found, obj, "at", pod.get("at"))
        _number(found, obj, "runSeconds", pod.get("runSeconds"))
        owner = pod.get("owner")
        if owner is not None:
            if not isinstance(owner, Mapping):
                found.add(obj, "owner", "must be an object with kind and name")
            else:
                _unknown(found, obj, "owner.", owner, OWNER_KEYS)
                for key in OWNER_KEYS:
                    if not isinstance(owner.get(key), str) or not owner.get(key):
                        found.add(obj, f"owner.{key}", "required: a string")
        _job_metadata(found, obj, pod)
        spec = pod.get("spec")
        if spec is not None and not isinstance(spec, Mapping):
            found.add(obj, "spec", "must be a pod spec (an object)")
        elif spec is not None:
            for field, message in pod_spec_problems(spec):
                found.add(obj, f"spec.{field}", message)
    return count


def _job_metadata(found: _Found, obj: str, pod: Mapping[str, Any]) -> None:
    """A pod line's `jobAnnotations` and `jobLabels`: string maps, on a Job's pod only, and
    deferral annotations that read (`lightsout.dev/max-delay: later` would be released at
    once, saying why)."""
    given = [key for key in (JOB_ANNOTATIONS, JOB_LABELS) if pod.get(key) is not None]
    if not given:
        return
    if dig(pod, "owner", "kind") != "Job":
        for key in given:
            found.add(obj, key, "only for a Job's pod (owner.kind Job): its Job's")
        return
    for key in given:
        value = pod[key]
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            found.add(obj, key, f"must be an object of strings, as metadata.{key[3:].lower()}")
    annotations = pod.get(JOB_ANNOTATIONS)
    if isinstance(annotations, Mapping):
        _held_job(found, obj, JOB_ANNOTATIONS, str_map(annotations))


def pod_spec_problems(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """What the replay's pod reader (`lightsout.state.parse`) would silently drop from a pod
    spec and the API server refuses: (field, message) for quantities that are none, node
    selectors that are not strings, tolerations and node-affinity operators it does not know."""
    for section in ("initContainers", "containers"):
        for index, container in enumerate(as_list(spec.get(section))):
            where = f"{section}[{index}]"
            if not isinstance(container, Mapping):
                yield where, "must be a container (an object)"
                continue
            for kind in ("requests", "limits"):
                yield from _quantities(
                    f"{where}.resources.{kind}", dig(container, "resources", kind)
                )
    yield from _quantities("overhead", spec.get("overhead"))
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for key, value in selector.items():
            if not isinstance(value, str):
                yield f"nodeSelector.{key}", f"must be a string, got {value!r}"
    for index, toleration in enumerate(as_list(spec.get("tolerations"))):
        operator, effect = dig(toleration, "operator"), dig(toleration, "effect")
        if operator not in (None, "", "Equal", "Exists"):
            yield f"tolerations[{index}].operator", f"must be Equal or Exists, got {operator!r}"
        if effect not in (None, "") and effect not in TAINT_EFFECTS:
            effects = ", ".join(sorted(TAINT_EFFECTS))
            yield f"tolerations[{index}].effect", f"must be one of {effects}, got {effect!r}"
    base = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = dig(spec, *base.split("."), "nodeSelectorTerms")
    for t, term in enumerate(as_list(terms)):
        for part in ("matchExpressions", "matchFields"):
            for r, requirement in enumerate(as_list(dig(term, part))):
                operator = dig(requirement, "operator")
                if operator not in NODE_OPERATORS:
                    operators = ", ".join(sorted(NODE_OPERATORS))
                    yield (
                        f"{base}.nodeSelectorTerms[{t}].{part}[{r}].operator",
                        f"must be one of {operators}, got {operator!r}",
                    )


def _quantities(where: str, values: object) -> Iterator[tuple[str, str]]:
    if values is None:
        return
    if not isinstance(values, Mapping):
        yield where, "must be an object of resource quantities"
        return
    for name, value in values.items():
        if parse_amount(str(name), value) is None:
            yield f"{where}.{name}", f"not a quantity (e.g. 4, 500m, 16Gi): {value!r}"
