"""The `lightsout` command: run the operator, print the CRDs, explain the autoscaler's plan.

The local dev cluster and the demo are the lab's (`lightsout-lab`), not the operator's."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def cmd_run(args: argparse.Namespace) -> int:
    import kopf

    import lightsout.handlers  # noqa: F401  (registers the handlers)

    if args.namespace:
        # A namespaced operator keeps its autoscaler Lease where it works, unless told otherwise.
        os.environ.setdefault("LIGHTSOUT_NAMESPACE", args.namespace[0])
        # What it serves cluster-autoscaler is limited to the same namespaces.
        os.environ["LIGHTSOUT_WATCHED_NAMESPACES"] = ",".join(args.namespace)
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

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
