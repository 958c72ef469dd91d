"""``opbroker controller run`` refuses an impossible shard before it connects to anything (issue 46)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from opbroker.cli.controller import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--shards", "3", "--shard", "3"], "shard 3 is not one of the 3 shards"),
        (["--shards", "2", "--shard", "1", "--shard-from-hostname"], "not both"),
        (["--shards", "2", "--multicluster"], "runs unsharded"),
        (["--shards", "65"], "Invalid value for '--shards'"),
    ],
)
def test_an_impossible_shard_is_refused_with_its_reason(flags: list[str], why: str) -> None:
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["--kubeconfig", "/nonexistent", *flags])
    assert result.exit_code == 2, result.output
    assert why in " ".join(result.output.split()), result.output
