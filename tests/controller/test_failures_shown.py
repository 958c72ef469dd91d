"""Every failure where the user looks (issue 44): the whole matrix of kind x failure, against a real kube-apiserver,
the real controller process and real brokers over HTTP.

Each row makes one failure happen to one object — a 403 (a namespace nobody onboarded, an account lacking a right),
a kind whose CRD is not installed, a 422 from an operator's schema, a ValidatingAdmissionPolicy's denial, a
broker's 5xx or timeout, a template that does not render — and asserts, within the row's bound, that the object
shows it: its Ready condition False with the expected reason and a message naming the fix, and a Warning Event on
it saying the same; neither carries a value of a Secret or a credential. A combination that cannot happen to a
kind is a row too, with why (``NOT_APPLICABLE``): :func:`test_the_matrix_is_whole` fails if a cell is neither.

Lean: every row is set up first, in namespaces of its own, then all are watched at once (the broker time-outs
bound the wait, not the sum of the rows); the rows' assertions are one test each over what was seen.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from tests.brokers.fixture import SecondBroker
from tests.claims_support import create as create_claims_object
from tests.claims_support import registered_service, service_claim
from tests.cluster_fixtures import onboard
from tests.controller.test_lifecycle import SERVICE_ID, bind, provision
from tests.controller_support import apply_yaml, wait_for
from tests.servicecatalog_support import GROUP as SC_GROUP
from tests.servicecatalog_support import VERSION as SC_VERSION
from tests.servicecatalog_support import auth_secret, custom, get, ready, renamed

pytestmark = pytest.mark.usefixtures("controller")

SECRET = "Sup3r-s3cret-v4lue-7f1c"
"""A value put where a refusal would echo it (a rendered ConfigMap, a Secret): it must never be shown."""
BROKER_TIMEOUT = osbclient.Broker(url="http://broker.invalid").timeout
QUICK = 20.0
"""Seconds within which a failure that needs no broker time-out must show (first failure to condition + Event)."""
SLOW = BROKER_TIMEOUT + 20.0
"""... and one that waits for a broker's time-out first."""
DENY_LABEL = "failures.opbroker.io/deny"


class Failure(StrEnum):
    NOT_ONBOARDED = "403 namespace not onboarded"
    LACKS_RIGHT = "403 account lacking a right"
    MISSING_CRD = "missing CRD"
    SCHEMA = "422 from a schema"
    ADMISSION = "admission denial"
    BROKER_5XX = "broker 5xx"
    BROKER_TIMEOUT = "broker timeout"
    RENDER = "render error"


class Kind(StrEnum):
    SF_INSTANCE = "SFServiceInstance"
    SF_BINDING = "SFServiceBinding"
    SC_BROKER = "Broker"
    SC_INSTANCE = "Instance"
    SC_BINDING = "Binding"
    CLAIM = "ServiceClaim"


@dataclass(frozen=True)
class Where:
    """The object a row watches."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str


@dataclass
class World:
    """What the rows share: the API, the catalog namespace, the second broker, and what to clean up."""

    api: client.ApiClient
    catalog_namespace: str
    broker: SecondBroker
    tmp: Path
    sc_broker: str = ""
    suffix: str = ""
    sc_instance: tuple[str, str] = ("", "")
    sc_instance_id: str = ""
    namespaces: list[str] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def namespace(self, prefix: str, *, onboarded: bool = True, deny: bool = False) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        labels = {"opbroker.io/test": "true", **({DENY_LABEL: "true"} if deny else {})}
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": name, "labels": labels}})
        self.namespaces.append(name)
        if onboarded:
            onboard(self.api, name)
        return name


@dataclass(frozen=True)
class Row:
    kind: Kind
    failure: Failure
    setup: Callable[[World], Where]
    reasons: frozenset[str]
    """The Ready reason the object shows (one of)."""
    fix: str
    """Words of the fix its message names."""
    bound: float = QUICK

    @property
    def id(self) -> str:
        return f"{self.kind.value}|{self.failure.value}"


# -- SFServiceInstance and SFServiceBinding: a plan's templates, applied as the plan's account ------------------------

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {name}
  serviceId: {service}
  description: a plan made to fail one way
  bindable: true
  templates:
{templates}
"""

CONFIG_MAP = f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: {{{{ instance.metadata.name }}}}-cm
data:
  password: {SECRET}
"""

TEMPLATES = {
    Failure.NOT_ONBOARDED: CONFIG_MAP,
    Failure.LACKS_RIGHT: """apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ instance.metadata.name }}-sa
""",
    Failure.MISSING_CRD: """apiVersion: gadgets.not-installed.example.com/v1
kind: Gadget
metadata:
  name: {{ instance.metadata.name }}-gadget
spec: {size: 1}
""",
    Failure.SCHEMA: """apiVersion: demo.opbroker.io/v1alpha1
kind: Database
metadata:
  name: {{ instance.metadata.name }}-db
spec:
  engine: postgres
  storageGB: -4
""",
    Failure.ADMISSION: CONFIG_MAP,
    Failure.RENDER: """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}-cm
data:
  size: {{ required(parameter("/size"), "parameter size") }}
""",
}


def _indented(content: str, by: int) -> str:
    return "\n".join(" " * by + line for line in content.strip("\n").splitlines())


def _plan(world: World, name: str, provision_template: str, bind_template: str | None = None) -> str:
    templates = [("provision", provision_template)] + ([("bind", bind_template)] if bind_template else [])
    listed = "\n".join(
        f"  - action: {action}\n    type: jinja2\n    content: |\n{_indented(content, 6)}"
        for action, content in templates
    )
    path = world.tmp / f"{name}.yaml"
    path.write_text(PLAN.format(name=name, service=SERVICE_ID, templates=listed))
    apply_yaml(world.api, path, world.catalog_namespace)
    return name


def sf_instance(failure: Failure) -> Callable[[World], Where]:
    def setup(world: World) -> Where:
        namespace = world.namespace(
            "sfi", onboarded=failure is not Failure.NOT_ONBOARDED, deny=failure is Failure.ADMISSION
        )
        plan = _plan(world, f"fails-{namespace}", TEMPLATES[failure])
        provision(world.api, namespace, "inst", plan_id=plan, service_id=SERVICE_ID)
        return Where("osb.servicefabrik.io", "v1alpha1", "sfserviceinstances", namespace, "inst")

    return setup


def sf_binding(failure: Failure) -> Callable[[World], Where]:
    """The instance provisions (a Service of its own: ConfigMaps may be denied there); its binding's ``bind``
    template fails."""

    def setup(world: World) -> Where:
        namespace = world.namespace("sfb", deny=failure is Failure.ADMISSION)
        template = TEMPLATES[failure].replace("instance.metadata.name", "binding.metadata.name")
        plan = _plan(world, f"bindfails-{namespace}", OK_SERVICE, template)
        provision(world.api, namespace, "inst", plan_id=plan, service_id=SERVICE_ID)
        wait_for(lambda: _state(world.api, namespace, "sfserviceinstances", "inst") == "succeeded", 30, "provisioned")
        bind(world.api, namespace, "bnd", "inst", plan_id=plan, service_id=SERVICE_ID)
        return Where("osb.servicefabrik.io", "v1alpha1", "sfservicebindings", namespace, "bnd")

    return setup


OK_SERVICE = """apiVersion: v1
kind: Service
metadata:
  name: {{ instance.metadata.name }}-svc
spec:
  ports: [{port: 5432}]
"""
"""What an instance renders in a namespace whose ConfigMaps and Secrets are denied (Services are not)."""


def _state(api: client.ApiClient, namespace: str, plural: str, name: str) -> str | None:
    with contextlib.suppress(ApiException):
        found = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", namespace, plural, name
        )
        return ((found or {}).get("status") or {}).get("state")
    return None


# -- the Service Catalog: a Broker, an Instance, a Binding ---------------------------------------------------------


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"description": "the catalog database is down"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def failing_broker() -> Iterator[str]:
    """A broker that answers every request 503."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_broker() -> Iterator[str]:
    """A broker that takes the connection and never answers (the kernel accepts; nobody reads)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def _register(world: World, name: str, url: str) -> None:
    custom(world.api).create_cluster_custom_object(
        SC_GROUP,
        SC_VERSION,
        "brokers",
        {"apiVersion": f"{SC_GROUP}/{SC_VERSION}", "kind": "Broker", "metadata": {"name": name}, "spec": {"url": url}},
    )
    world.cleanups.append(lambda: custom(world.api).delete_cluster_custom_object(SC_GROUP, SC_VERSION, "brokers", name))


def sc_broker(failure: Failure) -> Callable[[World], Where]:
    def setup(world: World) -> Where:
        name = f"fails-{uuid.uuid4().hex[:8]}"
        stand_in = failing_broker() if failure is Failure.BROKER_5XX else silent_broker()
        url = stand_in.__enter__()
        world.cleanups.append(lambda: stand_in.__exit__(None, None, None))
        _register(world, name, url)
        return Where(SC_GROUP, SC_VERSION, "brokers", None, name)

    return setup


def _sc_create(world: World, namespace: str, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    custom(world.api).create_namespaced_custom_object(
        SC_GROUP,
        SC_VERSION,
        namespace,
        plural,
        {"apiVersion": f"{SC_GROUP}/{SC_VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec},
    )


def sc_instance(failure: Failure) -> Callable[[World], Where]:
    def setup(world: World) -> Where:
        namespace = world.namespace("sci")
        external = str(uuid.uuid4())
        path = rf"^/v2/service_instances/{external}$"
        if failure is Failure.BROKER_5XX:
            world.broker.fail("PUT", path, 500, body='{"description": "out of disks"}', times=None)
        else:
            world.broker.fail("PUT", path, None, delay=BROKER_TIMEOUT + 60, times=None)
        spec = {"serviceClassName": f"second-db-{world.suffix}", "planName": "sync-small", "externalID": external}
        _sc_create(world, namespace, "instances", "Instance", "inst", spec)
        return Where(SC_GROUP, SC_VERSION, "instances", namespace, "inst")

    return setup


def _shared_instance(world: World) -> tuple[str, str]:
    """One provisioned Instance every Binding row binds to (shared with every namespace)."""
    if not world.sc_instance[0]:
        namespace = world.namespace("scshared")
        world.sc_instance_id = str(uuid.uuid4())
        spec = {
            "serviceClassName": f"second-db-{world.suffix}",
            "planName": "sync-small",
            "externalID": world.sc_instance_id,
            "shareWith": ["*"],
        }
        _sc_create(world, namespace, "instances", "Instance", "shared", spec)
        wait_for(
            lambda: ready(get(world.api, "instances", "shared", namespace)) == ("True", "Provisioned"),
            30,
            "provisioned",
        )
        world.sc_instance = (namespace, "shared")
    return world.sc_instance


def sc_binding(failure: Failure) -> Callable[[World], Where]:
    def setup(world: World) -> Where:
        instance_namespace, instance = _shared_instance(world)
        namespace = world.namespace(
            "scb", onboarded=failure is not Failure.NOT_ONBOARDED, deny=failure is Failure.ADMISSION
        )
        external = str(uuid.uuid4())
        path = rf"^/v2/service_instances/{world.sc_instance_id}/service_bindings/{external}$"
        if failure is Failure.BROKER_5XX:
            world.broker.fail("PUT", path, 503, body='{"description": "try later"}', times=None)
        elif failure is Failure.BROKER_TIMEOUT:
            world.broker.fail("PUT", path, None, delay=BROKER_TIMEOUT + 60, times=None)
        elif failure is Failure.SCHEMA:  # credentials a Secret cannot hold: the API server refuses the key (422)
            credentials = {"credentials": {"bad key!": SECRET, "password": SECRET}}
            world.broker.fail("PUT", path, 201, body=json.dumps(credentials), times=None)
        spec = {"instanceRef": {"name": instance, "namespace": instance_namespace}, "externalID": external}
        _sc_create(world, namespace, "bindings", "Binding", "bnd", spec)
        return Where(SC_GROUP, SC_VERSION, "bindings", namespace, "bnd")

    return setup


# -- claims -----------------------------------------------------------------------------------------------------


def claim(failure: Failure) -> Callable[[World], Where]:
    def setup(world: World) -> Where:
        namespace = world.namespace(
            "cl", onboarded=failure is not Failure.NOT_ONBOARDED, deny=failure is Failure.ADMISSION
        )
        endpoints: dict[str, str | tuple[str, str]] = {"host": "pg.example", "port": "5432", "password": SECRET}
        create_claims_object(world.api, namespace, registered_service("pg", endpoints=endpoints))
        create_claims_object(world.api, namespace, service_claim("app-db"))
        return Where("primaza.io", "v1alpha1", "serviceclaims", namespace, "app-db")

    return setup


# -- the matrix ---------------------------------------------------------------------------------------------------

ONBOARD = "Onboard the namespace"
GRANT = "grant it that right"
INSTALL = "install the operator"
SCHEMA_FIX = "fix the plan's template or the request's parameters"
ADMISSION_FIX = "ask the cluster's administrator"
BROKER_DOWN = "its operator must look at it"
BROKER_LATE = "did not answer in time: check the Broker's URL and that the broker is up"

COUNTED = frozenset({"ApplyFailed", "GaveUp"})
"""A refusal fixable outside the request (403, 404): counted, and past ``--error-threshold`` (4 in the tests) the
operation gives up — either way Ready False, the message naming the fix."""
RENDERED = frozenset({"RenderFailed", "GaveUp"})
SC_PROVISION = frozenset(
    {"ProvisionCallFailed", "StartingOrphanMitigation", "OrphanMitigationSuccessful", "Provisioning"}
)
"""A provision a broker fails is mitigated and sent again, for ever: Ready goes round these steps, each message
carrying the failure and its fix (``statuses.after_failure``); the Event is the mitigation's."""
SC_BIND = frozenset(
    {"BindCallFailed", "StartingOrphanMitigation", "OrphanMitigationSuccessful", "Binding", "Unbinding"}
)
SC_STORE = frozenset({"BindResultRefused", "StartingOrphanMitigation", "OrphanMitigationSuccessful"})

ROWS: tuple[Row, ...] = (
    Row(Kind.SF_INSTANCE, Failure.NOT_ONBOARDED, sf_instance(Failure.NOT_ONBOARDED), COUNTED, "onboard namespace"),
    Row(Kind.SF_INSTANCE, Failure.LACKS_RIGHT, sf_instance(Failure.LACKS_RIGHT), COUNTED, GRANT),
    Row(
        Kind.SF_INSTANCE,
        Failure.MISSING_CRD,
        sf_instance(Failure.MISSING_CRD),
        frozenset({"KindNotInstalled"}),
        INSTALL,
    ),
    Row(Kind.SF_INSTANCE, Failure.SCHEMA, sf_instance(Failure.SCHEMA), frozenset({"ApplyRefused"}), SCHEMA_FIX),
    Row(
        Kind.SF_INSTANCE, Failure.ADMISSION, sf_instance(Failure.ADMISSION), frozenset({"ApplyRefused"}), ADMISSION_FIX
    ),
    Row(Kind.SF_INSTANCE, Failure.RENDER, sf_instance(Failure.RENDER), RENDERED, "template provision line 6"),
    Row(Kind.SF_BINDING, Failure.LACKS_RIGHT, sf_binding(Failure.LACKS_RIGHT), COUNTED, GRANT),
    Row(
        Kind.SF_BINDING, Failure.MISSING_CRD, sf_binding(Failure.MISSING_CRD), frozenset({"KindNotInstalled"}), INSTALL
    ),
    Row(Kind.SF_BINDING, Failure.SCHEMA, sf_binding(Failure.SCHEMA), frozenset({"ApplyRefused"}), SCHEMA_FIX),
    Row(Kind.SF_BINDING, Failure.ADMISSION, sf_binding(Failure.ADMISSION), frozenset({"ApplyRefused"}), ADMISSION_FIX),
    Row(Kind.SF_BINDING, Failure.RENDER, sf_binding(Failure.RENDER), RENDERED, "template bind line 6"),
    Row(
        Kind.SC_BROKER,
        Failure.BROKER_5XX,
        sc_broker(Failure.BROKER_5XX),
        frozenset({"ErrorFetchingCatalog"}),
        BROKER_DOWN,
    ),
    Row(
        Kind.SC_BROKER,
        Failure.BROKER_TIMEOUT,
        sc_broker(Failure.BROKER_TIMEOUT),
        frozenset({"ErrorFetchingCatalog"}),
        BROKER_LATE,
        SLOW,
    ),
    Row(Kind.SC_INSTANCE, Failure.BROKER_5XX, sc_instance(Failure.BROKER_5XX), SC_PROVISION, BROKER_DOWN),
    Row(Kind.SC_INSTANCE, Failure.BROKER_TIMEOUT, sc_instance(Failure.BROKER_TIMEOUT), SC_PROVISION, BROKER_LATE, SLOW),
    Row(
        Kind.SC_BINDING,
        Failure.NOT_ONBOARDED,
        sc_binding(Failure.NOT_ONBOARDED),
        frozenset({"NamespaceNotOnboarded"}),
        ONBOARD,
    ),
    Row(Kind.SC_BINDING, Failure.SCHEMA, sc_binding(Failure.SCHEMA), SC_STORE, "a Secret cannot"),
    Row(Kind.SC_BINDING, Failure.ADMISSION, sc_binding(Failure.ADMISSION), SC_STORE, ADMISSION_FIX),
    Row(Kind.SC_BINDING, Failure.BROKER_5XX, sc_binding(Failure.BROKER_5XX), SC_BIND, BROKER_DOWN),
    Row(Kind.SC_BINDING, Failure.BROKER_TIMEOUT, sc_binding(Failure.BROKER_TIMEOUT), SC_BIND, BROKER_LATE, SLOW),
    Row(Kind.CLAIM, Failure.NOT_ONBOARDED, claim(Failure.NOT_ONBOARDED), frozenset({"NamespaceNotOnboarded"}), ONBOARD),
    Row(Kind.CLAIM, Failure.ADMISSION, claim(Failure.ADMISSION), frozenset({"AdmissionDenied"}), ADMISSION_FIX),
)

NO_BROKER = "calls no broker: opbroker is the broker, and its platform sees its answer, not this object"
NO_TEMPLATE = "renders no template and writes no operator kind: the broker does the work"
NOT_APPLICABLE: dict[tuple[Kind, Failure], str] = {
    (Kind.SF_INSTANCE, Failure.BROKER_5XX): NO_BROKER,
    (Kind.SF_INSTANCE, Failure.BROKER_TIMEOUT): NO_BROKER,
    (Kind.SF_BINDING, Failure.NOT_ONBOARDED): "lives in its instance's namespace: the instance's row fails there first",
    (Kind.SF_BINDING, Failure.BROKER_5XX): NO_BROKER,
    (Kind.SF_BINDING, Failure.BROKER_TIMEOUT): NO_BROKER,
    **{
        (
            Kind.SC_BROKER,
            f,
        ): "cluster-scoped; writes only ServiceClasses, with the controller's own rights; renders nothing"
        for f in (Failure.NOT_ONBOARDED, Failure.LACKS_RIGHT, Failure.MISSING_CRD, Failure.RENDER)
    },
    (Kind.SC_BROKER, Failure.SCHEMA): "a ServiceClass the API server refuses is skipped and named (CatalogComplete, "
    "tests/servicecatalog)",
    (Kind.SC_BROKER, Failure.ADMISSION): "as a refused ServiceClass: skipped and named in CatalogComplete",
    **{
        (Kind.SC_INSTANCE, f): "writes nothing into its namespace (parameters are read with the controller's rights); "
        + NO_TEMPLATE
        for f in (Failure.NOT_ONBOARDED, Failure.LACKS_RIGHT, Failure.MISSING_CRD, Failure.SCHEMA, Failure.ADMISSION)
    },
    (Kind.SC_INSTANCE, Failure.RENDER): NO_TEMPLATE,
    (
        Kind.SC_BINDING,
        Failure.LACKS_RIGHT,
    ): "writes only as its namespace's opbroker account: that is the onboarding row",
    (Kind.SC_BINDING, Failure.MISSING_CRD): NO_TEMPLATE,
    (Kind.SC_BINDING, Failure.RENDER): NO_TEMPLATE,
    (Kind.CLAIM, Failure.LACKS_RIGHT): "writes only as its namespace's opbroker account: that is the onboarding row",
    (Kind.CLAIM, Failure.MISSING_CRD): "writes only Secrets and projections into the apps/v1 workloads it selects",
    (Kind.CLAIM, Failure.SCHEMA): "its binding Secret's keys are the RegisteredService's, which its schema admits",
    (
        Kind.CLAIM,
        Failure.BROKER_5XX,
    ): "calls no broker (a RegisteredService names an endpoint, probed by health checks)",
    (
        Kind.CLAIM,
        Failure.BROKER_TIMEOUT,
    ): "calls no broker (a RegisteredService names an endpoint, probed by health checks)",
    (Kind.CLAIM, Failure.RENDER): "renders no template",
}


# -- watching ------------------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What a row's object showed, and when (seconds after its setup)."""

    condition: dict[str, Any] | None = None
    event: Any = None
    after: float | None = None
    error: str | None = None


def _read(api: client.ApiClient, where: Where) -> dict[str, Any] | None:
    objects = client.CustomObjectsApi(api)
    try:
        if where.namespace is None:
            found: dict[str, Any] = objects.get_cluster_custom_object(
                where.group, where.version, where.plural, where.name
            )
        else:
            found = objects.get_namespaced_custom_object(
                where.group, where.version, where.namespace, where.plural, where.name
            )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _ready_condition(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return dict(condition)
    return None


def _event(api: client.ApiClient, where: Where, reasons: frozenset[str]) -> Any:
    namespace = where.namespace or "default"
    listed = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={where.name}")
    return next((e for e in listed.items if e.reason in reasons and e.type == "Warning"), None)


def _shows(row: Row, condition: dict[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "False" and condition.get("reason") in row.reasons


VAP = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "failures-deny"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps", "secrets"],
                }
            ]
        },
        "validations": [
            {
                "expression": "object.metadata.name == 'kube-root-ca.crt'",
                # Echoes the values it refuses (as a careless policy would): they must not reach the object.
                "messageExpression": "'refused, it holds: ' + (has(object.data) ? "
                "object.data.map(k, object.data[k]).join(',') : '') + (has(object.stringData) ? "
                "object.stringData.map(k, object.stringData[k]).join(',') : '')",
            }
        ],
    },
}
VAP_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "failures-deny"},
    "spec": {
        "policyName": "failures-deny",
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {DENY_LABEL: "true"}}},
    },
}


@contextlib.contextmanager
def denying_policy(api: client.ApiClient) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing ConfigMaps and Secrets in namespaces labelled :data:`DENY_LABEL`, once
    the API server enforces it (a dry-run create is refused, echoing the value)."""
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(VAP)
    admission.create_validating_admission_policy_binding(VAP_BINDING)
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": probe, "labels": {DENY_LABEL: "true"}}})

    def refused() -> bool:
        try:
            core.create_namespaced_config_map(probe, {"metadata": {"name": "p"}, "data": {"k": SECRET}}, dry_run="All")
        except ApiException as exc:
            return SECRET in (exc.body or "")
        return False

    try:
        wait_for(refused, 30, "the admission policy to be enforced")
        yield
    finally:
        core.delete_namespace(probe)
        admission.delete_validating_admission_policy_binding("failures-deny")
        admission.delete_validating_admission_policy("failures-deny")


@pytest.fixture(scope="module")
def seen(
    api_client: client.ApiClient, catalog_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Seen, float]]]:
    """Every row set up, then all watched at once until each shows its failure or passes its bound."""
    started = time.monotonic()
    with SecondBroker() as broker, denying_policy(api_client):
        world = World(api_client, catalog_namespace, broker, tmp_path_factory.mktemp("plans"))
        world.suffix = uuid.uuid4().hex[:6]
        broker.set_catalog(renamed(world.suffix))
        world.sc_broker = f"second-{world.suffix}"
        credentials = {"username": broker.username, "password": broker.password}
        with auth_secret(api_client, f"second-auth-{world.suffix}", credentials) as secret_ref:
            custom(api_client).create_cluster_custom_object(
                SC_GROUP,
                SC_VERSION,
                "brokers",
                {
                    "apiVersion": f"{SC_GROUP}/{SC_VERSION}",
                    "kind": "Broker",
                    "metadata": {"name": world.sc_broker},
                    "spec": {"url": broker.url, "authInfo": {"basic": {"secretRef": secret_ref}}},
                },
            )
            world.cleanups.append(
                lambda: custom(api_client).delete_cluster_custom_object(
                    SC_GROUP, SC_VERSION, "brokers", world.sc_broker
                )
            )
            try:
                wait_for(
                    lambda: ready(get(api_client, "brokers", world.sc_broker)) == ("True", "FetchedCatalog"),
                    30,
                    "the broker's catalog",
                )
                watched: list[tuple[Row, Where, float]] = []
                for row in ROWS:
                    watched.append((row, row.setup(world), time.monotonic()))
                results = {row.id: Seen() for row in ROWS}
                deadline = time.monotonic() + max(row.bound for row in ROWS)
                while time.monotonic() < deadline:
                    waiting = 0
                    for row, where, at in watched:
                        found = results[row.id]
                        if found.after is not None:
                            continue
                        condition = _ready_condition(_read(api_client, where))
                        event = _event(api_client, where, row.reasons) if _shows(row, condition) else None
                        found.condition = condition
                        if event is not None:
                            found.event, found.after = event, time.monotonic() - at
                        else:
                            waiting += 1
                    if not waiting:
                        break
                    time.sleep(0.5)
                for row, where, _at in watched:  # what a row that never showed its failure did show
                    if results[row.id].after is None:
                        found = results[row.id]
                        found.condition = _ready_condition(_read(api_client, where))
                        listed = client.CoreV1Api(api_client).list_namespaced_event(
                            where.namespace or "default", field_selector=f"involvedObject.name={where.name}"
                        )
                        found.error = "; ".join(f"{e.type} {e.reason}: {e.message}" for e in listed.items)
                for row in ROWS:  # the figures the report gives (pytest -s)
                    after = results[row.id].after
                    print(f"[failures shown] {row.id}: {'never' if after is None else f'{after:.1f} s'}")
                bindings = broker.state().get("bindings") or {}
                credential_values = {
                    str(v)
                    for held in bindings.values()
                    for v in (held.get("credentials") or {}).values()
                    if len(str(v)) >= 6
                }
                yield {row.id: (results[row.id], time.monotonic() - started) for row in ROWS} | {
                    "credentials": (Seen(error=json.dumps(sorted(credential_values))), 0.0)
                }
            finally:
                broker.clear_faults()
                for cleanup in reversed(world.cleanups):
                    with contextlib.suppress(Exception):
                        cleanup()
                for namespace in world.namespaces:
                    with contextlib.suppress(ApiException):
                        client.CoreV1Api(api_client).delete_namespace(namespace)


def test_the_matrix_is_whole() -> None:
    """Every kind x failure is a row or says why it cannot happen; none is both."""
    rows = {(row.kind, row.failure) for row in ROWS}
    cells = {(kind, failure) for kind in Kind for failure in Failure}
    assert not rows & set(NOT_APPLICABLE), rows & set(NOT_APPLICABLE)
    assert cells - rows - set(NOT_APPLICABLE) == set()
    assert all(why for why in NOT_APPLICABLE.values())


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_the_failure_shows_on_the_object(row: Row, seen: dict[str, tuple[Seen, float]]) -> None:
    found, _ = seen[row.id]
    assert found.after is not None, f"not shown: Ready is {found.condition}; events: {found.error}"
    assert found.after <= row.bound, f"shown after {found.after:.1f} s (bound {row.bound:.0f} s)"
    condition = found.condition
    assert condition is not None and row.fix in condition["message"], condition
    secrets = {
        SECRET,
        base64.b64encode(SECRET.encode()).decode().rstrip("="),
        *json.loads(seen["credentials"][0].error or "[]"),
    }
    for text in (condition["message"], found.event.message or ""):
        assert not any(value in text for value in secrets), text
