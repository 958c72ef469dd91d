"""Builds that talk: every build opbroker runs says its step and the elapsed time at least every 30 seconds, against
one measured estimate per build.

A cold build of Kubernetes or the Pulumi engine takes minutes; silence for that long reads as a hang. The estimates
are measured once and written once, in ``build-estimates.tsv`` beside this module: the shell builds read it through
``talk.sh`` (``devcluster/build.sh``, ``scripts/build-*.sh``), the Python builds (the Go renderer here, the images in
``opbroker.devcluster``) through :func:`estimate`, and the README's figures are checked against it by a test. It
lives in the Go renderer's package because that is the lowest layer that builds anything.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ESTIMATES_FILE = Path(__file__).with_name("build-estimates.tsv")
#: At most this many seconds pass between two lines of a running build.
TALK_EVERY = 30.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class Estimate:
    """How long a cold build of one thing takes on 2 cores, as measured (``build-estimates.tsv``)."""

    name: str
    seconds: int
    what: str


@cache
def estimates() -> Mapping[str, Estimate]:
    """Every build's estimate by name, read once from :data:`ESTIMATES_FILE` (``#`` lines are comments)."""
    found: dict[str, Estimate] = {}
    for line in ESTIMATES_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, seconds, what = line.split("\t", 2)
        found[name] = Estimate(name, int(seconds), what)
    return found


def estimate(name: str) -> Estimate:
    """The estimate of the build ``name``; a KeyError names a build the file does not know (a bug of the caller)."""
    return estimates()[name]


def still_running(step: str, elapsed: float, name: str) -> str:
    """The line a build prints while ``step`` runs (the shell builds print the same words, see ``talk.sh``)."""
    return f"still {step}: {elapsed:.0f} s so far (a cold build takes about {estimate(name).seconds} s on 2 cores)"


def run_talking(
    command: Sequence[str],
    *,
    step: str,
    name: str,
    say: Say,
    every: float = TALK_EVERY,
    clock: Callable[[], float] = time.monotonic,
    popen: Callable[..., subprocess.Popen[str]] = subprocess.Popen,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to the end (its output captured, as ``subprocess.run(capture_output=True, text=True)``),
    saying :func:`still_running` every ``every`` seconds while it runs. The caller checks the return code."""
    started = clock()
    process = popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=every)
            except subprocess.TimeoutExpired:  # retrying communicate loses no output (the subprocess docs say so)
                say(still_running(step, clock() - started, name))
                continue
            return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)
    except BaseException:  # Ctrl-C, or a failing say: the build stops with its caller, it is not left running
        process.kill()
        process.communicate()
        raise
