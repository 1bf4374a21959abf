"""Frozen snapshot types: what the autoscaling planner knows about the cluster at one instant.

`lightsout.state.build.snapshot_from` fills them from raw API objects; the planner
(`lightsout.planning.autoscaler.autoscale`) and the scheduling simulation
(`lightsout.planning.autoscaler.scheduling`) only read them. They hold data, not policy: how a
toleration matches a taint, or whether a pod fits, is decided in `planning`.

Label maps are plain mappings that nobody mutates; everything else is tuples, so a pod's
`SchedulingRequirements` is hashable and identical pods can be grouped by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lightsout.models.battery import BatteryPolicy, BatteryStatus
from lightsout.models.enums import Autoscaler, DesiredPowerState, Phase, SelectionPolicy
from lightsout.models.group import (
    DEFAULT_BREAK_EVEN_MULTIPLE,
    DEFAULT_JOB_GRACE_SECONDS,
    Electricity,
)
from lightsout.models.windows import WindowTimes
from lightsout.state.resources import Resources
from lightsout.state.series import Series

#: Pod annotation that keeps the autoscaler from draining the pod's node.
DO_NOT_DISRUPT = "lightsout.dev/do-not-disrupt"
#: cluster-autoscaler's way of saying the same ("false"): honoured too, so a workload marked
#: for cluster-autoscaler is safe under Lights-Out without a second annotation.
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
#: Pod annotation the kubelet puts on mirror pods of static pods.
MIRROR_POD = "kubernetes.io/config.mirror"
#: Machine annotation where a handler may persist `Plan.unneeded_since` (RFC 3339).
UNNEEDED_SINCE = "lightsout.dev/unneeded-since"
#: A machine's drain deadline while its UPS runs low (`planning.autoscaler.battery`).
DRAIN_BY = "lightsout.dev/drain-by"

# Deferrable Jobs (`planning.autoscaler.deferral`): a Job that carries FINISH_BY (an RFC 3339
# time) or MAX_DELAY (a duration from its creation: "8h", "90m", "3600s") may wait for cheap
# hours. The admission webhook creates it suspended and marks it DEFERRED; the planner releases
# it (`spec.suspend: false`) at the start that costs least and writes START_AT meanwhile.
FINISH_BY = "lightsout.dev/finish-by"
MAX_DELAY = "lightsout.dev/max-delay"
#: How long the Job runs once started (a duration as MAX_DELAY's); else learned from the
#: finished Jobs of the same CronJob.
EXPECTED_DURATION = "lightsout.dev/expected-duration"
#: Set by the admission webhook on a deferrable Job it created suspended ("true").
DEFERRED = "lightsout.dev/deferred"
#: When the planner will release a held Job (RFC 3339), for `kubectl get job -o yaml`.
START_AT = "lightsout.dev/start-at"
#: Kueue's label: a Job another admission controller governs is left to it.
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


def deferrable(annotations: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a Job with these annotations and labels may wait for cheap hours, and is
    Lights-Out's to hold (not Kueue's)."""
    return (FINISH_BY in annotations or MAX_DELAY in annotations) and KUEUE_QUEUE not in labels


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """Namespace and name of an object (`namespace` is empty for cluster-scoped ones)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty: every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions/matchFields entry: `key operator values`."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        if self.operator in ("Gt", "Lt"):
            return f"{self.key} {self.operator} {self.values[0] if self.values else '?'}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Expressions on node labels and fields (only `metadata.name`), all of which must hold."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector (PodDisruptionBudget). Empty selects everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulingRequirements:
    """What the scheduler looks at to place a pod: identical pods share one value, which is what
    lets the planner place ten thousand replicas as a handful of groups.

    `requests` is the pod's effective request (see `lightsout.state.parse.pod_requests`),
    including `pods: 1`. `affinity` holds the required node affinity's terms (ORed), or None when
    the pod has none.
    """

    requests: Resources
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class Pod:
    key: ObjectKey
    uid: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    node_name: str | None
    scheduling: SchedulingRequirements
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Kind of the controlling owner (`ReplicaSet`, `DaemonSet`, …), None for a bare pod.
    owner_kind: str | None = None
    #: Name of the controlling owner (a Job's name for a Job's pod), None for a bare pod.
    owner_name: str | None = None
    mirror: bool = False
    #: The annotation that keeps the planner from evicting it (`lightsout.dev/do-not-disrupt=true`
    #: or `cluster-autoscaler.kubernetes.io/safe-to-evict=false`), empty when none does.
    do_not_disrupt: str = ""
    #: When the scheduler declared it Unschedulable (PodScheduled=False, reason Unschedulable).
    unschedulable_since: datetime | None = None
    created: datetime | None = None
    #: status.startTime: when the kubelet accepted it on its node (None until bound).
    started: datetime | None = None
    deleting: bool = False

    @property
    def requests(self) -> Resources:
        return self.scheduling.requests

    @property
    def daemonset(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def terminal(self) -> bool:
        """Finished pods hold no resources on their node."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def pending_unschedulable(self) -> bool:
        return (
            self.node_name is None
            and self.unschedulable_since is not None
            and not self.terminal
            and not self.deleting
        )


@dataclass(frozen=True, slots=True)
class CoreNode:
    """A core Kubernetes Node (whether or not Lights-Out manages its machine)."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    unschedulable: bool = False
    ready: bool = False
    #: When the Ready condition last changed: a node Ready since after a pod's Unschedulable
    #: verdict is one the scheduler may not have tried yet.
    ready_since: datetime | None = None
    provider_id: str | None = None
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class Machine:
    """A Lights-Out Node: one machine, with what its core Node will look like once it joins."""

    key: ObjectKey
    group: str
    kubernetes_node_name: str
    phase: Phase | None
    desired: DesiredPowerState
    autoscaling_enabled: bool = True
    priority: int = 0
    #: Expected capacity (spec.resources), None when the spec does not say.
    resources: Resources | None = None
    #: Labels and taints its core Node carries (`state.corenode.core_node_metadata`): the
    #: Group's, then the machine's, and the labels naming the machine and its Group.
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    watts_on: float | None = None
    watts_idle: float | None = None
    watts_off: float | None = None
    #: spec.power.bootTimeoutSeconds: the only boot-time figure the spec carries.
    boot_seconds: int = 600
    #: How long its power-on really takes, power-on Job to Ready, learned from its phase
    #: history (`status.learned.bootSeconds`); None until learned (the planner then falls back
    #: to `boot_seconds`).
    learned_boot_seconds: float | None = None
    #: How long its power-off Job really takes (`status.learned.shutdownSeconds`).
    learned_shutdown_seconds: float | None = None
    #: When it was asked to power on within the last 24 hours (`status.learned.powerOns`).
    power_ons: tuple[datetime, ...] = ()
    #: Wear limits (`spec.autoscaling`): None is no limit.
    minimum_on_seconds: int | None = None
    max_power_cycles_per_day: int | None = None
    phase_since: datetime | None = None
    provider_id: str | None = None
    #: Why the machine cannot be powered on (a missing Group, Secret, key, ConfigMap or
    #: playbook, `state.references`), None when everything it needs exists.
    unresolved: str | None = None

    @property
    def group_key(self) -> ObjectKey:
        return ObjectKey(self.key.namespace, self.group)

    @property
    def boot_estimate(self) -> float:
        """Seconds from the power-on decision to Ready: learned, else the boot timeout."""
        if self.learned_boot_seconds is not None:
            return self.learned_boot_seconds
        return float(self.boot_seconds)


@dataclass(frozen=True, slots=True)
class ScaleUpPolicy:
    stabilization_seconds: int = 0
    max_concurrent: int = 2


@dataclass(frozen=True, slots=True)
class ScaleDownPolicy:
    enabled: bool = True
    #: None is `auto`: one break-even time of each machine (`planning.autoscaler.breakeven`).
    unneeded_seconds: int | None = None
    #: `auto` waits this many break-even times.
    break_even_multiple: float = DEFAULT_BREAK_EVEN_MULTIPLE
    utilization_threshold: float = 0.5
    stabilization_seconds: int = 300
    max_concurrent: int = 1
    job_grace_seconds: int = DEFAULT_JOB_GRACE_SECONDS


@dataclass(frozen=True, slots=True)
class Group:
    key: ObjectKey
    min_nodes: int = 0
    max_nodes: int = 10
    autoscaler: Autoscaler = Autoscaler.BUILTIN
    dry_run: bool = False
    scale_up: ScaleUpPolicy = ScaleUpPolicy()
    scale_down: ScaleDownPolicy = ScaleDownPolicy()
    selection_policy: SelectionPolicy = SelectionPolicy.LOWEST_ENERGY
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    price_per_kwh: float | None = None
    #: `spec.electricity` whole, with its tariff (`planning.energy.tariff` prices a period).
    electricity: Electricity | None = None
    #: Its price series per kWh (markup added) and carbon series, read from ConfigMaps
    #: (`state.series`), and why one it names is missing or unreadable.
    prices: Series | None = None
    carbon: Series | None = None
    series_problem: str | None = None
    #: Its solar surplus in W, where one is known (`state.series.surplus`).
    surplus: Series | None = None
    last_scale_up: datetime | None = None
    last_scale_down: datetime | None = None
    #: `spec.windows`: recurring floors and ceilings (`planning.autoscaler.windows` applies them).
    windows: tuple[Window, ...] = ()
    #: Set by `planning.autoscaler.windows.effective` on the Group the planner sizes: the window
    #: whose limits are in force, in words ("window evening (18:00-23:00 Europe/Berlin): minNodes 1
    #: until 23:00").
    window_note: str | None = None
    #: Set by `planning.autoscaler.windows.effective`: a quiet window is open ("strict" when
    #: strict).
    quiet: str | None = None
    #: `spec.battery`: the UPS feeding its machines and its tier (`planning.autoscaler.battery`).
    battery: BatteryPolicy | None = None
    #: `status.battery`: that UPS as last read, and the outage its machines are off for.
    battery_status: BatteryStatus | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """A schedule window of a Group: its times, and the limits it sets while open."""

    times: WindowTimes
    min_nodes: int | None = None
    max_nodes: int | None = None
    #: No power-on for a pod another Group's machine could be powered on for now
    #: (`planning.autoscaler.startable.alternatives`; `strict`: for no pending pod at all).
    quiet: bool = False
    strict: bool = False


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    key: ObjectKey
    #: None selects no pod (policy/v1: a null selector matches nothing).
    selector: LabelSelector | None
    #: status.disruptionsAllowed; None until the disruption controller has computed it.
    disruptions_allowed: int | None


@dataclass(frozen=True, slots=True)
class DaemonSet:
    """A DaemonSet's pod template: every new node it selects also runs one of these pods."""

    key: ObjectKey
    scheduling: SchedulingRequirements


@dataclass(frozen=True, slots=True)
class ExpectedPod:
    """A pod known to arrive at `at` before it exists: a CronJob's next run. The planner
    powers capacity on early enough for it (`planning.autoscaler.prewarm`)."""

    key: ObjectKey
    at: datetime
    scheduling: SchedulingRequirements


@dataclass(frozen=True)
class DeferredJob:
    """A suspended deferrable Job (`deferrable`) the planner may release later
    (`planning.autoscaler.deferral`): what it asks of a machine, by when it must be done, how
    long it runs."""

    key: ObjectKey
    #: The pod template's requirements: the machines that could run it.
    scheduling: SchedulingRequirements
    #: When it must have finished (None: its annotations do not say, see `problem`).
    deadline: datetime | None
    #: How long it runs once started (None: unknown; it then runs at once).
    duration: timedelta | None = None
    #: Where `duration` comes from, in words ("lightsout.dev/expected-duration", "learned ...").
    duration_source: str = ""
    #: Its START_AT annotation as stored (the applier writes it only when it changes).
    start_mark: str | None = None
    #: An annotation that does not read: the Job is released at once and this says why.
    problem: str | None = None
    #: How many of its pods run at once: `spec.parallelism` (1 when unset), no more than
    #: `spec.completions` when that is set (the Job controller never runs more pods than
    #: completions remain).
    width: int = 1


@dataclass(frozen=True)
class Snapshot:
    """Everything the planner reads, captured at one instant.

    `complete` is set by the caller once every watch feeding the snapshot has synced; the planner
    refuses to decide on a partial view (a missing pod list looks exactly like an idle cluster).
    `unneeded_since` carries the times the previous plan returned, so unneeded-time counting
    survives between plans (and restarts, when the handler persists them). `problems` lists the
    objects the builder skipped or degraded, and why.
    """

    pods: tuple[Pod, ...] = ()
    nodes: tuple[CoreNode, ...] = ()
    machines: tuple[Machine, ...] = ()
    groups: tuple[Group, ...] = ()
    disruption_budgets: tuple[DisruptionBudget, ...] = ()
    daemonsets: tuple[DaemonSet, ...] = ()
    #: Pods announced ahead of time (CronJob runs), soonest first.
    expected: tuple[ExpectedPod, ...] = ()
    #: Suspended deferrable Jobs waiting for their release (`planning.autoscaler.deferral`).
    deferred: tuple[DeferredJob, ...] = ()
    complete: bool = False
    unneeded_since: Mapping[ObjectKey, datetime] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
