"""The providerID a managed machine's core Node carries (cluster-autoscaler matches by it).

Pure parts of `lightsout.execution.providerid`: which providerID a machine wants, when the core
Node is patched (only from empty), and the ProviderIDConflict condition otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from lightsout.execution import providerid
from lightsout.models.enums import ConditionStatus, ConditionType
from lightsout.models.node import NodeSpec
from lightsout.planning.machine.effects import Decision, SetCondition
from lightsout.planning.machine.passes import provider_id_reported
from lightsout.planning.types import Phase

pytestmark = pytest.mark.unit


MACHINE = {"metadata": {"namespace": "lab", "name": "m1"}}
IPMI = {"ipmi": {"host": "10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}


def spec(**fields: Any) -> NodeSpec:
    return NodeSpec.model_validate(
        {"group": "g", "kubernetesNodeName": "m1", "driver": IPMI, **fields}
    )


def core(provider: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "m1"}, "spec": {"providerID": provider} if provider else {}}


def test_wanted_is_the_spec_s_else_the_lightsout_scheme() -> None:
    assert providerid.wanted(MACHINE, spec()) == "lightsout://lab/m1"
    assert providerid.wanted(MACHINE, spec(providerID="k3s://m1")) == "k3s://m1"


def test_the_core_node_is_patched_only_from_empty() -> None:
    assert providerid.patch(core(None), "lightsout://lab/m1") == {
        "spec": {"providerID": "lightsout://lab/m1"}
    }
    assert providerid.patch(core("lightsout://lab/m1"), "lightsout://lab/m1") is None
    assert providerid.patch(core("k3s://m1"), "lightsout://lab/m1") is None  # never overwritten
    assert providerid.patch(None, "lightsout://lab/m1") is None


def _conditions(decision: Decision) -> list[SetCondition]:
    return [e for e in decision.effects if isinstance(e, SetCondition)]


def test_a_different_provider_id_is_reported_as_a_condition() -> None:
    base = Decision(phase=Phase.READY, reason="Ready", message="")
    want = providerid.wanted(MACHINE, spec())
    (condition,) = _conditions(provider_id_reported(base, providerid.ids(core("k3s://m1"), want)))
    assert condition.type == ConditionType.PROVIDER_ID_CONFLICT
    assert condition.status == ConditionStatus.TRUE
    assert "k3s://m1" in condition.message
    (ok,) = _conditions(
        provider_id_reported(base, providerid.ids(core("lightsout://lab/m1"), want))
    )
    assert ok.status == ConditionStatus.FALSE
    assert provider_id_reported(base, providerid.ids(None, want)) == base
