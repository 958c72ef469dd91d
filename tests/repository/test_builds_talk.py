"""Builds that talk: every build says its step and elapsed time at least every 30 s, against one measured estimate
per build (``gorender/build-estimates.tsv``), and every figure written elsewhere is that estimate.

A cold build of Kubernetes or the Pulumi engine takes minutes; before, setup printed nothing for 7 to 15 minutes and
the README, the docs and ``devcluster/build.sh`` gave three different estimates.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from opbroker.gorender import builds

ROOT = Path(__file__).resolve().parents[2]
#: Every shell build and the line that must wrap its long command (the Python builds are checked below).
SHELL_BUILDS = {
    "devcluster/build.sh": 'talking "compiling',
    "scripts/build-cert-manager.sh": 'talking "compiling the controller" cert-manager',
    "scripts/build-pulumi.sh": 'talk_while "compiling',
    "scripts/build-helm.sh": 'talking "compiling helm $VERSION" helm',
    "scripts/setup.sh": 'talking "installing the Python packages" python-packages',
}


class FakeProcess:
    """A process that runs for ``timeouts`` waits of ``every`` seconds, then ends with output (time is faked)."""

    def __init__(self, clock: list[float], timeouts: int, every: float) -> None:
        self.clock, self.timeouts, self.every, self.returncode = clock, timeouts, every, None
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self.killed:
            return "", ""
        assert timeout == self.every
        if self.timeouts:
            self.timeouts -= 1
            self.clock[0] += timeout
            raise subprocess.TimeoutExpired("go", timeout)
        self.returncode = 0
        return "out", "err"


def test_a_python_build_says_it_still_runs_every_interval_with_its_estimate() -> None:
    clock = [100.0]
    said: list[str] = []
    done = builds.run_talking(
        ["go", "build"],
        step="compiling the Go template renderer",
        name="gorender",
        say=said.append,
        every=30.0,
        clock=lambda: clock[0],
        popen=lambda *args, **kwargs: FakeProcess(clock, timeouts=3, every=30.0),
    )
    seconds = builds.estimate("gorender").seconds
    assert said == [
        f"still compiling the Go template renderer: {n} s so far (a cold build takes about {seconds} s on 2 cores)"
        for n in (30, 60, 90)
    ]
    assert (done.returncode, done.stdout, done.stderr) == (0, "out", "err")


def test_a_build_whose_caller_stops_is_killed_not_left_running() -> None:
    process = FakeProcess([0.0], timeouts=5, every=builds.TALK_EVERY)

    def interrupted(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        builds.run_talking(["go"], step="x", name="gorender", say=interrupted, popen=lambda *a, **k: process)
    assert process.killed


def test_a_short_python_build_says_nothing() -> None:
    said: list[str] = []
    builds.run_talking(
        ["true"],
        step="x",
        name="gorender",
        say=said.append,
        popen=lambda *args, **kwargs: FakeProcess([0.0], timeouts=0, every=builds.TALK_EVERY),
    )
    assert said == []


@pytest.mark.process
def test_a_shell_build_says_it_still_runs_and_keeps_the_commands_exit_status() -> None:
    script = f"""
        set -euo pipefail
        START=$(date +%s)
        say() {{ printf '[t] %s\\n' "$*"; }}
        source {ROOT}/gorender/talk.sh
        TALK_EVERY=1
        talking "sleeping" kubernetes sleep 2.5
        talking "failing" pulumi sh -c 'sleep 1.5; exit 3' || echo "failed: $?"
    """
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    lines = done.stdout.splitlines()
    kubernetes, pulumi = builds.estimate("kubernetes").seconds, builds.estimate("pulumi").seconds
    assert f"[t] still sleeping: 1 s so far (a cold build takes about {kubernetes} s on 2 cores)" in lines
    assert f"[t] still sleeping: 2 s so far (a cold build takes about {kubernetes} s on 2 cores)" in lines
    assert f"[t] still failing: 1 s so far (a cold build takes about {pulumi} s on 2 cores)" in lines
    assert lines[-1] == "failed: 1"


@pytest.mark.parametrize(("script", "wrapped"), sorted(SHELL_BUILDS.items()))
def test_every_shell_build_talks_through_the_shared_helper(script: str, wrapped: str) -> None:
    text = (ROOT / script).read_text()
    assert "gorender/talk.sh" in text, f"{script} does not source gorender/talk.sh"
    assert wrapped in text, f"{script}'s long step is not wrapped by talking/talk_while"
    for name in re.findall(r"(?:talking|talk_while) \"[^\"]*\" ([a-z-]+)", text):
        assert name in builds.estimates(), f"{script} names the estimate {name!r}, which build-estimates.tsv lacks"
    for name in re.findall(r"build_estimate ([a-z-]+)", text):
        assert name in builds.estimates(), f"{script} names the estimate {name!r}, which build-estimates.tsv lacks"


def test_every_build_is_in_one_of_the_readmes_sums() -> None:
    assert sorted(DEMO_BUILDS + TEST_ONLY_BUILDS) == sorted(builds.estimates())


def test_the_python_builds_name_estimates_the_file_has() -> None:
    for module in ("gorender/__init__.py", "devcluster/images.py", "devcluster/postgres_image.py"):
        text = (ROOT / module).read_text()
        named = re.findall(r"(?:name|build)=\"([a-z-]+)\"", text)
        assert named, f"{module} runs no build through run_talking"
        assert set(named) <= set(builds.estimates()), f"{module} names {set(named) - set(builds.estimates())}"


#: What the demo builds (``scripts/setup.sh --demo``), and what the test command builds besides.
DEMO_BUILDS = ("python-packages", "kubernetes", "gorender")
TEST_ONLY_BUILDS = ("kube-node", "cert-manager", "pulumi", "opbroker-image", "postgres-image", "helm")


def minutes(*names: str) -> int:
    return round(sum(builds.estimate(name).seconds for name in names) / 60)


def test_the_readme_quotes_the_measured_estimates() -> None:
    readme = (ROOT / "README.md").read_text()
    demo, tests = minutes(*DEMO_BUILDS), minutes(*TEST_ONLY_BUILDS)
    assert f"about {demo} minutes" in readme, f"the README should say the demo's builds take about {demo} minutes"
    assert f"about {tests} minutes more" in readme, f"the README should say the tests' builds take {tests} more"


#: A build figure written in prose: "about 25 minutes", "~15-25 min", "(402 s and 969 s)" next to "build".
FIGURE = re.compile(r"(?i)\b(?:about|~)\s*\d+(?:\s*[-\u2013]\s*\d+)?\s*(?:minutes|min)\b")


def test_no_other_build_estimate_is_written_anywhere() -> None:
    """An estimate in prose is one of the README's two sums; any other drifts from the measured file."""
    allowed = {f"about {minutes(*DEMO_BUILDS)} minutes", f"about {minutes(*TEST_ONLY_BUILDS)} minutes"}
    places = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "scripts").glob("*.sh")]
    places += [*(ROOT / "devcluster").glob("*.sh"), *(ROOT / "devcluster").glob("*.py"), *(ROOT / "cli").glob("*.py")]
    wrong = []
    for place in places:
        for number, line in enumerate(place.read_text().splitlines(), 1):
            if not re.search(r"(?i)build|compil", line):
                continue
            for figure in FIGURE.findall(line):
                if figure not in allowed:
                    wrong.append(f"{place.relative_to(ROOT)}:{number}: {figure!r}")
    assert not wrong, "build estimates written outside gorender/build-estimates.tsv:\n" + "\n".join(wrong)
