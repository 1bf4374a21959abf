"""Our externalgrpc.proto against upstream's: the same wire contract, so a drift is caught.

Upstream's proto (cluster-autoscaler 1.34.5, in ../shared/third_party, the source the e2e tests
build cluster-autoscaler from) imports Kubernetes' generated.proto files; `go mod download`
fetches the k8s.io/api and k8s.io/apimachinery modules that hold them (the same versions the
cluster-autoscaler build uses). Both files are compiled with grpcio-tools' protoc into
descriptor sets and compared: every RPC with its request and reply, every message, field
number, type and label, every enum value. Upstream's deprecated fields (typed with Kubernetes
messages) must be reserved on our side instead.

Our k8s_node.proto and k8s_pod.proto are checked the same way against core/v1 Node and Pod:
every field we encode or decode has upstream's number and type.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = (
    ROOT.parent
    / "shared/third_party/cluster-autoscaler-1.34.5/cluster-autoscaler"
    / "cloudprovider/externalgrpc/protos/externalgrpc.proto"
)
OURS = ROOT / "src/lightsout/grpc/protos"
K8S_MODULES = {"api": "k8s.io/api@v0.34.9", "apimachinery": "k8s.io/apimachinery@v0.34.9"}


@pytest.fixture(scope="module")
def k8s_include(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An include root where `k8s.io/api/...` and `k8s.io/apimachinery/...` resolve."""
    root = tmp_path_factory.mktemp("k8s-protos")
    (root / "k8s.io").mkdir()
    for name, module in K8S_MODULES.items():
        proc = subprocess.run(
            ["go", "mod", "download", "-json", module],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
            env=_go_env(),
        )
        (root / "k8s.io" / name).symlink_to(json.loads(proc.stdout)["Dir"])
    return root


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}


def _compile(proto: Path, includes: list[Path], out: Path) -> descriptor_pb2.FileDescriptorSet:
    well_known = Path(str(resources.files("grpc_tools") / "_proto"))
    args = ["protoc", *(f"-I{i}" for i in [*includes, well_known])]
    args += ["--include_imports", f"--descriptor_set_out={out}", str(proto)]
    assert protoc.main(args) == 0, f"protoc failed on {proto}"
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _file(fds: descriptor_pb2.FileDescriptorSet, suffix: str) -> descriptor_pb2.FileDescriptorProto:
    return next(f for f in fds.file if f.name.endswith(suffix))


def _fields(message: descriptor_pb2.DescriptorProto) -> dict[int, tuple[str, int, int, str]]:
    return {
        f.number: (f.name, f.type, f.label, f.type_name.rsplit(".", 1)[-1])
        for f in message.field
        if not f.options.deprecated
    }


def _messages(
    file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, descriptor_pb2.DescriptorProto]:
    out: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, messages: list[descriptor_pb2.DescriptorProto]) -> None:
        for message in messages:
            out[prefix + message.name] = message
            walk(f"{prefix}{message.name}.", list(message.nested_type))

    walk("", list(file.message_type))
    return out


def test_our_proto_is_upstreams_wire_contract(k8s_include: Path, tmp_path: Path) -> None:
    upstream = _file(
        _compile(UPSTREAM, [UPSTREAM.parent, k8s_include], tmp_path / "up.pb"), "externalgrpc.proto"
    )
    ours = _file(
        _compile(OURS / "externalgrpc.proto", [OURS.parents[2]], tmp_path / "ours.pb"),
        "externalgrpc.proto",
    )
    assert ours.package == upstream.package
    (up_service,) = upstream.service
    (our_service,) = ours.service
    assert our_service.name == up_service.name
    methods = {m.name: (m.input_type, m.output_type) for m in our_service.method}
    assert methods == {m.name: (m.input_type, m.output_type) for m in up_service.method}

    up_messages, our_messages = _messages(upstream), _messages(ours)
    assert set(our_messages) == set(up_messages)
    for name, up in up_messages.items():
        mine = our_messages[name]
        assert _fields(mine) == _fields(up), name
        deprecated = {f.number for f in up.field if f.options.deprecated}
        reserved = {n for r in mine.reserved_range for n in range(r.start, r.end)}
        assert deprecated <= reserved, f"{name}: deprecated fields {deprecated} not reserved"
        enums = {e.name: [(v.name, v.number) for v in e.value] for e in mine.enum_type}
        assert enums == {e.name: [(v.name, v.number) for v in e.value] for e in up.enum_type}


def test_node_and_pod_subsets_match_core_v1(k8s_include: Path, tmp_path: Path) -> None:
    core = _compile(
        k8s_include / "k8s.io/api/core/v1/generated.proto", [k8s_include], tmp_path / "core.pb"
    )
    upstream = {
        name: message
        for f in core.file
        for name, message in _messages(f).items()
        if f.package in ("k8s.io.api.core.v1", "k8s.io.apimachinery.pkg.apis.meta.v1")
        or name == "Quantity"
    }
    ours = {
        name: message
        for proto in ("k8s_node.proto", "k8s_pod.proto")
        for name, message in _messages(
            _file(_compile(OURS / proto, [OURS.parents[2]], tmp_path / f"{proto}.pb"), proto)
        ).items()
    }
    assert {"Node", "Pod", "PodSpec", "Container", "ResourceRequirements"} <= set(ours)
    for name, mine in ours.items():
        theirs = _fields(upstream[name])
        for number, (field, kind, label, type_name) in _fields(mine).items():
            assert theirs[number][:3] == (field, kind, label), f"{name}.{field}"
            assert theirs[number][3] == type_name, f"{name}.{field}"
