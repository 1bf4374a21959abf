"""`molecule test` for every role that has a `molecule/default` scenario.

Each scenario starts what its role talks to (e.g. sushy-tools for redfish_power) on 127.0.0.1
in its own create/destroy playbooks: no Docker. The whole output is shown when one fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.molecule

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(
    p.parent.parent.parent for p in (ROOT / "roles").glob("*/molecule/default/molecule.yml")
)


def test_some_role_has_a_scenario() -> None:
    assert ROLES, "no roles/*/molecule/default/molecule.yml found"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_molecule_scenario_passes(role: Path) -> None:
    bin_dir = Path(sys.executable).parent
    molecule = shutil.which("molecule", path=str(bin_dir)) or shutil.which("molecule")
    assert molecule, "molecule is not installed (pip install -e '.[dev]')"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
        "PY_COLORS": "0",
    }
    proc = subprocess.run(
        [molecule, "test"],
        cwd=role,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=840,
        check=False,
    )
    assert proc.returncode == 0, f"molecule test failed in {role}:\n{proc.stdout}"
