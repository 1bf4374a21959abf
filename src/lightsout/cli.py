"""The `lightsout` command: run the operator, print the CRDs, explain the autoscaler's plan, drive
the local dev cluster, demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _dev_dir(value: str | None) -> Path:
    default = Path.home() / ".cache" / "lightsout" / "dev-cluster"
    return Path(value or os.environ.get("LIGHTSOUT_DEV_DIR") or default)


def cmd_run(args: argparse.Namespace) -> int:
    import kopf

    import lightsout.handlers  # noqa: F401  (registers the handlers)

    if args.namespace:
        # A namespaced operator keeps its autoscaler Lease where it works, unless told otherwise.
        os.environ.setdefault("LIGHTSOUT_NAMESPACE", args.namespace[0])
    log_format = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL
    kopf.configure(verbose=args.verbose, log_format=log_format)
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
    import datetime as dt
    import json

    from lightsout.config import OperatorConfig
    from lightsout.k8s import api
    from lightsout.planning.autoscale import plan
    from lightsout.planning.report import as_json, render_text
    from lightsout.state import (
        DAEMONSETS_KEY,
        GROUPS_KEY,
        MACHINES_KEY,
        NODES_KEY,
        PDBS_KEY,
        PODS_KEY,
        snapshot_from,
    )

    ns = args.namespace
    objects = {
        PODS_KEY: api.list_pods(ns),
        NODES_KEY: api.list_core_nodes(),
        MACHINES_KEY: api.list_all_resources("nodes", ns),
        GROUPS_KEY: api.list_all_resources("groups", ns),
        PDBS_KEY: api.list_pdbs(ns),
        DAEMONSETS_KEY: api.list_daemonsets(ns),
    }
    # Every list above is whole, so the snapshot is complete: the same view the operator has.
    snapshot = snapshot_from(objects, complete=True)
    now = dt.datetime.now(dt.UTC)
    result = plan(snapshot, now)
    if OperatorConfig.from_env().autoscaler_dry_run:
        print("LIGHTSOUT_AUTOSCALER_DRY_RUN is set: the operator applies none of this")
    if args.json:
        print(json.dumps(as_json(snapshot, result, now), indent=2))
    else:
        sys.stdout.write(render_text(snapshot, result, now))
    return 0


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    from lightsout.devcluster import Cluster

    directory = _dev_dir(args.dir)
    if args.action == "up":
        if (directory / "cluster.json").exists() and Cluster.load(directory).running():
            print(f"already running; export KUBECONFIG={directory / 'kubeconfig'}")
            return 0
        cluster = Cluster(directory=directory).start()
        print(f"control plane up at {cluster.server}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    if not (directory / "cluster.json").exists():
        print(f"no dev cluster in {directory}", file=sys.stderr)
        return 1
    cluster = Cluster.load(directory)
    if args.action == "down":
        cluster.destroy()
        print("control plane stopped")
    elif args.action == "env":
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    else:
        print("running" if cluster.running() else "stopped")
        return 0 if cluster.running() else 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from lightsout.demo import run_demo

    return run_demo(keep=args.keep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightsout", description=__doc__)
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

    dev = sub.add_parser("dev-cluster", help="a local control plane for kubectl and the demo")
    dev.add_argument("action", choices=["up", "down", "env", "status"])
    dev.add_argument("--dir", help="state directory (default ~/.cache/lightsout/dev-cluster)")
    dev.set_defaults(func=cmd_dev_cluster)

    demo = sub.add_parser("demo", help="run the local end-to-end demo")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
