"""The tests need nothing outside the repository: a fresh ``git clone`` runs them all (issue 14, point 5)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

#: Ways a file in the repository could reach for something beside the checkout.
OUTSIDE = re.compile(r"REPO\.parent|\.\./shared|/work/shared|parent\s*/\s*\"shared\"")


def test_seed_manifests_are_inside_the_repository(seed_manifests: list[Path]) -> None:
    assert {p.name for p in seed_manifests} >= {"sfplan-postgresql-zalando.yaml", "sfserviceinstance.yaml"}
    assert all(p.resolve().is_relative_to(REPO) for p in seed_manifests)


def test_nothing_in_the_tests_or_scripts_reads_beside_the_checkout() -> None:
    this = Path(__file__).resolve()
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("tests", "scripts", "bench", "examples", "devcluster")
        for path in sorted((REPO / folder).rglob("*"))
        if path.is_file() and path.suffix in (".py", ".sh", ".yaml") and path.resolve() != this
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, f"these lines read outside the repository: {offenders}"
