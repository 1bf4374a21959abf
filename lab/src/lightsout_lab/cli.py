"""The `lightsout-lab` command: the local dev cluster (`dev-cluster up|down|env|status`) and the
demo. Used by `make demo` and by people who want a control plane for kubectl; the operator's own
command (`lightsout`) knows nothing of it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _dev_dir(value: str | None) -> Path:
    default = Path.home() / ".cache" / "lightsout" / "dev-cluster"
    return Path(value or os.environ.get("LIGHTSOUT_DEV_DIR") or default)


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    from lightsout_lab import Cluster

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
    from lightsout_lab.demo import run_demo

    return run_demo(keep=args.keep)


def cmd_dashboard_check(args: argparse.Namespace) -> int:
    from lightsout_lab.dashboard import check_dashboard

    prometheus = Path(args.prometheus) if args.prometheus else None
    return check_dashboard(prometheus, Path(args.dashboard))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightsout-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev-cluster", help="a local control plane for kubectl and the demo")
    dev.add_argument("action", choices=["up", "down", "env", "status"])
    dev.add_argument("--dir", help="state directory (default ~/.cache/lightsout/dev-cluster)")
    dev.set_defaults(func=cmd_dev_cluster)

    demo = sub.add_parser("demo", help="run the local end-to-end demo")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    demo.set_defaults(func=cmd_demo)

    check = sub.add_parser(
        "dashboard-check",
        help="run the demo's scenario under a real Prometheus and query every dashboard panel",
    )
    check.add_argument(
        "--prometheus", help="the prometheus binary (default: Debian's, installed when missing)"
    )
    check.add_argument("--dashboard", default="deploy/grafana/lightsout.json")
    check.set_defaults(func=cmd_dashboard_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
