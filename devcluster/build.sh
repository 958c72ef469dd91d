#!/usr/bin/env bash
# Build the local Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# and for the opt-in node kubelet, kube-proxy and the pause binary) from the Go module proxy, once per
# machine; the binaries are cached in $OPBROKER_CACHE/kube-$KUBE_VERSION-<key>/bin.
#
# Why a wrapper module: k8s.io/kubernetes's go.mod replaces every k8s.io/* staging module with a
# directory (./staging/src/...) that the published module zip leaves out, and `go install pkg@version`
# refuses modules with replace directives. So a wrapper module requires k8s.io/kubernetes and pins
# each staging module to its published v0.x twin, the way downstream projects vendor Kubernetes.
# etcd's own main package lives in its root module (same replace problem); its main is one line over
# go.etcd.io/etcd/server/v3/etcdmain, so the wrapper carries that line.
#
# The wrapper module is committed (devcluster/kubebuild: go.mod, go.sum, the Go files; re-pinned by
# scripts/pin-go-wrappers.sh) and compiled with -mod=readonly: nothing is resolved here, every module is the
# version go.mod names and every download is checked against go.sum. The versions come from that go.mod.
# The cache folder is keyed by the module's files (kube-<version>-<key>): a change of any pin builds anew
# beside the old binaries instead of reusing them.
#
# Usage: build.sh [--node]        (--node also builds kubelet, kube-proxy and pause)
#        build.sh --print-bin-dir (where the binaries of the committed pins are, or would be, cached)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
MODULE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubebuild"
START=$(date +%s)

say() { printf '[kube-build %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }
# talking/build_estimate: progress every 30 s against the measured estimate (gorender/build-estimates.tsv).
# shellcheck source=../gorender/talk.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gorender/talk.sh"

[ -f "$MODULE/go.mod" ] && [ -f "$MODULE/go.sum" ] || die "the wrapper module $MODULE (go.mod, go.sum) is missing"
# The module's fingerprint (devcluster/binaries.py computes the same): sha256 over `sha256sum` of its files.
module_key() { (cd "$1" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort \
  | xargs sha256sum | sha256sum | cut -c1-12); }
pinned() { sed -nE "s#^(require)?[[:space:]]*$1 v([0-9][0-9.]*)( // indirect)?\$#\\2#p" "$MODULE/go.mod" | head -1; }
PINNED_KUBE=$(pinned k8s.io/kubernetes)
PINNED_ETCD=$(pinned go.etcd.io/etcd/server/v3)
[ -n "$PINNED_KUBE" ] && [ -n "$PINNED_ETCD" ] || die "$MODULE/go.mod pins no k8s.io/kubernetes or etcd version"
for pair in "KUBE_VERSION:$PINNED_KUBE" "ETCD_VERSION:$PINNED_ETCD"; do
  name=${pair%%:*}
  if [ -n "${!name:-}" ] && [ "${!name}" != "${pair#*:}" ]; then
    die "$name=${!name} but the committed wrapper module pins ${pair#*:}: re-pin with scripts/pin-go-wrappers.sh"
  fi
done
KUBE_VERSION=$PINNED_KUBE
ETCD_VERSION=$PINNED_ETCD
ROOT="$CACHE/kube-$KUBE_VERSION-$(module_key "$MODULE")"
BIN="$ROOT/bin"
WORK="$ROOT/build"
if [ "${1:-}" = "--print-bin-dir" ]; then
  printf '%s\n' "$BIN"
  exit 0
fi

CONTROL_PLANE=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
NODE=(kubelet kube-proxy)
TARGETS=("${CONTROL_PLANE[@]}")
WANT_NODE=0
if [ "${1:-}" = "--node" ]; then
  WANT_NODE=1
  TARGETS+=("${NODE[@]}")
fi

# One build per cache folder at a time: a second caller (a test run beside setup) waits, then finds it cached.
mkdir -p "$CACHE"
exec 9>"$ROOT.lock"
if ! flock -n 9; then
  say "another build into $ROOT is running: waiting for it to finish"
  flock 9
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
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# --- the wrapper module ---------------------------------------------------------------------------
say "step 1/3: the committed wrapper module (go build downloads what it compiles, each module checked against go.sum)"
# Built from a copy: the build writes nothing into the checkout (or the installed package).
rm -rf "$WORK/module"
cp -R "$MODULE" "$WORK/module"
cd "$WORK/module"
KUBE_DIR=$(go mod download -json k8s.io/kubernetes | sed -nE 's/.*"Dir": "(.*)".*/\1/p')
[ -d "$KUBE_DIR" ] || die "cannot download k8s.io/kubernetes v$KUBE_VERSION (or it does not match go.sum)"

# --- the binaries -------------------------------------------------------------------------------------
say "step 2/3: compiling (the long part, cached afterwards: a cold build of the control plane takes about \
$(build_estimate kubernetes) s on 2 cores, the node's binaries $(build_estimate kube-node) s more)"
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
  # Only the node's binaries missing (the control plane's were built before): the shorter estimate.
  estimate=kubernetes
  [[ " ${missing[*]} " == *" kube-apiserver "* ]] || estimate=kube-node
  talking "compiling ${missing[*]}" "$estimate" go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/" "${pkgs[@]}" ||
    die "go build failed"
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
