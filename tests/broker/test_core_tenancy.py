"""The broker's pure core for tenancy (issue 24), as tables: the catalog of the trusted namespaces (an id two
entries declare is served by neither) and which namespaces a request's ``context.namespace`` may name. Over HTTP
against a real broker, as a tenant: tests/tenancy/test_catalog.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opbroker.api.selectors import SelectorError
from opbroker.broker import catalogs, errors
from opbroker.broker.namespaces import NamespacePolicy, admit, context_namespace
from opbroker.broker.settings import Settings
from tests.broker_support import ASYNC_PLAN, SERVICE, SYNC_PLAN, catalog_objects

R = errors.Reason


def objects(namespace: str = "opbroker") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    services, plans = [], []
    for plural, body in catalog_objects():
        item = {**copy.deepcopy(body), "metadata": {**body["metadata"], "namespace": namespace}}
        (services if plural == "sfservices" else plans).append(item)
    return services, plans


def renamed(item: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    copied = copy.deepcopy(item)
    copied["metadata"]["name"] = name
    copied["spec"].update(spec)
    return copied


def offered(catalog: catalogs.Catalog) -> set[str]:
    return {plan["id"] for service in catalog.body().wire()["services"] for plan in service["plans"]}


def test_the_trusted_namespaces_default_to_the_control_plane_namespace_as_the_controllers() -> None:
    assert Settings(namespace="cp").trusted_namespaces == ("cp",)
    assert Settings(namespace="cp", catalog_namespaces=("a", "b")).trusted_namespaces == ("a", "b")


def test_every_entry_is_served_when_each_id_is_declared_once() -> None:
    catalog, problems = catalogs.read(*objects())
    assert problems == []
    assert ASYNC_PLAN in offered(catalog) and catalog.plan(SYNC_PLAN) is not None


def test_a_plan_id_declared_twice_is_served_by_neither() -> None:
    services, plans = objects()
    async_plan = next(p for p in plans if p["spec"]["id"] == ASYNC_PLAN)
    catalog, problems = catalogs.read(services, [*plans, renamed(async_plan, "impostor", description="x")])
    assert catalog.plan(ASYNC_PLAN) is None and ASYNC_PLAN not in offered(catalog)
    assert catalog.plan(SYNC_PLAN) is not None  # the others are served
    assert any(repr(ASYNC_PLAN) in p for p in problems), problems
    with pytest.raises(errors.BrokerError) as raised:
        catalog.resolve(SERVICE, ASYNC_PLAN)
    assert raised.value.reason is R.BAD_REQUEST and "more than one catalog entry" in raised.value.description


def test_an_invalid_entry_declaring_a_served_id_makes_it_a_duplicate_too() -> None:
    """As the controller sees it: the invalid SFPlan still declares the id (it is reported, not served)."""
    services, plans = objects()
    broken = {"metadata": {"name": "broken", "namespace": "opbroker"}, "spec": {"id": ASYNC_PLAN}}
    catalog, problems = catalogs.read(services, [*plans, broken])
    assert catalog.plan(ASYNC_PLAN) is None
    assert any("skipping SFPlan opbroker/broken" in p for p in problems), problems


def test_a_service_id_declared_twice_hides_the_service_and_its_plans() -> None:
    services, plans = objects()
    testdb = next(s for s in services if s["spec"]["id"] == SERVICE)
    catalog, _ = catalogs.read([*services, renamed(testdb, "copy")], plans)
    assert catalog.service(SERVICE) is None and catalog.plan(ASYNC_PLAN) is None
    assert SERVICE not in {s["id"] for s in catalog.body().wire()["services"]}


def test_duplicates_among_specs_given_directly_are_refused_too() -> None:
    _, plans = objects()
    catalog, _ = catalogs.read(*objects())
    spec = catalog.plan(ASYNC_PLAN)
    assert spec is not None and plans
    again = catalogs.Catalog([catalog.service(SERVICE)], [spec, spec])  # type: ignore[list-item]
    assert again.plan(ASYNC_PLAN) is None


# -- context.namespace ------------------------------------------------------------------------------------------

LISTED = NamespacePolicy.of(default="opbroker", names=["team-a"])
SELECTED = NamespacePolicy.of(default="opbroker", names=["team-a"], selector="tenant=true,!frozen")
NOTHING = NamespacePolicy.of(default="opbroker")


@pytest.mark.parametrize(
    ("reason", "namespace", "policy", "labels", "allowed"),
    [
        ("no namespace named", None, NOTHING, None, True),
        ("the default instance namespace", "opbroker", NOTHING, None, True),
        ("nothing configured: any other is refused", "team-a", NOTHING, None, False),
        ("listed", "team-a", LISTED, None, True),
        ("not listed", "kube-system", LISTED, None, False),
        ("labels match", "team-b", SELECTED, {"tenant": "true"}, True),
        ("labels do not match", "team-b", SELECTED, {"tenant": "false"}, False),
        ("a label the selector forbids", "team-b", SELECTED, {"tenant": "true", "frozen": ""}, False),
        ("no such namespace", "team-b", SELECTED, None, False),
        ("listed, whatever its labels", "team-a", SELECTED, None, True),
    ],
)
def test_admit(
    reason: str, namespace: str | None, policy: NamespacePolicy, labels: dict[str, str] | None, allowed: bool
) -> None:
    try:
        admit(namespace, policy, labels)
    except errors.BrokerError as exc:
        assert not allowed, f"{reason}: refused ({exc.description})"
        assert exc.reason is R.BAD_REQUEST
        assert f"context.namespace {namespace!r} is not allowed" in exc.description
    else:
        assert allowed, f"{reason}: admitted"


def test_the_refusal_says_why() -> None:
    with pytest.raises(errors.BrokerError) as nothing:
        admit("team-a", NOTHING)
    assert "only in its own namespace" in nothing.value.description
    with pytest.raises(errors.BrokerError) as missing:
        admit("team-b", SELECTED, None)
    assert "does not exist" in missing.value.description and "tenant=true,!frozen" in missing.value.description


def test_labels_are_needed_only_for_an_unlisted_namespace_under_a_selector() -> None:
    assert not SELECTED.needs_labels(None)
    assert not SELECTED.needs_labels("opbroker") and not SELECTED.needs_labels("team-a")
    assert SELECTED.needs_labels("team-b")
    assert not LISTED.needs_labels("team-b")


def test_a_selector_that_does_not_parse_is_refused() -> None:
    with pytest.raises(SelectorError):
        NamespacePolicy.of(default="opbroker", selector="tenant in (a")
    assert NamespacePolicy.of(default="opbroker", selector="  ").selector is None


@pytest.mark.parametrize(
    ("context", "wanted"),
    [
        (None, None),
        ({}, None),
        ({"platform": "kubernetes"}, None),
        ({"namespace": "team-a"}, "team-a"),
        ({"namespace": "Team_A"}, R.BAD_REQUEST),
        ({"namespace": 7}, R.BAD_REQUEST),
        ({"namespace": "a" * 64}, R.BAD_REQUEST),
    ],
)
def test_context_namespace(context: dict[str, Any] | None, wanted: Any) -> None:
    try:
        assert context_namespace(context) == wanted
    except errors.BrokerError as exc:
        assert exc.reason is wanted
