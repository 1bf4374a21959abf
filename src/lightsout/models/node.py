"""The Node kind (`nodes.lightsout.dev`): one machine Lights-Out can power on and off.

`NodeSpec` is what a person (or the autoscaler, through `desiredPowerState`) wants; `NodeStatus`
is what the operator observed, written only through the status subresource. The power FSM reads
both; the CRD generator turns both into the Node CRD's schema.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from lightsout.models.base import ApiModel, Rule, default_empty, rules
from lightsout.models.common import Conditions, Energy, Taints
from lightsout.models.drivers import CloudInitJoin, NodeDriver, ProxmoxDriver
from lightsout.models.enums import (
    Action,
    DesiredPowerState,
    HealthCheckResult,
    NodeRemovalPolicy,
    ObservedPowerState,
    OperationResult,
    Phase,
    ProxmoxMode,
)
from lightsout.models.types import (
    DnsSubdomain,
    LabelMap,
    LongText,
    PlaybookFile,
    Quantity,
    ShortText,
    Watts,
)

ProviderID = Annotated[
    str, StringConstraints(min_length=1, max_length=512, pattern=r"^[a-z][-a-z0-9+.]*://.+$")
]
ExtendedResourceName = Annotated[str, StringConstraints(max_length=317)]

#: Durations kept per kind in `status.learned` (the learned figure is their median, so one
#: slow boot among them does not move it).
MAX_SAMPLES = 9
#: Defaults of a Node's spec, in one place: the schema, the state machine's `MachineState` and
#: the reading of a Node resource take them from here.
DEFAULT_MAX_RETRIES = 3
DEFAULT_BOOT_TIMEOUT_SECONDS = 600
DEFAULT_SHUTDOWN_TIMEOUT_SECONDS = 300
#: Power-on times kept for the wear limit (also the highest maxPowerCyclesPerDay).
MAX_POWER_ONS_KEPT = 96

EXTENDED_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
EXTENDED_NAMES = Rule(
    cel=f"self.all(k, k.matches(r'{EXTENDED_NAME}'))",
    message="extended resource names must be domain-prefixed, e.g. nvidia.com/gpu",
)


class NodeResources(ApiModel):
    """Capacity the machine is expected to offer once it has joined, so the autoscaler can plan
    for a machine that has never run; the real allocatable replaces it once the Node registers."""

    cpu: Quantity
    """Allocatable CPU (`8`, `7500m`)."""
    memory: Quantity
    """Allocatable memory (`32Gi`)."""
    pods: int = Field(default=110, ge=1, le=10_000)
    """Maximum number of pods."""
    extended: dict[ExtendedResourceName, Quantity] | None = Field(
        default=None, max_length=16, json_schema_extra=rules(EXTENDED_NAMES)
    )
    """Extended resources by name (`nvidia.com/gpu: 1`)."""
    pinned: bool = False
    """Plan with these figures even when a health check inspected others. False (the default):
    once the machine's controller has reported its cpu and memory (`status.inspected`) the
    planner uses the inspected cpu, memory and GPU count instead, and the InspectionMismatch
    condition names each declared figure that differs; set it to keep room for the system, or
    when the BMC counts wrong."""

    @model_validator(mode="after")
    def _extended_names(self) -> Self:
        names = self.extended or {}
        EXTENDED_NAMES.check(all(re.fullmatch(EXTENDED_NAME, name) for name in names))
        return self


IDLE_NOT_ABOVE_ON = Rule(
    cel="!has(self.idleWatts) || !has(self.onWatts) || self.idleWatts <= self.onWatts",
    message="idleWatts must not exceed onWatts",
    field_path=".idleWatts",
    test=lambda p: p.idle_watts is None or p.on_watts is None or p.idle_watts <= p.on_watts,
)
OFF_NOT_ABOVE_ON = Rule(
    cel="!has(self.offWatts) || ((!has(self.idleWatts) || self.offWatts <= self.idleWatts)"
    " && (!has(self.onWatts) || self.offWatts <= self.onWatts))",
    message="offWatts must not exceed idleWatts or onWatts",
    field_path=".offWatts",
    test=lambda p: (
        p.off_watts is None
        or all(p.off_watts <= above for above in (p.idle_watts, p.on_watts) if above is not None)
    ),
)


class PowerProfile(ApiModel):
    """Electrical draw for energy accounting and the LowestEnergy policy, and action timeouts."""

    cel_rules = (IDLE_NOT_ABOVE_ON, OFF_NOT_ABOVE_ON)

    on_watts: Watts | None = None
    """Draw when on and busy."""
    idle_watts: Watts | None = None
    """Draw when on and idle."""
    off_watts: Watts | None = None
    """Draw when off (BMC, standby)."""
    boot_timeout_seconds: int = Field(default=DEFAULT_BOOT_TIMEOUT_SECONDS, ge=10, le=86_400)
    """From power-on until the core Node is Ready; after it the attempt fails."""
    shutdown_timeout_seconds: int = Field(
        default=DEFAULT_SHUTDOWN_TIMEOUT_SECONDS, ge=10, le=86_400
    )
    """From the shutdown request until the machine is observed off."""


class AutoscalingSettings(ApiModel):
    """Whether and how the autoscaler may power this machine on and off."""

    enabled: bool = True
    """False pins the machine to the `desiredPowerState` a person set."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """Under the Priority selection policy, higher priority machines are powered on first and
    off last."""
    minimum_on_seconds: int | None = Field(default=None, ge=1, le=86_400)
    """Wear limit: once Ready, the autoscaler leaves the machine on at least this long (unset:
    no minimum)."""
    max_power_cycles_per_day: int | None = Field(default=None, ge=1, le=MAX_POWER_ONS_KEPT)
    """Wear limit: the autoscaler does not power the machine off while it has been powered on
    this many times in the last 24 hours, so it is never started more often than this in any
    24 hours (unset: no limit)."""


class PlaybookOverrides(ApiModel):
    """User playbooks replacing the shipped ones for this machine's actions."""

    config_map_name: DnsSubdomain | None = None
    """ConfigMap holding the playbooks; by default the Group's, else the shipped set."""
    startup: PlaybookFile | None = None
    """Playbook powering the machine on."""
    shutdown: PlaybookFile | None = None
    """Playbook powering the machine off."""
    provision: PlaybookFile | None = None
    """Playbook creating an ephemeral machine."""
    deprovision: PlaybookFile | None = None
    """Playbook destroying an ephemeral machine."""
    healthcheck: PlaybookFile | None = None
    """Playbook observing power state and BMC reachability."""


class NodeSpec(ApiModel):
    """The machine and what is wanted of it."""

    desired_power_state: DesiredPowerState = DesiredPowerState.OFF
    """On or Off: set by a person (`kubectl patch`) or by the autoscaler."""
    group: DnsSubdomain
    """Name of the Group (same namespace) whose policy applies to this machine."""
    kubernetes_node_name: DnsSubdomain
    """Name of the core Kubernetes Node the machine registers as."""
    provider_id: ProviderID | None = Field(default=None, alias="providerID")
    """Provider id matched against the core Node; by default `lightsout://<namespace>/<name>`."""
    driver: NodeDriver
    """How the machine is powered."""
    resources: NodeResources | None = None
    """Expected capacity, so the autoscaler can plan a machine that has never joined; once its
    controller reported cpu and memory (`status.inspected`) those replace the declared ones
    unless `pinned`; without this block, the inspected cpu and memory are used."""
    labels: LabelMap | None = None
    """Labels applied to the core Node when it registers."""
    taints: Taints | None = None
    """Taints applied to the core Node when it registers."""
    power: PowerProfile = default_empty(PowerProfile)
    """Power draw and action timeouts."""
    autoscaling: AutoscalingSettings = default_empty(AutoscalingSettings)
    """Autoscaler participation."""
    playbooks: PlaybookOverrides | None = None
    """Per-action playbook overrides."""
    node_removal_policy: NodeRemovalPolicy | None = None
    """Delete or keep the core Node object after power-off; unset: the Group's choice."""
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0, le=20)
    """Failed attempts of one intent before the Node goes Failed."""

    @property
    def clone_join(self) -> CloudInitJoin | None:
        """The `join` block, when the machine is an Ephemeral Proxmox clone that has one: it
        joins by itself (with an address from its Group's `addressPool`, if any)."""
        proxmox = self.driver.block(ProxmoxDriver)
        if proxmox is not None and proxmox.mode is ProxmoxMode.EPHEMERAL:
            return proxmox.join
        return None


class Learned(ApiModel):
    """What the operator measured of this machine's power cycles: durations the planner uses
    instead of the declared timeouts (pre-warming lead time, break-even, FastestBoot), and the
    recent power-ons its wear limit counts."""

    boot_seconds: int | None = Field(default=None, ge=0)
    """Median of `bootSamples`: power-on Job started to Ready."""
    shutdown_seconds: int | None = Field(default=None, ge=0)
    """Median of `shutdownSamples`: power-off Job started to Off."""
    boot_samples: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, max_length=MAX_SAMPLES
    )
    """The last power-ons' durations in seconds, oldest first."""
    shutdown_samples: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, max_length=MAX_SAMPLES
    )
    """The last power-offs' durations in seconds, oldest first."""
    power_ons: list[datetime] | None = Field(default=None, max_length=MAX_POWER_ONS_KEPT)
    """When the machine was asked to power on within the last 24 hours, oldest first."""
    off_watts: Watts | None = None
    """Draw measured while off (BMC, standby), learned from the health checks' readings."""
    idle_watts: Watts | None = None
    """Draw measured while on with (almost) no cpu requested."""
    busy_watts: Watts | None = None
    """Draw at full cpu, extrapolated from readings taken while pods requested cpu."""


class LastOperation(ApiModel):
    """The most recent action Job and how it ended."""

    action: Action
    """Which action ran."""
    intent: int = Field(ge=0)
    """metadata.generation of the Node when the intent this action serves was decided."""
    job: DnsSubdomain
    """Name of the Job (`lo-<node>-<action>-g<generation>-a<attempt>`)."""
    attempt: int = Field(ge=0, le=1000)
    """Attempt number for this intent, from 1 (0: adopted without a Job of its own)."""
    started: datetime
    """When the Job was created."""
    finished: datetime | None = None
    """When the Job ended."""
    result: OperationResult
    """Running, Succeeded or Failed."""
    failed_task: ShortText | None = None
    """Name of the playbook task that failed."""
    message: LongText | None = None
    """What the playbook reported, credentials redacted."""
    values: dict[str, Any] | None = None
    """Values the playbook reported through set_stats (`lightsout` key)."""


class Intent(ApiModel):
    """The power state the operator is working towards, and since which generation."""

    desired: DesiredPowerState
    """The desiredPowerState being carried out."""
    generation: int = Field(ge=0)
    """metadata.generation at which this desired state was first seen. Only a change of
    desiredPowerState starts a new intent (editing labels does not), except that any spec edit
    of a Failed machine retries it."""


class CloneRecord(ApiModel):
    """The virtual machine an ephemeral Node's provision made (Proxmox `mode: Ephemeral`)."""

    vmid: int = Field(ge=100, le=999_999_999)
    """Proxmox VM id of the clone."""
    host: ShortText | None = None
    """Proxmox VE host the clone was placed on."""


class HealthCheckRecord(ApiModel):
    """The last health check of the machine (the Group's health-check CronJob or the CLI)."""

    time: datetime
    """When the check read the machine's controller."""
    result: HealthCheckResult
    """Healthy, Unhealthy, or Skipped (an action held the machine's Lease)."""
    reason: ShortText | None = None
    """Healthy, BMCUnreachable, AuthenticationFailed, TLSError, UnknownSystem, CheckFailed,
    ActionInProgress."""
    message: LongText | None = None
    """What the check found, credentials redacted."""
    power_state: ObservedPowerState | None = None
    """Power state the controller reported."""
    job: DnsSubdomain | None = None
    """Name of the Job that ran the check."""


class MeasuredPower(ApiModel):
    """The machine's draw as its controller (BMC, hypervisor, smart plug) last reported it."""

    watts: Watts
    """Consumed watts."""
    observed_at: datetime
    """When the reading was taken (the health check's time)."""
    source: ShortText
    """Who measured it: the driver (`redfish`, `ipmi`, `proxmox`) or a plug."""


class Inspected(ApiModel):
    """What the machine's controller says it is: the BMC's inventory (Redfish ProcessorSummary,
    MemorySummary, Processors, PCIeDevices) or the hypervisor's VM configuration. The planner
    uses this capacity unless `spec.resources.pinned`."""

    cpu: int | None = Field(default=None, ge=1, le=100_000)
    """Logical processors (threads where the controller reports them, else cores)."""
    memory: Quantity | None = None
    """Installed memory (`64Gi`)."""
    architecture: ShortText | None = None
    """Processor architecture as Kubernetes names it (`amd64`, `arm64`)."""
    gpus: int | None = Field(default=None, ge=0, le=1_000)
    """GPUs: Processors of type GPU, or PCIe display controllers other than the BMC's own video,
    whichever counts more (a BMC may list a GPU in both)."""
    observed_at: datetime
    """When the controller was read."""
    source: ShortText
    """Who reported it (the driver)."""


class NodeStatus(ApiModel):
    """What the operator observed. Written through the status subresource only."""

    phase: Phase | None = None
    """Where the machine is in its power life cycle."""
    observed_power_state: ObservedPowerState | None = None
    """Power state last seen on the machine."""
    conditions: Conditions | None = None
    """Registered, Healthy, PowerActionSucceeded, Drifted, Draining, ProviderIDConflict,
    InspectionMismatch."""
    last_operation: LastOperation | None = None
    """The most recent action."""
    provider_id: ProviderID | None = Field(default=None, alias="providerID")
    """Provider id in use (spec.providerID or the default)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation this status was computed from."""
    intent: Intent | None = None
    """The intent being carried out; its generation names the action Jobs."""
    phase_since: datetime | None = None
    """When `phase` last changed."""
    reason: ShortText | None = None
    """CamelCase reason for the current phase."""
    message: LongText | None = None
    """Human-readable explanation of the current phase."""
    attempts: int | None = Field(default=None, ge=0)
    """Attempts made for the current intent."""
    energy: Energy | None = None
    """Energy accounting (checkpointed when the machine's draw changes)."""
    drift_corrections: list[datetime] | None = Field(default=None, max_length=100)
    """When a health check's drift was last corrected (driftPolicy Correct), within the
    Group's correctionWindowSeconds: once maxCorrections are listed the machine is Failed."""
    last_health_check: HealthCheckRecord | None = None
    """The last health check's result."""
    learned: Learned | None = None
    """Boot and shutdown durations measured from the phase history, recent power-ons, and the
    draw learned from measured watts."""
    power: MeasuredPower | None = None
    """The last measured draw (health checks of controllers that report it)."""
    inspected: Inspected | None = None
    """Capacity and architecture the controller reported at the last health check."""
    clone: CloneRecord | None = None
    """Ephemeral machines: the VM made by the last provision, kept until a deprovision
    confirms it is gone (also when the provision failed after cloning)."""


class Node(ApiModel):
    """A machine Lights-Out powers on and off: a BMC-managed server, a Wake-on-LAN PC or a
    Proxmox VM, member of one Group."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["lightsout.dev/v1alpha1"] = "lightsout.dev/v1alpha1"
    kind: Literal["Node"] = "Node"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: NodeSpec
    status: NodeStatus | None = None
