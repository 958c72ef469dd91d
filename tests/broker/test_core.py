"""The broker's pure core, without any server: OSB validation and the decisions, as tables of cases.

Aspects: API version and identity headers; operation tokens; the catalog body; parameter schemas;
provision / update / deprovision / fetch of instances; bind / unbind / fetch of bindings; last_operation
(including after the object is gone); the answer after a synchronous wait. Each case: a reason, the
inputs, and what is wanted (a decision, or the error reason).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from opbroker.api import SFPlan, SFService
from opbroker.api.osb import OperationState
from opbroker.broker import bindings, bodies, decisions, errors, headers, instances, parameters, records
from opbroker.broker.catalogs import Catalog
from opbroker.broker.decisions import Answer, Change, Create, Credentials, Remove, Wait
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record
from tests.broker_support import (
    APP_PLAN,
    ASYNC_PLAN,
    FIXED_PLAN,
    OTHER_SERVICE,
    SERVICE,
    STRICT_PLAN,
    SYNC_PLAN,
    UNBINDABLE_PLAN,
    catalog_objects,
)

R = errors.Reason


def make_catalog(withdrawn: tuple[str, ...] = ()) -> Catalog:
    services, plans = [], []
    for plural, body in catalog_objects():
        if plural == "sfservices":
            services.append(SFService.model_validate(body).spec)
        else:
            plans.append(SFPlan.model_validate(body).spec)
    return Catalog(services, plans, withdrawn)


CATALOG = make_catalog()
IID = "inst-1"


def outcome(call: Any) -> Any:
    """The decision, or the error's reason when the core refuses."""
    try:
        return call()
    except errors.BrokerError as exc:
        return exc.reason


def provision_request(plan: str = ASYNC_PLAN, **extra: Any) -> bodies.ProvisionRequest:
    service = OTHER_SERVICE if plan == APP_PLAN else SERVICE
    return bodies.ProvisionRequest.model_validate(
        {"service_id": service, "plan_id": plan, "organization_guid": "o", "space_guid": "s", **extra}
    )


def instance(
    plan: str = ASYNC_PLAN, *, state: str | None = "succeeded", op: str | None = "provision", **kw: Any
) -> Record:
    spec = kw.pop("spec", None) or records.instance_spec(IID, provision_request(plan, **kw.pop("request", {})))
    return Record(
        kind=Kind.INSTANCE,
        namespace="ns",
        name=IID,
        uid=kw.pop("uid", "uid-1"),
        generation=kw.pop("generation", 1),
        resource_version="7",
        spec=spec,
        state=state,
        operation_type=op,
        **kw,
    )


def binding(state: str | None = "succeeded", *, op: str | None = "bind", **kw: Any) -> Record:
    request = bodies.BindRequest.model_validate({"service_id": SERVICE, "plan_id": ASYNC_PLAN, **kw.pop("request", {})})
    return Record(
        kind=Kind.BINDING,
        namespace="ns",
        name="bind-1",
        uid="uid-b",
        spec=kw.pop("spec", None) or records.binding_spec("bind-1", kw.pop("instance_id", IID), request, True),
        state=state,
        operation_type=op,
        **kw,
    )


# -- headers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "value", "want"),
    [
        ("missing", None, R.API_VERSION),
        ("blank", " ", R.API_VERSION),
        ("too old", "2.11", R.API_VERSION),
        ("too new", "2.18", R.API_VERSION),
        ("major 3", "3.0", R.API_VERSION),
        ("garbage", "latest", R.API_VERSION),
        ("lowest", "2.12", (2, 12)),
        ("highest", "2.17", (2, 17)),
    ],
)
def test_api_version(reason: str, value: str | None, want: Any) -> None:
    assert outcome(lambda: headers.check_api_version(value)) == want, reason


def _identity(platform: str, value: Any) -> str:
    return f"{platform} {base64.b64encode(json.dumps(value).encode()).decode()}"


@pytest.mark.parametrize(
    ("reason", "header", "want"),
    [
        ("absent", None, None),
        ("kubernetes", _identity("kubernetes", {"username": "ann"}), ("kubernetes", {"username": "ann"})),
        ("no value", "cloudfoundry", R.BAD_REQUEST),
        ("not base64", "cloudfoundry %%%", R.BAD_REQUEST),
        ("not an object", _identity("cloudfoundry", [1, 2]), R.BAD_REQUEST),
        ("not json", "cloudfoundry " + base64.b64encode(b"{nope").decode(), R.BAD_REQUEST),
    ],
)
def test_originating_identity(reason: str, header: str | None, want: Any) -> None:
    got = outcome(lambda: headers.parse_originating_identity(header))
    if isinstance(got, headers.OriginatingIdentity):
        got = (got.platform, got.value)
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "authorization", "ok"),
    [
        ("right", "Basic " + base64.b64encode(b"u:p:w").decode(), True),
        ("wrong password", "Basic " + base64.b64encode(b"u:x").decode(), False),
        ("wrong user", "Basic " + base64.b64encode(b"x:p:w").decode(), False),
        ("no header", None, False),
        ("bearer", "Bearer abc", False),
        ("not base64", "Basic !!!", False),
        ("no colon", "Basic " + base64.b64encode(b"up:w").decode(), False),
    ],
)
def test_basic_credentials(reason: str, authorization: str | None, ok: bool) -> None:
    given = headers.basic_credentials(authorization)
    assert headers.credentials_match(given, ("u", "p:w")) is ok, reason


# -- tokens, catalog, parameters -------------------------------------------------------------------------


def test_token_round_trip_and_determinism() -> None:
    token = Token.of(OperationType.UPDATE, instance(generation=4))
    assert Token.decode(token.encode()) == token
    assert token.generation == 4
    assert Token.of(OperationType.PROVISION, instance(generation=4)).generation == 0
    assert token.encode() == Token.of(OperationType.UPDATE, instance(generation=4)).encode()
    assert len(token.encode()) < 10_000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "op1.",
        "op1.!!!",
        "task_10",
        "op1." + base64.urlsafe_b64encode(b'["nuke","a","b","c",0]').decode(),
        "op1." + base64.urlsafe_b64encode(b'{"a":1}').decode(),
        "op1." + base64.urlsafe_b64encode(b'["update",1,2,3,4]').decode(),
    ],
)
def test_foreign_tokens_are_400(text: str) -> None:
    assert outcome(lambda: Token.decode(text)) == R.BAD_REQUEST


def test_catalog_body_follows_osb_spelling() -> None:
    body = CATALOG.body().wire()
    services = {s["id"]: s for s in body["services"]}
    assert set(services) == {SERVICE, OTHER_SERVICE}
    plans = {p["id"]: p for p in services[SERVICE]["plans"]}
    assert services[SERVICE]["plan_updateable"] is True  # OSB's historical misspelling
    assert plans[ASYNC_PLAN]["maximum_polling_duration"] == 600
    assert plans[FIXED_PLAN]["maintenance_info"] == {"version": "1.2.0"}
    assert plans[FIXED_PLAN]["plan_updateable"] is False
    assert plans[ASYNC_PLAN]["schemas"]["service_instance"]["create"]["parameters"]["properties"]["size"]
    assert "maximum_polling_duration" not in plans[SYNC_PLAN]
    assert services[OTHER_SERVICE]["instances_retrievable"] is False


@pytest.mark.parametrize(
    ("reason", "plan", "params", "want"),
    [
        ("fits", ASYNC_PLAN, {"size": 2}, []),
        ("wrong type", ASYNC_PLAN, {"size": "big"}, ["parameters.size: must be of type integer"]),
        ("below minimum", ASYNC_PLAN, {"size": 0}, ["parameters.size: fails minimum 1"]),
        (
            "unknown key",
            ASYNC_PLAN,
            {"colour": "red"},
            ["parameters: Additional properties are not allowed ('colour' was unexpected)"],
        ),
        ("two required", STRICT_PLAN, {}, ["parameters.name: is required", "parameters.size: is required"]),
    ],
)
def test_parameter_problems_name_the_field(reason: str, plan: str, params: dict[str, Any], want: list[str]) -> None:
    schema = CATALOG.resolve(SERVICE, plan).schema("create")
    assert schema is not None
    assert parameters.problems(schema, params) == want, reason


def test_parameter_problems_never_echo_values() -> None:
    schema = CATALOG.resolve(SERVICE, ASYNC_PLAN).schema("create")
    assert schema is not None
    assert not any("hunter2" in p for p in parameters.problems(schema, {"size": "hunter2"}))


def test_a_schema_is_checked_once_not_on_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checking the plan's schema against its metaschema is most of validating a request: done once per schema (by
    its canonical text, so an equal schema read again is the same), and a schema too large to keep is checked
    each time."""
    checked: list[int] = []
    real = parameters._validator
    monkeypatch.setattr(parameters, "_validator", lambda text: checked.append(1) or real(text))
    parameters._checked.cache_clear()
    schema = {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}}
    reordered = {"properties": {"size": {"minimum": 1, "type": "integer"}}, "type": "object"}
    assert parameters.problems(schema, {"size": 0}) == ["parameters.size: fails minimum 1"]
    assert parameters.problems(reordered, {"size": 2}) == []
    assert len(checked) == 1
    large = {**schema, "description": "x" * parameters.CACHED_SCHEMA_BYTES}
    assert parameters.problems(large, {"size": 2}) == parameters.problems(large, {"size": 3}) == []
    assert len(checked) == 3 and parameters._checked.cache_info().currsize == 1


def test_invalid_plan_schema_is_the_catalogs_fault() -> None:
    with pytest.raises(errors.BrokerError) as info:
        parameters.validate({"type": "no-such-type"}, {}, action="create")
    assert info.value.reason is R.INTERNAL_ERROR


# -- provision -------------------------------------------------------------------------------------------

TOKEN_P = Token(OperationType.PROVISION, "ns", IID, "uid-1", 0)


@pytest.mark.parametrize(
    ("reason", "request_", "existing", "accepts", "want"),
    [
        ("new, async plan", provision_request(), None, True, Create(True)),
        ("new, sync plan", provision_request(SYNC_PLAN), None, False, Create(False)),
        ("sync plan ignores accepts_incomplete", provision_request(SYNC_PLAN), None, True, Create(False)),
        ("async plan, client cannot wait", provision_request(), None, False, R.ASYNC_REQUIRED),
        ("unknown service", provision_request().model_copy(update={"service_id": "x"}), None, True, R.BAD_REQUEST),
        ("unknown plan", provision_request().model_copy(update={"plan_id": "x"}), None, True, R.BAD_REQUEST),
        (
            "plan of another service",
            provision_request().model_copy(update={"plan_id": APP_PLAN}),
            None,
            True,
            R.BAD_REQUEST,
        ),
        (
            "maintenance_info outdated",
            provision_request(FIXED_PLAN, maintenance_info={"version": "1.1.0"}),
            None,
            True,
            R.MAINTENANCE_INFO_CONFLICT,
        ),
        (
            "maintenance_info for a plan without",
            provision_request(maintenance_info={"version": "1.0.0"}),
            None,
            True,
            R.MAINTENANCE_INFO_CONFLICT,
        ),
        (
            "maintenance_info current",
            provision_request(FIXED_PLAN, maintenance_info={"version": "1.2.0"}),
            None,
            True,
            Create(True),
        ),
        ("parameters break the schema", provision_request(parameters={"size": "big"}), None, True, R.BAD_REQUEST),
        ("identical, provisioned", provision_request(), instance(), True, Answer(200, {})),
        (
            "identical, queued",
            provision_request(),
            instance(state="in_queue"),
            True,
            decisions.accepted(TOKEN_P, bodies.ProvisionBody()),
        ),
        (
            "identical, no status yet",
            provision_request(),
            instance(state=None, op=None),
            True,
            decisions.accepted(TOKEN_P, bodies.ProvisionBody()),
        ),
        (
            "identical, pending, sync plan",
            provision_request(SYNC_PLAN),
            instance(SYNC_PLAN, state="in progress"),
            False,
            Wait(TOKEN_P),
        ),
        (
            "identical, failed, async: poll to learn",
            provision_request(),
            instance(state="failed"),
            True,
            decisions.accepted(TOKEN_P, bodies.ProvisionBody()),
        ),
        (
            "identical, failed, sync",
            provision_request(SYNC_PLAN),
            instance(SYNC_PLAN, state="failed"),
            False,
            R.OPERATION_FAILED,
        ),
        (
            "identical, since updated",
            provision_request(),
            instance(state="in progress", op="update"),
            True,
            Answer(200, {}),
        ),
        (
            "other parameters",
            provision_request(parameters={"size": 3}),
            instance(request={"parameters": {"size": 2}}),
            True,
            R.CONFLICT,
        ),
        ("other plan", provision_request(FIXED_PLAN), instance(), True, R.CONFLICT),
        (
            "other context",
            provision_request(context={"namespace": "a"}),
            instance(request={"context": {"namespace": "b"}}),
            True,
            R.CONFLICT,
        ),
        ("being deprovisioned", provision_request(), instance(deleting=True), True, R.CONCURRENCY_ERROR),
    ],
)
def test_provision(
    reason: str, request_: bodies.ProvisionRequest, existing: Record | None, accepts: bool, want: Any
) -> None:
    got = outcome(
        lambda: instances.provision(
            request_, instance_id=IID, catalog=CATALOG, existing=existing, accepts_incomplete=accepts
        )
    )
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "context", "want"),
    [
        ("no context", None, "default"),
        ("cloud foundry context", {"platform": "cloudfoundry"}, "default"),
        ("kubernetes namespace", {"platform": "kubernetes", "namespace": "team-a"}, "team-a"),
        ("invalid namespace", {"namespace": "Team_A"}, R.BAD_REQUEST),
        ("not a string", {"namespace": 7}, R.BAD_REQUEST),
    ],
)
def test_instance_namespace(reason: str, context: dict[str, Any] | None, want: Any) -> None:
    assert outcome(lambda: instances.namespace_for(context, default="default", from_context=True)) == want, reason


# -- update ----------------------------------------------------------------------------------------------


def update_request(**fields: Any) -> bodies.UpdateRequest:
    return bodies.UpdateRequest.model_validate({"service_id": SERVICE, **fields})


@pytest.mark.parametrize(
    ("reason", "request_", "existing", "accepts", "want"),
    [
        ("no such instance", update_request(parameters={"size": 3}), None, True, R.INSTANCE_DOES_NOT_EXIST),
        ("unknown service", update_request().model_copy(update={"service_id": "x"}), instance(), True, R.BAD_REQUEST),
        ("unknown plan", update_request(plan_id="x"), instance(), True, R.BAD_REQUEST),
        ("new parameters", update_request(parameters={"size": 3}), instance(), True, "change"),
        (
            "new parameters, client cannot wait",
            update_request(parameters={"size": 3}),
            instance(),
            False,
            R.ASYNC_REQUIRED,
        ),
        (
            "parameters break the update schema",
            update_request(parameters={"size": -1}),
            instance(),
            True,
            R.BAD_REQUEST,
        ),
        ("nothing changes", update_request(parameters={}), instance(), False, Answer(200, {})),
        ("context only, not allowed: no effect", update_request(context={"x": 1}), instance(), False, Answer(200, {})),
        ("plan change allowed", update_request(plan_id=SYNC_PLAN), instance(), True, "change"),
        (
            "plan change from a fixed plan",
            update_request(plan_id=ASYNC_PLAN),
            instance(FIXED_PLAN),
            True,
            R.PLAN_CHANGE_NOT_SUPPORTED,
        ),
        (
            "maintenance_info outdated",
            update_request(maintenance_info={"version": "0.9.0"}),
            instance(FIXED_PLAN),
            True,
            R.MAINTENANCE_INFO_CONFLICT,
        ),
        (
            "maintenance upgrade",
            update_request(maintenance_info={"version": "1.2.0"}),
            instance(FIXED_PLAN),
            True,
            "change",
        ),
        (
            "still provisioning",
            update_request(parameters={"size": 3}),
            instance(state="in_queue"),
            True,
            R.CONCURRENCY_ERROR,
        ),
        (
            "provisioning failed",
            update_request(parameters={"size": 3}),
            instance(state="failed"),
            True,
            R.INSTANCE_NOT_USABLE,
        ),
        (
            "being deprovisioned",
            update_request(parameters={"size": 3}),
            instance(deleting=True),
            True,
            R.CONCURRENCY_ERROR,
        ),
        (
            "another update pending",
            update_request(parameters={"size": 3}),
            instance(state="update", op="update"),
            True,
            R.CONCURRENCY_ERROR,
        ),
        (
            "same update pending",
            update_request(parameters={"size": 3}),
            instance(state="update", op="update", request={"parameters": {"size": 3}}),
            True,
            "accepted",
        ),
        (
            "same update pending, cannot wait",
            update_request(parameters={"size": 3}),
            instance(state="update", op="update", request={"parameters": {"size": 3}}),
            False,
            R.ASYNC_REQUIRED,
        ),
        (
            "same update failed: retried",
            update_request(parameters={"size": 3}),
            instance(state="failed", op="update", request={"parameters": {"size": 3}}),
            True,
            "change",
        ),
        ("other service's instance", update_request(), instance(APP_PLAN), True, R.BAD_REQUEST),
    ],
)
def test_update(reason: str, request_: bodies.UpdateRequest, existing: Record | None, accepts: bool, want: Any) -> None:
    got = outcome(
        lambda: instances.update(
            request_, instance_id=IID, catalog=CATALOG, existing=existing, accepts_incomplete=accepts
        )
    )
    if want == "change":
        assert isinstance(got, Change), (reason, got)
    elif want == "accepted":
        assert isinstance(got, Answer) and got.status == 202, (reason, got)
    else:
        assert got == want, reason


def test_update_merges_parameters_and_records_previous_values() -> None:
    existing = instance(request={"parameters": {"size": 2, "name": "a"}})
    got = instances.update(
        update_request(plan_id=SYNC_PLAN, parameters={"size": 5, "name": None}),
        instance_id=IID,
        catalog=CATALOG,
        existing=existing,
        accepts_incomplete=True,
    )
    assert isinstance(got, Change) and got.asynchronous is False
    assert got.spec["planId"] == SYNC_PLAN
    assert got.spec["parameters"] == {"size": 5}
    assert got.spec["previousValues"] == {
        "service_id": SERVICE,
        "plan_id": ASYNC_PLAN,
        "parameters": {"size": 2, "name": "a"},
    }
    assert got.spec["organizationGuid"] == "o"  # the rest of the spec is kept


# -- deprovision -----------------------------------------------------------------------------------------

TOKEN_D = Token(OperationType.DEPROVISION, "ns", IID, "uid-1", 0)


@pytest.mark.parametrize(
    ("reason", "query", "existing", "live", "accepts", "want"),
    [
        ("empty service_id", ("", ASYNC_PLAN), instance(), 0, True, R.BAD_REQUEST),
        ("empty plan_id", (SERVICE, ""), instance(), 0, True, R.BAD_REQUEST),
        ("missing service_id", (None, ASYNC_PLAN), instance(), 0, True, R.BAD_REQUEST),
        ("gone", (SERVICE, ASYNC_PLAN), None, 0, True, R.GONE),
        ("async", (SERVICE, ASYNC_PLAN), instance(), 0, True, Remove(True)),
        ("async, client cannot wait", (SERVICE, ASYNC_PLAN), instance(), 0, False, R.ASYNC_REQUIRED),
        ("sync", (SERVICE, SYNC_PLAN), instance(SYNC_PLAN), 0, False, Remove(False)),
        ("during provisioning", (SERVICE, ASYNC_PLAN), instance(state="in_queue"), 0, True, Remove(True)),
        ("after a failed provision", (SERVICE, ASYNC_PLAN), instance(state="failed"), 0, True, Remove(True)),
        (
            "repeat while deleting",
            (SERVICE, ASYNC_PLAN),
            instance(deleting=True, state="delete"),
            0,
            True,
            decisions.accepted(TOKEN_D),
        ),
        (
            "repeat while deleting, sync",
            (SERVICE, SYNC_PLAN),
            instance(SYNC_PLAN, deleting=True),
            0,
            False,
            Wait(TOKEN_D),
        ),
        ("live bindings", (SERVICE, ASYNC_PLAN), instance(), 2, True, R.BINDINGS_EXIST),
        ("another service", (OTHER_SERVICE, APP_PLAN), instance(), 0, True, R.BAD_REQUEST),
        ("plan id after an update", (SERVICE, FIXED_PLAN), instance(), 0, True, Remove(True)),
    ],
)
def test_deprovision(
    reason: str, query: tuple[Any, Any], existing: Record | None, live: int, accepts: bool, want: Any
) -> None:
    got = outcome(
        lambda: instances.deprovision(
            instance_id=IID,
            service_id=query[0],
            plan_id=query[1],
            catalog=CATALOG,
            existing=existing,
            live_bindings=live,
            accepts_incomplete=accepts,
        )
    )
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "existing", "want"),
    [
        ("missing", None, R.NOT_FOUND),
        ("provisioning", instance(state="in progress"), R.NOT_FOUND),
        ("provisioning failed", instance(state="failed"), R.NOT_FOUND),
        ("updating", instance(state="update", op="update"), R.CONCURRENCY_ERROR),
        ("deprovisioning", instance(deleting=True), R.CONCURRENCY_ERROR),
        ("not retrievable", instance(APP_PLAN), R.BAD_REQUEST),
        (
            "ready",
            instance(request={"parameters": {"size": 2}}),
            Answer(200, {"service_id": SERVICE, "plan_id": ASYNC_PLAN, "parameters": {"size": 2}}),
        ),
        ("update failed, still usable", instance(state="failed", op="update"), "ok"),
    ],
)
def test_fetch_instance(reason: str, existing: Record | None, want: Any) -> None:
    got = outcome(lambda: instances.fetch(instance_id=IID, catalog=CATALOG, existing=existing))
    if want == "ok":
        assert isinstance(got, Answer) and got.status == 200, reason
    else:
        assert got == want, reason


def test_a_fetched_instance_says_what_its_operator_says_of_it_now() -> None:
    """Day two: the instance's live Ready condition (the operator's words) is OSB's ``metadata.attributes``; the
    last operation's outcome is not rewritten (it succeeded, the answer is 200)."""
    existing = instance(request={"parameters": {"size": 2}})
    ready = {"type": "Ready", "status": "False", "reason": "OperatorFailed", "message": "disk full"}
    unhealthy = dataclasses.replace(existing, status={**existing.status, "conditions": [ready]})
    got = outcome(lambda: instances.fetch(instance_id=IID, catalog=CATALOG, existing=unhealthy))
    assert isinstance(got, Answer) and got.status == 200
    assert got.body["metadata"] == {
        "attributes": {"ready": "false", "reason": "OperatorFailed", "message": "disk full"}
    }


# -- bindings ------------------------------------------------------------------------------------------


def bind_request(**fields: Any) -> bodies.BindRequest:
    return bodies.BindRequest.model_validate({"service_id": SERVICE, "plan_id": ASYNC_PLAN, **fields})


TOKEN_B = Token(OperationType.BIND, "ns", "bind-1", "uid-b", 0)


@pytest.mark.parametrize(
    ("reason", "request_", "inst", "existing", "accepts", "want"),
    [
        ("new, async", bind_request(), instance(), None, True, Create(True)),
        ("new, async, client cannot wait", bind_request(), instance(), None, False, R.ASYNC_REQUIRED),
        ("no instance", bind_request(), None, None, True, R.INSTANCE_DOES_NOT_EXIST),
        (
            "plan not bindable",
            bind_request(plan_id=UNBINDABLE_PLAN),
            instance(UNBINDABLE_PLAN),
            None,
            True,
            R.BAD_REQUEST,
        ),
        ("plan differs from the instance's", bind_request(plan_id=FIXED_PLAN), instance(), None, True, R.BAD_REQUEST),
        (
            "requires app, none given",
            bind_request(service_id=OTHER_SERVICE, plan_id=APP_PLAN),
            instance(APP_PLAN),
            None,
            False,
            R.REQUIRES_APP,
        ),
        (
            "requires app, given",
            bind_request(service_id=OTHER_SERVICE, plan_id=APP_PLAN, bind_resource={"app_guid": "a"}),
            instance(APP_PLAN),
            None,
            False,
            Create(False),
        ),
        (
            "requires app, deprecated app_guid",
            bind_request(service_id=OTHER_SERVICE, plan_id=APP_PLAN, app_guid="a"),
            instance(APP_PLAN),
            None,
            False,
            Create(False),
        ),
        (
            "parameters break the schema",
            bind_request(parameters={"role": "root"}),
            instance(),
            None,
            True,
            R.BAD_REQUEST,
        ),
        ("instance still provisioning", bind_request(), instance(state="in progress"), None, True, R.CONCURRENCY_ERROR),
        ("instance provisioning failed", bind_request(), instance(state="failed"), None, True, R.INSTANCE_NOT_USABLE),
        ("instance being deleted", bind_request(), instance(deleting=True), None, True, R.CONCURRENCY_ERROR),
        (
            "instance marked delete",
            bind_request(),
            instance(state="delete", op="deprovision"),
            None,
            True,
            R.CONCURRENCY_ERROR,
        ),
        (
            "instance marked by a deprovision, state moved on since",
            bind_request(),
            instance(op="deprovision"),
            None,
            True,
            R.CONCURRENCY_ERROR,
        ),
        ("identical, bound", bind_request(), instance(), binding(), True, Credentials(200)),
        (
            "identical, pending",
            bind_request(),
            instance(),
            binding(state="in_queue"),
            True,
            decisions.accepted(TOKEN_B),
        ),
        (
            "identical, bound, instance busy since",
            bind_request(),
            instance(state="update", op="update"),
            binding(),
            True,
            Credentials(200),
        ),
        ("different parameters", bind_request(parameters={"role": "write"}), instance(), binding(), True, R.CONFLICT),
        ("same id, other instance", bind_request(), instance(), binding(instance_id="other"), True, R.CONFLICT),
        ("being unbound", bind_request(), instance(), binding(deleting=True), True, R.CONCURRENCY_ERROR),
        (
            "created by another bind, not yet recorded (it may still be withdrawn)",
            bind_request(),
            instance(),
            binding(state=None, op=None),
            True,
            decisions.Recheck(),
        ),
    ],
)
def test_bind(
    reason: str, request_: bodies.BindRequest, inst: Record | None, existing: Record | None, accepts: bool, want: Any
) -> None:
    got = outcome(
        lambda: bindings.bind(
            request_,
            binding_id="bind-1",
            instance_id=IID,
            catalog=CATALOG,
            instance=inst,
            existing=existing,
            accepts_incomplete=accepts,
        )
    )
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "now", "want"),
    [
        ("unchanged", instance(), None),
        ("an update finished meanwhile", instance(op="update", operation_id="op-2"), None),
        ("deprovision marked it", instance(state="delete", op="deprovision"), R.CONCURRENCY_ERROR),
        ("being deleted", instance(deleting=True), R.CONCURRENCY_ERROR),
        ("gone", None, R.CONCURRENCY_ERROR),
        ("deleted and created again", instance(uid="uid-2"), R.CONCURRENCY_ERROR),
        ("being updated", instance(state="update", op="update"), R.CONCURRENCY_ERROR),
    ],
)
def test_still_bindable_when_read_again(reason: str, now: Record | None, want: Any) -> None:
    assert outcome(lambda: bindings.still_bindable(IID, instance(), now)) == want, reason


def test_which_bindings_block_a_deprovision() -> None:
    recorded, unbinding = binding(), binding(deleting=True)
    creating, withdrawn = binding(state=None, op=None), binding(state=None, op=None, deleting=True)
    assert instances.binding_census([]) == (0, [])
    assert instances.binding_census([recorded, unbinding, creating, withdrawn]) == (2, [creating])
    assert instances.binding_census([withdrawn]) == (0, [])


def test_a_recheck_waits_until_the_binding_is_recorded_or_withdrawn() -> None:
    unrecorded = binding(state=None, op=None)
    assert not decisions.settled("uid-b", unrecorded)
    assert not decisions.settled("uid-b", binding(state="in progress", op=None))  # the controller was first
    assert decisions.settled("uid-b", binding(state=None, op="bind"))
    assert decisions.settled("uid-b", binding(state=None, op=None, deleting=True))
    assert decisions.settled("uid-b", None)
    assert decisions.settled("uid-other", unrecorded)


def test_unmarking_puts_back_what_the_mark_replaced() -> None:
    before = {
        "state": "succeeded",
        "description": "done",
        "lastOperation": {"type": "update", "id": "op-2"},
        "observedGeneration": 2,
    }
    mark = records.requested_status(OperationState.DELETE, "deprovision", "op-3", "2026-01-01T00:00:00.000001Z")
    marked = {"state": "delete", "lastOperation": mark["lastOperation"], "observedGeneration": 2}
    undo = records.unmarked_status(before, mark, marked)
    # Merged into the marked status, exactly ``before`` (a key ``before`` lacked is removed: null).
    assert undo == {
        "state": "succeeded",
        "lastOperation": {"type": "update", "id": "op-2", "startedAt": None},
        "description": "done",
        "error": None,
        "instanceUsable": None,
        "updateRepeatable": None,
    }
    # Fields changed since the mark are left alone (the controller moved the state on, wrote a description).
    moved = {**marked, "state": "in progress", "description": "applying"}
    assert records.unmarked_status(before, mark, moved) == {
        "lastOperation": {"type": "update", "id": "op-2", "startedAt": None},
        "error": None,
        "instanceUsable": None,
        "updateRepeatable": None,
    }
    # No lastOperation before the mark: it is removed.
    assert records.unmarked_status({"state": "succeeded"}, mark, marked)["lastOperation"] is None


def test_a_mark_is_told_apart_by_its_start() -> None:
    stamps = [records.instant() for _ in range(1000)]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert stamps[0].endswith("Z") and len(stamps[0]) == len("2026-01-01T00:00:00.000000Z")


def test_a_record_keeps_the_status_as_stored() -> None:
    status = {"state": "succeeded", "lastOperation": {"type": "provision", "id": "op-1", "startedAt": "t"}}
    record = Record.from_object(Kind.INSTANCE, {"metadata": {"name": "i"}, "status": status})
    assert record.status == status and record.operation_id == "op-1"


@pytest.mark.parametrize(
    ("reason", "query", "existing", "accepts", "want"),
    [
        ("empty plan_id", (SERVICE, ""), binding(), True, R.BAD_REQUEST),
        ("gone", (SERVICE, ASYNC_PLAN), None, True, R.GONE),
        ("async", (SERVICE, ASYNC_PLAN), binding(), True, Remove(True)),
        ("async, client cannot wait", (SERVICE, ASYNC_PLAN), binding(), False, R.ASYNC_REQUIRED),
        ("while binding", (SERVICE, ASYNC_PLAN), binding(state="in progress"), True, Remove(True)),
        (
            "repeat while unbinding",
            (SERVICE, ASYNC_PLAN),
            binding(deleting=True),
            True,
            decisions.accepted(Token(OperationType.UNBIND, "ns", "bind-1", "uid-b", 0)),
        ),
        ("other instance's binding", (SERVICE, ASYNC_PLAN), binding(instance_id="other"), True, R.BAD_REQUEST),
    ],
)
def test_unbind(reason: str, query: tuple[str, str], existing: Record | None, accepts: bool, want: Any) -> None:
    got = outcome(
        lambda: bindings.unbind(
            binding_id="bind-1",
            instance_id=IID,
            service_id=query[0],
            plan_id=query[1],
            catalog=CATALOG,
            existing=existing,
            accepts_incomplete=accepts,
        )
    )
    assert got == want, reason


@pytest.mark.parametrize(
    ("reason", "existing", "want"),
    [
        ("missing", None, R.NOT_FOUND),
        ("binding", binding(state="in progress"), R.NOT_FOUND),
        ("failed", binding(state="failed"), R.NOT_FOUND),
        ("unbinding", binding(deleting=True), R.NOT_FOUND),
        ("other instance", binding(instance_id="x"), R.NOT_FOUND),
        ("bound", binding(), Credentials(200, with_parameters=True)),
    ],
)
def test_fetch_binding(reason: str, existing: Record | None, want: Any) -> None:
    assert (
        outcome(lambda: bindings.fetch(binding_id="bind-1", instance_id=IID, catalog=CATALOG, existing=existing))
        == want
    ), reason


# -- last_operation and waiting ------------------------------------------------------------------------

TOKEN_U = Token(OperationType.UPDATE, "ns", IID, "uid-1", 3)


def state_of(answer: Answer) -> tuple[int, str | None]:
    return answer.status, answer.body.get("state")


@pytest.mark.parametrize(
    ("reason", "token", "existing", "want"),
    [
        ("queued", TOKEN_P, instance(state="in_queue", operation_id=TOKEN_P.encode()), (200, "in progress")),
        ("no status yet", TOKEN_P, instance(state=None, op=None), (200, "in progress")),
        ("provisioned", TOKEN_P, instance(operation_id=TOKEN_P.encode()), (200, "succeeded")),
        ("failed", TOKEN_P, instance(state="failed", error="boom"), (200, "failed")),
        ("deprovision finished: object gone", TOKEN_D, None, (200, "succeeded")),
        ("deprovision finished, id reused since", TOKEN_D, instance(uid="uid-2"), (200, "succeeded")),
        (
            "deprovision under way",
            TOKEN_D,
            instance(state="delete", op="deprovision", deleting=True, operation_id=TOKEN_D.encode()),
            (200, "in progress"),
        ),
        (
            "deprovision failed",
            TOKEN_D,
            instance(state="failed", op="deprovision", deleting=True, operation_id=TOKEN_D.encode()),
            (200, "failed"),
        ),
        ("provision, object gone", TOKEN_P, None, (200, "failed")),
        ("no token, object gone", None, None, R.GONE),
        ("no token, provisioning", None, instance(state="in progress"), (200, "in progress")),
        (
            "update not yet observed",
            TOKEN_U,
            instance(op="update", generation=3, observed_generation=2, operation_id=TOKEN_U.encode()),
            (200, "in progress"),
        ),
        (
            "update observed",
            TOKEN_U,
            instance(op="update", generation=3, observed_generation=3, operation_id=TOKEN_U.encode()),
            (200, "succeeded"),
        ),
        (
            "provision superseded by an update",
            TOKEN_P,
            instance(op="update", operation_id=TOKEN_U.encode()),
            (200, "succeeded"),
        ),
        (
            "provision superseded by a deprovision",
            TOKEN_P,
            instance(op="deprovision", deleting=True, operation_id=TOKEN_D.encode()),
            (200, "failed"),
        ),
        # A token of another object says nothing about this one: the current operation is answered.
        (
            "token of another instance",
            Token(OperationType.PROVISION, "ns", "other", "u", 0),
            instance(state="in progress"),
            (200, "in progress"),
        ),
        ("binding token on an instance", TOKEN_B, instance(), (200, "succeeded")),
        ("token of another instance, this one gone", TOKEN_B, None, R.GONE),
    ],
)
def test_instance_last_operation(reason: str, token: Token | None, existing: Record | None, want: Any) -> None:
    got = outcome(lambda: decisions.last_operation(Kind.INSTANCE, IID, token, existing))
    assert (state_of(got) if isinstance(got, Answer) else got) == want, reason


def test_failed_update_reports_usability() -> None:
    existing = instance(state="failed", op="update", error="quota", instance_usable=True, update_repeatable=False)
    answer = decisions.last_operation(Kind.INSTANCE, IID, None, existing)
    assert answer.body == {
        "state": "failed",
        "description": "quota",
        "instance_usable": True,
        "update_repeatable": False,
    }
    failed_provision = decisions.last_operation(
        Kind.INSTANCE, IID, None, instance(state="failed", instance_usable=False)
    )
    assert "instance_usable" not in failed_provision.body  # only for update/deprovision, as OSB says


def test_in_progress_answers_ask_for_retry_after() -> None:
    assert decisions.last_operation(Kind.INSTANCE, IID, None, instance(state="in progress")).pending
    assert not decisions.last_operation(Kind.INSTANCE, IID, None, instance()).pending


@pytest.mark.parametrize(
    ("reason", "token", "record", "created", "accepts", "want"),
    [
        ("provisioned", TOKEN_P, instance(), True, False, Answer(201, {})),
        ("provisioned by an earlier request", TOKEN_P, instance(), False, False, Answer(200, {})),
        ("provision failed", TOKEN_P, instance(state="failed"), True, False, R.OPERATION_FAILED),
        (
            "timed out, client can poll",
            TOKEN_P,
            instance(state="in progress"),
            True,
            True,
            decisions.accepted(TOKEN_P, bodies.ProvisionBody()),
        ),
        ("timed out, client cannot poll", TOKEN_P, instance(state="in progress"), True, False, R.OPERATION_TIMEOUT),
        ("deleted meanwhile", TOKEN_P, None, True, False, R.OPERATION_FAILED),
        ("deprovisioned", TOKEN_D, None, False, False, Answer(200, {})),
        ("bound", TOKEN_B, binding(), True, False, Credentials(201)),
        (
            "unbind timed out",
            Token(OperationType.UNBIND, "ns", "bind-1", "uid-b", 0),
            binding(deleting=True, state="delete"),
            False,
            False,
            R.OPERATION_TIMEOUT,
        ),
    ],
)
def test_after_wait(reason: str, token: Token, record: Record | None, created: bool, accepts: bool, want: Any) -> None:
    got = outcome(lambda: decisions.after_wait(token, record, created=created, accepts_incomplete=accepts))
    assert got == want, reason


def test_error_bodies_use_the_spec_codes() -> None:
    for reason, code in [
        (R.ASYNC_REQUIRED, 422),
        (R.CONCURRENCY_ERROR, 422),
        (R.MAINTENANCE_INFO_CONFLICT, 422),
        (R.REQUIRES_APP, 422),
    ]:
        status, body = errors.to_response(errors.BrokerError(reason, "why"))
        assert (status, body["error"], body["description"]) == (code, reason.value, "why")
    assert errors.to_response(errors.BrokerError(R.GONE, "gone")) == (410, {})
    assert set(errors.STATUS) == set(errors.Reason)


def test_a_plan_being_deleted_takes_no_new_instances_but_serves_its_own() -> None:
    """Issue 18: an SFPlan with a deletionTimestamp (held by the controller while instances use it) is no
    longer offered: gone from /v2/catalog, 400 for a new provision or a move onto it; its existing instances
    keep working (an identical repeat, updates, binds)."""
    catalog = make_catalog(withdrawn=(ASYNC_PLAN,))
    offered = {plan.id for service in catalog.body().services for plan in service.plans}
    assert ASYNC_PLAN not in offered and FIXED_PLAN in offered

    def provision(existing: Record | None) -> Any:
        return outcome(
            lambda: instances.provision(
                provision_request(), instance_id=IID, catalog=catalog, existing=existing, accepts_incomplete=True
            )
        )

    assert provision(None) == R.BAD_REQUEST
    assert provision(instance()) == Answer(200, {}), "an identical repeat for an existing instance"
    update = outcome(
        lambda: instances.update(
            update_request(parameters={"size": 3}),
            instance_id=IID,
            catalog=catalog,
            existing=instance(),
            accepts_incomplete=True,
        )
    )
    assert update != R.BAD_REQUEST, "an existing instance of the plan is still updated"
    bind = outcome(
        lambda: bindings.bind(
            bind_request(),
            binding_id="b-1",
            instance_id=IID,
            catalog=catalog,
            instance=instance(),
            existing=None,
            accepts_incomplete=True,
        )
    )
    assert isinstance(bind, Create), "an existing instance of the plan is still bound"
    moved = outcome(
        lambda: instances.update(
            update_request(plan_id=ASYNC_PLAN),
            instance_id=IID,
            catalog=catalog,
            existing=instance(FIXED_PLAN),
            accepts_incomplete=True,
        )
    )
    assert moved == R.BAD_REQUEST, "no instance moves onto a withdrawn plan"
