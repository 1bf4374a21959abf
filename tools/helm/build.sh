#!/usr/bin/env bash
# Builds Helm from the consumer Go module beside this script into a versioned cache outside the
# work tree; a warm run only checks that it exists. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "helm.sh/helm/v3" {print $2; exit} $2 == "helm.sh/helm/v3" {print $3; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "no helm.sh/helm/v3 requirement in $here/go.mod" >&2; exit 1; }
cache=${LIGHTSOUT_CACHE:-$HOME/.cache/lightsout}
out="$cache/bin/helm-$version/helm"
# One build at a time per cache: parallel test workers may all ask for the binaries at once.
mkdir -p "$(dirname "$out")"
exec 9>"$(dirname "$out")/.build.lock"
flock 9
if [ ! -x "$out" ]; then
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  t0=$SECONDS
  # Helm's own Makefile stamps its version and the Kubernetes version it defaults to (from the
  # client-go it was built with); unstamped, `helm template` assumes Kubernetes 1.20.
  kube=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$here/go.mod")
  minor=${kube#v0.}; minor=${minor%%.*}
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ld="$ld -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  (cd "$here" && go build -trimpath -ldflags "$ld" -o "$out.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$out.tmp" "$out"
  echo "built helm $version in $((SECONDS - t0))s" >&2
fi
echo "$out"
