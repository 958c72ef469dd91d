"""Shards' pure rules (issue 46): where an object belongs, who handles it, what the assigner writes."""

from __future__ import annotations

import collections
import datetime

import pytest

from opbroker.api.shards import (
    MAX_SHARDS,
    SHARD_LABEL,
    Shards,
    index_from_hostname,
    label_of,
    shard_of,
)
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb.core.drift import differences
from opbroker.controller.runtime.informers import resources_of
from opbroker.controller.runtime.watches import Watch
from opbroker.controller.shards.core import (
    ELSEWHERE,
    MINE,
    HandOver,
    assignment,
    lease_held,
    moves_along,
    ownership,
    relabelling,
)

pytestmark = pytest.mark.unit

NAMES = [f"instance-{n}" for n in range(3000)]


def test_objects_spread_evenly_and_a_new_shard_takes_only_its_own_share() -> None:
    spread = collections.Counter(shard_of("team-a", name, 3) for name in NAMES)
    assert set(spread) == {0, 1, 2} and min(spread.values()) > 900  # ~1 000 each
    moved = [name for name in NAMES if shard_of("team-a", name, 3) != shard_of("team-a", name, 4)]
    assert all(shard_of("team-a", name, 4) == 3 for name in moved)  # nothing moves between the old shards
    assert 600 < len(moved) < 900  # about a quarter
    back = [name for name in NAMES if shard_of("team-a", name, 4) != shard_of("team-a", name, 3)]
    assert set(back) == set(moved)  # 4 → 3 moves only the removed shard's objects


def test_the_shard_depends_on_the_namespace_and_one_shard_is_shard_zero() -> None:
    assert {shard_of(f"ns-{n}", "db", 8) for n in range(200)} == set(range(8))
    assert shard_of("team-a", "db", 1) == 0
    assert shard_of("team-a", "db", 5) == shard_of("team-a", "db", 5)  # stable: no process salt


def test_a_label_reads_as_a_shard_index_or_none() -> None:
    assert label_of({SHARD_LABEL: "2"}) == 2
    for value in (None, "", "-1", "x", "1.0", "0x1", "9999", 3):
        assert label_of({SHARD_LABEL: value}) is None
    assert label_of(None) is None and label_of({}) is None


def test_a_replica_names_its_lease_and_selects_its_own_objects() -> None:
    assert Shards().lease("opbroker-controller") == "opbroker-controller"  # unsharded: as before
    # The other layout's Leases, waited for before acting: a shard the unsharded one; one controller every shard's.
    assert Shards(3, 2).other_layout_leases("lead") == ("lead",)
    assert Shards().other_layout_leases("lead") == tuple(f"lead-shard-{i}" for i in range(MAX_SHARDS))
    assert Shards().selector is None and Shards().label("ns", "db") == {}
    third = Shards(3, 2)
    assert third.lease("opbroker-controller") == "opbroker-controller-shard-2"
    assert third.selector == "opbroker.io/shard=2"
    assert third.unplaced_selector == "opbroker.io/shard notin (0,1,2)"
    assert third.label("ns", "db") == {SHARD_LABEL: str(shard_of("ns", "db", 3))}
    assert Shards(3, 0).coordinator and not third.coordinator


@pytest.mark.parametrize(("count", "index"), [(0, 0), (MAX_SHARDS + 1, 0), (3, 3), (3, -1)])
def test_an_impossible_place_is_refused(count: int, index: int) -> None:
    with pytest.raises(ValueError, match="shard"):
        Shards(count, index)


def test_a_statefulset_pod_takes_its_ordinal_modulo_the_count() -> None:
    assert index_from_hostname("opbroker-controller-0", 3) == 0
    assert index_from_hostname("opbroker-controller-4", 3) == 1  # the second replica of shard 1
    with pytest.raises(ValueError, match="ordinal"):
        index_from_hostname("laptop", 3)


def test_ownership_is_the_label_and_the_owner_hands_over_what_belongs_elsewhere() -> None:
    shards = Shards(3, 1)
    home = next(name for name in NAMES if shard_of("ns", name, 3) == 1)
    away = next(name for name in NAMES if shard_of("ns", name, 3) == 2)
    assert ownership(shards, 1, "ns", home) == MINE
    assert ownership(shards, 1, "ns", away) == HandOver(2)  # labelled here, belongs to 2: moved by its owner
    assert ownership(shards, 2, "ns", home) == ELSEWHERE  # labelled elsewhere: never touched, whatever the rule
    assert ownership(shards, None, "ns", home) == ELSEWHERE  # unlabelled: the assigner's
    assert ownership(Shards(), 5, "ns", away) == MINE  # unsharded: everything, a stale label ignored


def test_the_assigner_labels_only_what_no_running_shard_handles() -> None:
    shards = Shards(3, 0)
    want = shard_of("ns", "db", 3)
    assert assignment(shards, None, "ns", "db", lease_held=False) == want  # a tenant's own object
    assert assignment(shards, 1, "ns", "db", lease_held=False) is None  # a current shard's
    assert assignment(shards, 5, "ns", "db", lease_held=True) is None  # a removed shard that still runs
    assert assignment(shards, 5, "ns", "db", lease_held=False) == want  # a removed shard, gone


def test_a_lease_is_held_while_renewed_within_its_duration() -> None:
    now = datetime.datetime(2026, 12, 5, 10, 0, 0, tzinfo=datetime.UTC)
    second = datetime.timedelta(seconds=1)
    assert lease_held("pod-1", now - 14 * second, 15, now)
    assert not lease_held("pod-1", now - 15 * second, 15, now)
    assert not lease_held("", now, 15, now)  # released
    assert not lease_held("pod-1", None, 15, now)


def test_a_relabelling_is_guarded_by_the_version_read() -> None:
    assert relabelling("42", 3) == {"metadata": {"resourceVersion": "42", "labels": {SHARD_LABEL: "3"}}}


def test_watches_of_one_resource_with_different_selectors_are_streams_of_their_own() -> None:
    def handler(_event_type: str, _body: object) -> None:
        return None

    streams = resources_of(
        [
            Watch("opbroker.io/v1", "sfservicebindings", handler, "shard", label_selector="opbroker.io/shard=0"),
            Watch("opbroker.io/v1", "sfservicebindings", handler, "claims"),
            Watch("opbroker.io/v1", "sfservicebindings", handler, "claims-too"),
        ]
    )
    assert [(s.key, len(s.watches)) for s in streams] == [
        (("opbroker.io/v1", "sfservicebindings", "opbroker.io/shard=0"), 1),
        (("opbroker.io/v1", "sfservicebindings", None), 2),
    ]
    assert streams[0].collection(10).label_selector == "opbroker.io/shard=0"


def test_a_shards_source_watch_follows_its_own_and_the_unlabelled_never_anothers() -> None:
    assert Shards().sources_selector is None and Shards().covers({SHARD_LABEL: "3"})  # unsharded: everything
    middle = Shards(4, 2)
    assert middle.sources_selector == "opbroker.io/shard notin (0,1,3)"
    assert middle.covers({SHARD_LABEL: "2"}) and middle.covers({}) and middle.covers(None)
    assert middle.covers({SHARD_LABEL: "7"})  # a label naming no current shard: the selector selects it too
    assert not middle.covers({SHARD_LABEL: "0"}) and not middle.covers({SHARD_LABEL: "3"})


def test_only_the_owners_stamped_objects_labelled_as_it_was_move_along_with_it() -> None:
    def live(shard: str | None, uid: str | None) -> ObjectView:
        labels = {SHARD_LABEL: shard} if shard is not None else {}
        annotations = {"opbroker.io/owner-uid": uid} if uid is not None else {}
        return ObjectView.of({"metadata": {"name": "db", "labels": labels, "annotations": annotations}})

    assert moves_along(live("1", "uid-a"), "uid-a", 1)
    assert not moves_along(live("1", "uid-b"), "uid-a", 1)  # another owner's (a record is a tenant's request)
    assert not moves_along(live("1", None), "uid-a", 1)  # not stamped: not opbroker's to move
    assert not moves_along(live(None, None), "uid-a", 1)  # a shared singleton: every shard follows it
    assert not moves_along(live("2", "uid-a"), "uid-a", 1)  # moved already
    assert moves_along(live(None, "uid-a"), "uid-a", None)  # made before sharding, placed by the assigner
    assert moves_along(live("5", "uid-a"), "uid-a", 5)  # a removed shard's, placed by the assigner
    assert not moves_along(live("x", "uid-a"), "uid-a", None)  # a label that names no shard is not "none"
    assert not moves_along(None, "uid-a", 1) and not moves_along(live("1", ""), "", 1)


def test_moving_shards_is_not_drift() -> None:
    desired = {"kind": "Database", "metadata": {"labels": {SHARD_LABEL: "3", "team": "a"}}, "spec": {"size": 1}}
    moving = {"kind": "Database", "metadata": {"labels": {SHARD_LABEL: "1", "team": "a"}}, "spec": {"size": 1}}
    assert differences(desired, moving) == ()
    changed = {"kind": "Database", "metadata": {"labels": {SHARD_LABEL: "3", "team": "b"}}, "spec": {"size": 1}}
    assert differences(desired, changed) == ("metadata.labels.team",)
