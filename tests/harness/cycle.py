"""Power a Lights-Out Node on or off with `kubectl patch` and time it, as a user would.

Who uses it: the per-driver end-to-end tests of the operator (tests/e2e/test_power_*.py) and
the playbook overlay test. `patch_and_wait` returns the Node's status once it reaches the
phase, and the seconds from the patch to then (printed by the tests, never asserted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lightsout_lab import Cluster
from tests.harness.wait import get_json, says_ready, wait_for

#: Seconds to wait for a phase: Ansible starts in ~5 s on a loaded 2-core machine, a Job pod
#: needs the scheduler and the stand-in kubelet first.
PATIENCE = 240


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = get_json(cluster, "lsn", name, "-n", namespace)
    return (obj or {}).get("status") or {}


def wait_phase(
    cluster: Cluster, namespace: str, name: str, phase: str, timeout: float = PATIENCE
) -> dict[str, Any]:
    """The Node's status once its phase is `phase`; a clear failure naming the last one."""
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        current = status(cluster, namespace, name)
        last.clear()
        last.update(current)
        if current.get("phase") == phase:
            return current
        if current.get("phase") == "Failed":
            raise AssertionError(f"{name} Failed while waiting for {phase}: {current}")
        return None

    return wait_for(probe, timeout, f"{name} to reach phase {phase}", seen=lambda: summary(last))


#: The status fields a timed-out wait shows: where the machine stood and what it last did.
SUMMARY_FIELDS = ("phase", "reason", "message", "attempts", "lastOperation", "conditions")


def summary(current: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Node's status that says why it is where it is."""
    return {k: current[k] for k in SUMMARY_FIELDS if k in current}


def patch_and_wait(
    cluster: Cluster,
    namespace: str,
    name: str,
    desired: str,
    phase: str,
    timeout: float = PATIENCE,
) -> tuple[dict[str, Any], float]:
    """Patch spec.desiredPowerState, wait for `phase`; (status, seconds since the patch)."""
    body = json.dumps({"spec": {"desiredPowerState": desired}})
    started = time.monotonic()
    cluster.kubectl("patch", "lsn", name, "-n", namespace, "--type", "merge", "-p", body)
    reached = wait_phase(cluster, namespace, name, phase, timeout)
    return reached, time.monotonic() - started


def report(driver: str, step: str, **figures: Any) -> None:
    """One line of figures for the test log (`pytest -s`)."""
    print(f"[{driver}] {step}: " + ", ".join(f"{k}={_show(v)}" for k, v in figures.items()))


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def core_node_ready(cluster: Cluster, name: str) -> bool:
    """Whether the core (Kubernetes) Node `name` says Ready."""
    return says_ready(get_json(cluster, "node", name))


def wait_found_running(cluster: Cluster, names: Sequence[str]) -> None:
    """Wait until the core Nodes of machines running from the start (their simulated kubelets
    registered) say Ready: their Lights-Out Nodes, applied after this with desired On, are taken
    as running (Ready without a startup Job)."""
    wait_for(
        lambda: all(core_node_ready(cluster, name) for name in names),
        PATIENCE,
        f"the core Nodes of {', '.join(names)}, found running, to be Ready",
    )
