"""Locates the control-plane binaries, building them on first use.

`LIGHTSOUT_BIN_DIR` wins when set (a person who built elsewhere). Otherwise the repository's
`tools/controlplane/build.sh` is run: it builds into a versioned cache outside the work tree
and, when warm, only prints the directory.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BinariesMissingError(RuntimeError):
    """No usable control-plane binaries could be found or built."""


def repo_root() -> Path:
    """The source checkout this package runs from (lab/src/lightsout_lab → three up)."""
    return Path(__file__).resolve().parents[3]


@functools.cache
def find_binaries() -> Path:
    """Return the directory holding etcd, kube-apiserver, … and kwok."""
    configured = os.environ.get("LIGHTSOUT_BIN_DIR")
    if configured:
        directory = Path(configured)
    else:
        script = repo_root() / "tools" / "controlplane" / "build.sh"
        if not script.exists():
            raise BinariesMissingError(
                f"{script} not found: set LIGHTSOUT_BIN_DIR to a directory with {REQUIRED}"
            )
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BinariesMissingError(f"building the control plane failed:\n{proc.stderr[-4000:]}")
        directory = Path(proc.stdout.strip().splitlines()[-1])
    missing = [name for name in REQUIRED if not (directory / name).exists()]
    if missing:
        raise BinariesMissingError(f"{directory} lacks {', '.join(missing)}")
    return directory


@functools.cache
def find_helm() -> Path:
    """Helm built from Go modules by `tools/helm/build.sh` (a warm run only prints its path)."""
    script = repo_root() / "tools" / "helm" / "build.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BinariesMissingError(f"building Helm failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])
