"""Frozen snapshots of the cluster for the autoscaling planner, and their builder.

`snapshot_from` turns raw API objects (pods, core Nodes, Lights-Out Nodes and Groups,
PodDisruptionBudgets, DaemonSets, CronJobs) into a `Snapshot` of frozen values; handlers call
it with their
watch caches and pass the result to `lightsout.planning.autoscale.plan`. Pure: no kopf, no
Kubernetes client, no I/O.
"""

from lightsout.state.build import (
    CONFIGMAPS_KEY,
    CRONJOBS_KEY,
    DAEMONSETS_KEY,
    GROUPS_KEY,
    MACHINES_KEY,
    NODES_KEY,
    PDBS_KEY,
    PODS_KEY,
    SECRETS_KEY,
    snapshot_from,
)
from lightsout.state.resources import Resources, format_amount, parse_amount, parse_resources
from lightsout.state.types import (
    DO_NOT_DISRUPT,
    MIRROR_POD,
    SAFE_TO_EVICT,
    UNNEEDED_SINCE,
    CoreNode,
    DaemonSet,
    DisruptionBudget,
    ExpectedPod,
    Group,
    LabelSelector,
    Machine,
    NodeSelectorTerm,
    ObjectKey,
    Pod,
    Requirement,
    ScaleDownPolicy,
    ScaleUpPolicy,
    SchedulingRequirements,
    Snapshot,
    Taint,
    Toleration,
)

__all__ = [
    "CONFIGMAPS_KEY",
    "CRONJOBS_KEY",
    "DAEMONSETS_KEY",
    "DO_NOT_DISRUPT",
    "GROUPS_KEY",
    "MACHINES_KEY",
    "MIRROR_POD",
    "NODES_KEY",
    "PDBS_KEY",
    "PODS_KEY",
    "SAFE_TO_EVICT",
    "SECRETS_KEY",
    "UNNEEDED_SINCE",
    "CoreNode",
    "DaemonSet",
    "DisruptionBudget",
    "ExpectedPod",
    "Group",
    "LabelSelector",
    "Machine",
    "NodeSelectorTerm",
    "ObjectKey",
    "Pod",
    "Requirement",
    "Resources",
    "ScaleDownPolicy",
    "ScaleUpPolicy",
    "SchedulingRequirements",
    "Snapshot",
    "Taint",
    "Toleration",
    "format_amount",
    "parse_amount",
    "parse_resources",
    "snapshot_from",
]
