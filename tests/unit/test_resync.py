"""The watch cache after a re-list (handlers/resync.py): an object deleted while a watch was away
is forgotten, one made again under its name replaces its old entry, and nothing that exists is
dropped. On kopf's own index objects, so a kopf upgrade that moves their insides fails here."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf._core.engines.indexing import OperatorIndexer

import lightsout.handlers  # noqa: F401 - registers every index with kopf's default registry
from lightsout.execution import reconcile as rc
from lightsout.handlers import resync

pytestmark = pytest.mark.unit

NODES = ("", "v1", "nodes")
PODS = ("", "v1", "pods")
#: Indexes whose staleness is accepted (see the module's docstring).
LEFT_OUT = {rc.MOUNT_FAILURES}


def indexer(*objects: tuple[str, str, str, Any]) -> OperatorIndexer:
    """A kopf index holding (namespace, name, uid, value) under the name, as `core_nodes` does."""
    made = OperatorIndexer()
    for namespace, name, uid, value in objects:
        made.replace((namespace, name, uid), {name: value})
    return made


def test_a_listing_collects_what_it_saw_until_it_has_been_quiet() -> None:
    relists = resync.Relists(quiet=3.0)
    relists.saw(NODES, "MODIFIED", "before", now=0.0)  # a plain event: no listing going on
    assert relists.over(now=100.0) == []
    relists.saw(NODES, None, "a", now=10.0)
    relists.saw(NODES, "ADDED", "made-meanwhile", now=11.0)
    relists.saw(NODES, "DELETED", "deleted-meanwhile", now=11.5)
    relists.saw(NODES, None, "b", now=12.0)
    assert relists.over(now=14.9) == [], "still listing: the last listed object is 2.9 s old"
    assert relists.over(now=15.0) == [(NODES, frozenset({"a", "b", "made-meanwhile"}))]
    assert relists.over(now=99.0) == [], "a listing is swept once"


def test_a_node_deleted_and_registered_again_in_the_gap_keeps_only_its_new_entry() -> None:
    # The stale entry came first: a reader taking "the" Node of that name got the old one.
    index = indexer((None, "box", "old", "tainted, unregistered"), (None, "box", "new", "Ready"))
    assert list(index.index["box"]) == ["tainted, unregistered", "Ready"]
    asked: list[tuple[Any, ...]] = []

    def uid_at(kind: resync.Kind, namespace: str | None, name: str) -> str | None:
        asked.append((kind, namespace, name))
        return "new"

    dropped = resync.sweep({rc.CORE_NODES: index.index}, NODES, frozenset({"new"}), uid_at)
    assert dropped == [(None, "box", "old")]
    assert list(index.index["box"]) == ["Ready"]
    assert asked == [(NODES, None, "box")], "only the entry not listed is read back"


def test_a_pod_deleted_while_the_watch_was_away_leaves_the_drains_view() -> None:
    index = indexer(("media", "gone", "u1", "pod on n1"), ("media", "kept", "u2", "pod on n1"))
    dropped = resync.sweep(
        {rc.PODS: index.index, rc.JOB_PODS: indexer().index},
        PODS,
        frozenset({"u2"}),
        lambda *_: None,  # the API server has no pod of that name
    )
    assert dropped == [("media", "gone", "u1")]
    assert list(index.index) == ["kept"]


def test_an_entry_not_listed_yet_but_still_there_is_kept() -> None:
    # Its listing event was still queued behind others when the sweep ran: it exists, same uid.
    index = indexer((None, "late", "u9", "Ready"))
    dropped = resync.sweep({rc.CORE_NODES: index.index}, NODES, frozenset(), lambda *_: "u9")
    assert dropped == []
    assert list(index.index["late"]) == ["Ready"]


def test_every_index_the_operator_reads_is_swept_with_its_own_kind() -> None:
    registered = {
        h.id: (h.selector.group or "", h.selector.version, h.selector.any_name)
        for h in kopf.get_default_registry()._indexing.get_all_handlers()
    }
    swept = {index: kind for kind, ids in resync.WATCHED.items() for index in ids}
    missing = set(registered) - set(swept) - LEFT_OUT - {rc.SECRETS}
    assert missing == set(), "an index nothing sweeps after a re-list"
    wrong = {i: (swept[i], registered[i]) for i in swept if i in registered}
    assert all(a == b for a, b in wrong.values()), wrong
