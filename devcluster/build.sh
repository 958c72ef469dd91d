#!/usr/bin/env bash
# Build the local Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# and for the opt-in node kubelet, kube-proxy and the pause binary) from the Go module proxy, once per
# machine; the binaries are cached in $OPBROKER_CACHE/kube-$KUBE_VERSION/bin.
#
# Why a wrapper module: k8s.io/kubernetes's go.mod replaces every k8s.io/* staging module with a
# directory (./staging/src/...) that the published module zip leaves out, and `go install pkg@version`
# refuses modules with replace directives. So a throwaway module requires k8s.io/kubernetes and pins
# each staging module to its published v0.x twin, the way downstream projects vendor Kubernetes.
# etcd's own main package lives in its root module (same replace problem); its main is one line over
# go.etcd.io/etcd/server/v3/etcdmain, so the wrapper carries that line.
#
# Usage: build.sh [--node]   (--node also builds kubelet, kube-proxy and pause)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
KUBE_VERSION="${KUBE_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
BIN="$CACHE/kube-$KUBE_VERSION/bin"
WORK="$CACHE/kube-$KUBE_VERSION/build"
START=$(date +%s)

say() { printf '[kube-build %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }

CONTROL_PLANE=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
NODE=(kubelet kube-proxy)
TARGETS=("${CONTROL_PLANE[@]}")
WANT_NODE=0
if [ "${1:-}" = "--node" ]; then
  WANT_NODE=1
  TARGETS+=("${NODE[@]}")
fi

missing=()
for t in "${TARGETS[@]}" etcd; do [ -x "$BIN/$t" ] || missing+=("$t"); done
if [ "$WANT_NODE" = 1 ] && [ ! -x "$BIN/pause" ]; then missing+=(pause); fi
if [ ${#missing[@]} = 0 ]; then
  say "cached binaries found in $BIN"
  exit 0
fi
say "building ${missing[*]} (Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION) into $BIN"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "Kubernetes $KUBE_VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

mkdir -p "$BIN" "$WORK"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# --- the wrapper module ---------------------------------------------------------------------------
say "step 1/3: resolving k8s.io/kubernetes v$KUBE_VERSION and its staging modules"
cd "$WORK"
go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" >kubernetes.json || die "cannot download k8s.io/kubernetes@v$KUBE_VERSION from $(go env GOPROXY)"
KUBE_MOD=$(sed -nE 's/.*"GoMod": "(.*)".*/\1/p' kubernetes.json)
KUBE_DIR=$(sed -nE 's/.*"Dir": "(.*)".*/\1/p' kubernetes.json)
STAGING_VERSION="v0.${KUBE_VERSION#1.}"
{
  echo "module opbroker.local/kubebuild"
  echo
  echo "go $(sed -nE 's/^go ([0-9.]+)$/\1/p' "$KUBE_MOD")"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes v$KUBE_VERSION"
  echo "	go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  echo ")"
  echo
  echo "replace ("
  # Every staging module the kubernetes go.mod redirects; the sample-* ones are never published
  # past what Kubernetes itself needs, so they point at the newest tag the proxy has.
  sed -nE 's#^\s+(k8s.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$KUBE_MOD" | while read -r m; do
    case "$m" in
      k8s.io/sample-*) ;;
      *) echo "	$m => $m $STAGING_VERSION" ;;
    esac
  done
  echo ")"
} >go.mod
mkdir -p cmd/etcd
cat >cmd/etcd/main.go <<'GO'
// etcd's own main (go.etcd.io/etcd/v3/main.go), carried here because that module cannot be
// `go install`ed: its go.mod has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat >tools.go <<'GO'
//go:build tools

package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
go mod tidy -e >tidy.log 2>&1 || { cat tidy.log; die "go mod tidy failed"; }

# --- the binaries -------------------------------------------------------------------------------------
say "step 2/3: compiling (this is the long part: ~15-25 min on 2 cores, cached afterwards)"
# What `kubectl version` and the API server's /version report, as upstream's hack/lib/version.sh sets it.
MINOR="${KUBE_VERSION#1.}"; MINOR="${MINOR%%.*}"
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
pkgs=()
for t in "${missing[@]}"; do
  case "$t" in
    etcd) pkgs+=(./cmd/etcd) ;;
    pause) ;;
    *) pkgs+=("k8s.io/kubernetes/cmd/$t") ;;
  esac
done
if [ ${#pkgs[@]} -gt 0 ]; then
  go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/" "${pkgs[@]}" || die "go build failed"
fi

# --- the sandbox (pause) binary ---------------------------------------------------------------------
if [[ " ${missing[*]} " == *" pause "* ]]; then
  say "step 3/3: the pause binary, from Kubernetes's own build/pause/linux/pause.c"
  command -v gcc >/dev/null || die "gcc is needed for the pause binary: apt-get install gcc libc6-dev"
  gcc -Os -Wall -Werror -static -DVERSION="v$KUBE_VERSION-opbroker" -o "$BIN/pause" \
    "$KUBE_DIR/build/pause/linux/pause.c" || die "compiling pause.c failed"
fi

for t in "${missing[@]}"; do [ -x "$BIN/$t" ] || die "$t is missing from $BIN after the build"; done
# What this build took, for the benchmarks (bench/cluster.py): a cached binary is never rebuilt.
printf '{"seconds": %s, "built": "%s", "go": "%s", "cpus": %s}\n' "$(( $(date +%s) - START ))" "${missing[*]}" \
  "$(go env GOVERSION)" "$(nproc)" >"$BIN/../build-$(date +%Y%m%dT%H%M%S).json"
say "done: $("$BIN/kube-apiserver" --version 2>/dev/null || true), $("$BIN/etcd" --version | head -1)"
