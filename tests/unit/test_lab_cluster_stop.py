"""How the lab stops one control-plane component: `Cluster.kill` is a crash (SIGKILL, the
component never hears of it), `Cluster.halt` a shutdown (SIGTERM first). The fault tests rely on
the difference: an API server killed mid-request leaves its clients with cut connections, not a
graceful goodbye."""

from __future__ import annotations

import sys
from pathlib import Path

from lightsout_lab import Cluster
from tests.harness.wait import wait_for

#: A component that notes a SIGTERM in `term` before it exits; `ready` once its handler is set.
COMPONENT = """
import pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
def on_term(*_):
    (here / "term").write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(here / "ready").write_text("")
while True:
    time.sleep(1)
"""


def started(tmp_path: Path) -> Cluster:
    cluster = Cluster(directory=tmp_path, with_kwok=False)
    cluster.logs.mkdir()
    cluster._spawn("component", [sys.executable, "-c", COMPONENT, str(tmp_path)])
    wait_for((tmp_path / "ready").exists, 30, "the component's SIGTERM handler")
    return cluster


def test_kill_is_a_crash_the_component_never_hears_of(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    pid = cluster.pids["component"]

    cluster.kill("component")

    assert "component" not in cluster.pids
    assert not Path(f"/proc/{pid}").exists(), "the component still runs"
    assert not (tmp_path / "term").exists(), "the component was asked to stop, not killed"
    argv, _ = cluster._launches["component"]  # kept for `resume`, which starts it the same way
    assert argv[-1] == str(tmp_path)


def test_halt_asks_the_component_to_stop_first(tmp_path: Path) -> None:
    cluster = started(tmp_path)

    cluster.halt("component")

    assert "component" not in cluster.pids
    assert (tmp_path / "term").read_text() == "SIGTERM"
