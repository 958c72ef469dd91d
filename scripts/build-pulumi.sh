#!/usr/bin/env bash
# Build the Pulumi engine opbroker's engine tests run: the `pulumi` CLI, the YAML language host and the
# Kubernetes resource plugin, from the Go module proxy, once per machine. The binaries are cached in
# $OPBROKER_CACHE/pulumi-$PULUMI_VERSION/bin (tests put that folder first on PATH, where the engine finds
# language hosts and "ambient" resource plugins). Each build's time is recorded in build-*.json beside it.
#
# Why wrapper modules (the same pattern as devcluster/build.sh): github.com/pulumi/pulumi/pkg/v3 replaces
# sdk/v3 with ../sdk and pulumi-kubernetes/provider/v4 replaces its sdk/v4 with ../sdk, and `go install
# pkg@version` refuses modules with replace directives. A throwaway module per binary requires the module
# and pins the replaced one to the same release (replace directives of non-main modules are ignored), so
# each binary builds against exactly the dependency versions its release was tested with.
#
# The Kubernetes provider's main embeds `schema-embed.json` and `terraform-mapping-embed.json`, which
# upstream's `go generate` writes from the module's schema.json (with the version filled in) and
# terraform-mapping.json; the published module leaves them out, so the wrapper carries a three-line main
# and writes both files from the downloaded module's own JSON.
#
# Not built: the Python language host (module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3)
# — every pseudo-version of it answers 403 on the module proxy here; see README "Deploying with Pulumi".
#
# Usage: build-pulumi.sh            (builds what is missing; a no-op when cached)
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
PULUMI_VERSION="${PULUMI_VERSION:-3.260.0}"
PULUMI_YAML_VERSION="${PULUMI_YAML_VERSION:-1.25.0}"
# pulumi-kubernetes v4.25.0 is commit f47bc2d6f199 (tag v4.25.0); the proxy serves the provider module only
# by that pseudo-version (its tagged versions answer 403).
PULUMI_KUBERNETES_VERSION="${PULUMI_KUBERNETES_VERSION:-4.25.0}"
PULUMI_KUBERNETES_MODULE_VERSION="${PULUMI_KUBERNETES_MODULE_VERSION:-v4.0.0-20260115033456-f47bc2d6f199}"
ROOT="$CACHE/pulumi-$PULUMI_VERSION"
BIN="$ROOT/bin"
WORK="$ROOT/build"
START=$(date +%s)

say() { printf '[pulumi-build %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}

missing=()
for t in pulumi pulumi-language-yaml pulumi-resource-kubernetes; do [ -x "$BIN/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} = 0 ]; then
  say "cached binaries found in $BIN"
  exit 0
fi
say "building ${missing[*]} (pulumi $PULUMI_VERSION, pulumi-yaml $PULUMI_YAML_VERSION, pulumi-kubernetes $PULUMI_KUBERNETES_VERSION) into $BIN"

command -v go >/dev/null || die "Go is not installed: install Go 1.26 or newer (https://go.dev/dl/)"
GO_MINOR=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$GO_MINOR" -ge 26 ] || die "pulumi $PULUMI_VERSION needs Go 1.26 or newer, found $(go env GOVERSION)"

mkdir -p "$BIN" "$WORK"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# One wrapper module: wrapper NAME REQUIRE... -- REPLACE...
wrapper() {
  local name=$1
  shift
  local dir="$WORK/$name"
  mkdir -p "$dir"
  {
    echo "module opbroker.local/pulumibuild/$name"
    echo
    echo "go 1.26"
    echo
    echo "require ("
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
      echo "	$1"
      shift
    done
    echo ")"
    [ "${1:-}" = -- ] && shift
    if [ $# -gt 0 ]; then
      echo
      echo "replace ("
      for r in "$@"; do echo "	$r"; done
      echo ")"
    fi
  } >"$dir/go.mod"
  printf '%s\n' "$dir"
}

build_pulumi() {
  local t0 dir
  t0=$(date +%s)
  # pkg/v3's own replace of github.com/atotto/clipboard is repeated: it is part of what the release builds with.
  dir=$(wrapper pulumi "github.com/pulumi/pulumi/pkg/v3 v$PULUMI_VERSION" "github.com/pulumi/pulumi/sdk/v3 v$PULUMI_VERSION" -- \
    "github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e")
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package pulumibuild

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
GO
  (cd "$dir" && go mod tidy -e >tidy.log 2>&1) || {
    cat "$dir/tidy.log"
    return 1
  }
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) || return 1
  say "pulumi built in $(($(date +%s) - t0)) s"
}

build_yaml() {
  local t0 dir
  t0=$(date +%s)
  dir=$(wrapper yaml "github.com/pulumi/pulumi-yaml v$PULUMI_YAML_VERSION")
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package pulumibuild

import _ "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
GO
  (cd "$dir" && go mod tidy -e >tidy.log 2>&1) || {
    cat "$dir/tidy.log"
    return 1
  }
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi-language-yaml" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version=v$PULUMI_YAML_VERSION" \
    github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml) || return 1
  say "pulumi-language-yaml built in $(($(date +%s) - t0)) s"
}

build_kubernetes() {
  local t0 dir module_dir
  t0=$(date +%s)
  dir=$(wrapper kubernetes \
    "github.com/pulumi/pulumi-kubernetes/provider/v4 $PULUMI_KUBERNETES_MODULE_VERSION" \
    "github.com/pulumi/pulumi-kubernetes/sdk/v4 v$PULUMI_KUBERNETES_VERSION")
  mkdir -p "$dir/cmd/pulumi-resource-kubernetes"
  cat >"$dir/cmd/pulumi-resource-kubernetes/main.go" <<'GO'
// The Kubernetes resource plugin's main (upstream's is the same call): serve the provider with the schema
// and Terraform mapping that build-pulumi.sh writes next to this file from the provider module's JSON.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() { provider.Serve("kubernetes", version.Version, schema, terraformMapping) }
GO
  (cd "$dir" && go mod tidy -e >tidy.log 2>&1) || {
    cat "$dir/tidy.log"
    return 1
  }
  module_dir=$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
  # What upstream's generate.go does: the schema with its version set, both files re-serialized compactly.
  python3 - "$module_dir/cmd/pulumi-resource-kubernetes" "$dir/cmd/pulumi-resource-kubernetes" \
    "$PULUMI_KUBERNETES_VERSION" <<'PY'
import json, sys
src, dst, version = sys.argv[1:]
with open(f"{src}/schema.json") as f:
    schema = json.load(f)
schema["version"] = version
with open(f"{dst}/schema-embed.json", "w") as f:
    json.dump(schema, f, separators=(",", ":"))
with open(f"{src}/terraform-mapping.json") as f:
    mapping = json.load(f)
with open(f"{dst}/terraform-mapping-embed.json", "w") as f:
    json.dump(mapping, f, separators=(",", ":"))
PY
  (cd "$dir" && go build -trimpath -o "$BIN/pulumi-resource-kubernetes" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_VERSION" \
    ./cmd/pulumi-resource-kubernetes) || return 1
  say "pulumi-resource-kubernetes built in $(($(date +%s) - t0)) s"
}

# The three builds share Go's build cache; run side by side, one link overlaps another's compiles.
pids=()
for t in "${missing[@]}"; do
  case "$t" in
    pulumi) build_pulumi >"$WORK/pulumi.log" 2>&1 &
      pids+=($!) ;;
    pulumi-language-yaml) build_yaml >"$WORK/yaml.log" 2>&1 &
      pids+=($!) ;;
    pulumi-resource-kubernetes) build_kubernetes >"$WORK/kubernetes.log" 2>&1 &
      pids+=($!) ;;
  esac
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
for log in "$WORK"/*.log; do [ -f "$log" ] && grep -h "built in" "$log" || true; done
if [ "$failed" != 0 ]; then
  for log in "$WORK"/pulumi.log "$WORK"/yaml.log "$WORK"/kubernetes.log; do [ -f "$log" ] && tail -20 "$log"; done
  die "a build failed (logs in $WORK)"
fi
for t in "${missing[@]}"; do [ -x "$BIN/$t" ] || die "$t is missing from $BIN after the build"; done
printf '{"seconds": %s, "built": "%s", "go": "%s", "cpus": %s, "pulumi": "%s", "pulumi_yaml": "%s", "pulumi_kubernetes": "%s"}\n' \
  "$(($(date +%s) - START))" "${missing[*]}" "$(go env GOVERSION)" "$(nproc)" "$PULUMI_VERSION" "$PULUMI_YAML_VERSION" \
  "$PULUMI_KUBERNETES_VERSION" >"$ROOT/build-$(date +%Y%m%dT%H%M%S).json"
say "done: $("$BIN/pulumi" version), pulumi-language-yaml, pulumi-resource-kubernetes $PULUMI_KUBERNETES_VERSION"
