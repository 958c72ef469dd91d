"""``opbroker controller run`` refuses an impossible shard before it connects to anything (issue 46)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from opbroker.api.shards import Shards
from opbroker.cli.controller import app
from opbroker.controller.settings import ControllerSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--shards", "3", "--shard", "3"], "shard 3 is not one of the 3 shards"),
        (["--shards", "2", "--shard", "1", "--shard-from-hostname"], "not both"),
        (["--shards", "2", "--multicluster"], "runs unsharded"),
        (["--shards", "65"], "Invalid value for '--shards'"),
        (["--shard-takeover"], "it needs --shards > 1 and leader election"),
        (["--shards", "2", "--shard-takeover", "--no-leader-election"], "it needs --shards > 1 and leader election"),
    ],
)
def test_an_impossible_shard_is_refused_with_its_reason(flags: list[str], why: str) -> None:
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["--kubeconfig", "/nonexistent", *flags])
    assert result.exit_code == 2, result.output
    assert why in " ".join(result.output.split()), result.output


def test_a_standby_taking_over_campaigns_for_every_shards_lease_its_own_first_then_the_next_in_turn() -> None:
    """Spares of different ordinals try different shards first (after their own), so two spares do not race for the
    same free Lease while another stays free; without ``--shard-takeover`` a replica campaigns for its own only."""
    takeover = ControllerSettings(shards=Shards(4, 2), shard_takeover=True)
    assert takeover.shard_leases() == (
        (2, "opbroker-controller-shard-2"),
        (3, "opbroker-controller-shard-3"),
        (0, "opbroker-controller-shard-0"),
        (1, "opbroker-controller-shard-1"),
    )
    assert ControllerSettings(shards=Shards(4, 2)).shard_leases() == ((2, "opbroker-controller-shard-2"),)
    taken = takeover.as_shard(0)
    assert (taken.shards, taken.lease, taken.shards.coordinator) == (Shards(4, 0), "opbroker-controller-shard-0", True)
