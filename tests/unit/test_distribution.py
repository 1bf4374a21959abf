"""The operator's distribution holds only the operator.

Builds the wheel from a copy of the sources the wheel is made of, installs it without its
dependencies into an empty virtualenv and looks at what a user gets: the package's files, its
declared dependencies and `lightsout --help`. The lab (`lightsout_lab`: control plane,
emulators, demo), the emulators' packages and the test helpers must be nowhere in it.
"""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LAB_MODULES = ("lightsout_lab", "devcluster", "demo")
EMULATORS = ("sushy-tools", "fakepve")
TEST_HELPERS = ("pytest", "molecule", "tests", "benchmarks")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # Without the generated gRPC stubs: the build backend must generate them itself.
    shutil.copytree(
        ROOT / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "*_pb2*")
    )
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, str(src), "-w", str(out)], check=True)
    (built,) = out.glob("*.whl")
    return built


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_wheel_holds_only_the_operator_package(wheel: Path) -> None:
    names = _names(wheel)
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"lightsout"}
    assert "lightsout/runner/main.py" in names  # the Job entrypoint is the operator's own
    assert "lightsout/simulate/replay/engine.py" in names  # `lightsout simulate` is a user command
    # The externalgrpc stubs are generated at build time and shipped, the build backend is not.
    assert "lightsout/grpc/protos/externalgrpc_pb2_grpc.py" in names
    assert "lightsout/grpc/protos/k8s_node_pb2.py" in names
    assert "lightsout/grpc/protos/k8s_pod_pb2.py" in names
    assert not [n for n in names if "build_backend" in n]
    lab = [n for n in names if any(part in LAB_MODULES for part in Path(n).with_suffix("").parts)]
    assert lab == [], f"lab modules in the operator's wheel: {lab}"


def test_wheel_declares_no_emulator_or_test_dependency(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = email.message_from_bytes(archive.read(meta)).get_all("Requires-Dist") or []
    assert requires, "the wheel declares no dependency at all"
    emulators = [r for r in requires if r.lower().startswith(EMULATORS)]
    assert emulators == [], f"emulators among the operator's dependencies: {emulators}"
    # Test tools may be optional extras (`dev`), never something every install pulls in.
    mandatory = [r for r in requires if "extra ==" not in r]
    helpers = [r for r in mandatory if r.lower().startswith(TEST_HELPERS)]
    assert helpers == [], f"test tools installed with the operator: {helpers}"


def test_installed_operator_offers_no_lab_command(wheel: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(pip, check=True)
    helped = subprocess.run(
        [str(env / "bin" / "lightsout"), "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    commands = re.search(r"\{([a-z,-]+)\}", helped.stdout)
    assert commands, helped.stdout
    assert set(commands.group(1).split(",")) == {
        "run",
        "crds",
        "plan",
        "status",
        "power",
        "simulate",
        "trace",
        "healthcheck",
        "logs",
    }
    probe = (
        "import importlib.util, lightsout, pathlib; "
        "print(pathlib.Path(lightsout.__file__).parent); "
        "print([m for m in ('lightsout.devcluster', 'lightsout.demo', 'lightsout_lab') "
        "if importlib.util.find_spec(m)])"
    )
    found = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    where, missing = found.stdout.splitlines()
    assert Path(where).is_relative_to(env), f"lightsout imported from {where}, not the new venv"
    assert missing == "[]"
