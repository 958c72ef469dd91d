"""The broker labels what it creates with the shard that handles it (issue 46): an instance by the rule, a binding
with its instance's shard; unsharded, no label at all (what a single controller's objects always looked like)."""

from __future__ import annotations

import pytest

from opbroker.api.shards import SHARD_LABEL, Shards, shard_of
from opbroker.broker import records
from opbroker.broker.headers import RequestMeta
from opbroker.broker.records import Kind, Record

pytestmark = pytest.mark.unit

SPEC = {"instanceId": "db-1", "serviceId": "svc", "planId": "plan"}


def test_an_instance_and_its_binding_carry_the_instances_shard() -> None:
    shards = Shards(5)
    names = [f"db-{n}" for n in range(40)]
    labels = {
        name: records.instance_object(name=name, namespace="team-a", spec=SPEC, meta=RequestMeta(), shards=shards)[
            "metadata"
        ]["labels"][SHARD_LABEL]
        for name in names
    }
    assert labels == {name: str(shard_of("team-a", name, 5)) for name in names}
    assert len(set(labels.values())) > 1
    instance = Record(Kind.INSTANCE, "team-a", "db-7", uid="u-1")
    binding = records.binding_object(
        name="bind-x", instance=instance, spec={**SPEC, "id": "bind-x"}, meta=RequestMeta(), shards=shards
    )
    assert binding["metadata"]["labels"][SHARD_LABEL] == labels["db-7"]


def test_unsharded_nothing_is_labelled() -> None:
    body = records.instance_object(name="db-1", namespace="team-a", spec=SPEC, meta=RequestMeta())
    assert SHARD_LABEL not in body["metadata"]["labels"]
