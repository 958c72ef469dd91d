"""The wheel carries every package in the tree.

The project maps ``opbroker.*`` onto top-level folders with an explicit package list. A subpackage left off that
list still imports from the checkout (the tests run on an editable install) but is missing from the wheel, so the
container image fails at start-up — which only the in-cluster tests see, minutes later.
"""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    in_tree = {
        ".".join((package, *init.parent.relative_to(REPO / folder).parts))
        for package, folder in setuptools["package-dir"].items()
        for init in (REPO / folder).rglob("__init__.py")
        if ".venv" not in init.parts
    }
    assert in_tree - listed == set(), f"missing from [tool.setuptools] packages: {in_tree - listed}"
    assert listed - in_tree == set(), f"listed packages with no folder: {listed - in_tree}"
