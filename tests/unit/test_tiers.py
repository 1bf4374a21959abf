"""The suite's own rules: a test is in exactly one tier; the real node's tests run first."""

from __future__ import annotations

import pytest

from tests.harness.tiers import TIERS, tier_problem, weight


@pytest.mark.parametrize("tier", TIERS)
def test_a_test_in_its_tier_folder_is_in_that_tier(tier: str) -> None:
    assert tier_problem(tier, set()) is None
    assert tier_problem(tier, {tier}) is None


def test_a_test_outside_the_tier_folders_is_refused() -> None:
    assert tier_problem("", set()) == "not in a tier folder (tests/{unit,e2e,molecule}/)"
    assert tier_problem("harness", {"unit"}) is not None


def test_a_test_marked_with_another_tier_is_in_two_and_refused() -> None:
    assert tier_problem("unit", {"e2e"}) == "in two tiers (e2e, unit); a test has exactly one"
    assert tier_problem("e2e", {"e2e", "molecule"}) is not None


def test_the_real_node_tests_go_first_and_the_unit_tests_last() -> None:
    order = sorted(
        [("unit", False), ("molecule", False), ("e2e", False), ("e2e", True)],
        key=lambda t: weight(*t),
    )
    assert order == [("e2e", True), ("e2e", False), ("molecule", False), ("unit", False)]
