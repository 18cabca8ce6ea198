#!/usr/bin/env bash
# Builds the upstream components that the real-peer tests run, from the Go modules pinned in
# the folders beside this script (one wrapper module each: go.mod, go.sum, build.env), into a
# cache outside the checkout keyed by each folder's pins, and links every binary into one
# folder the tests read. A folder whose pins did not change is not built again.
#
#   tests/upstream/build.sh [FOLDER ...]     (default: every folder here)
#
# Environment:
#   KUBE_PROBER_UPSTREAM_CACHE  where the builds are kept (default ~/.cache/kube-prober-upstream)
#   KUBE_PROBER_UPSTREAM_BIN    where the binaries are linked (default target/upstream/bin),
#                               the folder tests/support/control_plane.rs reads
#
# build.env in each folder sets VERSION (the component's release, for the cache key and the
# log), BINARIES ("package=name ..."; the packages are the go.mod's `tool` lines) and
# optionally LDFLAGS and DATA ("module:folder=name ...": a folder of a dependency module's
# source, e.g. kwok's stage and metric configurations, copied beside the binaries as NAME).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${KUBE_PROBER_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-prober-upstream}
bin=${KUBE_PROBER_UPSTREAM_BIN:-$root/target/upstream/bin}

need_go() {
  echo "error: $1" >&2
  echo "The real-peer tests build kube-apiserver, etcd, kwok, metrics-server and the other upstream" >&2
  echo "components from their Go modules: install Go >= 1.26 (https://go.dev/doc/install) and put" >&2
  echo "'go' on PATH, with the Go module proxy reachable. See README.md, 'Test it'." >&2
  exit 1
}
command -v go >/dev/null 2>&1 || need_go "no 'go' on PATH"
gov=$(go env GOVERSION 2>/dev/null || true)
minor=$(printf '%s' "$gov" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
[ -n "$minor" ] && [ "$minor" -ge 26 ] || need_go "Go 1.26 or newer is needed, found '${gov:-unknown}'"
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

folders=("$@")
if ((${#folders[@]} == 0)); then
  for d in "$here"/*/; do [ -f "$d/go.mod" ] && folders+=("$(basename "$d")"); done
fi
mkdir -p "$cache" "$bin"
for f in "${folders[@]}"; do
  dir="$here/$f"
  [ -f "$dir/go.mod" ] && [ -f "$dir/build.env" ] || { echo "error: $dir has no go.mod and build.env" >&2; exit 1; }
  VERSION="" BINARIES="" LDFLAGS="" DATA=""
  # shellcheck disable=SC1091
  . "$dir/build.env"
  key=$(cd "$dir" && cat go.mod go.sum build.env $(ls ./*.go 2>/dev/null) | sha256sum | cut -c1-12)
  out="$cache/$f-$VERSION-$key"
  if [ -f "$out/.built" ]; then
    echo "upstream $f $VERSION: cached in $out"
  else
    start=$(date +%s)
    echo "upstream $f $VERSION: building into $out"
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    for pair in $BINARIES; do
      pkg=${pair%%=*} name=${pair#*=}
      (cd "$dir" && go build -trimpath -ldflags "-s -w $LDFLAGS" -o "$out.tmp/$name" "$pkg")
    done
    for pair in $DATA; do
      src=${pair%%=*} name=${pair#*=}
      moddir=$(cd "$dir" && go list -m -f '{{.Dir}}' "${src%%:*}")
      cp -r "$moddir/${src#*:}" "$out.tmp/$name" && chmod -R u+w "$out.tmp/$name"
    done
    touch "$out.tmp/.built"
    rm -rf "$out" && mv "$out.tmp" "$out"
    echo "upstream $f $VERSION: built in $(( $(date +%s) - start )) s"
  fi
  for pair in $BINARIES $DATA; do
    name=${pair#*=}
    ln -sfn "$out/$name" "$bin/$name"
  done
done
echo "upstream binaries in $bin: $(ls "$bin" | tr '\n' ' ')"
