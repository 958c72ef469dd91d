"""How the harness reads a page and compares output: what a page author relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import Block, PageError, Role, blocks
from tests.docs.session import BlockFailed, check_output

PAGE = Path("docs/x.md")


def _blocks(text: str) -> list[Block]:
    return list(blocks(PAGE, text))


def test_roles_come_from_the_comment_above_the_fence_and_shell_blocks_run_by_default() -> None:
    found = _blocks(
        "Intro.\n\n"
        '<!-- doc-test: background, ready when "ready:", timeout 900 -->\n'
        "```bash\nopbroker dev\n```\n\n"
        "```sh\nkubectl get ns\n```\n"
        "<!-- doc-test: output -->\n```text\ndefault ...\n```\n"
        "<!-- doc-test: file args.yaml -->\n```yaml\na:\n  b: 1\n```\n"
        "```yaml\nshape: only\n```\n"
        "<!-- doc-test: illustration: needs a real cloud -->\n```bash\naws ...\n```\n"
        "<!-- doc-test: fails, timeout 5 -->\n```bash\nfalse\n```\n"
    )
    assert [b.role for b in found] == [
        Role.BACKGROUND,
        Role.RUN,
        Role.OUTPUT,
        Role.FILE,
        Role.ILLUSTRATION,
        Role.ILLUSTRATION,
        Role.RUN,
    ]
    background, _, _, file, shape, cloud, failing = found
    assert (background.ready_when, background.timeout, background.line) == ("ready:", 900.0, 4)
    assert file.file == "args.yaml" and file.text == "a:\n  b: 1\n"  # indentation kept
    assert shape.why == "reference material" and cloud.why == "needs a real cloud"
    assert failing.fails and failing.timeout == 5.0


def test_a_comment_applies_only_to_the_block_right_below_it() -> None:
    found = _blocks("<!-- doc-test: illustration: not this -->\nSome text.\n\n```bash\ntrue\n```\n")
    assert found[0].role is Role.RUN


def test_a_block_inside_a_list_item_loses_the_item_indentation_only() -> None:
    (block,) = _blocks("* item:\n\n  ```bash\n  if true; then\n    echo x\n  fi\n  ```\n")
    assert block.text == "if true; then\n  echo x\nfi\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- doc-test: backgorund -->\n```bash\nx\n```\n", "is not one of"),
        ("<!-- doc-test: background -->\n```bash\nx\n```\n", 'needs `ready when "TEXT"`'),
        ("<!-- doc-test: timeout -->\n```bash\nx\n```\n", "is not one of"),
        ("```bash\nnever closed\n", "never closed"),
        ('<!-- doc-test: background, ready when "x" -->\n```yaml\na: 1\n```\n', "only sh/bash blocks run"),
    ],
)
def test_a_page_the_harness_cannot_read_is_named_with_its_line(text: str, message: str) -> None:
    with pytest.raises(PageError, match=message) as raised:
        _blocks(text)
    assert str(raised.value).startswith("docs/x.md:")


def _block(text: str, role: Role = Role.RUN) -> Block:
    return Block(page=PAGE, line=7, language="text", text=text, role=role)


def test_output_lines_match_in_order_with_ellipses_and_any_spacing() -> None:
    output = "NAME    READY   AGE\norders-db   True    3s\nbilling-db   True   4s\n"
    check_output(_block("x"), _block("NAME READY ...\n...\nbilling-db True ...\n", Role.OUTPUT), output)
    with pytest.raises(BlockFailed, match=r"docs/x.md:7: the output shown at docs/x.md:7 has 'orders-db True'"):
        check_output(_block("x"), _block("billing-db True\norders-db True\n", Role.OUTPUT), output)
