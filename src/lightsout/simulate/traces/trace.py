"""A workload trace on disk: what `lightsout simulate` replays and the generator writes.

A trace is a directory (the format is documented in docs/simulator.md):

- `trace.yaml`: name, start time, length, and what the API objects do not carry: each machine's
  true durations (power-on Job, boot to Ready, shutdown Job), each CronJob's run time, and
  optionally a UPS (`ups`: battery capacity, efficiency, mains outages);
- `machines.yaml`: the managed machines as this API's `Group` and `Node` manifests;
- `cronjobs.yaml`: `batch/v1` CronJob manifests (their runs are expanded by `state.cron`; a
  Job template annotated `lightsout.dev/max-delay` makes deferrable runs);
- `configmaps.yaml` (optional): `v1` ConfigMaps labelled `lightsout.dev/series`, the price and
  carbon series the Groups' `spec.electricity` names (`state.series`);
- `pods.jsonl`: every other pod, one JSON object a line: `at` (seconds after the start),
  `runSeconds`, `namespace`, `name`, `owner` (`{kind, name}`, absent for a bare pod) and `spec`
  (a pod spec: containers' requests, nodeSelector, tolerations, affinity); for a Job's pod,
  optionally `jobAnnotations` and `jobLabels`, its Job's (a deferrable Job's
  `lightsout.dev/max-delay`, Kueue's queue label): the replay then creates the Job at `at` and
  admits it as the webhook would, so a deferrable one is held.

`load` reads one (the simulator calls it), `write` writes one (the generator and the recorder
call it). Pod specs are parsed by the production `lightsout.state.parse`, so a pod means to
the simulator exactly what it means to the planner. `load` assumes a valid trace:
`validate` checks one first (every problem named by file, object and field).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from lightsout.models.base import ApiModel
from lightsout.simulate.traces import yamlfile
from lightsout.simulate.traces.overrides import apply_overrides
from lightsout.state.build import GROUPS_KEY, MACHINES_KEY, SERIES_KEY, snapshot_from
from lightsout.state.parse import as_str, dig, format_time, parse_time, str_map
from lightsout.state.types import Snapshot

TRACE_FILE = "trace.yaml"
MACHINES_FILE = "machines.yaml"
CRONJOBS_FILE = "cronjobs.yaml"
SERIES_FILE = "configmaps.yaml"
PODS_FILE = "pods.jsonl"
#: A pod line's keys for its owner Job's annotations and labels.
JOB_ANNOTATIONS, JOB_LABELS = "jobAnnotations", "jobLabels"


class TraceError(ValueError):
    """The directory is not a readable trace; the message says which file and why."""


#: A machine's true draw in `trace.yaml` (all three or none), as `spec.power` names them.
WATTS_KEYS = ("onWatts", "idleWatts", "offWatts")


@dataclass(frozen=True, slots=True)
class Durations:
    """A machine's truth, what the API objects do not carry: what its power-on Job, its boot
    and its shutdown Job take, and, when the trace knows them, what it really draws (busy,
    idle, off; else what it declares), what its controller reports it is (`inspected`: cpu,
    memory, architecture, gpus, as a health check's inspection reports them) and when its
    controller does not answer a health check (`unreachable`)."""

    power_on_seconds: float = 10.0
    boot_seconds: float = 120.0
    shutdown_seconds: float = 30.0
    watts: tuple[float, float, float] | None = None
    inspected: Mapping[str, Any] | None = None
    #: (atSeconds, seconds) windows in which a health check finds its controller not answering
    #: (the check fails: BMCUnreachable); its power actions are not made to fail.
    unreachable: tuple[tuple[float, float], ...] = ()

    def answers(self, seconds: float) -> bool:
        """Whether its controller answers a health check `seconds` after the trace's start."""
        return not any(at <= seconds < at + length for at, length in self.unreachable)


@dataclass(frozen=True, slots=True)
class TracePod:
    """A pod that is not a CronJob's: it arrives, waits for a node, runs, and leaves."""

    at: float
    run_seconds: float
    namespace: str
    name: str
    spec: Mapping[str, Any]
    owner_kind: str | None = None
    owner_name: str | None = None
    #: Its owner Job's annotations and labels, as far as admission reads them (empty: the
    #: trace does not say; the pod is created at `at`, as before).
    job_annotations: Mapping[str, str] = field(default_factory=dict)
    job_labels: Mapping[str, str] = field(default_factory=dict)


class MainsOutage(ApiModel):
    """One mains failure of a trace."""

    at_seconds: float = Field(ge=0)
    """When the mains fail, in seconds after the trace's start."""
    seconds: float = Field(gt=0, le=604_800)
    """How long they stay away."""


class TraceUps(ApiModel):
    """The trace's UPS (`trace.yaml`'s `ups`): a battery feeding every Group with
    `spec.battery`, and the mains failures it rides through."""

    capacity_wh: float = Field(gt=0, le=1_000_000, alias="capacityWh")
    """Energy stored when full, in Wh."""
    efficiency: float = Field(default=0.9, gt=0, le=1)
    """The share of stored energy the inverter delivers."""
    low_battery_percent: float = Field(default=20, ge=0, le=100)
    """The charge below which the UPS says low battery (LB)."""
    recharge_watts: float | None = Field(default=None, gt=0, le=1_000_000)
    """How fast it charges on mains, in W (default: full in four hours)."""
    outages: list[MainsOutage] = Field(default_factory=list, max_length=1000)
    """The mains failures, in any order."""


@dataclass(frozen=True)
class Trace:
    name: str
    start: datetime
    duration_seconds: float
    #: Group and Node manifests (dicts as `kubectl get -o json` prints them).
    machines: tuple[Mapping[str, Any], ...]
    cronjobs: tuple[Mapping[str, Any], ...] = ()
    #: ConfigMaps labelled `lightsout.dev/series`: the Groups' price and carbon series.
    configmaps: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[TracePod, ...] = ()
    #: Per Lights-Out Node name.
    durations: Mapping[str, Durations] = field(default_factory=dict)
    #: Per CronJob `namespace/name`: how long each of its runs takes.
    cron_run_seconds: Mapping[str, float] = field(default_factory=dict)
    description: str = ""
    seed: int | None = None
    #: The UPS feeding the Groups with `spec.battery`, and its outages (None: mains always on).
    ups: TraceUps | None = None

    def durations_of(self, node: str) -> Durations:
        return self.durations.get(node, Durations())

    def nodes(self) -> list[Mapping[str, Any]]:
        """The Lights-Out Node manifests."""
        return [m for m in self.machines if m.get("kind") == "Node"]

    def groups(self, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The Group manifests with `overrides` (`--set` settings) applied; `ValueError`
        naming a setting that does not apply."""
        return [apply_overrides(m, overrides) for m in self.machines if m.get("kind") == "Group"]

    def snapshot(self, overrides: Sequence[str] = ()) -> Snapshot:
        """The Groups (with `overrides`), their price and carbon series and the Nodes, read as
        the planner reads them: the one reading the replay and its analyses share."""
        return snapshot_of(self.groups(overrides), self.nodes(), self.configmaps)


def snapshot_of(
    groups: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    configmaps: Iterable[Mapping[str, Any]],
) -> Snapshot:
    """Group and Node manifests and the series ConfigMaps, read as the planner reads them
    (`Trace.snapshot`, and `validate` on a trace's documents before it loads)."""
    return snapshot_from(
        {GROUPS_KEY: list(groups), MACHINES_KEY: list(nodes), SERIES_KEY: list(configmaps)}
    )


def _documents(path: Path) -> tuple[Mapping[str, Any], ...]:
    if not path.exists():
        return ()
    try:
        docs = [d for d in yamlfile.load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as error:
        raise TraceError(f"{path}: not YAML ({error})") from error
    bad = [d for d in docs if not isinstance(d, Mapping)]
    if bad:
        raise TraceError(f"{path}: every document must be an object")
    return tuple(docs)


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise TraceError(f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


def _truth(entry: Mapping[str, Any], where: str) -> Durations:
    """One machine's entry of `trace.yaml`'s `machines`."""
    watts = None
    if any(key in entry for key in WATTS_KEYS):
        if not all(key in entry for key in WATTS_KEYS):
            raise TraceError(f"{where}: give all of {', '.join(WATTS_KEYS)} or none")
        on, idle, off = (_number(entry[key], f"{where}.{key}") for key in WATTS_KEYS)
        watts = (on, idle, off)
    inspected = entry.get("inspected")
    if inspected is not None and not isinstance(inspected, Mapping):
        raise TraceError(f"{where}.inspected: must be an object (cpu, memory, ...)")
    return Durations(
        power_on_seconds=_number(entry.get("powerOnSeconds", 10), f"{where}.powerOnSeconds"),
        boot_seconds=_number(entry.get("bootSeconds", 120), f"{where}.bootSeconds"),
        shutdown_seconds=_number(entry.get("shutdownSeconds", 30), f"{where}.shutdownSeconds"),
        watts=watts,
        inspected=dict(inspected) if inspected is not None else None,
        unreachable=_windows(entry.get("unreachable"), f"{where}.unreachable"),
    )


def _windows(value: object, where: str) -> tuple[tuple[float, float], ...]:
    """A machine's `unreachable`: a list of `{atSeconds, seconds}`."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(w, Mapping) for w in value):
        raise TraceError(f"{where}: must be a list of {{atSeconds, seconds}}")
    return tuple(
        (
            _number(w.get("atSeconds"), f"{where}[{n}].atSeconds"),
            _number(w.get("seconds"), f"{where}[{n}].seconds"),
        )
        for n, w in enumerate(value)
    )


def _truth_entry(d: Durations) -> dict[str, Any]:
    out: dict[str, Any] = {
        "powerOnSeconds": d.power_on_seconds,
        "bootSeconds": d.boot_seconds,
        "shutdownSeconds": d.shutdown_seconds,
    }
    if d.watts is not None:
        out.update(zip(WATTS_KEYS, d.watts, strict=True))
    if d.inspected is not None:
        out["inspected"] = dict(d.inspected)
    if d.unreachable:
        out["unreachable"] = [{"atSeconds": at, "seconds": s} for at, s in d.unreachable]
    return out


def _pod(line: str, where: str) -> TracePod:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        raise TraceError(f"{where}: not JSON ({error})") from error
    if not isinstance(obj, Mapping) or not as_str(obj.get("name")):
        raise TraceError(f"{where}: a pod needs at least a name")
    owner = obj.get("owner")
    spec = obj.get("spec")
    return TracePod(
        at=_number(obj.get("at"), f"{where}.at"),
        run_seconds=_number(obj.get("runSeconds"), f"{where}.runSeconds"),
        namespace=as_str(obj.get("namespace"), "default") or "default",
        name=as_str(obj.get("name")),
        spec=spec if isinstance(spec, Mapping) else {},
        owner_kind=as_str(dig(owner, "kind")) or None,
        owner_name=as_str(dig(owner, "name")) or None,
        job_annotations=str_map(obj.get(JOB_ANNOTATIONS)),
        job_labels=str_map(obj.get(JOB_LABELS)),
    )


def load(directory: Path | str) -> Trace:
    """Read a trace directory; raises `TraceError` naming what is wrong."""
    root = Path(directory)
    meta_path = root / TRACE_FILE
    if not meta_path.is_file():
        raise TraceError(f"{root}: no {TRACE_FILE}: not a trace directory")
    meta = yamlfile.load(meta_path.read_text()) or {}
    if not isinstance(meta, Mapping):
        raise TraceError(f"{meta_path}: must be an object")
    start = parse_time(meta.get("start"))
    if start is None:
        raise TraceError(f"{meta_path}: start must be an RFC 3339 time")
    durations = {
        str(name): _truth(d, f"machines.{name}")
        for name, d in (meta.get("machines") or {}).items()
        if isinstance(d, Mapping)
    }
    cron_runs = {
        str(key): _number(dig(value, "runSeconds"), f"cronjobs.{key}.runSeconds")
        for key, value in (meta.get("cronjobs") or {}).items()
    }
    pods_path = root / PODS_FILE
    lines = pods_path.read_text().splitlines() if pods_path.exists() else []
    pods = sorted(
        (_pod(line, f"{pods_path}:{n}") for n, line in enumerate(lines, start=1) if line.strip()),
        key=lambda p: (p.at, p.namespace, p.name),
    )
    return Trace(
        name=as_str(meta.get("name"), root.name) or root.name,
        start=start,
        duration_seconds=_number(meta.get("durationSeconds"), f"{meta_path}: durationSeconds"),
        machines=_documents(root / MACHINES_FILE),
        cronjobs=_documents(root / CRONJOBS_FILE),
        configmaps=_documents(root / SERIES_FILE),
        pods=tuple(pods),
        durations=durations,
        cron_run_seconds=cron_runs,
        description=as_str(meta.get("description")),
        seed=meta.get("seed") if isinstance(meta.get("seed"), int) else None,
        ups=_ups(meta.get("ups"), meta_path),
    )


def _ups(raw: object, where: Path) -> TraceUps | None:
    if raw is None:
        return None
    try:
        return TraceUps.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise TraceError(f"{where}: ups.{field}: {first['msg']}") from None


def _pod_line(pod: TracePod) -> str:
    obj: dict[str, Any] = {
        "at": round(pod.at, 3),
        "runSeconds": round(pod.run_seconds, 3),
        "namespace": pod.namespace,
        "name": pod.name,
    }
    if pod.owner_kind:
        obj["owner"] = {"kind": pod.owner_kind, "name": pod.owner_name or ""}
    if pod.job_annotations:
        obj[JOB_ANNOTATIONS] = dict(pod.job_annotations)
    if pod.job_labels:
        obj[JOB_LABELS] = dict(pod.job_labels)
    obj["spec"] = pod.spec
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


def write(trace: Trace, directory: Path | str) -> Path:
    """Write `trace` as a directory (created if needed); returns its path."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "name": trace.name,
        "description": trace.description,
        "start": format_time(trace.start),
        "durationSeconds": trace.duration_seconds,
        "machines": {name: _truth_entry(d) for name, d in sorted(trace.durations.items())},
        "cronjobs": {
            key: {"runSeconds": seconds} for key, seconds in sorted(trace.cron_run_seconds.items())
        },
    }
    if trace.seed is not None:
        meta["seed"] = trace.seed
    if trace.ups is not None:
        meta["ups"] = trace.ups.model_dump(mode="json", by_alias=True, exclude_none=True)
    (root / TRACE_FILE).write_text(yaml.safe_dump(meta, sort_keys=False))
    (root / MACHINES_FILE).write_text(_yaml_stream(trace.machines))
    (root / CRONJOBS_FILE).write_text(_yaml_stream(trace.cronjobs))
    if trace.configmaps:
        (root / SERIES_FILE).write_text(_yaml_stream(trace.configmaps))
    pods = sorted(trace.pods, key=lambda p: (p.at, p.namespace, p.name))
    (root / PODS_FILE).write_text("".join(_pod_line(p) + "\n" for p in pods))
    return root


def _yaml_stream(docs: Sequence[Mapping[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(dict(d), sort_keys=False) for d in docs)
