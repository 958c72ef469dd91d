"""The OSB client side against brokers of older API versions and of generated code (tests/brokers/legacy_broker.py,
over real HTTP): version negotiation, requests shaped per version, tolerant reading of answers and catalogs —
through the client library and through the Pulumi OSB resources' providers (create, delete; time faked).

The Service Catalog controller meets the same broker in tests/servicecatalog/test_conformance.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from opbroker import osbclient as osb
from opbroker.broker import bodies
from opbroker.provider.osb_providers import ServiceBindingProvider, ServiceInstanceProvider
from tests.brokers.legacy_broker import ASYNC_PLAN, SERVICE_ID, SYNC_PLAN, LegacyBroker, serve


@pytest.fixture(params=["2.13", "2.14"])
def legacy(request: pytest.FixtureRequest) -> Iterator[tuple[LegacyBroker, str]]:
    broker = LegacyBroker(version=request.param)
    with serve(broker) as url:
        yield broker, url


def client(broker: LegacyBroker, url: str, **extra: Any) -> osb.Client:
    return osb.Client(osb.Broker(url, auth=osb.BasicAuth(broker.username, broker.password), **extra))


def sent_versions(broker: LegacyBroker) -> list[str]:
    return [r.headers["x-broker-api-version"] for r in broker.requests]


def test_the_client_steps_down_to_the_version_the_broker_speaks_and_stays_there(
    legacy: tuple[LegacyBroker, str],
) -> None:
    broker, url = legacy
    with client(broker, url) as osbc:
        catalog = osbc.read_catalog()
        assert osbc.version == broker.version
        osbc.provision(
            "i-1",
            service_id=SERVICE_ID,
            plan_id=SYNC_PLAN,
            organization_guid="o",
            space_guid="s",
            maintenance_info={"version": "1.0.0"},  # 2.15: not sent to this broker (it would answer 400)
        )
    tried = osb.versions.tried_from("2.17")
    assert sent_versions(broker) == [*tried[: tried.index(broker.version) + 1], broker.version]
    assert [s.name for s in catalog.services] == ["legacy-db-x"]
    provision = broker.calls("PUT")[0]
    assert "maintenance_info" not in provision.body
    assert "x-broker-api-request-identity" not in provision.headers  # 2.15


def test_a_version_the_broker_does_not_speak_at_all_is_one_clear_error() -> None:
    broker = LegacyBroker(version="2.12")
    with serve(broker) as url, client(broker, url) as osbc, pytest.raises(osb.PreconditionFailed) as raised:
        osbc.catalog()
    assert "2.17, 2.16, 2.15, 2.14, 2.13" in str(raised.value)
    assert sent_versions(broker) == list(osb.versions.SUPPORTED)  # each once, then it gives up


def test_a_start_version_below_the_newest_is_never_raised() -> None:
    broker = LegacyBroker(version="2.14")
    with serve(broker) as url, client(broker, url, api_version="2.13") as osbc, pytest.raises(osb.PreconditionFailed):
        osbc.catalog()
    assert sent_versions(broker) == ["2.13"]


def test_requests_are_shaped_for_the_version_spoken(legacy: tuple[LegacyBroker, str]) -> None:
    broker, url = legacy
    with client(broker, url, api_version=broker.version) as osbc:
        osbc.provision("i-2", service_id=SERVICE_ID, plan_id=ASYNC_PLAN, organization_guid="o", space_guid="s")
        polled = osbc.last_operation("i-2", operation="provision", service_id=SERVICE_ID, plan_id=ASYNC_PLAN)
        bound = osbc.bind("i-2", "b-1", service_id=SERVICE_ID, plan_id=ASYNC_PLAN)
        unbound = osbc.unbind("i-2", "b-1", service_id=SERVICE_ID, plan_id=ASYNC_PLAN)
        if broker.version == "2.13":
            with pytest.raises(osb.NotInVersion):
                osbc.get_instance("i-2", service_id=SERVICE_ID, plan_id=ASYNC_PLAN)
        else:
            assert osbc.get_instance("i-2", service_id=SERVICE_ID, plan_id=ASYNC_PLAN) == {
                "service_id": SERVICE_ID,
                "plan_id": ASYNC_PLAN,
            }
    assert polled.state == osb.IN_PROGRESS and polled.retry_after is None  # Retry-After: 2.15, not read
    assert polled.description is None  # "" is absent
    assert bound.status == 201 and bound.credentials is not None and bound.credentials["port"] == "5432"
    assert bound.syslog_drain_url is None and bound.route_service_url is None and bound.endpoints is None
    assert bound.warnings == ("syslog_drain_url: is a number (0), not a string: ignored",)
    assert unbound.status == 200
    binding_calls = broker.calls("PUT", "service_bindings") + broker.calls("DELETE", "service_bindings")
    async_param = [("accepts_incomplete" in r.query) for r in binding_calls]
    assert async_param == [broker.version >= "2.14"] * 2
    fetches = [r for r in broker.calls("GET", "/v2/service_instances/i-2") if not r.path.endswith("last_operation")]
    assert len(fetches) == (broker.version >= "2.14")  # 2.13 has no fetch: nothing was sent
    assert all("service_id" not in r.query for r in fetches)  # the fetch hints are 2.16


def test_answers_are_read_the_tolerant_way() -> None:
    broker = LegacyBroker(version="2.14")
    with serve(broker) as url, client(broker, url) as osbc:
        created = osbc.provision("i-3", service_id=SERVICE_ID, plan_id=SYNC_PLAN, organization_guid="o", space_guid="s")
        again = osbc.provision("i-3", service_id=SERVICE_ID, plan_id=SYNC_PLAN, organization_guid="o", space_guid="s")
    assert created == osb.InstanceResult(201)  # "" dashboard and operation absent, x-vendor ignored
    assert again == osb.InstanceResult(200)


def test_a_catalog_is_read_entry_by_entry_with_every_problem_named() -> None:
    raw = {
        "services": [
            {
                "id": "s1",
                "name": "db",
                "bindable": "true",
                "tags": "",
                "plans": [
                    {"id": "p1", "name": "small", "maintenance_info": {}, "maximum_polling_duration": "3600"},
                    {"id": "p2", "name": "odd", "maintenance_info": {"version": "latest"}, "free": "maybe"},
                    {"id": "p1", "name": "again"},
                    {"name": "no-id"},
                    "not a plan",
                ],
            },
            {"id": "s2", "name": "empty", "plans": []},
            {"id": "s3", "plans": [{"id": "p", "name": "p"}]},
            {"id": "s4", "name": "db", "plans": [{"id": "p", "name": "p"}]},
        ]
    }
    catalog = osb.catalog.read(raw, "2.17")
    (db,) = catalog.services
    assert db.bindable is True and db.tags == ()
    small, odd = db.plans
    assert small.maintenance_info is None and small.maximum_polling_duration == 3600
    assert odd.maintenance_info is None and odd.free is None
    described = [p.describe() for p in catalog.problems]
    assert described == [
        "service 'db' plan 'odd': maintenance_info.version is 'latest', not a semantic version: maintenance_info "
        "ignored",
        "service 'db' plan 'odd': free is a string ('maybe'), not a boolean: ignored",
        "service 'db' plan 'again': id repeats an earlier plan's: plan skipped",
        "service 'db' plan 'no-id': id is missing, empty or not a string (required): plan skipped",
        "service 'db' plan 'plan #5': is a string, not an object: plan skipped",
        "service 'empty': plans is missing, empty or not an array (required): service skipped",
        "service 's3': name is missing, empty or not a string (required): service skipped",
        "service 'db': name repeats an earlier service's: service skipped",
    ]
    older = osb.catalog.read(raw, "2.14")  # maintenance_info and maximum_polling_duration are 2.15: unknown
    assert older.services[0].plans[0].maximum_polling_duration is None
    assert not any("maintenance_info" in p.field for p in older.problems)


@pytest.mark.parametrize(
    ("value", "absent"),
    [({}, True), ({"version": ""}, True), ("", True), ({"version": "1.0.0"}, False), ({"version": 3}, False)],
)
def test_the_broker_and_the_client_read_empty_the_same_way(value: Any, absent: bool) -> None:
    """One rule for both sides: the broker's request models use the client's ``absent_if_blank``."""
    assert bodies.absent_if_blank is osb.tolerance.absent_if_blank
    assert (osb.tolerance.absent_if_blank(value) is None) is absent
    request = {
        "service_id": "s",
        "plan_id": "p",
        "organization_guid": "o",
        "space_guid": "s",
        "maintenance_info": value,
    }
    if absent or isinstance(value.get("version"), str):
        parsed = bodies.ProvisionRequest.model_validate(request)
        assert (parsed.maintenance_info is None) is absent


def test_the_resource_model_offers_exactly_the_versions_the_client_speaks() -> None:
    from opbroker.api.servicecatalog import OSB_VERSIONS

    assert OSB_VERSIONS == osb.versions.SUPPORTED
    assert bodies.MAINTENANCE_INFO_SINCE == (2, 15)


# -- the Pulumi OSB resources ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_pulumi_osb_resources_negotiate_and_speak_the_older_version(legacy: tuple[LegacyBroker, str]) -> None:
    broker, url = legacy
    clock = FakeClock()
    connection = {"broker_url": url, "broker_username": broker.username, "broker_password": broker.password}
    instances = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    props = {
        **connection,
        "instance_id": "pulumi-i",
        "service_id": SERVICE_ID,
        "plan_id": ASYNC_PLAN,
        "organization_guid": "org",
        "space_guid": "space",
        "timeout": 60.0,
        "poll_interval": 1.0,
    }
    assert not instances.check({}, props).failures
    assert [f.property for f in instances.check({}, {**props, "api_version": "2.12"}).failures] == ["api_version"]
    created = instances.create(props)
    assert created.outs["state"] == osb.SUCCEEDED
    assert created.outs["broker_api_version"] == broker.version
    assert clock.sleeps == [1.0, 2.0]  # own backoff: the broker's Retry-After: 3600 is not of this version
    bindings = ServiceBindingProvider(clock=clock, sleep=clock.sleep)
    binding = {
        **connection,
        "binding_id": "pulumi-b",
        "instance_id": "pulumi-i",
        "service_id": SERVICE_ID,
        "plan_id": ASYNC_PLAN,
    }
    bound = bindings.create(binding)
    assert bound.outs["credentials"]["port"] == "5432" and bound.outs["broker_api_version"] == broker.version
    assert bound.outs["syslog_drain_url"] is None
    before = len(broker.requests)
    bindings.delete("pulumi-b", bound.outs)
    instances.delete("pulumi-i", created.outs)
    assert set(sent_versions(broker)[before:]) == {broker.version}  # the outputs' version: no 412 again
    assert "pulumi-i" not in broker.instances and "pulumi-b" not in broker.bindings
    assert all("maintenance_info" not in json.dumps(r.body or {}) for r in broker.requests)
