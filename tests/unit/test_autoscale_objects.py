"""Builders of raw API objects (as `kubectl get -o json` prints them) for the autoscaler tests.

No tests here: `test_autoscale.py`, `test_autoscale_scaledown.py`, `test_scheduling.py` and
`test_snapshot.py` import these so every table row goes through `snapshot_from` exactly as the
handler's watch caches will. Times are plain datetimes around T0 (a fake clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lightsout.planning.autoscaler.autoscale import plan
from lightsout.planning.autoscaler.decisions import Plan, PowerOff, PowerOn
from lightsout.state.build import (
    DAEMONSETS_KEY,
    GROUPS_KEY,
    JOBS_KEY,
    MACHINES_KEY,
    NODES_KEY,
    PDBS_KEY,
    PODS_KEY,
    SERIES_KEY,
    snapshot_from,
)
from lightsout.state.types import ObjectKey, Snapshot

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NS = "lightsout"  # namespace of the Lights-Out objects
APPS = "apps"  # namespace of the workload pods

Obj = dict[str, Any]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ts(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _res(cpu: str | None, memory: str | None, extended: Mapping[str, Any] | None) -> Obj:
    out: Obj = {}
    if cpu is not None:
        out["cpu"] = cpu
    if memory is not None:
        out["memory"] = memory
    out.update(extended or {})
    return out


def pod(
    name: str,
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    *,
    ns: str = APPS,
    node: str | None = None,
    pending_since: datetime | None = None,
    extended: Mapping[str, Any] | None = None,
    selector: Mapping[str, str] | None = None,
    affinity: list[Obj] | None = None,
    tolerations: list[Obj] | None = None,
    owner: str | None = "ReplicaSet",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    phase: str | None = None,
    **spec: Any,
) -> Obj:
    """A pod: bound to `node`, or (without one) Pending and Unschedulable since `pending_since`
    (default: a minute before T0)."""
    body: Obj = {
        "containers": [{"name": "c", "resources": {"requests": _res(cpu, memory, extended)}}]
    }
    if selector:
        body["nodeSelector"] = dict(selector)
    if affinity is not None:
        body["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}
            }
        }
    if tolerations:
        body["tolerations"] = tolerations
    body.update(spec)
    status: Obj = {"phase": phase or ("Running" if node else "Pending")}
    if node:
        body["nodeName"] = node
    else:
        since = pending_since or at(-60)
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": ts(since),
            }
        ]
    metadata: Obj = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{name}",
        "creationTimestamp": ts(at(-3600)),
        "labels": dict(labels or {"app": name.rsplit("-", 1)[0]}),
        "annotations": dict(annotations or {}),
    }
    if owner:
        metadata["ownerReferences"] = [
            {"kind": owner, "name": f"{name}-owner", "controller": True, "apiVersion": "apps/v1"}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body, "status": status}


def core_node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    pods: int = 110,
    extended: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: list[Obj] | None = None,
    ready: bool = True,
    ready_since: datetime | None = None,
    unschedulable: bool = False,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {"pods": str(pods), **_res(cpu, memory, extended)},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": ts(ready_since or at(-86_400)),
                }
            ],
        },
    }


def machine(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    group: str = "lab",
    desired: str = "Off",
    phase: str | None = "Off",
    watts: tuple[float, float, float] | None = None,
    priority: int = 0,
    enabled: bool = True,
    boot: int = 600,
    extended: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: list[Obj] | None = None,
    resources: bool = True,
    learned: Obj | None = None,
    wear: Obj | None = None,
) -> Obj:
    """A Lights-Out Node whose core Node is called like it. `watts` is (on, idle, off);
    `learned` is its `status.learned`, `wear` extra `spec.autoscaling` (wear limits)."""
    spec: Obj = {
        "desiredPowerState": desired,
        "group": group,
        "kubernetesNodeName": name,
        "driver": {"wol": {"macAddress": "52:54:00:00:00:01", "ssh": {"host": name, "user": "u"}}},
        "autoscaling": {"enabled": enabled, "priority": priority, **(wear or {})},
        "power": {"bootTimeoutSeconds": boot},
    }
    if resources:
        spec["resources"] = {"cpu": cpu, "memory": memory}
        if extended:
            spec["resources"]["extended"] = dict(extended)
    if watts:
        spec["power"].update(onWatts=watts[0], idleWatts=watts[1], offWatts=watts[2])
    if labels:
        spec["labels"] = dict(labels)
    if taints:
        spec["taints"] = taints
    status: Obj = {"phase": phase, "phaseSince": ts(at(-3600))} if phase else {}
    if learned:
        status["learned"] = learned
    return {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
        "status": status,
    }


def ready_machine(name: str, cpu: str = "4", memory: str = "8Gi", **kw: Any) -> list[Obj]:
    """A machine that is on and Ready, with its core Node (Ready for a day)."""
    ready_since = kw.pop("ready_since", None)
    node_labels = kw.get("labels")
    return [
        machine(name, cpu, memory, desired="On", phase="Ready", **kw),
        core_node(name, cpu, memory, labels=node_labels, ready_since=ready_since),
    ]


def group(name: str = "lab", *, last_scale_up: datetime | None = None, **spec: Any) -> Obj:
    obj: Obj = {
        "apiVersion": "lightsout.dev/v1alpha1",
        "kind": "Group",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    if last_scale_up is not None:
        obj["status"] = {"lastScaleUp": {"time": ts(last_scale_up), "reason": "test"}}
    return obj


def pdb(name: str, match_labels: Mapping[str, str], allowed: int | None, ns: str = APPS) -> Obj:
    status = {} if allowed is None else {"disruptionsAllowed": allowed}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": dict(match_labels)}},
        "status": status,
    }


def daemonset(name: str, cpu: str, memory: str, **template: Any) -> Obj:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [container], **template}}},
    }


_KEYS = {
    ("v1", "Pod"): PODS_KEY,
    ("v1", "Node"): NODES_KEY,
    ("lightsout.dev/v1alpha1", "Node"): MACHINES_KEY,
    ("lightsout.dev/v1alpha1", "Group"): GROUPS_KEY,
    ("policy/v1", "PodDisruptionBudget"): PDBS_KEY,
    ("apps/v1", "DaemonSet"): DAEMONSETS_KEY,
    ("batch/v1", "Job"): JOBS_KEY,
    ("v1", "ConfigMap"): SERIES_KEY,
}


def snap(
    *objects: Any,
    complete: bool = True,
    unneeded_since: Mapping[ObjectKey, datetime] | None = None,
) -> Snapshot:
    lists: dict[str, list[Obj]] = {}
    for obj in _flat(objects):
        lists.setdefault(_KEYS[(obj["apiVersion"], obj["kind"])], []).append(obj)
    return snapshot_from(lists, complete=complete, unneeded_since=unneeded_since)


def _flat(items: Any) -> list[Obj]:
    if isinstance(items, dict):
        return [items]
    return [obj for item in items for obj in _flat(item)]


def run(*objects: Any, now: datetime = T0, **kw: Any) -> Plan:
    return plan(snap(*objects, **kw), now)


def mkey(name: str) -> ObjectKey:
    return ObjectKey(NS, name)


def pkey(name: str, ns: str = APPS) -> ObjectKey:
    return ObjectKey(ns, name)


def ons(result: Plan) -> list[str]:
    return sorted(a.machine.name for a in result.actions if isinstance(a, PowerOn))


def offs(result: Plan) -> list[str]:
    return sorted(a.machine.name for a in result.actions if isinstance(a, PowerOff))


def pod_note(result: Plan, name: str) -> str:
    return " ".join(result.explanations.pods.get(pkey(name), ()))


def machine_note(result: Plan, name: str) -> str:
    return " ".join(result.explanations.machines.get(mkey(name), ()))
