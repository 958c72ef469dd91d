#!/usr/bin/env bash
# Install everything opbroker needs on a fresh machine: the virtual environment at .venv/ with the
# package and its tools, the Go template renderer, the local Kubernetes control plane and the Pulumi engine
# (each built once, cached outside the repo).
#
# Usage: setup.sh          (everything: what scripts/test.sh needs)
#        setup.sh --demo   (what scripts/demo.sh uses: the virtual environment, the control plane's binaries and the
#                           Go renderer; not the node's binaries and Debian packages, cert-manager or the Pulumi
#                           engine, which the demo never runs — `opbroker dev --in-cluster` builds the node's when
#                           it needs them)
set -euo pipefail
cd "$(dirname "$0")/.."

DEMO_ONLY=no
for arg in "$@"; do
  case "$arg" in
    --demo) DEMO_ONLY=yes ;;
    *)
      echo "[setup] unknown argument: $arg (usage: scripts/setup.sh [--demo])" >&2
      exit 2
      ;;
  esac
done

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] >= (3, 11), f"Python 3.11+ needed, found {sys.version}"'

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
echo "[setup] installing opbroker and its tools into .venv"
START=$(date +%s)
say() { printf '[setup %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
# talking: progress every 30 s against the measured estimate (gorender/build-estimates.tsv).
# shellcheck source=../gorender/talk.sh
source gorender/talk.sh
talking "installing the Python packages" python-packages \
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,pulumi]" -c scripts/engine-sdks.txt

if [ "$DEMO_ONLY" = yes ]; then
  echo "[setup] making sure the local Kubernetes control plane binaries are built"
  .venv/bin/opbroker cluster build
  echo "[setup] making sure the Go template renderer (gotemplate and helm plans) is built"
  .venv/bin/opbroker gorender build
  echo "[setup] the demo's parts are ready (not built: the node, cert-manager, the Pulumi engine)"
  exit 0
fi

# The node (kubelet's containers) and the image build need Debian's containerd, runc, CNI plugins, iptables,
# mmdebstrap and umoci; the manual's walkthroughs (tests/docs) use curl, as their readers do. Installed when missing
# and this runs as root (as CI does); otherwise `opbroker cluster up --node` names what is missing and how to get it.
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack iproute2 mmdebstrap umoci curl)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for package in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[setup] installing ${missing[*]} from Debian (for the node and the image build)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

echo "[setup] making sure the local Kubernetes binaries (control plane and node) are built"
.venv/bin/opbroker cluster build --node

echo "[setup] making sure the Go template renderer (gotemplate and helm plans) is built"
.venv/bin/opbroker gorender build

# cert-manager's controller and CRDs (tests/realservices/test_real_certmanager.py drives it through OSB), built from its Go
# module once per machine and cached beside the rest.
echo "[setup] making sure cert-manager (controller and CRDs) is built"
scripts/build-cert-manager.sh

# helm (tests/localcluster/test_install_without_pulumi.py installs opbroker's chart with it), built from its Go module
# helm.sh/helm/v4 once per machine and cached beside the rest (about 2 minutes).
echo "[setup] making sure helm is built"
scripts/build-helm.sh

# The Pulumi engine the engine tests run (pulumi, the YAML language host, the Kubernetes resource plugin),
# built from Go modules once per machine and cached next to the Kubernetes binaries.
echo "[setup] making sure the Pulumi engine binaries are built"
scripts/build-pulumi.sh
