"""What joining and leaving a shared singleton writes, decided from the object as read (``core.singleton_plan``).

Aspects: a singleton made for the plan, one the instance shares already, or an adopted one is joined — by an owner
reference where they reach it, else by its tracked users — and anything else is refused; a full list refuses; the
write carries the version read. Leaving writes nothing for an object gone or not the owner's, waits while it is
being deleted, deletes it at the version read when the owner is its last, else drops the owner's reference and its
entry. The effects perform exactly the write decided (the executor's singleton actions, one request each).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_SINGLETON, ANNOTATION_SINGLETON_USERS, LABEL_PLAN
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core import decisions
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb.core.singleton_plan import Leaving, joining, leaving, listing
from opbroker.controller.runtime.keys import Key
from tests.controller.test_instance_plan import executor

REF = ResourceRef(api_version="v1", kind="ConfigMap", name="shared", namespace="elsewhere")
MINE = {"apiVersion": "v1", "kind": "Instance", "name": "db", "uid": "me"}
THEIRS = {"apiVersion": "v1", "kind": "Instance", "name": "other", "uid": "u1"}


def live(
    *,
    users: list[str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    plan: str | None = "p",
    singleton: bool = True,
    deleting: bool = False,
) -> ObjectView:
    annotations = {ANNOTATION_SINGLETON: "true"} if singleton else {}
    if users is not None:
        annotations[ANNOTATION_SINGLETON_USERS] = json.dumps(users)
    meta: dict[str, Any] = {
        "name": "shared",
        "namespace": "elsewhere",
        "resourceVersion": "41",
        "annotations": annotations,
        "labels": {LABEL_PLAN: plan} if plan else {},
        "ownerReferences": owners or [],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return ObjectView.of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


def apply(*, owned: bool, adopt: bool = False) -> a.Apply:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "labels": {LABEL_PLAN: "p"}}}
    return a.Apply(manifest, "me", MINE, singleton=True, owned=owned, adopt=adopt, as_user="sa")


JOINS: list[tuple[str, ObjectView, a.Apply, object]] = [
    ("tracked, made for the plan: listed, at the version read", live(users=["u1"]), apply(owned=False),
     a.JoinSingleton(REF, ("u1", "me"), "41", as_user="sa")),
    ("tracked, listed already: nothing", live(users=["me", "u1"]), apply(owned=False), None),
    ("tracked, another plan's: refused", live(users=["u1"], plan="q"), apply(owned=False), a.Refused.NOT_OWNED),
    ("tracked, another plan's but we use it already: nothing", live(users=["me"], plan="q"), apply(owned=False), None),
    ("not a singleton, adopted: listed", live(users=[], singleton=False, plan=None), apply(owned=False, adopt=True),
     a.JoinSingleton(REF, ("me",), "41", as_user="sa")),
    ("not a singleton, not adopted: refused", live(singleton=False, plan=None), apply(owned=False),
     a.Refused.NOT_OWNED),
    ("owned, another instance's: our reference added", live(owners=[THEIRS]), apply(owned=True),
     a.ShareSingleton(REF, (THEIRS, MINE), "41", as_user="sa")),
    ("owned, ours already: nothing", live(owners=[THEIRS, MINE]), apply(owned=True), None),
]  # fmt: skip


@pytest.mark.parametrize(("found", "action", "expected"), [r[1:] for r in JOINS], ids=[r[0] for r in JOINS])
def test_joining(found: ObjectView, action: a.Apply, expected: object) -> None:
    assert joining(found, REF, action) == expected


def test_a_full_list_refuses_the_next_user() -> None:
    full = live(users=[f"u{i}" for i in range(decisions.MAX_SINGLETON_USERS)])
    assert joining(full, REF, apply(owned=False)) is a.Refused.SINGLETON_FULL
    assert listing(full, REF, owner_uid="u7") is None  # a user listed already is no newcomer


LEAVES: list[tuple[str, ObjectView | None, Leaving]] = [
    ("gone: nothing", None, Leaving(None, False)),
    ("not ours: nothing", live(users=["u1"], owners=[THEIRS]), Leaving(None, False)),
    ("being deleted, ours: wait", live(users=["me"], deleting=True), Leaving(None, True)),
    ("the last user: deleted at the version read", live(users=["me"]), Leaving(a.DeleteSingleton(REF, "41"), True)),
    ("the last owner: deleted at the version read", live(owners=[MINE]), Leaving(a.DeleteSingleton(REF, "41"), True)),
    ("one of the users: our entry dropped", live(users=["me", "u1"]),
     Leaving(a.LeaveSingleton(REF, None, ("u1",), "41"), False)),
    ("one of the owners: our reference dropped", live(owners=[MINE, THEIRS]),
     Leaving(a.LeaveSingleton(REF, (THEIRS,), None, "41"), False)),
]  # fmt: skip


@pytest.mark.parametrize(("found", "expected"), [r[1:] for r in LEAVES], ids=[r[0] for r in LEAVES])
def test_leaving(found: ObjectView | None, expected: Leaving) -> None:
    assert leaving(found, REF, owner_uid="me") == expected


def test_the_effects_perform_exactly_the_write_decided() -> None:
    run, kube, created = executor()
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "shared", "namespace": "elsewhere", "annotations": {ANNOTATION_SINGLETON_USERS: "[]"}},
        }
    )
    version = kube.object("v1", "ConfigMap", "elsewhere", "shared")["metadata"]["resourceVersion"]
    kube.calls.clear()
    key = Key("instance", "elsewhere", "db")
    run.run(key, created, [a.JoinSingleton(REF, ("u1", "me"), version)])
    found = kube.object("v1", "ConfigMap", "elsewhere", "shared")
    assert json.loads(found["metadata"]["annotations"][ANNOTATION_SINGLETON_USERS]) == ["me", "u1"]
    run.run(key, created, [a.LeaveSingleton(REF, None, ("u1",), found["metadata"]["resourceVersion"])])
    found = kube.object("v1", "ConfigMap", "elsewhere", "shared")
    assert json.loads(found["metadata"]["annotations"][ANNOTATION_SINGLETON_USERS]) == ["u1"]
    run.run(key, created, [a.DeleteSingleton(REF, found["metadata"]["resourceVersion"])])
    assert kube.object("v1", "ConfigMap", "elsewhere", "shared") is None
    assert [c.verb for c in kube.calls] == ["patch", "patch", "delete"]  # no read: nothing decided
