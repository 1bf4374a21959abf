#!/usr/bin/env bash
# Builds the Prometheus server (3.5 LTS, Go module v0.305.x) from the consumer Go module beside
# this script into a versioned cache outside the work tree; a warm run only checks that it
# exists. Prints the binary's path. Built without the web UI's assets (`builtinassets` needs the
# React bundle built by npm): the HTTP API, which the dashboard check queries, is all there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2; exit} $2 == "github.com/prometheus/prometheus" {print $3; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "no github.com/prometheus/prometheus requirement in $here/go.mod" >&2; exit 1; }
cache=${LIGHTSOUT_CACHE:-$HOME/.cache/lightsout}
out="$cache/bin/prometheus-$version/prometheus"
if [ ! -x "$out" ]; then
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  mkdir -p "$(dirname "$out")"
  t0=$SECONDS
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" \
    github.com/prometheus/prometheus/cmd/prometheus)
  mv "$out.tmp" "$out"
  echo "built prometheus $version in $((SECONDS - t0))s" >&2
fi
echo "$out"
