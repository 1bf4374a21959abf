"""README's cluster-autoscaler flags, read from its "Using cluster-autoscaler" block.

The end-to-end tests run a real cluster-autoscaler with exactly these
(tests/e2e/test_cluster_autoscaler.py and test_cluster_autoscaler_matrix.py, whose rows add
only what each is about), tests/unit/test_grpc_servicer.py checks that Groups alike
are similar under its `--balancing-ignore-label`s, and a unit test checks that the shipped
Deployment (deploy/cluster-autoscaler/cluster-autoscaler.yaml) passes them too, so what a user
copies, what ships and what is tested cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
#: The line that introduces README's block of cluster-autoscaler flags.
FLAGS_HEADING = "The cluster-autoscaler flags that matter"


def readme_flags() -> list[str]:
    """Every flag of the block (`--name=value`), comments stripped, in README's order."""
    text = README.read_text()
    block = text[text.index(FLAGS_HEADING) :].split("```", 2)[1]
    flags = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [f for f in flags if f.startswith("--")]
