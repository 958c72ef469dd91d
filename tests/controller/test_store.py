"""The controller's object store: what it serves, what it refuses to serve, and that versions only go forward."""

from __future__ import annotations

import random
from typing import Any

from opbroker.controller.runtime.jsoncopy import copy_json
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore

DB = ("demo.opbroker.io/v1", "Database")


def obj(name: str, version: str, *, namespace: str = "ns", **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": DB[0],
        "kind": DB[1],
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version, "managedFields": [{"x": 1}]},
        **fields,
    }


def test_a_type_nobody_feeds_is_never_served() -> None:
    store = ObjectStore()
    store.put(DB, obj("a", "1"))  # e.g. a write's answer on a sister cluster: nothing would keep it fresh
    assert store.lookup(DB, "ns", "a") is UNKNOWN


def test_fed_by_events_only_absent_means_unknown() -> None:
    store = ObjectStore()
    store.feed(DB)
    assert store.lookup(DB, "ns", "a") is UNKNOWN
    store.put(DB, obj("a", "1", spec={"size": 1}))
    found = store.lookup(DB, "ns", "a")
    assert found["spec"] == {"size": 1}
    assert "managedFields" not in found["metadata"]


def test_a_listed_type_is_complete() -> None:
    store = ObjectStore()
    store.put(DB, obj("stale", "1"))
    store.replace(DB, [obj("a", "5")])
    assert store.lookup(DB, "ns", "missing") is None
    assert store.lookup(DB, "ns", "a")["metadata"]["resourceVersion"] == "5"
    store.replace(DB, [])
    assert store.lookup(DB, "ns", "a") is None  # a relist drops what is gone


def test_a_listing_held_page_by_page_is_complete_only_at_its_end() -> None:
    """Pages are served as they come; until the listing is whole an object not held yet is unknown (read from the
    API), never absent; at the end what the listing did not name is gone, and a newer copy held stays."""
    store = ObjectStore()
    store.put(DB, obj("ignored", "1"))  # not fed yet: nothing keeps it fresh
    store.hold_page(DB, [obj("a", "5"), obj("b", "6")])
    assert store.lookup(DB, "ns", "a")["metadata"]["resourceVersion"] == "5"
    assert store.lookup(DB, "ns", "c") is UNKNOWN and store.lookup(DB, "ns", "ignored") is UNKNOWN
    store.put(DB, obj("b", "9"))  # our write's answer, newer than the page below (listed before the write)
    store.hold_page(DB, [obj("b", "7"), obj("c", "8")])
    store.complete(DB, {("ns", "b"), ("ns", "c")})
    assert store.lookup(DB, "ns", "a") is None and store.lookup(DB, "ns", "missing") is None
    assert store.lookup(DB, "ns", "b")["metadata"]["resourceVersion"] == "9"
    assert store.lookup(DB, "ns", "c")["metadata"]["resourceVersion"] == "8"
    assert store.census() == store.counted()


def test_a_type_followed_in_part_holds_only_what_its_watch_follows_and_is_never_complete() -> None:
    """A shard's source watch (issue 46): a copy of an object labelled for another shard is never held — not even a
    write's answer (an object relabelled away leaves the watch: nothing would keep its copy current) — and an object
    not held is unknown, never absent (it may exist, labelled for another shard)."""
    store = ObjectStore()
    store.cover(DB, lambda labels: labels.get("opbroker.io/shard") in (None, "1"))
    labelled = {"labels": {"opbroker.io/shard": "1"}}
    store.hold_page(DB, [obj("ours", "5"), obj("unlabelled", "6")])
    store.complete(DB, {("ns", "ours"), ("ns", "unlabelled")}, whole=False)
    assert store.lookup(DB, "ns", "elsewhere") is UNKNOWN
    moved = obj("ours", "7")
    moved["metadata"]["labels"] = {"opbroker.io/shard": "2"}
    store.put(DB, moved)  # the answer of the write that relabelled it for shard 2
    assert store.lookup(DB, "ns", "ours") is UNKNOWN
    back = obj("ours", "8")
    back["metadata"].update(labelled)
    store.put(DB, back)
    older = obj("ours", "7")
    older["metadata"]["labels"] = {"opbroker.io/shard": "2"}
    store.put(DB, older)  # a late answer, older than the copy held: it neither replaces nor drops it
    assert store.lookup(DB, "ns", "ours")["metadata"]["resourceVersion"] == "8"
    assert store.census() == store.counted()


def test_a_followed_read_trusts_the_absence_a_listing_of_part_of_a_type_shows() -> None:
    """A registry is written by opbroker alone, labelled with its owner's shard and moved along with it: if it exists,
    the shard's watch follows it, so once listed its absence is a fact for that read (one 404 per new instance and
    binding on every shard but the first, otherwise) — never for a read that knows no such thing."""
    store = ObjectStore()
    store.cover(DB, lambda labels: labels.get("opbroker.io/shard") in (None, "1"))
    store.hold_page(DB, [obj("ours", "5")])
    assert store.lookup(DB, "ns", "missing", followed=True) is UNKNOWN  # not listed whole yet
    store.complete(DB, {("ns", "ours")}, whole=False)
    assert store.lookup(DB, "ns", "missing", followed=True) is None
    assert store.lookup(DB, "ns", "missing") is UNKNOWN
    store.forget_type(DB)  # its watch broke off: nothing is known until it is listed again
    assert store.lookup(DB, "ns", "missing", followed=True) is UNKNOWN


def test_the_same_version_again_is_not_held_anew() -> None:
    """A watch event of the version our write's answer already stored (or a listed page's event) is not
    serialised again: the text held stays the very same object. A metadata-only copy of it is filled."""
    store = ObjectStore()
    store.feed(DB)
    store.put(DB, obj("a", "5", spec={"size": 1}))
    text = store._objects[(*DB, "ns", "a")][1]
    store.put(DB, obj("a", "5", spec={"size": 1}))
    assert store._objects[(*DB, "ns", "a")][1] is text
    store.stale(DB, "ns", "a")
    store.put(DB, obj("a", "5", spec={"size": 2}))
    assert store.lookup(DB, "ns", "a")["spec"] == {"size": 2}


def test_versions_only_move_forward() -> None:
    store = ObjectStore()
    store.feed(DB)
    store.put(DB, obj("a", "10", spec={"v": "new"}))
    store.put(DB, obj("a", "9", spec={"v": "late event"}))
    assert store.lookup(DB, "ns", "a")["spec"] == {"v": "new"}
    store.remove(DB, obj("a", "8"))  # the deletion of an earlier object of the same name
    assert store.lookup(DB, "ns", "a") is not UNKNOWN
    store.remove(DB, obj("a", "11"))
    assert store.lookup(DB, "ns", "a") is UNKNOWN


def test_copies_are_private_both_ways() -> None:
    store = ObjectStore()
    store.feed(DB)
    given = obj("a", "1", status={"phase": "Ready"})
    store.put(DB, given)
    given["status"]["phase"] = "changed by the caller after the put"
    served = store.lookup(DB, "ns", "a")
    served["status"]["phase"] = "changed by a reconciler"
    assert store.lookup(DB, "ns", "a")["status"] == {"phase": "Ready"}


def test_a_broken_watch_stops_serving_its_type() -> None:
    store = ObjectStore()
    store.replace(DB, [obj("a", "1")])
    store.forget_type(DB)
    assert store.lookup(DB, "ns", "a") is UNKNOWN
    store.feed(DB)
    store.discard(DB, "ns", "a")
    assert store.lookup(DB, "ns", "a") is UNKNOWN


def test_a_conflicts_stale_copy_is_read_again_never_taken_for_absent() -> None:
    """Issue 31's informers make our kinds complete; a reconcile's 409 dropped its object's copy with ``discard``,
    so the retry read "absent" and the instance stayed in_queue for good (7 of 1 000 in a bench). ``stale`` makes
    the next read go to the API, and a newer event is held again."""
    store = ObjectStore()
    store.replace(DB, [obj("a", "5")])
    store.stale(DB, "ns", "a")
    assert store.lookup(DB, "ns", "a") is UNKNOWN
    assert store.version_of(DB, "ns", "a") == "5"
    store.put(DB, obj("a", "6"))
    assert store.lookup(DB, "ns", "a")["metadata"]["resourceVersion"] == "6"
    store.stale(DB, "ns", "unseen")  # a conflict on an object the store never held: unknown, not absent
    assert store.lookup(DB, "ns", "unseen") is UNKNOWN
    assert store.census() == store.counted()


def test_versions_are_answered_without_a_copy() -> None:
    store = ObjectStore()
    assert store.version_of(DB, "ns", "a") is UNKNOWN
    store.replace(DB, [obj("a", "7", spec={"size": 1})])
    assert store.version_of(DB, "ns", "a") == "7"
    assert store.version_of(DB, "ns", "missing") is None  # listed: known not to exist


def test_objects_are_held_as_compact_text() -> None:
    """Issue 18 (memory per settled object): dicts of a settled binding took 7.4 KB, its JSON text 1.6 KB."""
    store = ObjectStore()
    store.replace(DB, [obj("a", "7", spec={"users": {"main": ["owner"]}})])
    ((version, text),) = store._objects.values()
    assert version == "7" and isinstance(text, bytes) and b"managedFields" not in text and b": " not in text


def test_what_orjson_refuses_the_standard_library_holds() -> None:
    """The store's JSON goes through orjson (kubeclient.jsontext); what orjson cannot write — an integer beyond 64
    bits, a lone surrogate, a non-string key — is written by the standard library and read back as it was."""
    store = ObjectStore()
    store.feed(DB)
    odd = {"big": 2**70, "surrogate": "\ud800", "é": "ü"}
    store.put(DB, obj("a", "1", spec=odd))
    assert store.lookup(DB, "ns", "a")["spec"] == odd


def test_json_copies_share_nothing() -> None:
    original = {"a": [{"b": 1}, "x"], "c": {"d": None}}
    copied = copy_json(original)
    assert copied == original
    copied["a"][0]["b"] = 2
    copied["c"]["d"] = "set"
    assert original == {"a": [{"b": 1}, "x"], "c": {"d": None}}


def test_the_census_kept_as_objects_change_is_the_census_counted() -> None:
    """Every way an object enters, changes or leaves the store keeps the census a scrape reads (without a pass
    over the store) equal to one counted afresh: random operations over two types, bodies and metadata only."""
    rng = random.Random(28)
    store = ObjectStore()
    secret = ("v1", "Secret")
    store.feed(DB)
    for step in range(3_000):
        type_key = rng.choice((DB, secret))
        name, version = f"o{rng.randrange(8)}", str(rng.randrange(1, 30))
        body = {
            **obj(name, version),
            "apiVersion": type_key[0],
            "kind": type_key[1],
            "spec": {"n": "x" * rng.randrange(9)},
        }
        match rng.randrange(10):
            case 0:
                store.put(type_key, body)
            case 1:
                store.note(type_key, body)
            case 2:
                store.fill(type_key, body)
            case 3:
                store.remove(type_key, body)
            case 4:
                store.discard(type_key, "ns", name)
            case 5:
                listed = [{**body, "metadata": {**body["metadata"], "name": f"o{i}"}} for i in range(rng.randrange(4))]
                store.replace(type_key, listed, bodies=rng.random() < 0.5)
            case 6:
                store.forget_type(type_key)
            case 7:
                store.hold_page(type_key, [{**body, "metadata": {**body["metadata"], "name": f"o{rng.randrange(8)}"}}])
            case 8:
                store.complete(type_key, {("ns", f"o{i}") for i in range(8) if rng.random() < 0.5})
            case _:
                store.feed(type_key)
        assert store.census() == store.counted(), f"after step {step}"
    assert store.census(), "the walk ended with something held"


def test_the_catalog_is_read_before_the_first_reconcile(api_client: Any, demo_catalog: list[dict[str, Any]]) -> None:
    """After a restart an instance's event may come before its plan's; the catalog is loaded first."""
    from opbroker.controller.app import Controller
    from opbroker.controller.settings import ControllerSettings

    controller = Controller(api_client, ControllerSettings())
    plan = next(doc for doc in demo_catalog if doc["kind"] == "SFPlan")
    assert controller.catalog.plan(plan["spec"]["id"]) is None
    controller.load_catalog()
    entry = controller.catalog.plan(plan["spec"]["id"])
    assert entry is not None and entry.model is not None
    service = next(doc for doc in demo_catalog if doc["kind"] == "SFService")
    assert controller.catalog.service(service["spec"]["id"]) is not None
