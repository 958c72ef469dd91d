#!/usr/bin/env bash
# Install everything opbroker needs on a fresh machine: the virtual environment at .venv/ with the
# package and its tools, the Go template renderer and the local Kubernetes control plane (each built once,
# cached outside the repo).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
"$PYTHON" -c 'import sys; assert sys.version_info[:2] >= (3, 11), f"Python 3.11+ needed, found {sys.version}"'

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
echo "[setup] installing opbroker and its tools into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,pulumi]"

echo "[setup] making sure the local control plane binaries are built"
.venv/bin/opbroker cluster build

echo "[setup] making sure the Go template renderer (gotemplate and helm plans) is built"
.venv/bin/opbroker gorender build
