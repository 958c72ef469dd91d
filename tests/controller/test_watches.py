"""The declared watches: one kopf handler per watch, ids unique, each handler given a body of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from opbroker.controller.multicluster.clusters import CLUSTERS
from opbroker.controller.watches import Watch, register


def handlers(registry: kopf.OperatorRegistry) -> dict[str, Any]:
    return {handler.id: handler for handler in registry._watching.get_all_handlers()}


def test_each_watch_becomes_one_handler_on_its_resource() -> None:
    registry = kopf.OperatorRegistry()
    register(
        registry,
        [
            Watch("batch/v1", "jobs", lambda *_: None, "jobs"),
            Watch("v1", "secrets", lambda *_: None, "secrets"),
            Watch.of(CLUSTERS, lambda *_: None, id="clusters"),
        ],
    )
    found = {id_: (h.selector.group, h.selector.version, h.selector.any_name) for id_, h in handlers(registry).items()}
    assert found == {
        "jobs": ("batch", "v1", "jobs"),
        "secrets": ("", "v1", "secrets"),
        "clusters": (CLUSTERS.group, CLUSTERS.version, CLUSTERS.plural),
    }


def test_two_watches_with_one_id_are_refused_rather_than_one_silently_replacing_the_other() -> None:
    with pytest.raises(ValueError, match="'bindings'"):
        register(
            kopf.OperatorRegistry(),
            [Watch("v1", "a", lambda *_: None, "bindings"), Watch("v1", "b", lambda *_: None, "bindings")],
        )


def test_a_handler_gets_the_event_type_and_a_copy_whole_or_its_identity_only() -> None:
    got: list[tuple[str, str, dict[str, Any]]] = []
    registry = kopf.OperatorRegistry()
    register(
        registry,
        [
            Watch("apps/v1", "deployments", lambda t, b: got.append(("whole", t, b)), "whole"),
            Watch(
                "apps/v1", "deployments", lambda t, b: got.append(("identity", t, b)), "identity", metadata_only=True
            ),
        ],
    )
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {}}
    for handler in handlers(registry).values():
        asyncio.run(handler.fn(event={"type": "MODIFIED"}, body=body))
    whole = next(b for what, _, b in got if what == "whole")
    identity = next(b for what, _, b in got if what == "identity")
    assert {t for _, t, _ in got} == {"MODIFIED"}
    assert whole == body and whole is not body
    assert identity == {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "labels": {"a": "b"}}}
    identity["metadata"]["labels"]["a"] = "changed"  # a handler's body is its own: kopf's stays as it was
    assert body["metadata"]["labels"] == {"a": "b"}


def test_the_controller_declares_each_subsystems_watches_once() -> None:
    from kubernetes import client

    from opbroker.controller.app import Controller
    from opbroker.controller.settings import ControllerSettings

    declared = Controller(client.ApiClient(), ControllerSettings(multicluster=True)).all_watches()
    resources = {(w.api_version, w.plural) for w in declared}
    assert len({w.id for w in declared}) == len(declared)  # register() would refuse a repeat
    assert {
        ("osb.servicefabrik.io/v1alpha1", "sfserviceinstances"),
        ("resource.servicefabrik.io/v1alpha1", "sfclusters"),
        ("batch/v1", "jobs"),
        ("servicecatalog.k8s.io/v1alpha1", "instances"),
    } <= resources
    # SFServiceBindings feed two subsystems (the controller's bindings, the claims' registered services)
    assert [w.id for w in declared if w.plural == "sfservicebindings"] == [
        "sfservicebindings",
        "claims-sfservicebindings",
    ]
