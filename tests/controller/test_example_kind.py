"""A kind added as docs/controller.md ("How to add a kind") says, in three files (tests/controller/example_kind:
the view, the facts and pure plan, observe/act and the one registration): its plan table-tested, then run on the
controller's own runtime and informers against a real API server — no line of the controller changed for it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import FINALIZER
from opbroker.controller.core import actions as a
from opbroker.controller.runtime.informers import Informers
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.runner import Runtime
from tests.controller.example_kind.kind import register
from tests.controller.example_kind.plan import GreetingFacts, plan
from tests.controller.example_kind.view import GREETINGS, GreetingView
from tests.waiting import wait_for

KEY = Key("greeting", "ns", "hi")


def greeting(
    *, name: Any = "Ada", finalizers: tuple[str, ...] = (), deleting: bool = False, status: Any = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "hi", "namespace": "ns", "generation": 2, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "spec": {"name": name}, "status": status or {}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (greeting(), [a.EnsureFinalizer(), a.Continue()]),
        (
            greeting(finalizers=(FINALIZER,)),
            [
                a.WriteStatus(
                    patch={"greeting": "Hello, Ada!", "observedGeneration": 2},
                    event=a.Event("Greeted", "Hello, Ada!"),
                )
            ],
        ),
        (greeting(finalizers=(FINALIZER,), status={"greeting": "Hello, Ada!", "observedGeneration": 2}), []),
        (
            greeting(name=7, finalizers=(FINALIZER,), status={"greeting": "Hello, Ada!", "observedGeneration": 1}),
            [
                a.WriteStatus(
                    patch={"greeting": "Hello, nobody!", "observedGeneration": 2},
                    event=a.Event("Greeted", "Hello, nobody!"),
                )
            ],
        ),
        (greeting(finalizers=(FINALIZER, "other"), deleting=True), [a.EnsureFinalizer(present=False)]),
        (greeting(finalizers=("other",), deleting=True), []),
    ],
    ids=["adopt", "greet", "settled", "wrong-type-reads-as-absent", "let-go", "not-ours"],
)
def test_the_plan(body: dict[str, Any], expected: list[Any]) -> None:
    assert plan(GreetingFacts(KEY, GreetingView.of(body))) == expected


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{GREETINGS.plural}.{GREETINGS.group}"},
    "spec": {
        "group": GREETINGS.group,
        "scope": "Namespaced",
        "names": {"plural": GREETINGS.plural, "singular": "greeting", "kind": "Greeting"},
        "versions": [
            {
                "name": GREETINGS.version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def install_crd(api_client: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api_client)
    try:
        extensions.create_custom_resource_definition(CRD)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        found = extensions.read_custom_resource_definition(CRD["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in (found.status.conditions or []))

    wait_for(established, 30, "the Greeting CRD to be established")


def test_the_example_kind_runs_on_the_controllers_runtime(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    group, version, plural = GREETINGS.group, GREETINGS.version, GREETINGS.plural

    def read() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = custom.get_namespaced_custom_object(group, version, namespace, plural, "hi")
            return found
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def said(text: str, generation: int) -> bool:
        status = (read() or {}).get("status") or {}
        return status.get("greeting") == text and status.get("observedGeneration") == generation

    def steps() -> None:
        body = {"apiVersion": f"{group}/{version}", "kind": "Greeting", "metadata": {"name": "hi"}}
        custom.create_namespaced_custom_object(group, version, namespace, plural, {**body, "spec": {"name": "Ada"}})
        wait_for(lambda: said("Hello, Ada!", 1), 30, "the first greeting")
        assert FINALIZER in (read() or {})["metadata"]["finalizers"]
        custom.patch_namespaced_custom_object(group, version, namespace, plural, "hi", {"spec": {"name": "Grace"}})
        wait_for(lambda: said("Hello, Grace!", 2), 30, "the greeting of the new generation")
        custom.delete_namespaced_custom_object(group, version, namespace, plural, "hi")
        wait_for(lambda: read() is None, 30, "the finalizer let go")

    async def scenario() -> None:
        runtime = Runtime(workers=2)
        watches = register(runtime, Kube(api_client), runtime.enqueue_threadsafe)
        runtime.start()
        informers = Informers(api_client, watches, watch_seconds=30)
        informers.start()
        try:
            await asyncio.to_thread(steps)
        finally:
            informers.stop()
            await informers.wait()
            await runtime.stop(drain=5.0)

    asyncio.run(scenario())
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="reason=Greeted").items
    assert {e.message for e in events} >= {"Hello, Ada!", "Hello, Grace!"}
