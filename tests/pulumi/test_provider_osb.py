"""Provisioning and binding through any OSB broker: the OSB logic of the provider's ServiceInstance and
ServiceBinding resources (provider/osb_providers.py: check/diff/create/update/delete, called directly),
against a small OSB broker served on 127.0.0.1 (tests/osb_fake_broker.py). The client they use
(opbroker.osbclient) has its own tests in tests/osbclient/test_osbclient.py.

Covers: async polling with backoff and Retry-After (time is faked, never slept), a failed operation surfaced
as an error, a timeout, orphan mitigation after both (and not after a 4xx), idempotent deletes, and
credentials from sync and async bindings.
"""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pulumi.runtime import rpc

from opbroker import osbclient as osb
from opbroker.provider.osb_providers import ServiceBindingProvider, ServiceInstanceProvider
from tests.osb_fake_broker import PLAN_ASYNC, PLAN_ASYNC_BIND, SERVICE_ID, FakeBroker, serve


class FakeClock:
    """Time that moves only when the code under test sleeps; remembers every pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


@pytest.fixture
def url(broker: FakeBroker) -> Iterator[str]:
    with serve(broker) as base_url:
        yield base_url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def connection(url: str, broker: FakeBroker, **extra: Any) -> dict[str, Any]:
    return {"broker_url": url, "broker_username": broker.username, "broker_password": broker.password, **extra}


def instance_props(url: str, broker: FakeBroker, **extra: Any) -> dict[str, Any]:
    defaults = {
        "instance_id": "inst-1",
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ASYNC,
        "organization_guid": "org",
        "space_guid": "space",
        "parameters": {"size": "s"},
        "context": {"platform": "pulumi"},
        "timeout": 60.0,
        "poll_interval": 1.0,
    }
    return connection(url, broker, **{**defaults, **extra})


# -- ServiceInstance ----------------------------------------------------------------------------------------


def test_a_conflicting_repeat_is_a_409_and_changes_nothing(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    provider.create(instance_props(url, broker))
    with pytest.raises(osb.Conflict):
        provider.create(instance_props(url, broker, parameters={"size": "xl"}))
    assert broker.calls("DELETE") == []  # a 4xx is no reason for orphan mitigation
    assert broker.instances["inst-1"].body["parameters"] == {"size": "s"}


def test_create_provisions_and_polls_until_succeeded(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)

    result = provider.create({**instance_props(url, broker), "__provider": "serialized"})

    assert result.id == "inst-1"
    assert result.outs["state"] == "succeeded"
    assert result.outs["dashboard_url"] == "https://dashboard.example/inst-1"
    assert "__provider" not in result.outs
    (put,) = broker.calls("PUT")
    assert put.path == "/v2/service_instances/inst-1"
    assert put.query == {"accepts_incomplete": "true"}
    polls = broker.calls("GET", "/last_operation")
    assert len(polls) == 3  # two "in progress", then the outcome
    assert polls[0].query == {"operation": "provision-0", "service_id": SERVICE_ID, "plan_id": PLAN_ASYNC}
    assert clock.sleeps == [1.0, 2.0]


def test_retry_after_replaces_the_backoff(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    broker.retry_after = 7
    ServiceInstanceProvider(clock=clock, sleep=clock.sleep).create(instance_props(url, broker))
    assert clock.sleeps == [7.0, 7.0]


def test_a_failed_provision_is_an_error_and_the_instance_is_cleaned_up(
    url: str, broker: FakeBroker, clock: FakeClock
) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError) as raised:
        provider.create(instance_props(url, broker, parameters={"fail": "quota exceeded"}))
    message = str(raised.value)
    assert "provision of instance inst-1 failed: quota exceeded" in message
    assert "orphan mitigation: deprovision requested (broker answered 202)" in message
    (delete,) = broker.calls("DELETE")
    assert delete.query == {"accepts_incomplete": "true", "service_id": SERVICE_ID, "plan_id": PLAN_ASYNC}


def test_a_provision_that_never_finishes_times_out(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError) as raised:
        provider.create(instance_props(url, broker, parameters={"stall": True}, timeout=10.0))
    message = str(raised.value)
    assert "provision of instance inst-1 did not finish within 10s" in message
    assert "last state: 'in progress'" in message
    assert "orphan mitigation" in message
    assert sum(clock.sleeps) == 10.0
    assert len(broker.calls("DELETE")) == 1


def test_orphan_mitigation_can_be_disabled(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError, match="orphan mitigation disabled"):
        provider.create(instance_props(url, broker, parameters={"fail": "x"}, orphan_mitigation=False))
    assert broker.calls("DELETE") == []


def test_update_patches_plan_and_parameters_and_polls(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    olds = provider.create(instance_props(url, broker)).outs
    news = instance_props(url, broker, plan_id=PLAN_ASYNC_BIND, parameters={"size": "m"})

    result = provider.update("inst-1", olds, news)

    assert result.outs["state"] == "succeeded"
    assert result.outs["plan_id"] == PLAN_ASYNC_BIND
    (patch,) = broker.calls("PATCH")
    assert json.loads(patch.body) == {
        "service_id": SERVICE_ID,
        "plan_id": PLAN_ASYNC_BIND,
        "parameters": {"size": "m"},
        "previous_values": {"service_id": SERVICE_ID, "plan_id": PLAN_ASYNC},
    }
    assert broker.instances["inst-1"].body["plan_id"] == PLAN_ASYNC_BIND


def test_a_connection_only_update_calls_nothing(url: str, broker: FakeBroker, clock: FakeClock) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    olds = provider.create(instance_props(url, broker)).outs
    before = len(broker.requests)
    result = provider.update("inst-1", olds, instance_props(url, broker, timeout=120.0))
    assert len(broker.requests) == before
    assert result.outs["dashboard_url"] == olds["dashboard_url"]


@pytest.mark.parametrize("gone_after_delete", [False, True])
def test_delete_deprovisions_and_is_idempotent(
    url: str, broker: FakeBroker, clock: FakeClock, gone_after_delete: bool
) -> None:
    broker.gone_after_delete = gone_after_delete
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    outs = provider.create(instance_props(url, broker)).outs

    provider.delete("inst-1", outs)
    assert broker.instances["inst-1"].deleted
    provider.delete("inst-1", outs)  # 410: already gone is done

    assert [r.method for r in broker.requests if r.method == "DELETE"] == ["DELETE", "DELETE"]


def test_check_generates_a_stable_instance_id_and_reports_bad_inputs() -> None:
    provider = ServiceInstanceProvider()
    news = {
        "broker_url": "ftp://broker",
        "broker_username": "u",
        "service_id": "",
        "plan_id": "p",
        "organization_guid": "o",
        "space_guid": "s",
        "timeout": -1,
    }
    result = provider.check({}, news)
    assert len(result.inputs["instance_id"]) == 36
    assert sorted(f.property for f in result.failures) == ["broker_url", "service_id", "timeout"]
    again = provider.check({"instance_id": "kept"}, {**news, "broker_url": "http://broker"})
    assert again.inputs["instance_id"] == "kept"


def test_check_accepts_unknown_values_during_preview() -> None:
    news = {
        "broker_url": rpc.UNKNOWN,
        "broker_username": "u",
        "service_id": rpc.UNKNOWN,
        "plan_id": "p",
        "organization_guid": "o",
        "space_guid": "s",
    }
    assert ServiceInstanceProvider().check({}, news).failures == []


@pytest.mark.parametrize(
    ("change", "replaces", "changes"),
    [
        ({}, [], False),
        ({"plan_id": "other"}, [], True),
        ({"parameters": {"size": "xl"}}, [], True),
        ({"broker_password": "rotated"}, [], True),
        ({"service_id": "other"}, ["service_id"], True),
        ({"broker_url": "http://elsewhere"}, ["broker_url"], True),
    ],
)
def test_diff_replaces_only_what_osb_cannot_update(change: dict[str, Any], replaces: list[str], changes: bool) -> None:
    olds = instance_props("http://b", FakeBroker())
    result = ServiceInstanceProvider().diff("inst-1", olds, {**olds, **change})
    assert result.replaces == replaces
    assert result.changes is changes
    assert result.delete_before_replace is True


# -- ServiceBinding ------------------------------------------------------------------------------------------


def binding_props(url: str, broker: FakeBroker, plan_id: str = PLAN_ASYNC, **extra: Any) -> dict[str, Any]:
    defaults = {
        "instance_id": "inst-1",
        "binding_id": "bind-1",
        "service_id": SERVICE_ID,
        "plan_id": plan_id,
        "timeout": 60.0,
        "poll_interval": 1.0,
    }
    return connection(url, broker, **{**defaults, **extra})


@pytest.fixture
def instance(url: str, broker: FakeBroker, clock: FakeClock) -> dict[str, Any]:
    return ServiceInstanceProvider(clock=clock, sleep=clock.sleep).create(instance_props(url, broker)).outs


def test_a_sync_binding_returns_credentials(url: str, broker: FakeBroker, clock: FakeClock, instance: Any) -> None:
    provider = ServiceBindingProvider(clock=clock, sleep=clock.sleep)
    result = provider.create(binding_props(url, broker))
    assert result.id == "bind-1"
    assert result.outs["credentials"] == {"username": "u-bind-1", "password": "s3cr3t", "host": "db.fake", "port": 5432}

    provider.delete("bind-1", result.outs)
    assert "bind-1" not in broker.bindings
    provider.delete("bind-1", result.outs)  # already gone


def test_an_async_binding_is_polled_then_fetched(url: str, broker: FakeBroker, clock: FakeClock, instance: Any) -> None:
    provider = ServiceBindingProvider(clock=clock, sleep=clock.sleep)
    result = provider.create(binding_props(url, broker, plan_id=PLAN_ASYNC_BIND))
    assert result.outs["credentials"]["password"] == "s3cr3t"
    assert len(broker.calls("GET", "/service_bindings/bind-1/last_operation")) == 3
    assert len(broker.calls("GET", "/service_bindings/bind-1")) == 1

    provider.delete("bind-1", result.outs)
    assert "bind-1" not in broker.bindings


def test_a_failed_async_binding_is_an_error_and_is_unbound(
    url: str, broker: FakeBroker, clock: FakeClock, instance: Any
) -> None:
    provider = ServiceBindingProvider(clock=clock, sleep=clock.sleep)
    with pytest.raises(RuntimeError) as raised:
        provider.create(binding_props(url, broker, plan_id=PLAN_ASYNC_BIND, parameters={"fail": "no users left"}))
    assert "bind bind-1 to instance inst-1 failed: no users left" in str(raised.value)
    assert "orphan mitigation: unbind requested (broker answered 202)" in str(raised.value)


def test_binding_to_an_instance_that_is_not_ready_is_refused_without_cleanup(url: str, broker: FakeBroker) -> None:
    with pytest.raises(osb.Unprocessable):
        ServiceBindingProvider().create(binding_props(url, broker))
    assert broker.calls("DELETE") == []


def test_binding_changes_replace_and_connection_changes_keep_credentials() -> None:
    olds = {**binding_props("http://b", FakeBroker()), "credentials": {"password": "p"}}
    provider = ServiceBindingProvider()
    assert provider.diff("bind-1", olds, {**olds, "parameters": {"role": "ro"}}).replaces == ["parameters"]
    rotated = provider.diff("bind-1", olds, {**olds, "broker_password": "new"})
    assert (rotated.changes, rotated.replaces) == (True, [])
    assert provider.update("bind-1", olds, {**olds, "broker_password": "new"}).outs["credentials"] == {"password": "p"}
    assert len(provider.check({}, {**olds, "binding_id": None}).inputs["binding_id"]) == 36


# -- failures the fake broker cannot produce -------------------------------------------------------------------


def test_a_mitigation_that_cannot_reach_the_broker_is_reported_with_the_first_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 5xx on create triggers orphan mitigation; when that DELETE cannot even connect, the error says so
    instead of replacing the broker's answer."""
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            return httpx.Response(500, json={"description": "backend down"})
        raise httpx.ConnectError("connection refused")

    provider = ServiceInstanceProvider()

    def client(props: Any) -> osb.Client:
        config = osb.Broker("http://broker.test", auth=osb.BasicAuth("u", "p"))
        return osb.Client(config, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(provider, "client", client)
    with pytest.raises(RuntimeError) as raised:
        provider.create(instance_props("http://broker.test", FakeBroker()))
    message = str(raised.value)
    assert "broker answered 500 (backend down)" in message
    assert "orphan mitigation (deprovision) failed too: deprovision of instance inst-1: could not reach" in message
    assert isinstance(raised.value.__cause__, osb.ServerError)


def test_check_fills_the_defaults_every_language_gets_from_the_platform() -> None:
    from opbroker.provider import custom
    from opbroker.provider.osb_providers import Platform

    urn = "urn:pulumi:dev::shop::opbroker:index:ServiceInstance::db"
    assert custom.type_of(urn) == "opbroker:index:ServiceInstance"
    assert custom.platform_of(urn) == Platform(project="shop", stack="dev")
    news = {"broker_url": "http://b", "broker_username": "u", "service_id": "s", "plan_id": "p", "timeout": None}
    inputs = ServiceInstanceProvider().check({}, {**news, "__provider": "pickled"}, custom.platform_of(urn)).inputs
    assert inputs["context"] == {"platform": "pulumi", "project": "shop", "stack": "dev"}
    assert (inputs["organization_guid"], inputs["space_guid"]) == ("shop", "shop-dev")
    assert (inputs["api_version"], inputs["timeout"], inputs["poll_interval"]) == ("2.17", 1800.0, 2.0)
    assert inputs["orphan_mitigation"] is True and "__provider" not in inputs
    given = ServiceInstanceProvider().check({}, {**news, "space_guid": "mine", "timeout": 5.0}).inputs
    assert (given["space_guid"], given["timeout"]) == ("mine", 5.0)
    binding = ServiceBindingProvider().check({}, {**news, "instance_id": "i"}, custom.platform_of(urn)).inputs
    assert binding["context"]["project"] == "shop" and "organization_guid" not in binding


def test_read_keeps_an_instance_the_broker_cannot_fetch_says_so_and_drops_one_that_is_gone(
    url: str, broker: FakeBroker, clock: FakeClock
) -> None:
    provider = ServiceInstanceProvider(clock=clock, sleep=clock.sleep)
    outs = provider.create(instance_props(url, broker)).outs
    kept = provider.read("inst-1", outs)  # this broker serves no GET of an instance: the last operation decides
    assert kept.id == "inst-1" and kept.outs == outs
    assert kept.note is not None and "does not serve the instance fetch" in kept.note
    broker.instances["inst-1"].deleted, broker.gone_after_delete = True, True  # deprovisioned out of band
    gone = provider.read("inst-1", outs)
    assert (gone.id, gone.outs, gone.note) == ("", {}, None)
