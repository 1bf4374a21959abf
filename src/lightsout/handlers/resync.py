"""Forget objects deleted while a watch was away: the one watch cache kept true after a re-list.

The operator's caches are kopf indexes, fed by watch events. When a watch cannot resume (the
API server restarted, or was away long enough that the resource version is gone: "410 Gone"),
kopf lists the resource again and replays every object it finds, but it never tells its indexes
about the objects that are no longer there. An object deleted in that gap stays in the cache
for the life of the process: a core Node deleted and registered again under its name has two
entries, the stale one first (a machine then never sees its Node Ready and times out its boot);
a pod deleted in the gap is still "on" its Node, and a drain would wait for it for ever.

So every watched kind also feeds `Relists`: kopf hands a listed object to the handlers with the
event type None, at start-up and after every such re-list. Once a kind's listing has been quiet
for `QUIET_SECONDS`, each of its index entries whose object was not seen since the listing began
is a suspect; the object is read by name, and the entry is dropped only if the API server has no
object of that name or one with another uid (a suspect that exists was merely not replayed yet).
The machines and the planner are then woken, as a watch event would have woken them.

Events (the FailedMount index) and Secrets are left out: a kept FailedMount event of a pod that
is gone names no live pod, and the Secret key-name index is only the namespaced operator's,
which re-reads a referenced Secret before it relies on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from lightsout import API_GROUP, API_VERSION
from lightsout.execution import reconcile as rc
from lightsout.handlers.lifecycle import shared_api, stop_task
from lightsout.k8s.api import Api

log = logging.getLogger(__name__)

#: A watched kind: (API group, version, plural).
Kind = tuple[str, str, str]
#: kopf's key of one object's contribution to an index: (namespace, name, uid).
EntryKey = tuple[str | None, str | None, str | None]

#: Every watched kind whose indexes the operator reads, with those indexes (kopf handler ids).
WATCHED: dict[Kind, tuple[str, ...]] = {
    ("", "v1", "nodes"): (rc.CORE_NODES,),
    (API_GROUP, API_VERSION, "nodes"): (rc.MACHINES, rc.MACHINE_REFS),
    (API_GROUP, API_VERSION, "groups"): (rc.GROUPS,),
    ("batch", "v1", "jobs"): (rc.JOBS, "autoscaler_jobs"),
    ("", "v1", "pods"): (rc.PODS, rc.JOB_PODS, rc.HEALTH),
    ("coordination.k8s.io", "v1", "leases"): (rc.LEASES,),
    ("", "v1", "configmaps"): (rc.CONFIG_MAPS, rc.SERIES),
    ("policy", "v1", "poddisruptionbudgets"): ("autoscaler_pdbs",),
    ("apps", "v1", "daemonsets"): ("autoscaler_daemonsets",),
    ("batch", "v1", "cronjobs"): ("autoscaler_cronjobs",),
}
#: A listing is taken as over once no listed object has arrived for this long.
QUIET_SECONDS = 3.0
#: How often the sweeper looks for listings that are over.
LOOK_SECONDS = 1.0


@dataclass
class _Listing:
    last_listed: float
    seen: set[str] = field(default_factory=set)


@dataclass
class Relists:
    """Which kinds are being listed, and the uids seen since each listing began."""

    quiet: float = QUIET_SECONDS
    _listings: dict[Kind, _Listing] = field(default_factory=dict)

    def saw(self, kind: Kind, event_type: str | None, uid: str | None, now: float) -> None:
        listing = self._listings.get(kind)
        if event_type is None:  # kopf lists: at start-up and after a watch that cannot resume
            if listing is None:
                listing = self._listings[kind] = _Listing(now)
            listing.last_listed = now
        if listing is not None and uid and event_type != "DELETED":
            listing.seen.add(uid)

    def over(self, now: float) -> list[tuple[Kind, frozenset[str]]]:
        """The listings quiet for `quiet` seconds, each with the uids seen since it began;
        they are forgotten here (the next listing starts afresh)."""
        done = [k for k, v in self._listings.items() if now - v.last_listed >= self.quiet]
        return [(k, frozenset(self._listings.pop(k).seen)) for k in done]


def suspects(entries: Iterable[EntryKey], seen: frozenset[str]) -> list[EntryKey]:
    """Index entries whose object was not seen in the listing: deleted, or not replayed yet."""
    return sorted({e for e in entries if e[2] not in seen}, key=str)


# kopf (1.45) keeps each index's entries by (namespace, name, uid) and has no public way to
# list or drop them; these two are the only places that reach inside it.
def entries(index: Any) -> list[EntryKey]:
    """The keys of every object's contribution to a kopf index."""
    return list(index._Index__reverse)


def drop(index: Any, entry: EntryKey) -> None:
    """Drop one object's contribution from a kopf index, as kopf does for a DELETED event."""
    index._discard(entry)


def sweep(
    indexes: Mapping[str, Any], kind: Kind, seen: frozenset[str], uid_at: Callable[..., str | None]
) -> list[EntryKey]:
    """Drop the entries of `kind`'s indexes whose object is gone; return them. `uid_at(kind,
    namespace, name)` reads the uid of the object now at that name (None: none)."""
    dropped: list[EntryKey] = []
    for index_id in WATCHED[kind]:
        index = indexes.get(index_id)
        if index is None:  # an index this operator does not run (e.g. Secrets cluster-wide)
            continue
        for entry in suspects(entries(index), seen):
            uid_now = uid_at(kind, entry[0], entry[1])
            if uid_now is None or uid_now != entry[2]:  # nothing has its name, or another does
                drop(index, entry)
                dropped.append(entry)
    return dropped


@dataclass
class Sweeper:
    """The operator's one task that sweeps each kind after its listing."""

    api: Api
    indexes: Mapping[str, Any]
    #: kopf's memo: the reconcilers and the planner woken once entries were dropped.
    memo: kopf.Memo
    relists: Relists = field(default_factory=Relists)
    task: asyncio.Task[None] | None = None

    def uid_at(self, kind: Kind, namespace: str | None, name: str | None) -> str | None:
        return self.api.uid_at(*kind, namespace=namespace, name=name or "")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(LOOK_SECONDS)
            for kind, seen in self.relists.over(loop.time()):
                try:
                    dropped = await asyncio.to_thread(sweep, self.indexes, kind, seen, self.uid_at)
                except Exception:  # the API server went away again: its next listing sweeps
                    log.exception("sweeping the cache of %s after its listing failed", kind[2])
                    continue
                for namespace, name, _uid in dropped:
                    where = f"{namespace}/{name}" if namespace else name
                    log.info("forgot %s %s: deleted while the watch was away", kind[2], where)
                if dropped:
                    self._wake_all()

    def _wake_all(self) -> None:
        """Queue every machine and poke the planner, as the dropped objects' events would have."""
        reconcilers = getattr(self.memo, "reconcilers", None)
        if reconcilers is not None:
            for namespace, name in list(self.indexes.get(rc.MACHINES, {})):
                reconcilers.machine(namespace, name)
        planner = getattr(self.memo, "autoscaler", None)
        if planner is not None:
            planner.poke()


@kopf.on.startup()
async def start_sweeper(memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf hands every index to start-up handlers as a keyword argument named by its id.
    ids = {i for ids in WATCHED.values() for i in ids}
    sweeper = Sweeper(shared_api(memo), {i: kwargs[i] for i in ids if i in kwargs}, memo)
    sweeper.task = asyncio.create_task(sweeper.run(), name="lightsout-cache-sweeper")
    memo.sweeper = sweeper


@kopf.on.cleanup()
async def stop_sweeper(memo: kopf.Memo, **_: Any) -> None:
    sweeper: Sweeper | None = getattr(memo, "sweeper", None)
    if sweeper is not None:
        await stop_task(sweeper.task)


async def listed(
    resource: kopf.Resource, type: str | None, uid: str | None, memo: kopf.Memo, **_: Any
) -> None:
    sweeper: Sweeper | None = getattr(memo, "sweeper", None)
    if sweeper is not None:
        kind = (resource.group, resource.version, resource.plural)
        sweeper.relists.saw(kind, type, uid, asyncio.get_running_loop().time())


for _group, _version, _plural in WATCHED:
    kopf.on.event(_group, _version, _plural, id="cache_listed")(listed)
