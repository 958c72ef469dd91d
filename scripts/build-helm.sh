#!/usr/bin/env bash
# Build the `helm` command line, which tests/localcluster/test_install_without_pulumi.py uses to install opbroker's
# chart (`opbroker manifests --helm-chart DIR`) on a local cluster, from the Go module helm.sh/helm/v4 once per
# machine. The binary is cached in $OPBROKER_CACHE/helm-<version>/bin/helm and each build's time is recorded in
# build-*.json.
#
# Why `go install module@version` and no wrapper module (unlike build-cert-manager.sh): helm's main package,
# cmd/helm, is part of the root module the proxy serves, so the module's own go.mod and go.sum decide every
# dependency; the download of each is checked against the checksum database.
#
# Usage: build-helm.sh                  (builds what is missing; a no-op when cached)
#        build-helm.sh --print-root     (where the build of the pinned version is, or would be, cached)
set -euo pipefail

# The pin: devcluster/binaries.py (HELM_VERSION) names the same version.
VERSION=v4.3.2
CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
ROOT="$CACHE/helm-${VERSION#v}"
START=$(date +%s)

say() { printf '[helm-build %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}

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
say "building helm $VERSION into $ROOT (about 2 minutes on 2 cores, downloads included: 99 s measured; progress every 30 s)"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "helm $VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

export GOFLAGS="-buildvcs=false"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
rm -rf "$ROOT/bin"
mkdir -p "$ROOT/bin"

# A build of a few minutes says that it is still going, every 30 s.
(
  while sleep 30; do say "still building helm $VERSION"; done
) &
TICKER=$!
trap 'kill "$TICKER" 2>/dev/null || true' EXIT

GOBIN="$ROOT/bin" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION" \
  "helm.sh/helm/v4/cmd/helm@$VERSION" || die "go install of helm.sh/helm/v4/cmd/helm@$VERSION failed"
[ -x "$ROOT/bin/helm" ] || die "helm is missing from $ROOT/bin after the build"
"$ROOT/bin/helm" version --short >/dev/null || die "the built helm does not run"
printf '{"seconds": %s, "go": "%s", "cpus": %s, "helm": "%s"}\n' \
  "$(($(date +%s) - START))" "$(go env GOVERSION)" "$(nproc)" "$VERSION" >"$ROOT/build-$(date +%Y%m%dT%H%M%S).json"
say "done: helm $VERSION in $ROOT/bin/helm"
