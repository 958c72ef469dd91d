#!/usr/bin/env bash
# Build the `helm` command line, which tests/localcluster/test_install_without_pulumi.py and
# tests/pulumi/test_components_without_pulumi.py use to install and render opbroker's chart (`opbroker manifests
# --helm-chart DIR`), from the Go module helm.sh/helm/v4 once per machine. The binary is cached in
# $OPBROKER_CACHE/helm-<version>-<key>/bin/helm and each build's time is recorded in build-*.json.
#
# Why a wrapper module with its own main (devcluster/helmbuild), as for cert-manager: the builds compile only what
# the repository pins (go.mod and go.sum committed, -mod=readonly: nothing is resolved here, every download is
# checked against go.sum). Upstream's main (cmd/helm) is a few lines over the public package pkg/cmd; the wrapper
# holds them. The cache folder is keyed by the module's files: a change of the pin or of main.go builds anew.
# Re-pin: in devcluster/helmbuild, get the new helm.sh/helm/v4 version and tidy (the maintainer's step, never this script).
#
# Usage: build-helm.sh                  (builds what is missing; a no-op when cached)
#        build-helm.sh --print-root     (where the build of the committed pin is, or would be, cached)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
MODULE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/devcluster/helmbuild"
START=$(date +%s)

say() { printf '[helm-build %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}
# talking: progress every 30 s against the measured estimate (gorender/build-estimates.tsv).
# shellcheck source=../gorender/talk.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gorender/talk.sh"

[ -f "$MODULE/go.mod" ] && [ -f "$MODULE/go.sum" ] || die "the wrapper module $MODULE (go.mod, go.sum) is missing"
# The module's fingerprint (devcluster/binaries.py computes the same): sha256 over `sha256sum` of its files.
KEY=$(cd "$MODULE" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort |
  xargs sha256sum | sha256sum | cut -c1-12)
VERSION=$(sed -nE 's#^(require)?[[:space:]]*helm.sh/helm/v4 (v[0-9][^ ]*)$#\2#p' "$MODULE/go.mod" | head -1)
[ -n "$VERSION" ] || die "$MODULE/go.mod pins no helm.sh/helm/v4 version"
ROOT="$CACHE/helm-${VERSION#v}-$KEY"
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
if [ -x "$ROOT/bin/helm" ]; then
  say "cached helm $VERSION found in $ROOT"
  exit 0
fi
say "building helm $VERSION into $ROOT (a cold build takes about $(build_estimate helm) s on 2 cores)"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "helm $VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

export GOFLAGS="-mod=readonly -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
WORK="$ROOT/build"
rm -rf "$WORK" "$ROOT/bin"
mkdir -p "$WORK" "$ROOT/bin"
cp -R "$MODULE/." "$WORK/"

# The version `helm version` prints: upstream's release build sets it the same way.
(cd "$WORK" && talking "compiling helm $VERSION" helm \
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION" \
  -o "$ROOT/bin/helm" ./cmd/helm) || die "go build of helm failed (work folder $WORK)"
[ -x "$ROOT/bin/helm" ] || die "helm is missing from $ROOT/bin after the build"
"$ROOT/bin/helm" version --short >/dev/null || die "the built helm does not run"
rm -rf "$WORK"
printf '{"seconds": %s, "go": "%s", "cpus": %s, "helm": "%s"}\n' \
  "$(($(date +%s) - START))" "$(go env GOVERSION)" "$(nproc)" "$VERSION" >"$ROOT/build-$(date +%Y%m%dT%H%M%S).json"
say "done: helm $VERSION in $ROOT/bin/helm"
