"""What the externalgrpc servicer reads and writes in the cluster, behind a small interface.

`ApiCluster` is the real one (through the operator's `lightsout.k8s.api.Api`, which it is given
at start-up): each RPC reads the Groups, machines and core Nodes afresh, so a size
cluster-autoscaler just changed is what the next call reports (the autoscaler asks TargetSize
right after IncreaseSize). Component tests pass an in-memory
implementation instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from lightsout.execution.actuator import write_desired
from lightsout.k8s.api import Api

# The write lost a race: the machine changed since it was read.
from lightsout.k8s.api import ConflictError as ConflictError  # noqa: PLC0414 - the servicer's
from lightsout.models.enums import DesiredPowerState
from lightsout.state.build import GROUPS_KEY, MACHINES_KEY, NODES_KEY

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Cluster(Protocol):
    def read(self) -> Mapping[str, list[Obj]]:
        """Groups, machines and core Nodes, keyed like `lightsout.state.snapshot_from` wants."""
        ...

    def set_power(self, machine: Obj, desired: str, reason: str) -> None:
        """Set `spec.desiredPowerState` if the machine is unchanged since read (else
        ConflictError), and say why in an event."""
        ...


#: Snapshot keys (`SECRETS_KEY`, `CONFIGMAPS_KEY`) → `references.contents_entry` dicts: the key
#: names of the Secrets and ConfigMaps the operator's watch caches hold, never a value.
Contents = Callable[[], Mapping[str, list[Obj]]]


class ApiCluster:
    """The cluster through the Kubernetes API: Lights-Out objects of the operator's namespaces
    (all when it watches the whole cluster), every core Node; and, from `contents`, which
    Secrets and ConfigMaps exist with their key names (so no machine whose credentials are
    missing is offered), without a Secret read of its own."""

    def __init__(
        self, api: Api, namespaces: Sequence[str] = (), contents: Contents | None = None
    ) -> None:
        self.api = api
        self.namespaces = tuple(namespaces)
        self.contents = contents

    def _list(self, plural: str) -> list[Obj]:
        if not self.namespaces:
            return self.api.list_all_resources(plural)
        return [obj for ns in self.namespaces for obj in self.api.list_all_resources(plural, ns)]

    def read(self) -> Mapping[str, list[Obj]]:
        return {
            GROUPS_KEY: self._list("groups"),
            MACHINES_KEY: self._list("nodes"),
            NODES_KEY: self.api.list_core_nodes(),
            **(self.contents() if self.contents is not None else {}),
        }

    def set_power(self, machine: Obj, desired: str, reason: str) -> None:
        meta = machine["metadata"]
        write_desired(self.api, machine, DesiredPowerState(desired), conditional=True)
        try:
            self.api.post_event(
                machine, "Normal", "ClusterAutoscaler", reason, component="lightsout-externalgrpc"
            )
        except Exception:  # the intent is recorded; a lost event is not worth failing the RPC
            log.exception("posting the event on %s/%s failed", meta["namespace"], meta["name"])
