"""The suite's tiers and the order its tests run in (used by tests/conftest.py).

Every test is in exactly one tier, the folder it lives in (`tests/<tier>/`), so that `-m unit`,
`-m e2e` and `-m molecule` together select every test once. The order puts the longest tests
first so that parallel workers (`make test`, pytest-xdist) end together.
"""

from __future__ import annotations

from collections.abc import Collection

TIERS = ("unit", "e2e", "molecule")
#: Fixtures that start the host's one real node (containerd + kubelet, a host-wide lock).
REAL_NODE_FIXTURES = frozenset({"real_node", "boot_on_power"})
#: The pytest-xdist group of the tests that use it: one worker runs them all (`--dist
#: loadgroup`), instead of several workers starting real nodes that wait for each other.
REAL_NODE_GROUP = "real-node"


def tier_problem(folder: str, marked: Collection[str]) -> str | None:
    """Why a test in `tests/<folder>/` carrying the tier markers `marked` is not in exactly one
    tier; None when it is (its folder's marker is then added if missing)."""
    if folder not in TIERS:
        return f"not in a tier folder (tests/{{{','.join(TIERS)}}}/)"
    if set(marked) - {folder}:
        return f"in two tiers ({', '.join(sorted({*marked, folder}))}); a test has exactly one"
    return None


def weight(tier: str, grouped: bool) -> int:
    """Where a test goes in the run, lowest first: the real node's tests (one worker runs them
    all, one after another), then the other end-to-end tests and the molecule scenarios, then
    the unit tests, which fill the gaps."""
    if grouped:
        return 0
    return {"e2e": 1, "molecule": 2}.get(tier, 3)
