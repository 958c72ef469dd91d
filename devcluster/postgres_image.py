"""A PostgreSQL image from Debian's packages, built like the opbroker image (``opbroker.devcluster.images``:
mmdebstrap + umoci, no Docker daemon, no registry), for the example plan ``examples/postgresql-statefulset``
on the local node.

What goes in: Debian bookworm's ``postgresql-15`` (server and psql) and ``postgres-entrypoint.sh`` beside this
module, which initialises the data directory on first start (superuser ``postgres`` with the password in
``POSTGRES_PASSWORD``, scram-sha-256 password logins only) and runs the server as the ``postgres`` user. The
same image runs the plan's bind and unbind Jobs (``psql``). The archive is cached in ``<cache>/images`` under
a digest of the recipe and the entry point, so it is built once per change of either.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from opbroker.devcluster.binaries import cache_dir
from opbroker.devcluster.images import (
    ImageBuildError,
    Progress,
    _archive,
    _digest,
    _mmdebstrap,
    _pack,
    _prune,
    _require,
)

ENTRYPOINT = Path(__file__).resolve().parent / "postgres-entrypoint.sh"


@dataclass(frozen=True)
class PostgresImageSpec:
    """What the image is; its ``repr`` is part of the cache key."""

    debian_suite: str = "bookworm"
    packages: tuple[str, ...] = ("postgresql-15",)
    repository: str = "docker.io/library/opbroker-postgresql"
    tag: str = "15-bookworm"
    entrypoint: str = "/usr/local/bin/postgres-entrypoint"
    #: Every file the server does not need and Debian's postinst made: the packaged "main" cluster (the entry
    #: point makes its own data directory), documentation, apt's lists.
    removed: tuple[str, ...] = (
        "/var/lib/postgresql/15",
        "/etc/postgresql/15",
        "/var/lib/apt/lists/*",
        "/var/cache/apt/*",
        "/usr/share/doc",
        "/usr/share/man",
    )


POSTGRES_IMAGE = PostgresImageSpec()


def postgres_image_name(spec: PostgresImageSpec = POSTGRES_IMAGE) -> str:
    """The reference pods use (``image:``), as containerd names the imported archive."""
    return f"{spec.repository}:{spec.tag}"


def _uid_gid(rootfs: Path, user: str) -> str:
    """``uid:gid`` of ``user`` in the tree's ``/etc/passwd``: Debian allocates the postgres user's ids at
    install time, and a numeric user lets pods say ``runAsNonRoot``."""
    for line in (rootfs / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return f"{fields[2]}:{fields[3]}"
    raise ImageBuildError(f"the root filesystem has no {user} user")


def postgres_image(progress: Progress = print, *, use_cache: bool = True) -> tuple[Path, str]:
    """Build (or find cached) the PostgreSQL image; returns the OCI archive and the image's name."""
    _require("mmdebstrap", "umoci")
    import tempfile

    spec = POSTGRES_IMAGE
    key = _digest(repr(spec).encode(), ENTRYPOINT.read_bytes())
    archive = cache_dir() / "images" / f"postgresql-{spec.tag}-{key}.tar"
    if archive.exists() and use_cache:
        progress(f"PostgreSQL image up to date ({archive.name})")
        return archive, postgres_image_name(spec)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="opbroker-postgres-") as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        progress(f"building the PostgreSQL root filesystem from Debian {spec.debian_suite} (mmdebstrap)")
        hooks = [f'install -m 0755 {ENTRYPOINT} "$1{spec.entrypoint}"']
        hooks += [f'rm -rf "$1"{path}' for path in spec.removed]
        _mmdebstrap(spec.debian_suite, spec.packages, hooks, rootfs, progress=progress, build="postgres-image")
        progress("packing the PostgreSQL OCI image (umoci)")
        config = [
            "--config.user",
            _uid_gid(rootfs, "postgres"),
            "--config.workingdir",
            "/var/lib/postgresql",
            "--no-history",
            f"--config.entrypoint={spec.entrypoint}",
            "--config.env=PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--config.env=PGDATA=/var/lib/postgresql/data/pgdata",
            "--config.exposedports=5432/tcp",
        ]
        layout = work / "layout"
        _pack(layout, spec.tag, rootfs, {}, config)
        _archive(layout, archive)
        _prune(archive.parent, "postgresql-*.tar", keep=2)
    progress(f"PostgreSQL image built in {time.monotonic() - started:.0f}s ({archive.stat().st_size >> 20} MiB)")
    return archive, postgres_image_name(spec)
