#!/usr/bin/env bash
# Checks the Grafana dashboard against a real Prometheus: builds Prometheus (cached, see
# build.sh; minutes cold), then `lightsout-lab dashboard-check` runs the demo's scenario while
# Prometheus scrapes the operator and requires data from every panel's query. Not a CI phase.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prometheus=$(bash "$here/build.sh")
cd "$root"
exec .venv/bin/lightsout-lab dashboard-check --prometheus "$prometheus" --dashboard deploy/grafana/lightsout.json
