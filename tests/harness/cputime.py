"""Each test's CPU time, to find what makes the suite slow.

On 2 cores the suite is CPU-bound: what a test costs the run is the CPU it burns, which
`--durations` (wall time) does not show; a test that waits out a minute costs the others little,
one that runs ten Ansible Jobs costs them a lot. With `LIGHTSOUT_TEST_CPU_LOG=DIR`, every test
process appends one JSON line per test to `DIR/<worker>.jsonl`: the test's wall seconds and the
CPU seconds of the test process itself and of the processes it reaped meanwhile (operators,
emulators, and the stand-in kubelet's action Jobs with their ansible-playbook runs and modules).
The session's control plane is reaped when the session ends and counts in no test; a module's
shared lab counts in the test during whose teardown it stops; a process nobody waited for counts
in the test that reaps it, often a later one (Python's subprocess reaps such children when it
next starts a process).

`python -m tests.harness.cputime DIR [N]` prints the N tests (default 30) that took the most CPU
and the totals by tier.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The directory the per-test lines go to; unset, nothing is measured.
LOG_ENV = "LIGHTSOUT_TEST_CPU_LOG"


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process and of the children it has reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


@contextmanager
def logged(nodeid: str) -> Iterator[None]:
    """Measure the enclosed test (setup, call and teardown) when LOG_ENV is set."""
    directory = os.environ.get(LOG_ENV)
    if not directory:
        yield
        return
    started, (own, reaped) = time.time(), _cpu()
    try:
        yield
    finally:
        ended, (own_after, reaped_after) = time.time(), _cpu()
        line = {
            "test": nodeid,
            "wall": round(ended - started, 3),
            "cpu": round(own_after - own, 3),
            "reapedCpu": round(reaped_after - reaped, 3),
        }
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(directory).mkdir(parents=True, exist_ok=True)
        with (Path(directory) / f"{worker}.jsonl").open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and not argv[1].isdigit()):
        print("usage: python -m tests.harness.cputime DIR [N]", file=sys.stderr)
        return 2
    directory, top = Path(argv[0]), int(argv[1]) if len(argv) == 2 else 30
    lines = [
        json.loads(text)
        for log in sorted(directory.glob("*.jsonl"))
        for text in log.read_text(encoding="utf-8").splitlines()
        if text.strip()
    ]
    if not lines:
        print(f"no per-test lines in {directory} (was {LOG_ENV} set for the run?)", file=sys.stderr)
        return 1
    tiers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for line in lines:
        tier = line["test"].split("/")[1] if line["test"].count("/") > 1 else "?"
        tiers[tier][0] += 1
        tiers[tier][1] += line["wall"]
        tiers[tier][2] += line["cpu"] + line["reapedCpu"]
    for tier, (count, wall, cpu) in sorted(tiers.items()):
        print(f"{tier:10} {int(count):5} tests {wall:9.1f} s {cpu:9.1f} CPU-s")
    print(f"\nthe {top} tests that took the most CPU (CPU-s, wall s):")
    for line in sorted(lines, key=lambda x: -(x["cpu"] + x["reapedCpu"]))[:top]:
        print(f"{line['cpu'] + line['reapedCpu']:8.1f} {line['wall']:8.1f}  {line['test']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
