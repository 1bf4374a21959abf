"""The `lightsout` command: run the operator, print the CRDs, explain the autoscaler's plan,
show Groups and machines, power a machine on or off, replay a workload trace, record one.

The local dev cluster and the demo are the lab's (`lightsout-lab`), not the operator's."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightsout.simulate.analysis.optimum import Bound
    from lightsout.simulate.analysis.sweep import Sweep
    from lightsout.simulate.replay.engine import Options, Result
    from lightsout.simulate.traces.trace import Trace

#: How long a command waits to connect to the API server (TLS handshake included) before it
#: says the server does not answer; each call is tried 4 times (urllib3's retries).
CONNECT_SECONDS = 5.0


def cmd_run(args: argparse.Namespace) -> int:
    import kopf

    import lightsout.handlers  # (registers the handlers)

    if args.namespace:
        # A namespaced operator keeps its autoscaler Lease where it works, unless told otherwise.
        os.environ.setdefault("LIGHTSOUT_NAMESPACE", args.namespace[0])
        # What it serves cluster-autoscaler is limited to the same namespaces.
        os.environ["LIGHTSOUT_WATCHED_NAMESPACES"] = ",".join(args.namespace)
        # Secrets are listed only where the operator is bound (no cluster-wide Secret access).
        lightsout.handlers.watch_secrets()
    log_format = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL
    kopf.configure(verbose=args.verbose, log_format=log_format)
    if not args.verbose:
        lightsout.handlers.lifecycle.quiet_handler_successes()
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace or (),
        liveness_endpoint=args.liveness,
    )
    return 0


def cmd_crds(args: argparse.Namespace) -> int:
    from lightsout.models.crd import render_crds

    rendered = render_crds()
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (out / name).write_text(text)
    else:
        # Each rendered file starts with its own `---` document marker.
        sys.stdout.write("".join(rendered[name] for name in sorted(rendered)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """List the cluster once, plan on it and print the plan; nothing is changed."""
    from lightsout.config import OperatorConfig
    from lightsout.k8s.api import Api
    from lightsout.models.group import SERIES_LABEL
    from lightsout.planning.autoscaler.autoscale import plan
    from lightsout.planning.autoscaler.report import as_json, render_text
    from lightsout.state import build
    from lightsout.state.references import contents_entry

    ns = args.namespace
    api = Api(connect_timeout=CONNECT_SECONDS)
    objects = {
        build.PODS_KEY: api.list_pods(ns),
        build.NODES_KEY: api.list_core_nodes(),
        build.MACHINES_KEY: api.list_all_resources("nodes", ns),
        build.GROUPS_KEY: api.list_all_resources("groups", ns),
        build.PDBS_KEY: api.list_pdbs(ns),
        build.DAEMONSETS_KEY: api.list_daemonsets(ns),
        build.CRONJOBS_KEY: api.list_cronjobs(ns),
        build.JOBS_KEY: api.list_jobs(ns),
        build.SERIES_KEY: api.list_labelled_config_maps(SERIES_LABEL, ns),
        build.SECRETS_KEY: [contents_entry(*found) for found in api.list_key_names("secret", ns)],
        build.CONFIGMAPS_KEY: [
            contents_entry(*found) for found in api.list_key_names("config_map", ns)
        ],
    }
    # Every list above is whole, so the snapshot is complete: the same view the operator has.
    now = dt.datetime.now(dt.UTC)
    snapshot = build.snapshot_from(objects, complete=True, now=now)
    result = plan(snapshot, now)
    if OperatorConfig.from_env().autoscaler_dry_run:
        print("LIGHTSOUT_AUTOSCALER_DRY_RUN is set: the operator applies none of this")
    if args.json:
        print(json.dumps(as_json(snapshot, result, now), indent=2))
    else:
        sys.stdout.write(render_text(snapshot, result, now))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Groups and machines, one table each (`-o json` for scripts)."""
    from lightsout.commands import status
    from lightsout.k8s.api import Api, current_namespace
    from lightsout.models.group import SERIES_LABEL

    ns = None if args.all_namespaces else (args.namespace or current_namespace())
    api = Api(connect_timeout=CONNECT_SECONDS)
    table = status.rows(
        api.list_all_resources("groups", ns),
        api.list_all_resources("nodes", ns),
        dt.datetime.now(dt.UTC),
        series_maps=api.list_labelled_config_maps(SERIES_LABEL, ns),
    )
    if args.output == "json":
        print(json.dumps(table, indent=2))
    else:
        sys.stdout.write(status.render_text(table, all_namespaces=ns is None))
    return 0


def cmd_power(args: argparse.Namespace) -> int:
    """Set desiredPowerState; with --wait, follow the phases until done, Failed or timeout."""
    from lightsout.commands.power import ExitCode, Progress, verdict
    from lightsout.k8s.api import Api, current_namespace
    from lightsout.models.enums import DesiredPowerState

    ns = args.namespace or current_namespace()
    api = Api(connect_timeout=CONNECT_SECONDS)
    desired = DesiredPowerState.ON if args.state == "on" else DesiredPowerState.OFF
    if api.get_resource(ns, "nodes", args.node) is None:
        print(f"error: Node {args.node!r} not found in namespace {ns!r}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    patched = api.patch_resource(
        ns, "nodes", args.node, {"spec": {"desiredPowerState": desired.value}}
    )
    generation = int(patched["metadata"].get("generation") or 0)
    print(f"{args.node}: desiredPowerState {desired.value}")
    if not args.wait:
        return ExitCode.DONE
    deadline = time.monotonic() + args.timeout
    shown: Progress | None = None
    while True:
        node = api.get_resource(ns, "nodes", args.node)
        if node is None:
            print(f"{args.node}: deleted while waiting", file=sys.stderr)
            return ExitCode.NOT_FOUND
        result = verdict(node, desired, generation)
        if result.progress != shown:
            shown = result.progress
            print(shown.line(args.node), flush=True)
        if result.code is not None:
            return result.code
        if time.monotonic() >= deadline:
            print(f"{args.node}: timed out after {args.timeout:g}s", file=sys.stderr)
            return ExitCode.TIMED_OUT
        time.sleep(1.0)


def cmd_logs(args: argparse.Namespace) -> int:
    """Print the playbook output of the machine's last (or last named) action's Job pod."""
    from lightsout.commands.logs import ExitCode, header, last_job, last_pod, render
    from lightsout.execution.jobs import job_selector
    from lightsout.k8s import people
    from lightsout.k8s.api import Api, current_namespace, error_message

    ns = args.namespace or current_namespace()
    api = Api(connect_timeout=CONNECT_SECONDS)
    if api.get_resource(ns, "nodes", args.node) is None:
        print(f"error: Node {args.node!r} not found in namespace {ns!r}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    job = last_job(api.list_jobs(ns, job_selector(args.node)), args.action)
    what = f"{args.action} " if args.action else ""
    if job is None:
        print(
            f"{args.node}: no {what}action Job left (finished Jobs are deleted after "
            "jobs.ttlSeconds; status.lastOperation keeps the outcome)",
            file=sys.stderr,
        )
        return ExitCode.NOT_FOUND
    pod = last_pod(api.job_pods(ns, job["metadata"]["name"]))
    if pod is None:
        print(f"{args.node}: job {job['metadata']['name']} has no pod left", file=sys.stderr)
        return ExitCode.NOT_FOUND
    print(header(job, pod), file=sys.stderr, flush=True)
    try:
        output = people.pod_log(api, ns, pod["metadata"]["name"])
    except Exception as exc:  # the API server's or the kubelet's refusal, shown as they say it
        print(f"{args.node}: logs unavailable: {error_message(exc)}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    if args.output == "json":  # the runner's JSON lines as the pod wrote them
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
    else:
        sys.stdout.write(render(output))
    return ExitCode.PRINTED


def cmd_simulate(args: argparse.Namespace) -> int:
    """Replay a trace against the production planner; print energy, waits, cycles, bounds."""
    from lightsout.simulate.analysis import report
    from lightsout.simulate.replay import engine

    _settings_of(args)
    sweep = _sweep_of(args)
    trace = _trace_of(args)
    options = engine.Options(
        policy=engine.Policy(args.policy),
        scoring=engine.Scoring(args.scheduler),
        overrides=tuple(args.set or ()),
        prewarm=args.prewarm,
    )
    if sweep is not None:
        return _simulate_sweep(trace, sweep, options, args)
    started = time.monotonic()
    result = engine.replay(trace, options)
    replay_seconds = round(time.monotonic() - started, 2)
    # One always-on reference for every policy printed, so their "% saved" share a denominator.
    reference = report.always_on_reference(result)
    summary = report.summarise(result, reference)
    summary["replaySeconds"] = replay_seconds
    if args.plot:
        from lightsout.simulate.analysis.plot import PlotMissingError, plot

        with _refusing(PlotMissingError):
            plot(result, Path(args.plot))
    baseline = None
    max_wait = report.longest_wait(result)
    replayed = [result]
    if args.baseline and options.policy is engine.Policy.LIGHTSOUT:
        reactive = engine.Options(policy=engine.Policy.REACTIVE, scoring=options.scoring)
        reactive_result = engine.replay(trace, reactive)
        baseline = report.summarise(reactive_result, reference)
        max_wait = max(max_wait, report.longest_wait(reactive_result))
        replayed.append(reactive_result)
    solved = None
    if args.optimum:
        from lightsout.simulate.analysis.optimum import SolverMissingError, solve

        with _refusing(SolverMissingError):
            # If no zero-wait schedule exists, the bound lets pods wait as long as the
            # schedules it is compared with did, so it bounds both of them.
            solved = solve(
                trace,
                args.time_limit,
                max_wait=max_wait,
                slot=args.slot,
                defer=options.defer,
                replayed=replayed,
            )
    _print_simulation(args, result, summary, baseline, solved)
    return 0


def _print_simulation(
    args: argparse.Namespace,
    result: Result,
    summary: dict[str, Any],
    baseline: dict[str, Any] | None,
    solved: Bound | None,
) -> None:
    """`lightsout simulate`'s report, text or JSON, with the bound and the breakdown asked for."""
    from lightsout.simulate.analysis import report

    bound = None if solved is None else solved.as_json()
    rows = None
    if args.breakdown:
        from lightsout.simulate.analysis.breakdown import breakdown

        rows = breakdown(result.machines, None if solved is None else solved.schedule)
    if args.output == "json":  # strict JSON: a non-finite figure fails here, not in a parser
        document = {**summary, "baseline": baseline, "bound": bound}
        if rows is not None:
            document["breakdown"] = rows
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        sys.stdout.write(report.render_text(summary, baseline, bound))
        if rows is not None:
            from lightsout.simulate.analysis.breakdown import render

            sys.stdout.write(render(rows, None if solved is None else solved.schedule_source))


class _RefusedError(Exception):
    """A command cannot go on with what it was given (exit 2): the error is the line `main`
    prints (none when the command printed its problems itself)."""


@contextlib.contextmanager
def _refusing(*errors: type[Exception], what: str = "lightsout simulate: ") -> Iterator[None]:
    """One of `errors` raised in the block is `_RefusedError`: `what`, then the error's words."""
    try:
        yield
    except errors as error:
        raise _RefusedError(f"{what}{error}") from None


def _trace_of(args: argparse.Namespace) -> Trace:
    """The trace `lightsout simulate` replays; `_RefusedError` saying why it cannot."""
    from lightsout.simulate.traces import generate
    from lightsout.simulate.traces.trace import TraceError, load
    from lightsout.simulate.traces.validate import validate

    path = Path(args.trace)
    with _refusing(TraceError):
        if path.exists() or args.trace not in generate.GENERATORS:
            # Checked as the API server would check its objects: every problem, no traceback.
            problems = validate(path, tuple(args.set or ()))
            if problems:
                _print_problems(f"trace {args.trace}", problems)
                raise _RefusedError
            return load(path)
        return generate.generate(args.trace)  # a shipped trace, by name


def _settings_of(args: argparse.Namespace) -> None:
    """Refuse a `--set` that could change nothing, once, before any trace is read."""
    from lightsout.simulate.traces.overrides import apply_overrides

    with _refusing(ValueError):
        apply_overrides({"spec": {}}, args.set or ())


def _sweep_of(args: argparse.Namespace) -> Sweep | None:
    """The parsed `--sweep` (None without one); `_RefusedError` saying why not."""
    if args.sweep is None:
        return None
    from lightsout.simulate.analysis.sweep import SweepError, parse

    with _refusing(SweepError, what="lightsout simulate: --sweep "):
        sweep = parse(args.sweep)
    if args.policy != "lightsout" or args.optimum or args.breakdown:
        raise _RefusedError(
            "lightsout simulate: --sweep replays the lightsout policy beside the reactive "
            "baseline; drop --policy, --optimum and --breakdown"
        )
    return sweep


def _simulate_sweep(trace: Trace, sweep: Sweep, options: Options, args: argparse.Namespace) -> int:
    """`lightsout simulate TRACE --sweep KNOB[=V1,...]`: a replay per value, the table."""
    from lightsout.simulate.analysis import sweep as sweeping

    # Before any replay: a knob the trace gives nothing to change is one line.
    with _refusing(sweeping.SweepError, what="lightsout simulate: --sweep "):
        sweep = sweeping.prepare(trace, sweep, options)
    points, baseline = sweeping.run(trace, sweep, options)
    document = sweeping.as_json(sweep, points, baseline)
    if args.plot:
        from lightsout.simulate.analysis.plot import PlotMissingError, plot_sweep

        with _refusing(PlotMissingError):
            plot_sweep(document, Path(args.plot))
    if args.output == "json":
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        sys.stdout.write(sweeping.render_text(document))
    return 0


def _print_problems(what: str, problems: Sequence[object]) -> None:
    for problem in problems:
        print(problem, file=sys.stderr)
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    print(f"{what}: invalid ({count})", file=sys.stderr)


def cmd_trace_validate(args: argparse.Namespace) -> int:
    """Check a trace as the API server checks objects; exit 2 naming every problem."""
    from lightsout.simulate.traces.validate import check

    problems, found = check(args.directory)
    if problems:
        _print_problems(f"trace {args.directory}", problems)
        return 2
    print(
        f"trace {args.directory}: valid ({found.machines} machines, {found.pods} pods, "
        f"{found.cronjobs} CronJobs)"
    )
    return 0


def cmd_trace_generate(args: argparse.Namespace) -> int:
    from lightsout.simulate.traces import generate
    from lightsout.simulate.traces.trace import write

    trace = generate.generate(args.name, args.seed)
    out = write(trace, args.output)
    print(f"{trace.name}: {len(trace.pods)} pods, {len(trace.cronjobs)} CronJobs -> {out}")
    return 0


def cmd_trace_record(args: argparse.Namespace) -> int:
    """Watch the cluster's pods for --duration (or until SIGINT/SIGTERM), then write a trace."""
    from lightsout.commands.record import record
    from lightsout.k8s.api import Api, current_namespace, error_message
    from lightsout.simulate.traces.record import build, machines_without_durations
    from lightsout.simulate.traces.trace import write
    from lightsout.state.parse import parse_duration

    with _refusing(ValueError, what="lightsout trace record: "):
        seconds = parse_duration(args.duration)
    namespaces = None if args.all_namespaces else (args.namespace or [current_namespace()])
    where = "all namespaces" if namespaces is None else "namespace(s) " + ", ".join(namespaces)
    print(f"recording {where} for {args.duration} (Ctrl-C to stop early)", flush=True)
    try:
        observed = record(
            Api(connect_timeout=CONNECT_SECONDS),
            namespaces,
            seconds,
            lambda text: print(f"lightsout trace record: {text}", file=sys.stderr),
        )
    except Exception as exc:  # the first listing failed: unreachable, no rights, no CRDs
        print(
            f"lightsout trace record: cannot list the machines, CronJobs, pods or Jobs: "
            f"{error_message(exc)}",
            file=sys.stderr,
        )
        return 1
    out = Path(args.output)
    description = f"Recorded by lightsout trace record from {where}."
    trace = build(out.resolve().name, observed, description)
    write(trace, out)
    nodes = len(trace.nodes())
    print(
        f"{trace.name}: {trace.duration_seconds:g}s, {len(trace.pods)} pods, "
        f"{len(trace.cronjobs)} CronJobs, {nodes} machines -> {out}"
    )
    unlearned = machines_without_durations(observed)
    if unlearned:
        print("no learned durations yet (the format's defaults are used): " + ", ".join(unlearned))
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    """Run the Group's health check now (a Job from its CronJob) and print each machine."""
    from lightsout.commands.healthcheck import finished, report
    from lightsout.commands.power import ExitCode
    from lightsout.execution import health
    from lightsout.k8s.api import Api, current_namespace

    ns = args.namespace or current_namespace()
    api = Api(connect_timeout=CONNECT_SECONDS)
    group = args.group
    if args.node:
        node = api.get_resource(ns, "nodes", args.node)
        if node is None:
            print(f"error: Node {args.node!r} not found in namespace {ns!r}", file=sys.stderr)
            return ExitCode.NOT_FOUND
        group = str((node.get("spec") or {}).get("group") or "")
    cron = api.get_cronjob(ns, health.cronjob_name(group))
    if cron is None:
        print(
            f"error: Group {group!r} in {ns!r} has no health-check CronJob (no such Group, or "
            "spec.healthCheck.enabled is false)",
            file=sys.stderr,
        )
        return ExitCode.NOT_FOUND
    count = int(cron["spec"]["jobTemplate"]["spec"].get("completions") or 0)
    name = f"{cron['metadata']['name'][:45]}-now-{uuid.uuid4().hex[:6]}"
    api.create_job(ns, health.job_from_cronjob(cron, name))
    print(f"Job {name}: checking {count} machine(s) of Group {group}", flush=True)
    deadline = time.monotonic() + args.timeout
    while True:
        job = api.get_job(ns, name) or {}
        pods = api.job_pods(ns, name)
        if finished(job, pods, count):
            break
        if time.monotonic() >= deadline:
            print(f"{name}: timed out after {args.timeout:g}s", file=sys.stderr)
            return ExitCode.TIMED_OUT
        time.sleep(1.0)
    lines, healthy = report(pods, [args.node] if args.node else None, count)
    print("\n".join(lines))
    return ExitCode.DONE if healthy else ExitCode.FAILED


def _add_simulation_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`lightsout simulate` and `lightsout trace`: the replay simulator's commands."""
    simulate = sub.add_parser(
        "simulate",
        help="replay a workload trace against the planner: energy, waits, power cycles",
    )
    simulate.add_argument("trace", help="a trace directory, or a shipped trace's name")
    simulate.add_argument(
        "--policy",
        choices=["lightsout", "reactive", "always-on"],
        default="lightsout",
        help="lightsout: the built-in planner; reactive: cluster-autoscaler's defaults",
    )
    simulate.add_argument(
        "--scheduler",
        choices=["LeastAllocated", "MostAllocated"],
        default="LeastAllocated",
        help="kube-scheduler's resource scoring (LeastAllocated is its default)",
    )
    simulate.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="override a setting of every Group, e.g. group.spec.scaleDown.unneededSeconds=300",
    )
    simulate.add_argument(
        "--sweep",
        metavar="KNOB[=V1,V2,...]",
        help="replay once per value of a Group setting and print energy against waits, with "
        "the reactive baseline: breakEvenMultiple (default 0.25,0.5,1,1.5,2,3,4,6) or "
        "selectionPolicy (default: every policy); or cost against deadlines missed, with the "
        "deferrable runs released at once: deferralMargin, seconds (default "
        "0,300,600,1800,3600,7200; needs deferrable CronJobs and a price that changes); "
        "--plot draws the curve",
    )
    simulate.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip the reactive (cluster-autoscaler defaults) baseline",
    )
    simulate.add_argument(
        "--no-prewarm",
        dest="prewarm",
        action="store_false",
        help="do not tell the planner about CronJobs' next runs",
    )
    simulate.add_argument(
        "--optimum", action="store_true", help="also solve the offline optimum (needs [sim])"
    )
    simulate.add_argument("--time-limit", type=float, default=60.0, help="solver seconds")
    simulate.add_argument(
        "--slot",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --optimum, the time-indexed model's slot (default: by the trace's size, "
        "300 for a week of four machines)",
    )
    simulate.add_argument(
        "--breakdown",
        action="store_true",
        help="also print each machine's energy by cause (pods, idle and why, booting, "
        "shutting down, standby), with --optimum beside the bound's schedule",
    )
    simulate.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the machines' on/off timeline and the pods waiting (needs matplotlib)",
    )
    simulate.add_argument("-o", "--output", choices=["text", "json"], default="text")
    simulate.set_defaults(func=cmd_simulate)

    trace = sub.add_parser("trace", help="workload traces for `lightsout simulate`")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    gen = trace_sub.add_parser("generate", help="write one of the seeded, generated weeks")
    gen.add_argument(
        "name", choices=["homelab-week", "batch-heavy", "bursty-random", "household-contention"]
    )
    gen.add_argument("-o", "--output", required=True, help="the trace directory to write")
    gen.add_argument("--seed", type=int, help="another seed than the shipped trace's")
    gen.set_defaults(func=cmd_trace_generate)
    rec = trace_sub.add_parser(
        "record",
        help="watch this cluster's pods, then write what ran as a trace to replay",
    )
    rec.add_argument("-o", "--output", required=True, help="the trace directory to write")
    rec.add_argument(
        "--duration", default="7d", help="how long to watch: 90s, 5m, 2h, 7d (default 7d)"
    )
    where = rec.add_mutually_exclusive_group()
    where.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="watch this namespace, repeatable (default: the context's); include the machines'",
    )
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    rec.set_defaults(func=cmd_trace_record)
    check = trace_sub.add_parser(
        "validate",
        help="check a trace's files as the API server would (exit 0 valid, 2 problems named)",
    )
    check.add_argument("directory", help="the trace directory")
    check.set_defaults(func=cmd_trace_validate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightsout", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator")
    run.add_argument("-n", "--namespace", action="append", help="watch only these namespaces")
    run.add_argument("--liveness", default="http://127.0.0.1:8080/healthz")
    run.add_argument("--log-format", choices=["json", "full"], default="json")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    crds = sub.add_parser("crds", help="print (or write) the CustomResourceDefinitions")
    crds.add_argument("--output", help="directory to write one YAML file per CRD")
    crds.set_defaults(func=cmd_crds)

    plan = sub.add_parser(
        "plan", help="what the built-in autoscaler would do now, and why (changes nothing)"
    )
    plan.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)

    status = sub.add_parser("status", help="Groups and machines: phase, power, last action")
    where = status.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="this namespace (default: the context's)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-o", "--output", choices=["text", "json"], default="text")
    status.set_defaults(func=cmd_status)

    power = sub.add_parser(
        "power",
        help="power a machine on or off (exit 0 done, 1 Failed, 2 timed out, 3 not found)",
    )
    power.add_argument("state", choices=["on", "off"])
    power.add_argument("node", help="the Lights-Out Node (lsn) name")
    power.add_argument("-n", "--namespace", help="its namespace (default: the context's)")
    power.add_argument("--wait", action="store_true", help="follow it until Ready / Off")
    power.add_argument("--timeout", type=float, default=900.0, help="seconds (with --wait)")
    power.set_defaults(func=cmd_power)

    logs = sub.add_parser(
        "logs",
        help="the playbook output of a machine's last action, from its Job's pod "
        "(exit 0 printed, 1 logs unavailable, 3 no such Node, Job or pod)",
    )
    logs.add_argument("node", help="the Lights-Out Node (lsn) name")
    logs.add_argument("-n", "--namespace", help="its namespace (default: the context's)")
    logs.add_argument(
        "--action",
        choices=["startup", "shutdown", "provision", "deprovision"],
        help="the last action of this kind instead of the last one",
    )
    logs.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="json: the raw lines"
    )
    logs.set_defaults(func=cmd_logs)

    _add_simulation_commands(sub)

    check = sub.add_parser(
        "healthcheck",
        help="check machines' BMCs now, as the Group's CronJob does (exit 0 all healthy, "
        "1 one is not, 2 timed out, 3 not found)",
    )
    which = check.add_mutually_exclusive_group(required=True)
    which.add_argument("node", nargs="?", help="the Lights-Out Node (lsn) name")
    which.add_argument("-g", "--group", help="every machine of this Group")
    check.add_argument("-n", "--namespace", help="its namespace (default: the context's)")
    check.add_argument("--timeout", type=float, default=900.0, help="seconds to wait")
    check.set_defaults(func=cmd_healthcheck)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command. Input it refuses is exit 2 (`_RefusedError`'s line on stderr). No usable
    kubeconfig, an API server that cannot be reached or that refuses is one `error: ...` line
    on stderr and exit 1, as kubectl says it; anything else (a bug) keeps its traceback."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except _RefusedError as refused:
        if str(refused):
            print(refused, file=sys.stderr)
        return 2
    except Exception as exc:
        from lightsout.k8s.api import cli_problem

        problem = cli_problem(exc)
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
