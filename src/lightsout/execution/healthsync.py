"""Keeps each Group's health-check CronJob and machine list equal to what the Group asks.

Called by the Group pass of the work queue (`handlers/node.py`), in a worker thread, after
every change of the Group or of one of its machines: with `spec.healthCheck.enabled` the
ConfigMap and CronJob built by `execution.health` are created or replaced when their content
changed; disabled, both are deleted. A deleted Group's CronJob and ConfigMap are removed by the
garbage collector (the Group owns them). What was last written is remembered per Group by its
hash, so a pass with nothing new sends nothing; after a restart the first pass writes once.

A machine is known from the first minute: when a write adds a machine to the list or changes
its entry (a new or edited Node), or lists a machine never checked (also after a restart), a
Job is made from the CronJob at once (`health.first_check_job`), so its power state, health,
draw and inspection are in its status within a minute of `kubectl apply`, not at the next
scheduled run. The Job checks those machines only, and a machine is asked for once per entry
(ten Nodes applied one after another make ten pods, not fifty-five). The Job is named after
the list's hash: one run per new list, never two, also across restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightsout.config import OperatorConfig
from lightsout.execution import health
from lightsout.k8s.api import Api, ConflictError
from lightsout.models.group import GroupSpec

log = logging.getLogger(__name__)
ABSENT = "absent"


@dataclass
class HealthCronJobs:
    """The spec hash last written for each Group's health check, by (namespace, Group)."""

    config: OperatorConfig
    api: Api
    written: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Each machine's entry (its hash) in the list last written, by (namespace, Group).
    entries: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: The entry (its hash) each machine's first check was asked for, by (namespace, Group).
    asked: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def forget(self, namespace: str, group: str) -> None:
        self.written.pop((namespace, group), None)
        self.entries.pop((namespace, group), None)
        self.asked.pop((namespace, group), None)

    def sync(
        self,
        group: Mapping[str, Any],
        spec: GroupSpec,
        machines: Sequence[Mapping[str, Any]],
    ) -> None:
        meta = group["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if meta.get("deletionTimestamp"):
            return
        if not spec.health_check.enabled:
            if self.written.get(key) != ABSENT:
                name = health.cronjob_name(key[1])
                self.api.delete_cronjob(key[0], name)
                self.api.delete_configmap(key[0], name)
                log.info("health check of group %s/%s disabled: CronJob deleted", *key)
                self.written[key] = ABSENT
            return
        members = health.readable(machines)  # in the worker thread, not on the event loop
        objects = health.build_health_objects(group, spec, members, self.config)
        if self.written.get(key) == objects.spec_hash:
            return
        # The machine list first: a Job the new CronJob starts must find its entries.
        self.api.apply_configmap(key[0], objects.configmap)
        name = objects.cronjob["metadata"]["name"]
        try:
            cronjob = self.api.create_cronjob(key[0], objects.cronjob)
            log.info("health check of group %s/%s: CronJob %s created", *key, name)
        except ConflictError:
            cronjob = self.api.replace_cronjob(key[0], name, objects.cronjob)
        self.written[key] = objects.spec_hash
        entries = health.entry_hashes(objects.configmap)
        asked = {n: h for n, h in self.asked.get(key, {}).items() if n in entries}
        self.asked[key] = asked
        new = health.needing_first_check(members, self.entries.get(key), entries, asked)
        self.entries[key] = entries
        if new:
            asked.update({name: entries[name] for name in new})
            job = health.first_check_job(cronjob, objects.spec_hash, new)
            try:
                self.api.create_job(key[0], job)
                log.info(
                    "health check of group %s/%s: Job %s checks %s now (new or edited)",
                    *key,
                    job["metadata"]["name"],
                    ", ".join(new),
                )
            except ConflictError:
                pass  # this list's first check already runs
