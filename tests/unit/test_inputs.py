"""API objects → state machine inputs; core Node helpers; the extravars contract."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lightsout.actuation import inputs, nodeops
from lightsout.execution import extravars
from lightsout.models.group import GroupSpec
from lightsout.models.node import NodeSpec
from lightsout.planning.types import (
    Action,
    MachineState,
    ObservedPowerState,
    Operation,
    OperationResult,
    Phase,
    operation_from_status,
    operation_to_status,
)
from lightsout.state.types import MIRROR_POD

pytestmark = pytest.mark.unit


def node(status: dict[str, Any] | None = None, generation: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "big-box", "namespace": "lab", "generation": generation},
        "spec": {
            "desiredPowerState": "On",
            "group": "homelab",
            "kubernetesNodeName": "big-box",
            "driver": {
                "redfish": {
                    "endpoint": "https://10.1.2.3",
                    "systemId": "abc",
                    "credentialsSecretRef": {"name": "bmc", "passwordKey": "pw"},
                    "tls": {"insecureSkipVerify": True},
                }
            },
            **spec,
        },
        "status": status or {},
    }


def state(n: dict[str, Any], group: dict[str, Any] | None = None) -> MachineState:
    return inputs.machine_state(n, spec(n), None if group is None else inputs.group_spec(group))


def spec(n: dict[str, Any]) -> NodeSpec:
    return inputs.node_spec(n)


def test_fresh_node_is_unknown_with_intent_at_current_generation() -> None:
    machine = state(node())
    assert machine.phase is Phase.UNKNOWN
    assert machine.desired is ObservedPowerState.ON
    assert machine.intent_generation == 3
    assert machine.operation is None


def test_label_edit_keeps_the_intent_but_a_new_desired_state_starts_one() -> None:
    status = {"phase": "PoweringOn", "intent": {"desired": "On", "generation": 2}}
    assert state(node(status)).intent_generation == 2
    status["intent"] = {"desired": "Off", "generation": 2}
    assert state(node(status)).intent_generation == 3


def test_any_edit_of_a_failed_machine_is_a_new_intent() -> None:
    status = {"phase": "Failed", "intent": {"desired": "On", "generation": 2}}
    assert state(node(status)).intent_generation == 3


def test_an_adoption_is_pending_until_the_spec_read_is_newer_than_the_decision() -> None:
    status = {"phase": "Failed", "reason": "DriftAdopted", "observedPowerState": "On"}
    stale = node({**status, "observedGeneration": 3}, desiredPowerState="Off")
    assert state(stale).adopting is ObservedPowerState.ON
    patched = node({**status, "observedGeneration": 3}, generation=4, desiredPowerState="On")
    assert state(patched).adopting is None
    # A person changing desiredPowerState later is a newer generation: not pending.
    overridden = node({**status, "observedGeneration": 4}, generation=5, desiredPowerState="Off")
    assert state(overridden).adopting is None
    other = node(
        {**status, "reason": "DriftDetected", "observedGeneration": 3}, desiredPowerState="Off"
    )
    assert state(other).adopting is None


def test_the_groups_drift_policy_and_the_corrections_made() -> None:
    status = {"driftCorrections": ["2026-11-24T10:00:00Z", "garbage"]}
    group = {"spec": {"healthCheck": {"driftPolicy": "Correct", "maxCorrections": 5}}}
    machine = state(node(status), group)
    assert (machine.correct_drift, machine.adopt_drift) == (True, False)
    assert (machine.max_corrections, machine.correction_window_seconds) == (5, 86_400)
    assert machine.drift_corrections == (dt.datetime(2026, 11, 24, 10, tzinfo=dt.UTC),)
    adopt = {"spec": {"healthCheck": {"driftPolicy": "Adopt"}}}
    machine = state(node(), adopt)
    assert (machine.correct_drift, machine.adopt_drift, machine.max_corrections) == (False, True, 3)


def test_the_specs_defaults_are_the_models() -> None:
    machine = state(node())
    assert (machine.max_retries, machine.boot_timeout_seconds) == (3, 600)
    assert (machine.shutdown_timeout_seconds, machine.node_removal_policy) == (300, "Delete")
    keep = state(node(), {"spec": {"nodeRemovalPolicy": "Keep"}})
    assert keep.node_removal_policy == "Keep", "the Group's choice when the machine has none"
    own = state(node(nodeRemovalPolicy="Delete"), {"spec": {"nodeRemovalPolicy": "Keep"}})
    assert own.node_removal_policy == "Delete"


def test_a_spec_the_models_refuse_is_an_error_naming_the_object() -> None:
    bad = node(desiredPowerState="Sideways")
    with pytest.raises(inputs.InvalidSpecError, match=r"Node lab/big-box: .*desiredPowerState"):
        inputs.node_spec(bad)
    with pytest.raises(inputs.InvalidSpecError, match="Group"):
        inputs.group_spec({"metadata": {"name": "g"}, "spec": {"minNodes": 5, "maxNodes": 1}})
    assert inputs.group_spec({"metadata": {"name": "g"}}) == GroupSpec()


def test_garbage_status_degrades_instead_of_raising() -> None:
    status = {
        "phase": "Sleeping",
        "phaseSince": "yesterday",
        "lastOperation": {"action": "dance", "started": 7},
        "intent": "x",
    }
    machine = state(node(status))
    assert machine.phase is Phase.UNKNOWN
    assert machine.operation is None
    assert machine.phase_since is None


def test_operation_round_trips_through_status() -> None:
    started = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    raw = {
        "action": "shutdown",
        "intent": 4,
        "attempt": 2,
        "started": "2026-01-02T03:04:05Z",
        "result": "Failed",
        "failedTask": "power off",
        "message": "HTTP Error 400",
        "values": {"power_state": "On"},
    }
    op = operation_from_status(raw)
    assert op is not None
    assert (op.action, op.intent_generation, op.attempt, op.started) == (
        Action.SHUTDOWN,
        4,
        2,
        started,
    )
    assert op.result is OperationResult.FAILED and op.power_state is ObservedPowerState.ON
    back = operation_to_status(op, "lo-big-box-shutdown-g4-a2")
    assert back is not None and back["job"] == "lo-big-box-shutdown-g4-a2"
    assert operation_from_status(back) == op


def test_every_reported_value_round_trips_through_status() -> None:
    raw = {
        "action": "startup",
        "intent": 2,
        "attempt": 1,
        "started": "2026-01-02T03:04:05Z",
        "result": "Succeeded",
        "values": {"power_state": "On", "driver": "ipmi", "changed": True, "note": "custom"},
    }
    op = operation_from_status(raw)
    assert op is not None and op.values["note"] == "custom"
    back = operation_to_status(op, "lo-x-startup-g2-a1")
    assert back is not None and back["values"] == raw["values"]


def _op(action: Action, result: OperationResult, **values: Any) -> Operation:
    power = values.get("power_state")
    return Operation(
        action,
        3,
        1,
        started=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        result=result,
        power_state=ObservedPowerState(power) if power else None,
        values=values,
    )


def test_clone_recorded_by_provision_and_cleared_by_a_confirmed_deprovision() -> None:
    made = _op(Action.PROVISION, OperationResult.SUCCEEDED, power_state="On", vmid=300, host="b")
    record = inputs.clone_to_status(None, made)
    assert record == {"vmid": 300, "host": "b"}
    # A provision that cloned and then failed still names its clone.
    half = _op(Action.PROVISION, OperationResult.FAILED, vmid=301)
    assert inputs.clone_to_status(None, half) == {"vmid": 301}
    # Other operations, a running or failed deprovision keep the record.
    running = _op(Action.DEPROVISION, OperationResult.RUNNING)
    assert inputs.clone_to_status(record, running) == record
    refused = _op(Action.DEPROVISION, OperationResult.FAILED, power_state="On")
    assert inputs.clone_to_status(record, refused) == record
    assert inputs.clone_to_status(record, None) == record
    gone = _op(Action.DEPROVISION, OperationResult.SUCCEEDED, power_state="Off")
    assert inputs.clone_to_status(record, gone) is None
    # Persistent machines never get one.
    started = _op(Action.STARTUP, OperationResult.SUCCEEDED, power_state="On")
    assert inputs.clone_to_status(None, started) is None


def test_wanted_metadata_merges_group_then_node() -> None:
    group = {
        "spec": {
            "labels": {"tier": "cold", "zone": "a"},
            "taints": [{"key": "power", "value": "group", "effect": "NoSchedule"}],
        }
    }
    n = node(
        labels={"zone": "b"}, taints=[{"key": "power", "value": "node", "effect": "NoSchedule"}]
    )
    labels, taints = inputs.wanted_metadata(n, spec(n), GroupSpec.model_validate(group["spec"]))
    assert labels["tier"] == "cold" and labels["zone"] == "b"
    assert labels["lightsout.dev/node"] == "big-box"
    assert taints == [{"key": "power", "value": "node", "effect": "NoSchedule"}]


def test_metadata_patch_adds_missing_and_keeps_foreign_taints() -> None:
    core = {
        "metadata": {"labels": {"a": "1"}},
        "spec": {"taints": [{"key": "other", "effect": "NoExecute"}]},
    }
    patch = nodeops.metadata_patch(
        core, {"a": "1", "b": "2"}, [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    )
    assert patch == {
        "metadata": {"labels": {"b": "2"}},
        "spec": {
            "taints": [
                {"key": "other", "effect": "NoExecute"},
                {"key": "k", "value": "v", "effect": "NoSchedule"},
            ]
        },
    }
    applied = {
        "metadata": {"labels": {"a": "1", "b": "2"}},
        "spec": {"taints": patch["spec"]["taints"]},
    }
    assert (
        nodeops.metadata_patch(
            applied, {"b": "2"}, [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        )
        is None
    )


def test_at_ready_only_the_startup_taint_goes_and_the_patch_is_conditional() -> None:
    group_taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    core = {
        "metadata": {"labels": {"a": "1"}, "resourceVersion": "42"},
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                group_taint,
                dict(nodeops.STARTUP_TAINT),
            ]
        },
    }
    assert nodeops.has_startup_taint(core)
    assert not nodeops.metadata_applied(core, {"a": "1"}, [group_taint])

    patch = nodeops.metadata_patch(
        core, {"a": "1"}, [group_taint], drop=("lightsout.dev/unregistered",)
    )

    assert patch == {
        "metadata": {"resourceVersion": "42"},
        "spec": {
            "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}, group_taint]
        },
    }
    # Before power-on the same function adds it (and nothing changes once it is there).
    assert nodeops.metadata_patch(core, {"a": "1"}, [group_taint, nodeops.STARTUP_TAINT]) is None


def test_drain_leaves_daemonset_mirror_and_finished_pods() -> None:
    def pod(name: str, **meta: Any) -> dict[str, Any]:
        phase = meta.pop("phase", "Running")
        return {"metadata": {"name": name, **meta}, "status": {"phase": phase}}

    pods = [
        pod("web"),
        pod("ds", ownerReferences=[{"kind": "DaemonSet", "name": "x"}]),
        pod("mirror", annotations={MIRROR_POD: "x"}),
        pod("done", phase="Succeeded"),
        pod("rs", ownerReferences=[{"kind": "ReplicaSet", "name": "y"}]),
    ]
    assert [p["metadata"]["name"] for p in nodeops.pods_to_drain(pods)] == ["web", "rs"]


def test_blocking_pdb_matches_selector_in_the_pods_namespace() -> None:
    pod = {"metadata": {"name": "p", "namespace": "a", "labels": {"app": "web", "tier": "1"}}}
    pdbs = [
        {
            "metadata": {"name": "other-ns", "namespace": "b"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        },
        {
            "metadata": {"name": "nope", "namespace": "a"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
        },
        {
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {
                "selector": {
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["1", "2"]}]
                }
            },
        },
    ]
    assert nodeops.blocking_pdb(pod, pdbs) == "a/web"
    assert nodeops.blocking_pdb(pod, pdbs[:2]) is None


def test_extravars_carry_parameters_but_no_credentials() -> None:
    n = node()
    out = extravars.action_extravars(n, spec(n), Action.STARTUP)
    assert out["lightsout_driver"] == "redfish"
    assert out["lightsout_redfish"]["endpoint"] == "https://10.1.2.3"
    assert out["lightsout_redfish"]["validate_certs"] is False
    assert out["lightsout_redfish"]["password_key"] == "pw"
    assert "SecretRef" not in repr(out)
    assert extravars.credentials_secret(spec(n)) == ("bmc", None)


def test_other_drivers_pass_key_names_and_group_but_no_values() -> None:
    n = node()
    n["spec"]["driver"] = {
        "proxmox": {
            "endpoint": "https://pve:8006",
            "node": "pve1",
            "vmid": 101,
            "credentialsSecretRef": {"name": "pve", "tokenIdKey": "id", "tokenSecretKey": "tok"},
        }
    }
    out = extravars.action_extravars(n, spec(n), Action.PROVISION)
    block = out["lightsout_proxmox"]
    # As the API server stores it: the defaults filled in.
    assert block["credentialsSecretRef"] == {
        "name": "pve",
        "tokenIdKey": "id",
        "tokenSecretKey": "tok",
        "usernameKey": "username",
        "passwordKey": "password",
    }
    assert (block["mode"], block["tls"]) == ("Persistent", {"insecureSkipVerify": False})
    assert out["lightsout_group"] == n["spec"]["group"]
    assert extravars.credentials_secret(spec(n)) == ("pve", None)


def test_group_counts_sort_machines_by_phase_and_intent() -> None:
    from lightsout.handlers.group import group_counts

    machines = [
        {"spec": {"desiredPowerState": "On"}, "status": {"phase": "Ready"}},
        {"spec": {"desiredPowerState": "On"}, "status": {"phase": "Booting"}},
        {"spec": {"desiredPowerState": "Off"}, "status": {"phase": "Off"}},
        {"spec": {"desiredPowerState": "Off"}, "status": {"phase": "Failed"}},
        {"spec": {}, "status": None},
    ]
    assert group_counts(machines) == {
        "nodes": {"total": 5, "on": 1, "off": 1, "transitioning": 1, "failed": 1},
        "targetSize": 2,
    }


def test_wol_playbook_waits_within_the_nodes_power_timeouts() -> None:
    wol = {
        "macAddress": "52:54:00:12:34:56",
        "ssh": {"host": "10.0.0.5", "user": "ops", "privateKeySecretRef": {"name": "k"}},
    }
    n = node(driver={"wol": wol}, power={"bootTimeoutSeconds": 200})
    block = extravars.action_extravars(n, spec(n), Action.STARTUP)["lightsout_wol"]
    assert (block["bootTimeoutSeconds"], block["shutdownTimeoutSeconds"]) == (200, 300)
    assert block["macAddress"] == "52:54:00:12:34:56"
    assert extravars.credentials_secret(spec(n)) == ("k", None)


def test_status_patch_sends_only_changes_and_nulls_what_is_gone() -> None:
    current = {
        "phase": "Ready",
        "lastOperation": {"action": "startup", "values": {"power_state": "On", "vmid": 300}},
        "clone": {"vmid": 300, "host": "pve2"},
    }
    wanted = {
        "phase": "Off",
        "lastOperation": {"action": "shutdown", "values": {"power_state": "Off"}},
        "clone": None,
    }
    assert inputs.status_patch(current, wanted) == {
        "phase": "Off",
        "lastOperation": {"action": "shutdown", "values": {"power_state": "Off", "vmid": None}},
        "clone": None,
    }
    assert inputs.status_patch(current, current) == {}
    assert inputs.status_patch({}, {"clone": None}) == {}


def test_status_patch_is_empty_when_only_null_keys_differ_from_what_is_stored() -> None:
    # A running attempt: `finished` and `failedTask` are null, so the API server stored the
    # operation without them; the next pass (a Lease renewal) must not patch it again.
    wanted = {
        "phase": "PoweringOn",
        "lastOperation": {"action": "startup", "attempt": 1, "finished": None, "failedTask": None},
    }
    stored = {"phase": "PoweringOn", "lastOperation": {"action": "startup", "attempt": 1}}
    assert inputs.status_patch(stored, wanted) == {}
    finished = {**wanted, "lastOperation": {**wanted["lastOperation"], "finished": "t"}}
    assert inputs.status_patch(stored, finished) == {
        "lastOperation": {
            "action": "startup",
            "attempt": 1,
            "finished": "t",
            "failedTask": None,
        }
    }
