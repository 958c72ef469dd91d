"""Before and after in the same run: the suites against another commit's code, beside this tree's.

``other_tree(ref)`` checks ``ref`` out with ``git worktree`` in a temporary folder and lays out a folder
``<tmp>/path/opbroker/`` of symlinks to its top-level packages (the layout setuptools' ``package-dir`` maps:
``opbroker.controller`` is ``controller/``…). ``using(tree)`` puts that folder on ``PYTHONPATH``: every
process the harness starts with ``python -m opbroker.cli.main`` — the controller and the broker — then
imports that tree's code (``PYTHONPATH`` comes before the editable install's finder, which is appended to
``sys.meta_path``); ``imported_from`` proves it by asking a process started exactly so where
``opbroker.controller`` and ``opbroker.broker`` come from. The harness itself (stack set-up, the CRDs it
installs, the demo operator, the counting) stays this tree's, and so does the virtualenv: a commit whose
dependencies differ needs its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Tree:
    ref: str
    commit: str
    root: Path
    pythonpath: Path | None  # None: this tree, as installed


def this_tree() -> Tree:
    return Tree("HEAD (this tree)", _git("rev-parse", "HEAD"), REPOSITORY, None)


@contextmanager
def other_tree(ref: str) -> Iterator[Tree]:
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    scratch = Path(tempfile.mkdtemp(prefix="opbroker-compare-"))
    worktree = scratch / "tree"
    _git("worktree", "add", "--detach", str(worktree), commit)
    try:
        farm = scratch / "path" / "opbroker"
        farm.mkdir(parents=True)
        pyproject = tomllib.loads((worktree / "pyproject.toml").read_text())
        for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items():
            (farm / package.removeprefix("opbroker.")).symlink_to(worktree / folder, target_is_directory=True)
        yield Tree(ref, commit, worktree, scratch / "path")
    finally:
        _git("worktree", "remove", "--force", str(worktree))
        shutil.rmtree(scratch, ignore_errors=True)


def environment(tree: Tree) -> dict[str, str]:
    """What a process's environment needs (over the harness's) to import ``tree``'s code."""
    if tree.pythonpath is None:
        return {}
    saved = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(tree.pythonpath), saved) if p)}


@contextmanager
def using(tree: Tree) -> Iterator[None]:
    """Processes started meanwhile import ``tree``'s code."""
    saved = os.environ.get("PYTHONPATH")
    os.environ.update(environment(tree))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def imported_from(tree: Tree) -> dict[str, str]:
    """Where a process started as the harness starts the controller (same interpreter, environment and
    working directory) imports opbroker's packages from; raises if any is not ``tree``'s."""
    probe = (
        "import json, opbroker.controller.app, opbroker.broker, opbroker.cli.main as m;"
        "print(json.dumps({n: __import__(n, fromlist=['_']).__file__ for n in "
        "('opbroker.controller', 'opbroker.controller.app', 'opbroker.broker', 'opbroker.cli.main')}))"
    )
    with using(tree):
        answer = subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=dict(os.environ)
        )
    files: dict[str, str] = json.loads(answer.stdout)
    root = tree.root.resolve()
    for module, file in files.items():
        if not Path(file).resolve().is_relative_to(root):
            raise RuntimeError(f"{module} comes from {file}, not from {root} ({tree.ref})")
    return files


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPOSITORY, check=True, capture_output=True, text=True).stdout.strip()
