#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok) and the real node's kubelet from the consumer Go modules beside this script.
# Binaries are cached outside the work tree by version and a hash of the modules, so a warm run
# only checks that they exist. Prints the directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.34.9
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.7.0
cache=${LIGHTSOUT_CACHE:-$HOME/.cache/lightsout}
# Keyed by the versions and a hash of the modules' go.mod/go.sum: a changed dependency builds
# anew, an unchanged one never.
inputs=$(cat "$here"/{etcd,kwok,k8s}/go.{mod,sum} | sha256sum | cut -c1-12)
bin="$cache/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$inputs"
mkdir -p "$bin"
# One build at a time per cache: parallel test workers may all ask for the binaries at once.
exec 9>"$bin/.build.lock"
flock 9
# Go may be installed outside a non-login shell's PATH.
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go >= 1.24 is needed to build the control plane" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The checksum database does not list k8s.io/externaljwt v0.34.9; go.sum pins its hash instead.
export GONOSUMDB=k8s.io/externaljwt

build() { # module-dir output package [ldflags]
  local dir=$1 out=$2 pkg=$3 ld=${4:-}
  if [ -x "$bin/$out" ]; then return 0; fi
  local t0=$SECONDS
  (cd "$here/$dir" && go build -trimpath -tags selinux,notest -ldflags "-s -w $ld" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  echo "built $out in $((SECONDS - t0))s" >&2
}
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
# kubelet (the lab's real node, lightsout_lab.realnode) came later: it joins the same directory,
# built on its own when missing, so the other binaries stay valid.
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build k8s "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$stamp"
done
echo "$bin"
