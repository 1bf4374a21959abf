#!/usr/bin/env bash
# Builds a real cluster-autoscaler with only its externalgrpc cloud provider, for the e2e tests
# of Lights-Out's gRPC server (tests/e2e/test_cluster_autoscaler*.py). The binary is cached by
# version outside the work tree, so a warm run only checks that it exists. Prints its path.
#
# The Go module proxy these machines reach does not serve k8s.io/autoscaler/cluster-autoscaler,
# so its upstream source (trimmed, unmodified) is built from ../shared/third_party (see its
# README); its go.mod carries the replaces, and every dependency comes from the proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CA_VERSION=1.34.5
cache=${LIGHTSOUT_CACHE:-$HOME/.cache/lightsout}
bin="$cache/bin/cluster-autoscaler-$CA_VERSION"
out="$bin/cluster-autoscaler"
mkdir -p "$bin"
# One build at a time per cache: parallel test workers may all ask for the binaries at once.
exec 9>"$bin/.build.lock"
flock 9
if [ -x "$out" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go >= 1.24 is needed to build cluster-autoscaler" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
t0=$SECONDS
src="$here/../../../shared/third_party/cluster-autoscaler-$CA_VERSION/cluster-autoscaler"
[ -d "$src" ] || { echo "cluster-autoscaler source not found at $src (see ../shared/third_party)" >&2; exit 1; }
(cd "$src" && go build -trimpath -tags externalgrpc -ldflags "-s -w" -o "$out.tmp" .)
mv "$out.tmp" "$out"
echo "built cluster-autoscaler $CA_VERSION in $((SECONDS - t0))s" >&2
echo "$out"
