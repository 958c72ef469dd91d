#!/usr/bin/env bash
# Build cert-manager's controller, the third-party operator tests/realservices/test_real_certmanager.py drives through OSB,
# from the Go module github.com/cert-manager/cert-manager once per machine. The binary is cached in
# $OPBROKER_CACHE/cert-manager-<version>-<key>/bin/cert-manager-controller, with the module's own CRD manifests
# copied beside it (crds/, from deploy/crds of the go.sum-checked module) and each build's time recorded in
# build-*.json.
#
# Why a wrapper module with its own main (devcluster/certmanagerbuild): upstream's main is the nested module
# github.com/cert-manager/cert-manager/cmd/controller, which the module proxy does not serve (404); the
# controllers themselves are public packages of the root module, so the wrapper's main starts them (see its
# doc comment for which). The module is committed (go.mod, go.sum, main.go) and compiled with -mod=readonly:
# nothing is resolved here, every download is checked against go.sum. The cache folder is keyed by the
# module's files: a change of the pin or of main.go builds anew.
#
# Usage: build-cert-manager.sh                  (builds what is missing; a no-op when cached)
#        build-cert-manager.sh --print-root     (where the build of the committed pin is, or would be, cached)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
MODULE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/devcluster/certmanagerbuild"
START=$(date +%s)

say() { printf '[cert-manager-build %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}
# talking: progress every 30 s against the measured estimate (gorender/build-estimates.tsv).
# shellcheck source=../gorender/talk.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gorender/talk.sh"

[ -f "$MODULE/go.mod" ] && [ -f "$MODULE/go.sum" ] || die "the wrapper module $MODULE (go.mod, go.sum) is missing"
# The module's fingerprint (devcluster/certmanager.py computes the same): sha256 over `sha256sum` of its files.
KEY=$(cd "$MODULE" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort |
  xargs sha256sum | sha256sum | cut -c1-12)
VERSION=$(sed -nE 's#^(require)?[[:space:]]*github.com/cert-manager/cert-manager (v[0-9][^ ]*)$#\2#p' "$MODULE/go.mod" | head -1)
[ -n "$VERSION" ] || die "$MODULE/go.mod pins no github.com/cert-manager/cert-manager version"
ROOT="$CACHE/cert-manager-${VERSION#v}-$KEY"
if [ "${1:-}" = "--print-root" ]; then
  printf '%s\n' "$ROOT"
  exit 0
fi

# One build per cache folder at a time: a second caller waits, then finds it cached.
mkdir -p "$CACHE"
exec 9>"$ROOT.lock"
if ! flock -n 9; then
  say "another build into $ROOT is running: waiting for it to finish"
  flock 9
fi
if [ -x "$ROOT/bin/cert-manager-controller" ] && [ -f "$ROOT/crds/cert-manager.io_certificates.yaml" ]; then
  say "cached cert-manager $VERSION found in $ROOT"
  exit 0
fi
say "building cert-manager $VERSION into $ROOT (a cold build takes about $(build_estimate cert-manager) s on 2 cores)"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "cert-manager $VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

export GOFLAGS="-mod=readonly -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
WORK="$ROOT/build"
rm -rf "$WORK" "$ROOT/bin" "$ROOT/crds"
mkdir -p "$WORK" "$ROOT/bin" "$ROOT/crds"
cp -R "$MODULE/." "$WORK/"

# The CRDs: deploy/crds of the very module the binary is compiled from (the download is checked against go.sum).
say "downloading the module github.com/cert-manager/cert-manager $VERSION (checked against go.sum)"
module_dir=$(cd "$WORK" && go mod download -json "github.com/cert-manager/cert-manager" | sed -nE 's/.*"Dir": "(.*)".*/\1/p')
[ -d "$module_dir/deploy/crds" ] || die "the module github.com/cert-manager/cert-manager@$VERSION has no deploy/crds"
for kind in certificates certificaterequests issuers clusterissuers; do
  cp "$module_dir/deploy/crds/cert-manager.io_$kind.yaml" "$ROOT/crds/"
done

say "compiling the controller"
(cd "$WORK" && talking "compiling the controller" cert-manager \
  go build -trimpath -ldflags "-s -w" -o "$ROOT/bin/cert-manager-controller" ./cmd/cert-manager-controller) ||
  die "go build of the cert-manager controller failed (work folder $WORK)"
[ -x "$ROOT/bin/cert-manager-controller" ] || die "cert-manager-controller is missing from $ROOT/bin after the build"
rm -rf "$WORK"
printf '{"seconds": %s, "go": "%s", "cpus": %s, "cert_manager": "%s"}\n' \
  "$(($(date +%s) - START))" "$(go env GOVERSION)" "$(nproc)" "$VERSION" >"$ROOT/build-$(date +%Y%m%dT%H%M%S).json"
say "done: cert-manager $VERSION controller and CRDs in $ROOT"
