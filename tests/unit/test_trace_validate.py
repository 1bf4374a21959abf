"""`lightsout trace validate` and the check `lightsout simulate` runs first: a bad trace exits 2
with every problem named by file, object and field, never a traceback or a silent default."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout import cli
from lightsout.simulate.traces import generate
from lightsout.simulate.traces.trace import (
    CRONJOBS_FILE,
    MACHINES_FILE,
    PODS_FILE,
    TRACE_FILE,
    load,
    write,
)
from lightsout.simulate.traces.validate import validate
from tests.unit.test_simulate import ROOT, cronjob, pod, trace

pytestmark = pytest.mark.unit


def valid(tmp_path: Path) -> Path:
    """A small valid trace: a Group, two Nodes with durations, a CronJob and two pods."""
    return write(
        trace([pod(60, 600, "a"), pod(120, 60, "b")], cronjobs=(cronjob("0 * * * *"),)),
        tmp_path / "t",
    )


def edit_yaml(path: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    change(docs)
    path.write_text("".join("---\n" + yaml.safe_dump(d) for d in docs))


def edit_meta(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = yaml.safe_load((directory / TRACE_FILE).read_text())
    change(meta)
    (directory / TRACE_FILE).write_text(yaml.safe_dump(meta))


def the_node(docs: list[dict[str, Any]], name: str = "m1") -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "Node" and d["metadata"]["name"] == name]
    return found


def refused(directory: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Both commands exit 2 with the same problem lines (and no traceback)."""
    assert cli.main(["trace", "validate", str(directory)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert cli.main(["simulate", str(directory), "--no-baseline"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == lines
    assert captured.out == ""
    assert lines[-1].startswith(f"trace {directory}: invalid (")
    return lines[:-1]


def test_a_valid_trace_says_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    assert cli.main(["trace", "validate", str(directory)]) == 0
    assert capsys.readouterr().out == f"trace {directory}: valid (2 machines, 2 pods, 1 CronJobs)\n"


@pytest.mark.parametrize("name", sorted(generate.GENERATORS))
def test_the_shipped_traces_are_valid(name: str) -> None:
    assert validate(ROOT / "traces" / name) == []


def test_idle_watts_above_on_watts_names_node_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)

    def change(docs: list[dict[str, Any]]) -> None:
        the_node(docs)["metadata"]["namespace"] = "lab"
        the_node(docs)["spec"]["power"].update(onWatts=300, idleWatts=350, offWatts=5)

    edit_yaml(directory / MACHINES_FILE, change)
    lines = refused(directory, capsys)
    assert (
        f"{directory / MACHINES_FILE}: Node lab/m1: spec.power.idleWatts: "
        "idleWatts must not exceed onWatts (got 350)"
    ) in lines


def test_a_node_quantity_and_an_unknown_group_field_are_all_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)

    def change(docs: list[dict[str, Any]]) -> None:
        the_node(docs)["spec"]["resources"]["cpu"] = "24 cores"
        docs[0]["spec"]["scaleDown"] = {"unneededSecond": 300}

    edit_yaml(directory / MACHINES_FILE, change)
    lines = refused(directory, capsys)
    machines = directory / MACHINES_FILE
    assert f"{machines}: Group lab: spec.scaleDown.unneededSecond: unknown field" in lines
    assert any(
        line.startswith(f"{machines}: Node m1: spec.resources.cpu: must be a non-negative quantity")
        and "'24 cores'" in line
        for line in lines
    )


def test_a_node_naming_a_group_not_in_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    edit_yaml(
        directory / MACHINES_FILE, lambda docs: the_node(docs, "m2")["spec"].update(group="lab2")
    )
    (line,) = refused(directory, capsys)
    assert line.startswith(f"{directory / MACHINES_FILE}: Node m2: spec.group: no Group 'lab2'")
    assert "(Groups: lab)" in line


def test_durations_under_a_misspelt_machine_name_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)

    def change(meta: dict[str, Any]) -> None:
        meta["machines"]["m3"] = meta["machines"].pop("m2")
        meta["machines"]["m1"]["bootSecond"] = meta["machines"]["m1"].pop("bootSeconds")

    edit_meta(directory, change)
    lines = refused(directory, capsys)
    meta = directory / TRACE_FILE
    assert (
        f"{meta}: machines.m1: bootSecond: unknown field "
        "(known: powerOnSeconds, bootSeconds, shutdownSeconds, onWatts, idleWatts, offWatts, "
        "inspected, unreachable)"
    ) in lines
    assert any(
        line.startswith(f"{meta}: machines.m3: no Node 'm3' in machines.yaml (Nodes: m1, m2)")
        for line in lines
    )


def test_unreachable_windows_that_do_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)

    def change(meta: dict[str, Any]) -> None:
        meta["machines"]["m1"]["unreachable"] = [{"atSeconds": -5, "second": 60}]
        meta["machines"]["m2"]["unreachable"] = {"atSeconds": 0, "seconds": 60}

    edit_meta(directory, change)
    lines = refused(directory, capsys)
    meta = directory / TRACE_FILE
    assert f"{meta}: machines.m1: unreachable[0].second: unknown field" in " ".join(lines)
    assert any(
        line.startswith(f"{meta}: machines.m1: unreachable[0].atSeconds: must be a non-negative")
        for line in lines
    )
    assert any(
        line.startswith(f"{meta}: machines.m1: unreachable[0].seconds: must be a non-negative")
        for line in lines
    )
    assert f"{meta}: machines.m2: unreachable: must be a list of {{atSeconds, seconds}}" in lines


def test_run_seconds_for_a_cronjob_the_trace_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    edit_meta(directory, lambda meta: meta["cronjobs"].update({"ops/bakup": {"runSeconds": 5}}))
    (line,) = refused(directory, capsys)
    assert line.startswith(f"{directory / TRACE_FILE}: cronjobs.ops/bakup: no CronJob 'ops/bakup'")
    assert "(CronJobs: ops/backup)" in line


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"schedule": "every night"}, "spec.schedule", "schedule 'every night' is not a cron"),
        ({"timeZone": "Europe/Berlinn"}, "spec.timeZone", "unknown timeZone 'Europe/Berlinn'"),
        ({"timezone": "UTC"}, "spec.timezone", "unknown field"),
        ({"concurrencyPolicy": "Never"}, "spec.concurrencyPolicy", "concurrencyPolicy 'Never'"),
    ],
)
def test_a_cronjob_schedule_time_zone_or_field_that_does_not_read(
    spec: dict[str, Any],
    field: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = valid(tmp_path)
    edit_yaml(directory / CRONJOBS_FILE, lambda docs: docs[0]["spec"].update(spec))
    (line,) = refused(directory, capsys)
    assert line.startswith(f"{directory / CRONJOBS_FILE}: CronJob ops/backup: {field}: {message}")


def test_a_cronjob_pod_template_quantity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)

    def change(docs: list[dict[str, Any]]) -> None:
        template = docs[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        template["containers"][0]["resources"]["requests"]["memory"] = "lots"

    edit_yaml(directory / CRONJOBS_FILE, change)
    (line,) = refused(directory, capsys)
    assert line == (
        f"{directory / CRONJOBS_FILE}: CronJob ops/backup: spec.jobTemplate.spec.template.spec"
        ".containers[0].resources.requests.memory: not a quantity (e.g. 4, 500m, 16Gi): 'lots'"
    )


def test_pods_with_a_bad_quantity_a_misspelt_key_and_bad_json_name_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    path = directory / PODS_FILE
    first, second = path.read_text().splitlines()
    one = json.loads(first)
    one["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "24 cores"
    two = json.loads(second)
    two["runSecond"] = two.pop("runSeconds")
    path.write_text("\n".join([json.dumps(one), json.dumps(two), "{not json"]) + "\n")
    lines = refused(directory, capsys)
    assert lines == [
        f"{path}:1: Pod default/a: spec.containers[0].resources.requests.cpu: "
        "not a quantity (e.g. 4, 500m, 16Gi): '24 cores'",
        f"{path}:2: Pod default/b: runSecond: unknown field "
        "(known: at, runSeconds, namespace, name, owner, jobAnnotations, jobLabels, spec)",
        f"{path}:2: Pod default/b: runSeconds: must be a non-negative number of seconds (missing)",
        f"{path}:3: not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))",
    ]


def test_a_bad_start_and_an_unknown_trace_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    edit_meta(directory, lambda meta: meta.update(start="Monday", durationSecond=60))
    lines = refused(directory, capsys)
    meta = directory / TRACE_FILE
    assert f"{meta}: start: must be an RFC 3339 time, got 'Monday'" in lines
    assert any(line.startswith(f"{meta}: durationSecond: unknown field") for line in lines)


def test_a_bad_set_override_is_refused_by_the_group_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = valid(tmp_path)
    assert cli.main(["simulate", str(directory), "--set", "spec.maxNodes=-1"]) == 2
    err = capsys.readouterr().err
    assert f"{directory / MACHINES_FILE}: Group lab (with --set): spec.maxNodes: " in err
    assert validate(directory) == []


def test_not_a_trace_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["trace", "validate", str(tmp_path / "missing")]) == 2
    assert "no trace.yaml: not a trace directory" in capsys.readouterr().err


def test_an_unquoted_time_of_day_is_read_as_kubectl_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # YAML 1.1 (PyYAML's default) reads `from: 17:00` as 1020; kubectl keeps "17:00".
    directory = valid(tmp_path)

    def add_window(docs: list[dict[str, Any]]) -> None:
        (group,) = [d for d in docs if d["kind"] == "Group"]
        window = {"name": "evening", "days": ["mon"], "from": "17:00", "to": "21:30", "minNodes": 1}
        group.setdefault("spec", {})["windows"] = [window]

    edit_yaml(directory / MACHINES_FILE, add_window)
    text = (directory / MACHINES_FILE).read_text()
    unquoted = text.replace("'17:00'", "17:00").replace("'21:30'", "21:30")
    assert "from: 17:00" in unquoted
    (directory / MACHINES_FILE).write_text(unquoted)

    assert cli.main(["trace", "validate", str(directory)]) == 0, capsys.readouterr().err
    (group,) = [m for m in load(directory).machines if m["kind"] == "Group"]
    assert group["spec"]["windows"][0]["from"] == "17:00"
    assert group["spec"]["windows"][0]["to"] == "21:30"
