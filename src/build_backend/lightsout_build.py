"""The operator's build backend: setuptools, after generating the gRPC stubs.

pyproject.toml names this module as its PEP 517 backend (`backend-path = ["src/build_backend"]`),
so every way of building or installing the operator — `pip install .` in the images (which copy
only pyproject.toml, README.md and src/), `pip install -e` in `make setup`, `pip wheel` in
tests/unit/test_distribution.py — first compiles src/lightsout/grpc/protos/*.proto with
grpcio-tools (a build requirement) into `*_pb2.py`, `*_pb2.pyi` and `*_pb2_grpc.py` next to
them. Those files are ignored by git and never edited. This folder is not a package of the
wheel. `python src/build_backend/lightsout_build.py` generates the stubs by hand.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 interface)

SRC = Path(__file__).resolve().parents[1]
PROTOS = Path("lightsout") / "grpc" / "protos"


def generate_stubs(src: Path = SRC) -> list[Path]:
    """Compiles every .proto under `src`/lightsout/grpc/protos; returns the files written."""
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")
    for proto in sorted((src / PROTOS).glob("*.proto")):
        args = [f"-I{src}", f"-I{include}", f"--python_out={src}", f"--pyi_out={src}"]
        if "\nservice " in proto.read_text():
            args.append(f"--grpc_python_out={src}")
        if protoc.main(["protoc", *args, str(proto.relative_to(src))]) != 0:
            raise RuntimeError(f"protoc failed on {proto}")
    return sorted((src / PROTOS).glob("*_pb2*.py*"))


def build_wheel(
    wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None
) -> str:
    generate_stubs()
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None
) -> str:
    generate_stubs()
    return str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    generate_stubs()
    return str(_setuptools.build_sdist(sdist_directory, config_settings))


if __name__ == "__main__":
    sys.stdout.write("".join(f"{path}\n" for path in generate_stubs()))
