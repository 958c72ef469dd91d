#!/usr/bin/env bash
# Re-pin the Go wrapper modules the builds compile from: devcluster/kubebuild (Kubernetes and etcd, built by
# devcluster/build.sh) and devcluster/pulumibuild/{pulumi,yaml,kubernetes} (the Pulumi engine, built by
# scripts/build-pulumi.sh). A maintainer's tool, run when a version changes; it needs the Go module proxy and
# the checksum database. The builds never resolve anything: they compile the committed go.mod and go.sum with
# -mod=readonly, so every module is the one pinned here and every download is checked against go.sum.
#
# What it writes: each module's go.mod (the release required, every module whose own go.mod replaces it with a
# directory pinned to its published twin — replace directives of non-main modules are ignored), then
# `go mod tidy` (never -e: a module that cannot be resolved is an error here, not a silently floating version)
# fills in go.sum. Commit the result; the build caches are keyed by these files, so the next build rebuilds.
#
# Usage: scripts/pin-go-wrappers.sh [kube|pulumi]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KUBE_VERSION="${KUBE_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
PULUMI_VERSION="${PULUMI_VERSION:-3.260.0}"
PULUMI_YAML_VERSION="${PULUMI_YAML_VERSION:-1.38.3}"
# pulumi-kubernetes v4.25.0 is commit f47bc2d6f199 (tag v4.25.0); the proxy serves the provider module only
# by that pseudo-version (its tagged versions answer 403).
PULUMI_KUBERNETES_VERSION="${PULUMI_KUBERNETES_VERSION:-4.25.0}"
PULUMI_KUBERNETES_MODULE_VERSION="${PULUMI_KUBERNETES_MODULE_VERSION:-v4.0.0-20260115033456-f47bc2d6f199}"

export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOWORK=off

say() { printf '[pin] %s\n' "$*"; }
die() {
  say "ERROR: $*" >&2
  exit 1
}

tidy() {
  local dir=$1
  rm -f "$dir/go.sum"
  (cd "$dir" && go mod tidy) || die "go mod tidy failed in $dir"
  (cd "$dir" && go mod verify) || die "go mod verify failed in $dir"
}

pin_kube() {
  local dir="$ROOT/devcluster/kubebuild" kube_mod staging="v0.${KUBE_VERSION#1.}"
  say "Kubernetes v$KUBE_VERSION (staging modules $staging), etcd v$ETCD_VERSION -> ${dir#"$ROOT"/}"
  kube_mod=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -nE 's/.*"GoMod": "(.*)".*/\1/p')
  [ -f "$kube_mod" ] || die "cannot download k8s.io/kubernetes@v$KUBE_VERSION"
  {
    echo "module opbroker.local/kubebuild"
    echo
    echo "go $(sed -nE 's/^go ([0-9.]+)$/\1/p' "$kube_mod")"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v$KUBE_VERSION"
    echo "	go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
    echo ")"
    echo
    echo "replace ("
    # Every staging module kubernetes requires (as v0.0.0) and replaces with ./staging/...: its published
    # twin of the same release. Those it replaces but does not require (sample-cli-plugin, sample-controller)
    # are not in the module graph and are left out.
    sed -nE 's#^\s+(k8s.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$kube_mod" | while read -r m; do
      if grep -qE "^\s+$m v0\.0\.0\b" "$kube_mod"; then echo "	$m => $m $staging"; fi
    done
    echo ")"
  } >"$dir/go.mod"
  tidy "$dir"
}

pulumi_module() {
  local dir=$1 name=$2
  shift 2
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
}

pin_pulumi() {
  local base="$ROOT/devcluster/pulumibuild" embed
  say "pulumi v$PULUMI_VERSION, pulumi-yaml v$PULUMI_YAML_VERSION, pulumi-kubernetes v$PULUMI_KUBERNETES_VERSION -> ${base#"$ROOT"/}"
  # pkg/v3's own replace of github.com/atotto/clipboard is repeated: it is part of what the release builds with.
  pulumi_module "$base/pulumi" pulumi \
    "github.com/pulumi/pulumi/pkg/v3 v$PULUMI_VERSION" "github.com/pulumi/pulumi/sdk/v3 v$PULUMI_VERSION" -- \
    "github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e"
  tidy "$base/pulumi"
  pulumi_module "$base/yaml" yaml "github.com/pulumi/pulumi-yaml v$PULUMI_YAML_VERSION"
  tidy "$base/yaml"
  pulumi_module "$base/kubernetes" kubernetes \
    "github.com/pulumi/pulumi-kubernetes/provider/v4 $PULUMI_KUBERNETES_MODULE_VERSION" \
    "github.com/pulumi/pulumi-kubernetes/sdk/v4 v$PULUMI_KUBERNETES_VERSION"
  # The provider's main embeds two JSON files build-pulumi.sh writes at build time; tidy loads the package, so
  # stand-ins exist while it runs.
  embed="$base/kubernetes/cmd/pulumi-resource-kubernetes"
  echo '{}' >"$embed/schema-embed.json"
  echo '{}' >"$embed/terraform-mapping-embed.json"
  tidy "$base/kubernetes"
  rm -f "$embed/schema-embed.json" "$embed/terraform-mapping-embed.json"
}

command -v go >/dev/null || die "Go is not installed"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kube pulumi)
for t in "${targets[@]}"; do
  case "$t" in
    kube) pin_kube ;;
    pulumi) pin_pulumi ;;
    *) die "unknown target $t (kube or pulumi)" ;;
  esac
done
say "done: commit devcluster/kubebuild and devcluster/pulumibuild"
