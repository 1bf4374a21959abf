#!/usr/bin/env bash
# Builds the operator and runner images without a Docker engine and without a registry:
#   1. a Debian root filesystem made by mmdebstrap from Debian's packages (the images' BASE),
#   2. deploy/images/<name>.Dockerfile built by buildah on that base (vfs storage, chroot
#      isolation), with the context staged from <name>.Dockerfile.dockerignore's `!` lines,
#   3. exported as a docker-archive tar that `ctr images import` (or `docker load`) reads.
# Each tar is named by a hash of everything that goes into it (Dockerfile, staged context, this
# script, the Debian suite), so a warm run builds nothing. Usage: build.sh [operator] [runner];
# prints one line per image: `<name> <tag> <tar>`. Called by `make images` and by the lab.
#
# `build.sh --previous` builds the previous release instead (the commit in previous-release, for
# tests/e2e/test_install.py's upgrade): both images from `git archive <commit>` with that
# commit's Dockerfiles and sources, tagged `<its version>-<short commit>` (both releases are
# loaded into one containerd, so their tags must differ), and its chart with those tags as its
# defaults, as that release would have shipped them. Keyed by the commit id; the working tree is
# not touched. Prints the two image lines, then `chart <tag> <directory>`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
SUITE=trixie
MIRROR=${LIGHTSOUT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REGISTRY=ghcr.io/lightsout
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n1)
cache=${LIGHTSOUT_CACHE:-$HOME/.cache/lightsout}/images
previous=""
if [ "${1:-}" = --previous ]; then
  shift
  previous=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/previous-release" | grep -m1 .)
  if ! git -C "$root" cat-file -e "$previous^{commit}" 2>/dev/null; then
    echo "build.sh --previous: commit $previous (tools/images/previous-release) is not in the" \
      "git history of $root; clone the whole history (git fetch --unshallow)" >&2
    exit 1
  fi
fi
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(operator runner)
mkdir -p "$cache"
# One build at a time per cache (make images and a test may start together).
exec 9>"$cache/.lock"
flock 9

log() { echo "[images $(date +%H:%M:%S)] $*" >&2; }
sha() { sha256sum | cut -c1-16; }

bash "$root/tools/ci/system-packages.sh" images >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
storage="$cache/storage"
bah() { # buildah on the cache's own vfs storage
  $SUDO buildah --storage-driver vfs --root "$storage/root" --runroot "$storage/run" "$@"
}

# ---------------------------------------------------------------- the base root filesystem
# The equivalent of debian:<suite>-slim: minbase, no docs, man pages or locales.
mm_args=(--variant=minbase --aptopt='Acquire::Languages "none"'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*')
base_key=$(printf '%s\n' "$SUITE" "$MIRROR" "${mm_args[@]}" | sha)
base_tar="$cache/base-$SUITE-$base_key.tar"
base_ref="localhost/lightsout-base:$SUITE-$base_key"
ensure_base() {
  if [ ! -f "$base_tar" ]; then
    local t0=$SECONDS
    log "mmdebstrap $SUITE (minbase) → $base_tar"
    $SUDO mmdebstrap --quiet --mode=root --format=tar "${mm_args[@]}" "$SUITE" "$base_tar.tmp" \
      "$MIRROR" >&2
    mv "$base_tar.tmp" "$base_tar"
    log "base root filesystem in $((SECONDS - t0))s ($(du -h "$base_tar" | cut -f1))"
  fi
  if ! bah inspect --type image "$base_ref" >/dev/null 2>&1; then
    local ctr
    ctr=$(bah from scratch)
    bah add --quiet "$ctr" "$base_tar" / >/dev/null
    bah config --cmd /bin/bash "$ctr"
    bah commit --quiet --rm "$ctr" "$base_ref" >/dev/null
  fi
}

# ---------------------------------------------------------------- one image
stage_context() { # name dir: copy the files the .dockerignore lets in, minus its exclusions
  local ignore="$source/deploy/images/$1.Dockerfile.dockerignore" dir=$2 line
  local -a include=() exclude=()
  while IFS= read -r line; do
    case "$line" in
      '' | '#'* | '**') ;;
      '!'*) line=${line#!}; include+=("${line%/}") ;;
      *) exclude+=(--exclude="${line//\*\*/*}") ;;
    esac
  done <"$ignore"
  mkdir -p "$dir"
  (
    cd "$source"
    if [ -z "$previous" ] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      # Tracked and new files, not what .gitignore hides (venvs, caches, build output).
      git ls-files -z --cached --others --exclude-standard -- "${include[@]}" |
        xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _ |
        tar "${exclude[@]}" --null -T - -cf -
    else
      tar "${exclude[@]}" -cf - "${include[@]}"
    fi
  ) | tar -C "$dir" -xf -
}

build_image() {
  local name=$1 tag="$REGISTRY/$1:$VERSION"
  local dockerfile="$source/deploy/images/$name.Dockerfile" ctx key tar
  if [ -n "$previous" ]; then
    # The commit is the key: its sources never change.
    tar="$cache/previous-$previous-$name.tar"
    if [ -f "$tar" ]; then
      echo "$name $tag $tar"
      return 0
    fi
  fi
  ctx=$(mktemp -d)
  stage_context "$name" "$ctx"
  if [ -z "$previous" ]; then
    key=$({
      tar -C "$ctx" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - .
      cat "$dockerfile" "$0"
      echo "$base_key $tag"
    } | sha)
    tar="$cache/lightsout-$name-$key.tar"
    if [ -f "$tar" ]; then
      rm -rf "$ctx"
      echo "$name $tag $tar"
      return 0
    fi
  fi
  ensure_base
  local t0=$SECONDS
  log "building $tag from $dockerfile"
  # pip in the build trusts what this machine trusts (a proxy's CA, say), as a build secret.
  local -a secret=()
  local ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  [ -s "$ca" ] && secret=(--secret "id=cacert,src=$ca")
  bah bud "${secret[@]}" --quiet --layers=false --pull=never --isolation=chroot --network=host \
    --timestamp=0 --build-arg "BASE=$base_ref" -f "$dockerfile" -t "$tag" "$ctx" >&2
  if [ -n "$previous" ]; then
    rm -f "$cache/previous-"*"-$name.tar" # an older previous release's
  else
    rm -f "$cache/lightsout-$name-"*.tar
  fi
  bah push --quiet "$tag" "docker-archive:$tar.tmp:$tag" >&2
  $SUDO chown "$(id -u):$(id -g)" "$tar.tmp"
  mv "$tar.tmp" "$tar"
  # vfs keeps a full copy per layer: drop what the next build does not reuse.
  bah rmi "$tag" >/dev/null 2>&1 || true
  bah rmi --prune >/dev/null 2>&1 || true
  rm -rf "$ctx"
  log "$tag in $((SECONDS - t0))s: $(du -h "$tar" | cut -f1) ($tar)"
  echo "$name $tag $tar"
}

# ---------------------------------------------------------------- the previous release
source=$root
if [ -n "$previous" ]; then
  source=$(mktemp -d)
  trap 'rm -rf "$source"' EXIT
  git -C "$root" archive "$previous" | tar -C "$source" -xf -
  VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$source/pyproject.toml" | head -n1)-${previous:0:7}"
fi

for image in "${images[@]}"; do
  build_image "$image"
done

if [ -n "$previous" ]; then
  # Its chart, its image tags as the defaults (what `helm upgrade --reset-then-reuse-values`
  # replaces with the new chart's).
  chart="$cache/previous-$previous-chart/lightsout"
  if [ ! -f "$chart/Chart.yaml" ]; then
    rm -rf "$cache/previous-"*-chart
    mkdir -p "$chart.tmp"
    cp -a "$source/deploy/helm/lightsout/." "$chart.tmp/"
    n=$(grep -c '^    tag: "' "$chart.tmp/values.yaml")
    [ "$n" -eq 2 ] || { echo "previous chart: $n image tags in values.yaml, expected 2" >&2; exit 1; }
    sed -i "s/^    tag: \".*\"/    tag: \"$VERSION\"/" "$chart.tmp/values.yaml"
    mv "$chart.tmp" "$chart"
  fi
  echo "chart $VERSION $chart"
fi
