"""The typed views over wire objects (issue 28): what each reads, and that a field of the wrong type reads as
absent and unknown fields are ignored — an object edited by hand never makes a reconcile fail."""

from __future__ import annotations

import json
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID, FINALIZER
from opbroker.controller.core.views import (
    ApiResource,
    ApiStatus,
    BindingView,
    EntryView,
    EventView,
    InstanceView,
    Meta,
    ObjectView,
    OperationView,
    OwnerRef,
    SecretView,
    namespace_terminating,
    resources_of,
)

OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1", "controller": True, "extra": 1}


def test_owner_references_are_read_and_entries_without_a_uid_skipped() -> None:
    meta = Meta.of(
        {
            "ownerReferences": [OWNER, {"name": "no-uid"}, "not an entry", {"uid": 7}, {"uid": "u-2", "kind": 3}],
            "annotations": {ANNOTATION_OWNER_UID: "u-9", "n": 5},
        }
    )
    assert meta.owners == (
        OwnerRef(uid="u-1", api_version="v1", kind="ConfigMap", name="o", controller=True),
        OwnerRef(uid="u-2"),
    )
    assert meta.owners[0].wire is OWNER, "kept whole, for a patch that writes the list back"
    assert meta.owner_uids == ("u-1", "u-2")
    assert meta.owned_by("u-2") and not meta.owned_by("u-9")
    assert meta.stamped("u-9") and not meta.stamped("u-1")
    assert dict(meta.annotations) == {ANNOTATION_OWNER_UID: "u-9"}, "a value that is not a string is absent"


@pytest.mark.parametrize(
    ("metadata", "owners"),
    [(None, ()), ({"ownerReferences": {"uid": "u"}}, ()), ("metadata", ()), ({"ownerReferences": None}, ())],
)
def test_owner_references_of_the_wrong_type_read_as_none(metadata: object, owners: tuple[OwnerRef, ...]) -> None:
    assert Meta.of(metadata).owners == owners


@pytest.mark.parametrize(
    ("finalizers", "deleting", "leaving"),
    [([FINALIZER], True, False), ([], True, True), (["other"], True, True), ([FINALIZER], False, False)],
)
def test_an_object_deleted_without_our_finalizer_is_leaving(
    finalizers: list[str], deleting: bool, leaving: bool
) -> None:
    metadata: dict[str, Any] = {"finalizers": finalizers}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert Meta.of(metadata).leaving is leaving


def test_an_object_view_reads_its_type_and_metadata() -> None:
    view = ObjectView.of({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "unknown": {"x": 1}})
    assert (view.api_version, view.kind, view.meta.name) == ("v1", "Secret", "s")
    odd = ObjectView.of({"apiVersion": 1, "kind": None, "metadata": []})
    assert (odd.api_version, odd.kind, odd.meta.name, odd.meta.owners) == ("", "", "", ())
    assert ObjectView.maybe(None) is None


def test_a_secret_view_keeps_only_string_data() -> None:
    secret = SecretView.of({"type": "Opaque", "metadata": {"uid": "s-1"}, "data": {"a": "YQ==", "b": 1, "c": None}})
    assert dict(secret.data) == {"a": "YQ=="}
    assert (secret.type, secret.meta.uid) == ("Opaque", "s-1")
    assert SecretView.of({"data": ["a"]}).data == {}
    assert SecretView.maybe(None) is None


@pytest.mark.parametrize(
    ("body", "message", "reason"),
    [
        ({"kind": "Status", "message": "nope", "reason": "Invalid", "details": {"x": "y"}}, "nope", "Invalid"),
        (json.dumps({"message": "as text", "reason": "Forbidden"}), "as text", "Forbidden"),
        (json.dumps({"message": "as bytes"}).encode(), "as bytes", None),
        ("not json at all", None, None),
        ("[1, 2]", None, None),
        ({"message": 4, "reason": ["x"]}, None, None),
        (None, None, None),
    ],
)
def test_an_api_status_reads_message_and_reason(body: object, message: str | None, reason: str | None) -> None:
    status = ApiStatus.of(body)
    assert (status.message, status.reason) == (message, reason)


def test_discovery_entries_are_matched_by_any_of_their_names() -> None:
    document = {
        "resources": [
            {"name": "sfplans/status", "kind": "SFPlan", "verbs": ["get"]},
            {
                "name": "sfplans",
                "kind": "SFPlan",
                "singularName": "sfplan",
                "shortNames": ["sfp", 3],
                "verbs": ["list", "watch", None],
                "unknown": True,
            },
            "garbage",
        ]
    }
    plans, status = resources_of(document)[1], resources_of(document)[0]
    assert status.subresource and not plans.subresource
    assert plans.short_names == ("sfp",) and plans.verbs == frozenset({"list", "watch"})
    assert all(plans.named(n) for n in ("sfplans", "sfplan", "sfp", "SFPlan", "sfPlan"))
    assert not plans.named("sfservices")
    assert ApiResource.of("garbage") == ApiResource("", "", None, (), frozenset())
    assert resources_of({"resources": {"name": "x"}}) == () and resources_of(None) == ()


def test_an_operation_view_reads_when_it_started() -> None:
    status = OperationView.of(
        {
            "operationStartedAt": "2026-01-01T00:00:00Z",
            "lastOperation": {"type": "provision", "startedAt": "2025-12-31T00:00:00Z"},
            "resources": [{"kind": "ConfigMap"}],
        }
    )
    assert (status.started_at, status.requested_at, status.last_operation_type) == (
        "2026-01-01T00:00:00Z",
        "2025-12-31T00:00:00Z",
        "provision",
    )
    assert status.records_resources and status.resources == (), "recorded, though no entry is a reference"
    odd = OperationView.of({"operationStartedAt": 5, "lastOperation": "provision", "resources": []})
    assert (odd.started_at, odd.requested_at, odd.last_operation_type, odd.records_resources) == (
        None,
        None,
        None,
        False,
    )


def test_an_operation_view_reads_which_recorded_objects_are_orphans() -> None:
    """``deletionPolicy: orphan`` on a ``status.resources`` entry; absent (a status from before policies), ``delete``
    or anything else is deleted as it always was."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "n"}
    status = OperationView.of(
        {
            "resources": [
                {**cm, "name": "kept", "deletionPolicy": "orphan"},
                {**cm, "name": "old"},
                {**cm, "name": "plain", "deletionPolicy": "delete"},
                {**cm, "name": "odd", "deletionPolicy": "Orphan"},
                {"kind": "no apiVersion", "deletionPolicy": "orphan"},
            ]
        }
    )
    assert [r.name for r in status.resources] == ["kept", "old", "plain", "odd"]
    assert [r.name for r in status.orphans] == ["kept"]
    assert OperationView.of({"resources": "x"}).orphans == ()


def test_meta_reads_a_pause_only_from_its_one_value() -> None:
    assert Meta.of({"annotations": {"opbroker.io/paused": "true"}}).paused
    for value in ("True", "yes", "", 1):
        assert not Meta.of({"annotations": {"opbroker.io/paused": value}}).paused
    assert not Meta.of({}).paused


def test_instance_and_binding_views_read_their_type_spec_and_context() -> None:
    body = {
        "apiVersion": "servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": "i", "namespace": "n"},
        "spec": {"planId": "p", "serviceId": "s", "context": {"namespace": "elsewhere"}, "new": 1},
    }
    view = InstanceView.of(body)
    assert (view.api_version, view.kind, view.service_id, view.context_namespace) == (
        "servicefabrik.io/v1alpha1",
        "SFServiceInstance",
        "s",
        "elsewhere",
    )
    assert view.spec is body["spec"]
    odd = InstanceView.of({"metadata": {"name": "i"}, "spec": {"context": ["namespace"]}})
    assert (odd.context_namespace, odd.api_version) == (None, "")
    assert InstanceView.of({"spec": "x"}).spec is None
    assert InstanceView.of({"spec": {"context": {"namespace": 3}}}).context_namespace is None
    binding = BindingView.of({"apiVersion": "v", "kind": "SFServiceBinding", "spec": {"instanceId": "i"}})
    assert (binding.api_version, binding.kind, binding.spec) == ("v", "SFServiceBinding", {"instanceId": "i"})


def test_an_entry_view_reads_its_service_and_spec() -> None:
    plan = EntryView.of({"spec": {"id": "p", "serviceId": "s", "templates": []}})
    assert (plan.osb_id, plan.service_id, dict(plan.spec)) == ("p", "s", {"id": "p", "serviceId": "s", "templates": []})
    odd = EntryView.of({"spec": {"id": 1, "serviceId": ["s"]}})
    assert (odd.osb_id, odd.service_id) == ("", "")
    assert EntryView.of({"spec": None}).spec == {}


def test_an_event_view_reads_what_the_watch_handlers_need() -> None:
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": "7", "generation": 2, "finalizers": [FINALIZER]},
        "spec": {"planId": "p", "serviceId": "s", "instanceId": "i"},
        "status": {"state": "succeeded", "observedGeneration": 2, "conditions": [{"type": "Ready"}]},
    }
    seen = EventView.of(body)
    assert (seen.plan_id, seen.service_id, seen.instance_ref, seen.state, seen.resource_version) == (
        "p",
        "s",
        "i",
        "succeeded",
        "7",
    )
    assert seen.fingerprint == (2, None, True, "succeeded", 2, False)
    body["status"]["conditions"] = []  # a change no reconcile decides on
    body["metadata"]["annotations"] = {"note": "x", "opbroker.io/paused": "no"}  # nor is this
    assert EventView.of(body).fingerprint == seen.fingerprint
    body["metadata"]["annotations"]["opbroker.io/paused"] = "true"  # an administrator paused it: reconciled
    paused = EventView.of(body).fingerprint
    assert paused != seen.fingerprint and paused[-1] is True
    body["metadata"]["deletionTimestamp"] = "now"
    assert EventView.of(body).fingerprint != paused
    odd = EventView.of({"metadata": "x", "spec": {"planId": 3}, "status": {"state": 4}})
    assert (odd.plan_id, odd.state, odd.resource_version, odd.fingerprint[2]) == ("", None, None, False)


@pytest.mark.parametrize(
    ("namespace", "going"),
    [
        ({"metadata": {"name": "n"}, "status": {"phase": "Active"}}, False),
        ({"metadata": {"name": "n"}, "status": {"phase": "Terminating"}}, True),
        ({"metadata": {"deletionTimestamp": "now"}}, True),
        ({"metadata": None, "status": "Terminating"}, False),
        (None, True),
    ],
)
def test_namespace_terminating_tolerates_odd_fields(namespace: dict[str, Any] | None, going: bool) -> None:
    assert namespace_terminating(namespace) is going
