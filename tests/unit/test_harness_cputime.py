"""The per-test CPU log (tests/harness/cputime.py): a test's CPU includes what the processes it
started burned, the summary ranks the tests by it, and without the setting nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import cputime

#: A child process that burns some CPU (a fixed amount of work, not a time).
BUSY = "sum(i * i for i in range(3_000_000))"


def test_a_tests_cpu_counts_the_processes_it_reaped_and_ranks_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(cputime.LOG_ENV, str(tmp_path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    with cputime.logged("tests/e2e/test_x.py::test_idle"):
        pass
    with cputime.logged("tests/e2e/test_x.py::test_busy"):
        subprocess.run([sys.executable, "-c", BUSY], check=True)
    lines = [json.loads(t) for t in (tmp_path / "gw7.jsonl").read_text().splitlines()]
    assert [line["test"] for line in lines] == [
        "tests/e2e/test_x.py::test_idle",
        "tests/e2e/test_x.py::test_busy",
    ]
    assert lines[1]["reapedCpu"] > lines[0]["reapedCpu"]

    assert cputime.main([str(tmp_path), "1"]) == 0
    said = capsys.readouterr().out
    assert "e2e            2 tests" in said
    assert said.rstrip().endswith("tests/e2e/test_x.py::test_busy")


def test_without_the_setting_nothing_is_written_and_the_summary_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(cputime.LOG_ENV, raising=False)
    with cputime.logged("tests/unit/test_x.py::test_a"):
        pass
    assert list(tmp_path.iterdir()) == []
    assert cputime.main([str(tmp_path)]) == 1
    assert f"was {cputime.LOG_ENV} set for the run?" in capsys.readouterr().err
    assert cputime.main([str(tmp_path), "many"]) == 2
