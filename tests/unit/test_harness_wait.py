"""The harness's waits (tests/harness/wait.py, cycle.py): a wait that times out in CI must say
where things stood, and an event wait must not pass on a list read before the event came."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import cycle, wait

STUCK = {
    "phase": "PoweringOn",
    "reason": "JobRunning",
    "message": "provision Job lo-x-provision-g2-a1 running",
    "attempts": 1,
    "lastOperation": {"action": "provision", "attempt": 1},
    "observedGeneration": 3,
    "energy": {"joules": 12.0},
}


def test_a_timed_out_phase_wait_names_the_phase_reason_and_last_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cycle, "status", lambda *_: dict(STUCK))
    with pytest.raises(AssertionError) as failed:
        cycle.wait_phase(Any, "t-1", "x", "Ready", timeout=0)  # type: ignore[arg-type]
    said = str(failed.value)
    assert said.startswith("timed out after 0s waiting for x to reach phase Ready; last: ")
    for shown in ("'phase': 'PoweringOn'", "'reason': 'JobRunning'", "provision Job lo-x"):
        assert shown in said, said
    assert "'action': 'provision'" in said
    # Only what says why: not the energy ledger or generations.
    assert "energy" not in said and "observedGeneration" not in said


def test_a_phase_wait_returns_the_status_once_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([dict(STUCK), {**STUCK, "phase": "Ready", "reason": "NodeRegistered"}])
    monkeypatch.setattr(cycle, "status", lambda *_: next(answers))
    monkeypatch.setattr(wait, "FIRST_INTERVAL", 0.0)
    reached = cycle.wait_phase(Any, "t-1", "x", "Ready", timeout=5)  # type: ignore[arg-type]
    assert reached["reason"] == "NodeRegistered"


def test_a_wait_without_seen_shows_the_probes_last_answer() -> None:
    with pytest.raises(AssertionError, match=r"waiting for nothing; last: \[\]$"):
        wait.wait_for(lambda: [], 0, "nothing")


def test_events_until_waits_for_the_event_posted_after_the_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warned = {"type": "Warning", "reason": "AuthenticationFailed", "message": "Secret t-1/x"}
    reads: list[list[dict[str, Any]]] = [[], [{"type": "Normal", "reason": "X"}], [warned]]
    monkeypatch.setattr(wait, "events_for", lambda *_: reads.pop(0))
    monkeypatch.setattr(wait, "FIRST_INTERVAL", 0.0)
    events = wait.events_until(
        Any,  # type: ignore[arg-type]
        "t-1",
        "x",
        lambda events: any(e["reason"] == "AuthenticationFailed" for e in events),
        "the refusal",
        timeout=5,
    )
    assert events == [warned] and reads == []


def test_warned_waits_for_a_warning_with_the_reason_and_the_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    normal = {"type": "Normal", "reason": "AuthenticationFailed", "message": "Secret t-1/x"}
    other = {"type": "Warning", "reason": "RetriesExhausted", "message": "Secret t-1/x"}
    vague = {"type": "Warning", "reason": "AuthenticationFailed", "message": "refused"}
    right = {"type": "Warning", "reason": "AuthenticationFailed", "message": "Secret t-1/x: 401"}
    reads = [[normal], [normal, other], [normal, other, vague], [normal, other, vague, right]]
    monkeypatch.setattr(wait, "events_for", lambda *_: reads.pop(0))
    monkeypatch.setattr(wait, "FIRST_INTERVAL", 0.0)
    events = wait.warned(Any, "t-1", "x", "Secret t-1/x", "AuthenticationFailed", timeout=5)  # type: ignore[arg-type]
    assert events[-1] is right and reads == []


def test_warned_without_a_reason_takes_any_warning_and_names_what_it_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wait, "events_for", lambda *_: [])
    with pytest.raises(AssertionError, match=r"a Warning saying 'no shutdown' \(events of x\)"):
        wait.warned(Any, "t-1", "x", "no shutdown", timeout=0)  # type: ignore[arg-type]
    monkeypatch.setattr(
        wait, "events_for", lambda *_: [{"type": "Warning", "reason": "R", "message": "m"}]
    )
    assert wait.warned(Any, "t-1", "x", timeout=0)  # type: ignore[arg-type]
