"""Prints, at the end of a session that ran walkthroughs, how many pages and blocks of each role it went through."""

from __future__ import annotations

import pytest

from tests.docs.pages import Role, read
from tests.docs.test_walkthroughs import PAGES, RAN, REPO


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RAN:
        return
    totals = {role.value: sum(counts[role.value] for counts in RAN.values()) for role in Role}
    shown = sum(1 for page in PAGES for block in read(page, REPO) if block.role is Role.ILLUSTRATION)
    terminalreporter.section("the manual, run as written")
    for page, counts in sorted(RAN.items()):
        terminalreporter.write_line(f"{page}: " + ", ".join(f"{n} {role}" for role, n in counts.items() if n))
    terminalreporter.write_line(
        f"{len(RAN)} walkthrough pages: {totals['run']} blocks run, {totals['background']} in the background, "
        f"{totals['file']} files written, {totals['output']} outputs compared, {totals['illustration']} "
        f"illustrations in them; {shown} illustrations in all {len(PAGES)} pages"
    )
