"""Where the Go template renderer's binary lives, and building it when it is missing.

The renderer (the Go sources beside this file: ``main.go``, ``funcs.go``, ``helm.go`` ...) renders Service
Fabrik's ``gotemplate`` and ``helm`` templates with Go's own engines. It is built once per machine with the
installed Go toolchain and cached outside the repository, like the Kubernetes binaries, under
``$OPBROKER_CACHE/gorender-<key>/gorender`` where the key hashes the Go sources, ``go.mod`` and ``go.sum``: a
changed renderer is a new key, so it is rebuilt, and an unchanged one is never rebuilt.

:func:`renderer_binary` is the one way the rest of opbroker finds it: ``$OPBROKER_GORENDER`` if set, else the
binary installed next to the running Python (the image puts it at ``/opt/opbroker/bin/gorender``), else the
cached build, building it first if needed (a clear :class:`BuildError` when Go is not installed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path

from opbroker.gorender.builds import Say, run_talking

BINARY = "gorender"
#: Files whose content decides the binary (tests excluded: they do not change it).
_SOURCE_SUFFIXES = (".go", ".mod", ".sum")

_lock = threading.Lock()
log = logging.getLogger(__name__)


class BuildError(RuntimeError):
    """The renderer binary is missing and could not be built."""


def cache_dir() -> Path:
    """``$OPBROKER_CACHE`` or ``~/.cache/opbroker``: outside the repository, kept across clones."""
    return Path(os.environ.get("OPBROKER_CACHE") or Path.home() / ".cache" / "opbroker")


def source_dir() -> Path:
    return Path(str(resources.files("opbroker.gorender")))


def _sources(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.name.endswith(_SOURCE_SUFFIXES) and not p.name.endswith("_test.go")
    )


def source_key(directory: Path | None = None) -> str:
    """A hash of the renderer's sources: the cache key of its binary."""
    digest = hashlib.sha256()
    for path in _sources(directory or source_dir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cached_binary() -> Path:
    return cache_dir() / f"gorender-{source_key()}" / BINARY


def installed_binary() -> Path | None:
    """An explicitly configured or installed binary (the image's), if there is one."""
    configured = os.environ.get("OPBROKER_GORENDER")
    if configured:
        return Path(configured)
    beside_python = Path(sys.executable).parent / BINARY
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return beside_python
    return None


def build(target: Path | None = None, *, say: Say = log.info) -> Path:
    """Build the renderer into the cache (or ``target``); returns the binary's path. ``say`` hears the build's
    progress (every 30 s, :mod:`opbroker.gorender.builds`) and its end; by default the log."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go template renderer (for gotemplate and helm plans) is not built and Go is not installed: "
            "install Go 1.26+ and run `opbroker gorender build`, or set OPBROKER_GORENDER to a built binary"
        )
    target = target or cached_binary()
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gorender-", dir=target.parent) as work:
        # Build from a copy: the package directory may be read-only (an installed wheel).
        for path in _sources(source_dir()):
            shutil.copy2(path, Path(work) / path.name)
        partial = Path(work) / BINARY
        result = run_talking(
            [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."],
            step="compiling the Go template renderer",
            name="gorender",
            say=say,
            cwd=work,
            env={**os.environ, "CGO_ENABLED": "0"},
        )
        if result.returncode != 0:
            raise BuildError(f"building the Go template renderer failed:\n{result.stderr.strip()}")
        os.replace(partial, target)  # atomic: a concurrent reader sees no half-written binary
    say(f"built {target} in {time.monotonic() - started:.1f}s")
    return target


def renderer_binary(*, build_if_missing: bool = True) -> Path:
    """The renderer binary to run (see the module docstring for the order of places)."""
    installed = installed_binary()
    if installed is not None:
        if not installed.is_file():
            raise BuildError(f"OPBROKER_GORENDER points at {installed}, which does not exist")
        return installed
    cached = cached_binary()
    if cached.is_file():
        return cached
    if not build_if_missing:
        raise BuildError(f"the Go template renderer is not built ({cached} is missing); run `opbroker gorender build`")
    with _lock:
        if not cached.is_file():
            build(cached)
    return cached
