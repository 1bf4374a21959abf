"""Every closed set of values in the Lights-Out API, as `StrEnum`s.

The values are the exact strings on the wire; the CRD generator turns each into an OpenAPI
`enum`, so the API server refuses anything else. Imported by the models, the planner and the
handlers alike (`Phase.READY == "Ready"`).
"""

from __future__ import annotations

from enum import StrEnum


class DesiredPowerState(StrEnum):
    """A power state a person or the autoscaler can ask for."""

    ON = "On"
    OFF = "Off"


class ObservedPowerState(StrEnum):
    """The power state last seen on the machine; `Unknown` until a check or action reported."""

    ON = "On"
    OFF = "Off"
    UNKNOWN = "Unknown"


class Phase(StrEnum):
    """Where a machine is in its power life cycle (the Node's `status.phase`)."""

    OFF = "Off"
    POWERING_ON = "PoweringOn"
    BOOTING = "Booting"
    READY = "Ready"
    DRAINING = "Draining"
    POWERING_OFF = "PoweringOff"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    PROVISIONING = "Provisioning"
    DEPROVISIONING = "Deprovisioning"


class Action(StrEnum):
    """An action run as a Job; also the playbook's base name (`startup.yml`)."""

    STARTUP = "startup"
    SHUTDOWN = "shutdown"
    PROVISION = "provision"
    DEPROVISION = "deprovision"
    HEALTHCHECK = "healthcheck"

    @property
    def target(self) -> ObservedPowerState | None:
        """The power state this action drives the machine to (None for a health check)."""
        if self in (Action.STARTUP, Action.PROVISION):
            return ObservedPowerState.ON
        if self in (Action.SHUTDOWN, Action.DEPROVISION):
            return ObservedPowerState.OFF
        return None


class OperationResult(StrEnum):
    """Outcome of the last action Job."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BootOverride(StrEnum):
    """One-shot boot device set before power-on."""

    NONE = "None"
    PXE = "Pxe"


class ProxmoxMode(StrEnum):
    """Persistent: start and stop one existing VM. Ephemeral: clone on power-on, destroy on off."""

    PERSISTENT = "Persistent"
    EPHEMERAL = "Ephemeral"


class JoinFlavor(StrEnum):
    """How a clone joins: `kubeadm join` with a bootstrap token, a k3s agent with the token of
    a Secret, or user-data from a template of your own (any other distribution)."""

    KUBEADM = "kubeadm"
    K3S = "k3s"
    TEMPLATE = "template"


class NodeRemovalPolicy(StrEnum):
    """What happens to the core Kubernetes Node object after the machine is powered off."""

    DELETE = "Delete"
    KEEP = "Keep"


class TaintEffect(StrEnum):
    """Effect of a taint, as in core/v1."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Autoscaler(StrEnum):
    """Who decides a Group's size."""

    BUILTIN = "builtin"
    CLUSTER_AUTOSCALER = "cluster-autoscaler"
    NONE = "none"


class SelectionPolicy(StrEnum):
    """How the autoscaler chooses among machines that would all fit the pending pods."""

    LOWEST_ENERGY = "LowestEnergy"
    LEAST_WASTE = "LeastWaste"
    PRIORITY = "Priority"
    FASTEST_BOOT = "FastestBoot"


class DeferralObjective(StrEnum):
    """What a deferrable Job's start minimises (`Group.spec.electricity.objective`)."""

    COST = "Cost"
    CARBON = "Carbon"


class DriftPolicy(StrEnum):
    """What a health check does when a machine's real power state differs from the desired one."""

    REPORT = "Report"
    CORRECT = "Correct"
    ADOPT = "Adopt"


class HealthCheckResult(StrEnum):
    """Outcome of one health check of one machine."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    #: An action Job held the machine's Lease: the reading was not used.
    SKIPPED = "Skipped"


class ConditionStatus(StrEnum):
    """Status of a condition, as in metav1.Condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    """Condition types Lights-Out writes (the schema accepts any well-formed type)."""

    # Node
    REGISTERED = "Registered"
    HEALTHY = "Healthy"
    POWER_ACTION_SUCCEEDED = "PowerActionSucceeded"
    DRIFTED = "Drifted"
    DRAINING = "Draining"
    #: The core Node carries a providerID other than the machine's (never overwritten).
    PROVIDER_ID_CONFLICT = "ProviderIDConflict"
    #: False while a power action waits for an object it needs (Group, Secret, ConfigMap).
    REFERENCES_RESOLVED = "ReferencesResolved"
    #: True while spec.resources (or the arch label) claims more than the controller reported.
    INSPECTION_MISMATCH = "InspectionMismatch"
    # Group
    READY = "Ready"
    SCALING_LIMITED = "ScalingLimited"
    #: True while the Group's UPS reads without error (`spec.battery.source`).
    POWER_SOURCE_REACHABLE = "PowerSourceReachable"
    #: True while the Group's UPS runs on battery (the mains have failed).
    ON_BATTERY = "OnBattery"
    #: True while the price and carbon series the Group names read (`spec.electricity`).
    PRICE_SERIES_READY = "PriceSeriesReady"
    #: True while the Group's solar surplus sensor reads (`spec.electricity.solarSurplus`).
    SOLAR_SURPLUS_READY = "SolarSurplusReady"


class BatteryTier(StrEnum):
    """When a Group's machines are powered off while their UPS runs on battery."""

    #: Deferrable work: drained and powered off as soon as the mains fail.
    SHED = "Shed"
    #: Kept on until the battery's runtime or charge falls below the Group's `holdUntil`.
    HOLD = "Hold"
    #: Storage, the control plane: powered off last, once every other tier fed by the UPS is off.
    LAST = "Last"


class Mains(StrEnum):
    """The mains as a Group's UPS reports them (`status.battery.mains`)."""

    ONLINE = "Online"
    ON_BATTERY = "OnBattery"
    #: On battery, and the UPS says low battery (LB) or a forced shutdown (FSD).
    LOW_BATTERY = "LowBattery"
    #: The UPS could not be read (the last reading is kept beside it).
    UNKNOWN = "Unknown"
