"""The manual as a sequence of steps: every fenced block of a Markdown page, with what the harness does with it.

A block's role is written just above its fence, in an HTML comment a reader of the rendered page does not see
(``<!-- doc-test: ... -->``, items separated by commas):

* a ``sh``/``bash`` block with no comment **runs**, as written, in the page's shell session (variables and the
  working folder carry from block to block, as in one terminal);
* ``background, ready when "TEXT"`` — a shell block started and left running (as in another terminal), the next
  block waiting until its output shows TEXT; stopped (SIGTERM, as Ctrl-C would) when the page ends;
* ``file NAME`` — the block's text is written to NAME in the page's folder (a manifest or a program a later block
  uses, as a reader would save it);
* ``output`` — what the previous run block printed: each line must appear, in order (``...`` in a line matches
  anything, runs of spaces match any spacing);
* ``fails`` — a run block that must exit non-zero (the page shows a refusal);
* ``timeout N`` — seconds a run block (or a background block's readiness) may take (default 300);
* ``illustration: WHY`` — shown, never run (a real cloud, a second site, a reference shape); counted.

Blocks of any other language without a comment are reference material (illustrations too). Pure: parsing only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

SHELLS = frozenset({"sh", "bash", "shell"})
DEFAULT_TIMEOUT = 300.0
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:(?P<items>.*?)-->\s*$")
_ITEM = re.compile(r'\s*((?:[^,"]|"[^"]*")+)\s*(?:,|$)')


class PageError(ValueError):
    """A page whose doc-test comments cannot be read: names the page and line."""


class Role(StrEnum):
    RUN = "run"
    BACKGROUND = "background"
    FILE = "file"
    OUTPUT = "output"
    ILLUSTRATION = "illustration"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The fence's line (1-based), for messages: ``docs/x.md:42``."""
    language: str
    text: str
    role: Role
    file: str | None = None
    ready_when: str | None = None
    fails: bool = False
    timeout: float = DEFAULT_TIMEOUT
    why: str | None = None
    """An illustration's reason, as the page gives it."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class _Directive:
    role: Role | None = None
    file: str | None = None
    ready_when: str | None = None
    fails: bool = False
    timeout: float = DEFAULT_TIMEOUT
    why: str | None = None


def _directive(items: str, where: str) -> _Directive:
    role: Role | None = None
    file: str | None = None
    ready_when: str | None = None
    fails = False
    timeout = DEFAULT_TIMEOUT
    text = items.strip()
    if text.startswith("illustration"):
        return _Directive(role=Role.ILLUSTRATION, why=text.removeprefix("illustration").lstrip(":— -").strip())
    for match in _ITEM.finditer(text):
        item = match.group(1).strip()
        if not item:
            continue
        word, _, rest = item.partition(" ")
        rest = rest.strip()
        if word == "background" and not rest:
            role = Role.BACKGROUND
        elif word == "output" and not rest:
            role = Role.OUTPUT
        elif word == "file" and rest:
            role, file = Role.FILE, rest
        elif word == "fails" and not rest:
            fails = True
        elif word == "timeout" and rest.isdigit():
            timeout = float(rest)
        elif word == "ready" and rest.startswith("when ") and rest[5:].strip().startswith('"'):
            ready_when = rest[5:].strip().strip('"')
        else:
            raise PageError(
                f'{where}: doc-test item {item!r} is not one of: background, ready when "TEXT", '
                "file NAME, output, fails, timeout N, illustration: WHY"
            )
    if role is Role.BACKGROUND and not ready_when:
        raise PageError(f'{where}: a background block needs `ready when "TEXT"`')
    return _Directive(role=role, file=file, ready_when=ready_when, fails=fails, timeout=timeout)


def blocks(page: Path, text: str) -> Iterator[Block]:
    """Every fenced block of ``text`` (the page ``page``), in order, with its role."""
    lines = text.splitlines()
    pending: _Directive | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        directive = _DIRECTIVE.match(line)
        if directive:
            pending = _directive(directive.group("items"), f"{page}:{index + 1}")
            index += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip():
                pending = None  # a comment applies to the block right below it (blank lines allowed)
            index += 1
            continue
        start = index
        marker, indent = fence.group("fence"), len(fence.group("indent"))
        language = fence.group("info").strip().split(" ")[0].lower()
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(marker):
            line = lines[index]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())  # a list item's block
            index += 1
        if index >= len(lines):
            raise PageError(f"{page}:{start + 1}: a fenced block is never closed")
        index += 1
        given = pending or _Directive()
        pending = None
        role = given.role or (Role.RUN if language in SHELLS else Role.ILLUSTRATION)
        if given.role is None and language not in SHELLS:
            given = _Directive(why="reference material")
        if role in (Role.RUN, Role.BACKGROUND) and language not in SHELLS:
            raise PageError(
                f"{page}:{start + 1}: only sh/bash blocks run; mark this {language or 'plain'} block "
                "`file NAME`, `output` or `illustration: WHY`"
            )
        yield Block(
            page=page,
            line=start + 1,
            language=language,
            text="\n".join(body) + "\n",
            role=role,
            file=given.file,
            ready_when=given.ready_when,
            fails=given.fails,
            timeout=given.timeout,
            why=given.why,
        )


def read(page: Path, root: Path) -> list[Block]:
    """The blocks of ``page``, named relative to ``root`` in messages; checks the roles fit together."""
    found = list(blocks(page.relative_to(root), page.read_text()))
    previous: Block | None = None
    for block in found:
        if block.role is Role.OUTPUT and (previous is None or previous.role is not Role.RUN):
            raise PageError(f"{block.where}: an `output` block must follow the block that prints it")
        previous = block
    return found


def runnable(found: list[Block]) -> bool:
    """Whether the page is a walkthrough: it has a block that runs."""
    return any(block.role in (Role.RUN, Role.BACKGROUND) for block in found)
