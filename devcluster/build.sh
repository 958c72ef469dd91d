#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kubectl 1.20.2 from Debian's `kubernetes` source
# package, offline, once per machine; the binaries are cached in $OPBROKER_CACHE/kube-1.20.2/bin.
#
# Why a source build: no registry we can reach ships a kube-apiserver binary. Debian's source package
# carries its whole vendor/ tree, so with Debian's Go 1.19 it builds with no network beyond apt.
# The one trap: the vendored modern-go/reflect2 1.0.1 crashes under Go 1.19 on the first custom-resource
# create; Debian's 1.0.2 is put in its place.
set -euo pipefail

CACHE="${OPBROKER_CACHE:-$HOME/.cache/opbroker}"
KUBE_VERSION="1.20.2"
BIN="$CACHE/kube-$KUBE_VERSION/bin"
WORK="$CACHE/kube-$KUBE_VERSION/build"
TARGETS=(kube-apiserver kube-controller-manager kubectl)
GO_ROOT=/usr/lib/go-1.19
START=$(date +%s)

say() { printf '[kube-build %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }

have_all() {
  local t
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
  command -v etcd >/dev/null || return 1
}

if have_all; then
  say "cached binaries found in $BIN"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "installing Debian packages needs root (or sudo)"
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

say "step 1/5: enabling Debian source packages"
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  $SUDO tee /etc/apt/sources.list.d/opbroker-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
$SUDO apt-get update -qq || die "apt-get update failed"

say "step 2/5: installing Go 1.19, etcd and build tools from Debian"
$SUDO apt-get install -y -qq --no-install-recommends \
  golang-1.19-go golang-1.19-src golang-github-modern-go-reflect2-dev etcd-server dpkg-dev make rsync \
  >/dev/null || die "apt-get install failed"
command -v etcd >/dev/null || die "etcd was not installed"

say "step 3/5: fetching and unpacking the kubernetes source package"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
apt-get source --download-only kubernetes >/dev/null || die "apt-get source kubernetes failed"
dsc=$(ls kubernetes_*.dsc)
case "$dsc" in *really$KUBE_VERSION*|*_$KUBE_VERSION-*) ;; *) die "unexpected source version: $dsc";; esac
dpkg-source --no-check -x "$dsc" src >/dev/null || die "dpkg-source failed"

say "step 4/5: replacing vendored modern-go/reflect2 1.0.1 with Debian's 1.0.2"
rm -rf src/vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 src/vendor/github.com/modern-go/reflect2

say "step 5/5: compiling ${TARGETS[*]} (about 4-13 minutes on 2 cores)"
cd src
whats=""
for t in "${TARGETS[@]}"; do whats="$whats cmd/$t"; done
(
  while sleep 30; do say "... still compiling (the Go compiler prints nothing until a binary is linked)"; done
) &
ticker=$!
trap 'kill $ticker 2>/dev/null || true' EXIT
if ! env PATH="$GO_ROOT/bin:$PATH" GOPROXY=off GO111MODULE=off GOFLAGS= CGO_ENABLED=0 \
  make WHAT="${whats# }" 2>&1 | while IFS= read -r line; do say "$line"; done; then
  die "make failed (see the lines above)"
fi
kill $ticker 2>/dev/null || true

mkdir -p "$BIN"
for t in "${TARGETS[@]}"; do
  [ -x "_output/bin/$t" ] || die "_output/bin/$t was not built"
  cp "_output/bin/$t" "$BIN/$t.tmp" && mv "$BIN/$t.tmp" "$BIN/$t"
done
cd "$CACHE"
rm -rf "$WORK"
say "done: $(ls "$BIN" | tr '\n' ' ')in $BIN"
