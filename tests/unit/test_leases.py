"""Per-machine Leases: names, MicroTime, who holds a Lease, and the bodies written to take,
renew and give it up. A fake clock (plain datetimes around T0) drives expiry."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from lightsout.actuation.inputs import node_spec
from lightsout.config import OperatorConfig
from lightsout.execution.actuator import KubeMachine
from lightsout.execution.leases import (
    acquire,
    build_lease,
    format_micro_time,
    lease_expiry,
    lease_name,
    lease_state,
    parse_micro_time,
    release,
    renew,
)
from lightsout.planning.types import LeaseState

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
ME, OTHER = "operator-a", "operator-b"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stored(holder: str | None, renewed: datetime = T0, duration: Any = 15) -> dict[str, Any]:
    """A Lease as read back from the API server."""
    spec: dict[str, Any] = {
        "acquireTime": format_micro_time(T0 - timedelta(seconds=60)),
        "renewTime": format_micro_time(renewed),
        "leaseTransitions": 4,
    }
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "lightsout-lab-big-box",
            "namespace": "lightsout-system",
            "resourceVersion": "4711",
            "uid": "abc",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
    }


# --- names and times ------------------------------------------------------------------------


def test_lease_name() -> None:
    assert lease_name("lab", "big-box") == "lightsout.lab.big-box"


def test_lease_names_of_different_machines_never_collide() -> None:
    # Namespaces hold no dots, so the first dot after the prefix separates the two parts.
    assert lease_name("team-a", "x") != lease_name("team", "a-x")


@pytest.mark.parametrize(
    ("namespace", "node"),
    [("lab", "n" * 253), ("a" * 63, "rack-1.example.org")],
)
def test_lease_name_is_a_stable_dns_subdomain(namespace: str, node: str) -> None:
    name = lease_name(namespace, node)
    assert len(name) <= 253
    assert all(DNS_LABEL.match(part) for part in name.split("."))
    assert name.startswith("lightsout.")
    assert lease_name(namespace, node) == name


def test_micro_time_has_microseconds_and_z() -> None:
    assert format_micro_time(T0) == "2026-03-01T12:00:00.250000Z"
    assert format_micro_time(datetime(2026, 3, 1, 12, tzinfo=UTC)) == "2026-03-01T12:00:00.000000Z"
    plus_two = datetime(2026, 3, 1, 12, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    assert format_micro_time(plus_two) == "2026-03-01T12:00:00.000000Z"


def test_micro_time_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match="timezone"):
        format_micro_time(datetime(2026, 3, 1, 12))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T12:00:00.250000Z", T0),
        ("2026-03-01T12:00:00.25Z", T0),
        ("2026-03-01T12:00:00.250000123Z", T0),
        ("2026-03-01T14:00:00.250000+02:00", T0),
        ("2026-03-01T12:00:00.250000", T0),
        ("yesterday", None),
        ("", None),
        (None, None),
        (1234, None),
    ],
)
def test_parse_micro_time(text: Any, expected: datetime | None) -> None:
    assert parse_micro_time(text) == expected


# --- building -------------------------------------------------------------------------------


def test_build_lease() -> None:
    lease = build_lease(
        "lightsout-lab-big-box", "lightsout-system", ME, 15, T0, machine=("lab", "big-box")
    )
    assert lease == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "lightsout-lab-big-box",
            "namespace": "lightsout-system",
            "labels": {
                "app.kubernetes.io/managed-by": "lightsout",
                "lightsout.dev/node": "big-box",
                "lightsout.dev/node-namespace": "lab",
            },
            "annotations": {"lightsout.dev/machine": "lab/big-box"},
        },
        "spec": {
            "holderIdentity": ME,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-03-01T12:00:00.250000Z",
            "renewTime": "2026-03-01T12:00:00.250000Z",
            "leaseTransitions": 0,
        },
    }
    assert lease_state(lease, ME, at(1)) is LeaseState.HELD_BY_ME


# --- who holds it ---------------------------------------------------------------------------

# fmt: off
STATES = [
    pytest.param(None, at(0), LeaseState.FREE, id="no-lease"),
    pytest.param(stored(None), at(0), LeaseState.FREE, id="released"),
    pytest.param(stored(""), at(0), LeaseState.FREE, id="empty-holder"),
    pytest.param(stored(ME), at(14), LeaseState.HELD_BY_ME, id="mine"),
    pytest.param(stored(OTHER), at(14), LeaseState.HELD_BY_OTHER, id="theirs"),
    pytest.param(stored(OTHER), at(15), LeaseState.EXPIRED, id="theirs-expired-at-the-edge"),
    pytest.param(stored(OTHER), at(3600), LeaseState.EXPIRED, id="theirs-long-expired"),
    pytest.param(stored(ME), at(16), LeaseState.EXPIRED, id="mine-expired"),
    pytest.param(stored(OTHER, renewed=at(100)), at(110), LeaseState.HELD_BY_OTHER,
                 id="renewed-recently"),
    pytest.param(stored(OTHER, duration=None), at(10**6), LeaseState.HELD_BY_OTHER,
                 id="no-duration-never-expires"),
    pytest.param(stored(OTHER, duration=True), at(10**6), LeaseState.HELD_BY_OTHER,
                 id="bogus-duration-never-expires"),
    pytest.param({"spec": {"holderIdentity": "alice"}}, at(10**6), LeaseState.HELD_BY_OTHER,
                 id="hand-made-lock"),
    pytest.param({"spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 15,
                           "renewTime": "garbage"}}, at(10**6), LeaseState.HELD_BY_OTHER,
                 id="unparseable-time-never-expires"),
    pytest.param({"spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 15,
                           "acquireTime": format_micro_time(T0)}}, at(20), LeaseState.EXPIRED,
                 id="falls-back-to-acquire-time"),
    pytest.param({"spec": "garbage"}, at(0), LeaseState.FREE, id="garbage-spec"),
]
# fmt: on


@pytest.mark.parametrize(("lease", "now", "expected"), STATES)
def test_lease_state(lease: dict[str, Any] | None, now: datetime, expected: LeaseState) -> None:
    assert lease_state(lease, ME, now) is expected


def test_lease_expiry() -> None:
    assert lease_expiry(stored(OTHER)) == at(15)
    assert lease_expiry(stored(OTHER, duration=None)) is None


# --- acquire / renew / release --------------------------------------------------------------


class _Leases:
    """The two Lease calls a machine's first take of its Lease makes."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    def get_lease(self, namespace: str, name: str) -> None:
        assert (namespace, name[:14]) == ("lab", "lightsout.lab.")

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((namespace, body))
        return body


def test_a_machines_lease_names_it_even_when_its_name_is_too_long_to_spell_out() -> None:
    # The handler of Lease events reads the annotation first: a hashed name cannot be split.
    node = {
        "metadata": {"name": "n" * 253, "namespace": "lab", "generation": 1},
        "spec": {
            "group": "lab",
            "kubernetesNodeName": "box",
            "driver": {"ipmi": {"host": "10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}},
        },
    }
    api = _Leases()
    machine = KubeMachine(api, node, node_spec(node), None, OperatorConfig(identity=ME))  # type: ignore[arg-type]
    assert machine.acquire_lease(T0)
    [(namespace, lease)] = api.created
    assert namespace == "lab" and lease["spec"]["holderIdentity"] == ME
    assert lease["metadata"]["name"] == lease_name("lab", "n" * 253) != f"lightsout.lab.{'n' * 253}"
    assert lease["metadata"]["annotations"] == {"lightsout.dev/machine": f"lab/{'n' * 253}"}
    assert lease["metadata"]["labels"]["lightsout.dev/node-namespace"] == "lab"


def test_acquire_a_released_lease() -> None:
    lease = stored(None)
    body = acquire(lease, ME, 20, at(5))
    assert body is not None
    assert body["spec"] == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 20,
        "acquireTime": format_micro_time(at(5)),
        "renewTime": format_micro_time(at(5)),
        "leaseTransitions": 5,
    }
    # Replace is a compare-and-swap on the version that was read.
    assert body["metadata"]["resourceVersion"] == "4711"
    assert "managedFields" not in body["metadata"]
    assert lease_state(body, ME, at(6)) is LeaseState.HELD_BY_ME


def test_acquire_takes_over_an_expired_lease() -> None:
    body = acquire(stored(OTHER), ME, 15, at(30))
    assert body is not None
    assert body["spec"]["holderIdentity"] == ME
    assert body["spec"]["leaseTransitions"] == 5
    assert body["spec"]["acquireTime"] == format_micro_time(at(30))


def test_acquire_of_my_own_lease_renews_it() -> None:
    lease = stored(ME)
    body = acquire(lease, ME, 15, at(5))
    assert body is not None
    assert body["spec"]["acquireTime"] == lease["spec"]["acquireTime"]
    assert body["spec"]["leaseTransitions"] == 4
    assert body["spec"]["renewTime"] == format_micro_time(at(5))


def test_acquire_refuses_a_lease_held_elsewhere() -> None:
    assert acquire(stored(OTHER), ME, 15, at(5)) is None
    assert acquire({"spec": {"holderIdentity": "alice"}}, ME, 15, at(10**6)) is None


def test_builders_never_mutate_what_was_read() -> None:
    lease = stored(ME)
    before = copy.deepcopy(lease)
    acquire(lease, ME, 15, at(5))
    renew(lease, ME, at(5))
    release(lease, ME, at(5))
    assert lease == before


def test_renew() -> None:
    body = renew(stored(ME), ME, at(10))
    assert body is not None
    assert body["spec"]["renewTime"] == format_micro_time(at(10))
    assert body["metadata"]["resourceVersion"] == "4711"
    assert lease_state(body, ME, at(20)) is LeaseState.HELD_BY_ME
    # Expired but nobody took it: renewing is fine (the replace would fail if someone had).
    assert renew(stored(ME), ME, at(100)) is not None
    assert renew(stored(OTHER), ME, at(10)) is None
    assert renew(stored(None), ME, at(10)) is None


def test_release() -> None:
    body = release(stored(ME), ME, at(10))
    assert body is not None
    assert "holderIdentity" not in body["spec"]
    assert "acquireTime" not in body["spec"]
    assert body["spec"]["leaseTransitions"] == 4
    assert body["metadata"]["resourceVersion"] == "4711"
    assert lease_state(body, OTHER, at(10)) is LeaseState.FREE


def test_release_never_frees_someone_elses_lease() -> None:
    assert release(stored(OTHER), ME, at(10)) is None
    assert release(stored(None), ME, at(10)) is None


def test_two_replicas_one_crashes() -> None:
    clock = T0
    a_lease = build_lease("lightsout-lab-box", "lab", ME, 15, clock)
    # B sees A's hold and stays away.
    assert lease_state(a_lease, OTHER, clock + timedelta(seconds=5)) is LeaseState.HELD_BY_OTHER
    assert acquire(a_lease, OTHER, 15, clock + timedelta(seconds=5)) is None
    # A renews once, then dies.
    a_lease = renew(a_lease, ME, clock + timedelta(seconds=5)) or {}
    later = clock + timedelta(seconds=21)
    assert lease_state(a_lease, OTHER, later) is LeaseState.EXPIRED
    b_lease = acquire(a_lease, OTHER, 15, later)
    assert b_lease is not None
    assert b_lease["spec"]["leaseTransitions"] == 1
    # A comes back: it may neither renew nor release B's Lease.
    assert lease_state(b_lease, ME, later) is LeaseState.HELD_BY_OTHER
    assert renew(b_lease, ME, later) is None
    assert release(b_lease, ME, later) is None
