"""Every metric Lights-Out exports, declared once. Imported by whatever records a figure.

Label values are bounded: phases, drivers and actions are enums, Groups and namespaces are few
and named by people. No label here carries a machine's or a pod's name; the per-machine series
(power state, draw, energy) are collected at scrape time by `metrics.energy`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

#: Seconds, from a quick IPMI call to a slow Proxmox clone or a long graceful shutdown.
_ACTION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600)

ACTIONS = Counter(
    "lightsout_actions_total",
    "Action Jobs that finished, by driver, action and result.",
    ["driver", "action", "result"],
)
ACTION_DURATION = Histogram(
    "lightsout_action_duration_seconds",
    "From an action Job's creation to its end, by driver and action.",
    ["driver", "action"],
    buckets=_ACTION_BUCKETS,
)
TRANSITION_DURATION = Histogram(
    "lightsout_power_transition_seconds",
    "From a change of desiredPowerState (as first seen) until the machine is Ready or Off.",
    ["desired"],
    buckets=_ACTION_BUCKETS,
)
AUTOSCALER_DECISIONS = Counter(
    "lightsout_autoscaler_decisions_total",
    "Power decisions of the built-in autoscaler, by kind, reason and outcome.",
    ["kind", "reason", "outcome"],
)
PENDING_PODS = Gauge(
    "lightsout_pending_pods",
    "Pods the scheduler found no room for, as the autoscaler leader last saw them.",
)
PENDING_OLDEST = Gauge(
    "lightsout_pending_pod_oldest_wait_seconds",
    "How long the longest-waiting of those pods has waited since its Unschedulable verdict.",
)
LEASE_CONFLICTS = Counter(
    "lightsout_lease_conflicts_total",
    "Times this replica wanted a machine's Lease and another holder had it.",
)

# The series with bounded, known labels exist from the start, at zero: Prometheus' rate() and
# increase() see no rise in a series whose first sample is already 1, so a first transition or
# autoscaler decision would otherwise never show on the dashboard. (Action series are created
# per driver when a machine is first seen: metrics.machines.)
for _desired in ("On", "Off"):
    TRANSITION_DURATION.labels(desired=_desired)
_DECISIONS = (("scale_up", "pending_pods"), ("scale_up", "min_nodes"), ("scale_down", "unneeded"))
for _kind, _reason in _DECISIONS:
    for _outcome in ("applied", "dry_run", "conflict"):
        AUTOSCALER_DECISIONS.labels(kind=_kind, reason=_reason, outcome=_outcome)
