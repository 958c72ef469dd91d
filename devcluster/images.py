"""Container images built on this machine, with no Docker daemon and no registry: the opbroker image and
the node's sandbox (pause) image, as OCI archives that ``ctr images import`` takes.

The opbroker image is what the repository's ``Containerfile`` describes (``IMAGE``), made from the same
parts: a Debian bookworm root filesystem (mmdebstrap, from Debian's packages) with its ``python3``, a virtual
environment at ``/opt/opbroker`` holding the opbroker wheel and the dependencies ``requirements.lock`` pins
(downloaded into a wheelhouse first, each file checked against the lock's sha256, and installed inside the
root filesystem with ``--no-index --require-hashes``, checked again), run as the non-root user 65532 with
``opbroker`` as its entry point. umoci turns the tree into an OCI image.

Archives are cached in ``<cache>/images`` under a digest of everything that goes in, so an unchanged
checkout is not rebuilt.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opbroker.devcluster.binaries import KUBE_VERSION, cache_dir
from opbroker.gorender.builds import run_talking

Progress = Callable[[str], None]
REPOSITORY = Path(__file__).resolve().parent.parent


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step and why."""


@dataclass(frozen=True)
class ImageSpec:
    """What the opbroker image is, shared by the local build and checked against the Containerfile."""

    debian_suite: str = "bookworm"
    runtime_packages: tuple[str, ...] = ("python3", "ca-certificates")
    build_packages: tuple[str, ...] = ("python3-venv",)
    venv: str = "/opt/opbroker"
    gorender: str = "/opt/opbroker/bin/gorender"
    """The Go template renderer, beside the venv's python, where ``opbroker.gorender`` looks first."""
    user: str = "65532:65532"
    entrypoint: tuple[str, ...] = ("opbroker",)
    exposed_ports: tuple[str, ...] = ("8080/tcp", "9090/tcp")
    env: tuple[tuple[str, str], ...] = field(
        default=(
            ("PATH", "/opt/opbroker/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("PYTHONUNBUFFERED", "1"),
        )
    )


IMAGE = ImageSpec()


def opbroker_version() -> str:
    from importlib.metadata import version

    return version("opbroker")


def opbroker_image_name(version: str | None = None) -> str:
    """The reference the ControlPlane component deploys (``opbroker:<version>``), as containerd names it."""
    return f"docker.io/library/opbroker:{version or opbroker_version()}"


def _run(
    step: str, command: list[str], *, progress: Progress = print, build: str = "opbroker-image", **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run one step of an image build to the end, saying every 30 s that it still runs (``build`` names its
    estimate in ``build-estimates.tsv``); an :class:`ImageBuildError` with the output's tail when it fails."""
    result = run_talking(command, step=step, name=build, say=progress, **kwargs)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip().splitlines()[-20:]
        raise ImageBuildError(
            f"{step}: `{' '.join(command[:3])} ...` failed (exit {result.returncode}):\n" + "\n".join(output)
        )
    return result


def _require(*commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        raise ImageBuildError(f"building images needs {', '.join(missing)}: apt-get install mmdebstrap umoci")


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _pack(layout: Path, tag: str, tree: Path | None, files: dict[str, Path], config: list[str]) -> None:
    """An OCI layout with one layer (``tree`` as ``/``, plus single ``files``) and the given config, tagged
    ``tag`` (the tag of the name it is imported as: ``ctr images import --base-name <repository>``)."""
    _run("umoci init", ["umoci", "init", "--layout", str(layout)])
    _run("umoci new", ["umoci", "new", "--image", f"{layout}:{tag}"])
    if tree is not None:
        _run("umoci insert", ["umoci", "insert", "--image", f"{layout}:{tag}", str(tree), "/"])
    for target, source in files.items():
        _run("umoci insert", ["umoci", "insert", "--image", f"{layout}:{tag}", str(source), target])
    _run("umoci config", ["umoci", "config", "--image", f"{layout}:{tag}", *config])
    _run("umoci gc", ["umoci", "gc", "--layout", str(layout)])


def _archive(layout: Path, archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    _run("tar", ["tar", "-C", str(layout), "-cf", str(partial), "."])
    partial.rename(archive)


def pause_image(pause_binary: Path, progress: Progress = print) -> Path:
    """The sandbox image: Kubernetes's pause binary alone, run as 65535 (as upstream's image does)."""
    archive = cache_dir() / "images" / f"pause-{KUBE_VERSION}-{_digest(pause_binary.read_bytes())}.tar"
    if archive.exists():
        return archive
    _require("umoci")
    progress("building the pause image (umoci)")
    with tempfile.TemporaryDirectory(prefix="opbroker-pause-") as tmp:
        layout = Path(tmp) / "layout"
        _pack(
            layout,
            KUBE_VERSION,
            None,
            {"/pause": pause_binary},
            ["--config.entrypoint", "/pause", "--config.user", "65535:65535", "--no-history"],
        )
        _archive(layout, archive)
    return archive


#: Every runtime dependency of opbroker (and the setuptools and wheel that build it), each version pinned with
#: the sha256 of every file it is published as; written by ``scripts/lock-requirements.sh``.
LOCK = REPOSITORY / "requirements.lock"


def _mmdebstrap(
    suite: str, packages: tuple[str, ...], hooks: list[str], rootfs: Path, *, progress: Progress, build: str
) -> None:
    """A minimal Debian root filesystem with ``packages`` from Debian's archive, then ``hooks`` run on it."""
    command = [
        "mmdebstrap",
        "--quiet",
        "--mode=root",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        *(f"--customize-hook={hook}" for hook in hooks),
        suite,
        str(rootfs),
    ]
    _run("building the root filesystem (mmdebstrap)", command, progress=progress, build=build)


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]


def _wheelhouse(directory: Path, progress: Progress) -> list[Path]:
    """The locked dependencies' wheels (pip checks each against the lock's hash; no source archive, so nothing
    is built from one) and the opbroker wheel, built from this checkout with no index: its build's setuptools
    and wheel come from the wheelhouse, checked like the rest."""
    wheels = directory / "wheels"
    progress("downloading the locked dependencies (pip download --require-hashes)")
    _run(
        "downloading the locked dependencies (pip download)",
        _pip("download", "--require-hashes", "--only-binary=:all:", "--dest", str(wheels), "--requirement", str(LOCK)),
        progress=progress,
    )
    progress("building the opbroker wheel (pip wheel, offline)")
    _run(
        "building the opbroker wheel (pip wheel)",
        _pip(
            "wheel", "--no-deps", "--no-index", "--find-links", str(wheels), "--wheel-dir", str(wheels), str(REPOSITORY)
        ),
        progress=progress,
    )
    return sorted(wheels.glob("*.whl"))


#: opbroker image archives kept in the cache (each checkout change makes a new one of ~90 MiB).
KEEP_ARCHIVES = 3


def _prune(directory: Path, pattern: str, *, keep: int) -> None:
    """Remove all but the ``keep`` newest archives matching ``pattern``."""
    archives = sorted(directory.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)


def _wheel_content(wheel: Path) -> bytes:
    """What a wheel holds, without the zip's timestamps: a wheel built again from an unchanged checkout
    differs in its bytes but not in this."""
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(archive.namelist())
        return wheel.name.encode() + b"".join(m.encode() + hashlib.sha256(archive.read(m)).digest() for m in members)


def _gorender_binary(progress: Progress) -> Path:
    """The cached Go template renderer (built first if needed): the image carries the same binary."""
    from opbroker import gorender

    try:
        binary = gorender.cached_binary()  # hashes the renderer's sources: once
        if binary.is_file():
            return binary
        progress("building the Go template renderer")
        return gorender.build(binary, say=progress)
    except gorender.BuildError as exc:
        raise ImageBuildError(str(exc)) from None


def opbroker_image(progress: Progress = print, *, use_cache: bool = True) -> tuple[Path, str]:
    """Build (or find cached) the opbroker image; returns the OCI archive and the image's name.
    ``use_cache=False`` builds it again even when an archive for this checkout exists (benchmarks)."""
    _require("mmdebstrap", "umoci")
    name = opbroker_image_name()
    with tempfile.TemporaryDirectory(prefix="opbroker-image-") as tmp:
        work = Path(tmp)
        wheels = _wheelhouse(work, progress)
        renderer = _gorender_binary(progress)
        recipe = repr(IMAGE).encode() + LOCK.read_bytes()
        key = _digest(recipe, *(_wheel_content(w) for w in wheels), renderer.read_bytes())
        archive = cache_dir() / "images" / f"opbroker-{opbroker_version()}-{key}.tar"
        if archive.exists() and use_cache:
            progress(f"opbroker image up to date ({archive.name})")
            return archive, name
        started = time.monotonic()
        rootfs = work / "rootfs"
        progress(f"building the root filesystem from Debian {IMAGE.debian_suite} (mmdebstrap)")
        venv = IMAGE.venv
        hooks = [
            f'mkdir -p "$1/tmp/wheels" && cp {work}/wheels/*.whl {LOCK} "$1/tmp/wheels/"',
            f'chroot "$1" python3 -m venv {venv}',
            f'chroot "$1" {venv}/bin/pip install --quiet --no-index --no-compile --find-links /tmp/wheels'
            f" --require-hashes --requirement /tmp/wheels/{LOCK.name}",
            f'chroot "$1" {venv}/bin/pip install --quiet --no-index --no-compile --find-links /tmp/wheels opbroker',
            f'chroot "$1" {venv}/bin/pip uninstall --quiet --yes pip',
            f'install -m 0755 {renderer} "$1{IMAGE.gorender}"',
            'rm -rf "$1/tmp/wheels"',
            'echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >> "$1/etc/passwd"',
            'echo "nonroot:x:65532:" >> "$1/etc/group"',
            'mkdir -p "$1/home/nonroot" && chown 65532:65532 "$1/home/nonroot"',
            f'chroot "$1" apt-get purge --quiet --yes {" ".join(IMAGE.build_packages)} >/dev/null',
            'chroot "$1" apt-get autoremove --quiet --yes --purge >/dev/null',
            'rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/* "$1/usr/share/doc" "$1/usr/share/man"',
        ]
        packages = IMAGE.runtime_packages + IMAGE.build_packages
        _mmdebstrap(IMAGE.debian_suite, packages, hooks, rootfs, progress=progress, build="opbroker-image")
        progress("packing the OCI image (umoci)")
        config = ["--config.user", IMAGE.user, "--config.workingdir", "/", "--no-history"]
        config += [f"--config.entrypoint={part}" for part in IMAGE.entrypoint]
        config += [f"--config.env={key}={value}" for key, value in IMAGE.env]
        config += [f"--config.exposedports={port}" for port in IMAGE.exposed_ports]
        config += [f"--config.label=org.opencontainers.image.version={opbroker_version()}"]
        layout = work / "layout"
        _pack(layout, opbroker_version(), rootfs, {}, config)
        _archive(layout, archive)
        _prune(archive.parent, "opbroker-*.tar", keep=KEEP_ARCHIVES)
        progress(f"opbroker image built in {time.monotonic() - started:.0f}s ({archive.stat().st_size >> 20} MiB)")
        return archive, name
