"""Every template type end to end (issue 43): a plan of each type — ``jinja2``, ``gotemplate``, ``helm`` and
``couchbase`` — provisioned, bound, unbound and deprovisioned by a platform over OSB HTTP, through the real broker
and the real controller on the real control plane.

The plans are the repository's own, applied as they are written:

* ``jinja2``: the demo plan (``examples/demo_operator/catalog.yaml``), the demo operator playing its operator;
* ``gotemplate``: Service Fabrik's Zalando plan (``tests/data/seeds/``), the stand-in Zalando operator;
* ``helm``: ``tests/data/end_to_end/keyvalue-helm.yaml``, its chart ``tests/data/charts/keyvalue`` shipped in the
  plan (no operator: the chart renders plain ConfigMaps and Secrets, the status template reads them);
* ``couchbase``: the imported Couchbase broker configuration (``examples/couchbase/imported.yaml``: a Secret per
  instance with a generated admin password, a ClusterRole shared by every instance, the binding's credentials
  from its ``credentials`` registry entry), given an account that may write ClusterRoles.

For each: the instance's rendered objects exist after the provision with the content the plan renders, the
binding's credentials are what the plan says they are (read independently from the objects they come from), the
binding's own objects go with the unbind, and every object the instance rendered is gone after the deprovision.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster.grants import grant_plan_account, onboard_namespace
from opbroker.rendering.renderer import release_name
from tests.broker.test_osb_end_to_end import poll
from tests.controller import test_gotemplate_lifecycle as zalando
from tests.controller.test_lifecycle import DB, PLAN_ID, SERVICE_ID, get
from tests.controller_support import OWNER_VERBS, REPO, apply_yaml, wait_for
from tests.rendering.test_goengine import chart_archive

pytestmark = pytest.mark.usefixtures("controller")

HELM_PLAN = REPO / "tests" / "data" / "end_to_end" / "keyvalue-helm.yaml"
HELM_CHART = REPO / "tests" / "data" / "charts" / "keyvalue"
COUCHBASE_PLAN = REPO / "examples" / "couchbase" / "imported.yaml"
#: The account the Couchbase plan acts with: the default plan account's rights and, cluster-wide, ClusterRoles
#: (its shared ``secret-store-reader``) and reading Secrets, which that ClusterRole grants (RBAC grants only
#: what one holds).
COUCHBASE_ACCOUNT = "couchbase-plans"
#: How long a provision, bind, unbind or deprovision may take here (the stand-in operators take a second).
OPERATION_SECONDS = 90


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _plan_ids(documents: list[dict[str, Any]]) -> tuple[str, str]:
    plan = next(d for d in documents if d["kind"] == "SFPlan")
    return plan["spec"]["serviceId"], plan["spec"]["id"]


HELM_IDS = _plan_ids(_documents(HELM_PLAN))
COUCHBASE_IDS = _plan_ids(_documents(COUCHBASE_PLAN))


@pytest.fixture(scope="session")
def helm_plan(api_client: client.ApiClient, catalog_namespace: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The helm plan with its chart packed into each helm template's ``contentEncoded``."""
    encoded = base64.b64encode(chart_archive(HELM_CHART)).decode()
    documents = _documents(HELM_PLAN)
    for document in documents:
        for template in document["spec"].get("templates") or []:
            if template["type"] == "helm":
                template["contentEncoded"] = encoded
    path = tmp_path_factory.mktemp("helm") / "keyvalue-helm.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    apply_yaml(api_client, path, catalog_namespace)


@pytest.fixture(scope="session")
def couchbase_plan(
    api_client: client.ApiClient, catalog_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The imported Couchbase plan, unchanged but for the account it acts with (:data:`COUCHBASE_ACCOUNT`)."""
    grant_plan_account(
        api_client,
        catalog_namespace,
        [],
        account=COUCHBASE_ACCOUNT,
        cluster_rules=[
            {"api_groups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": list(OWNER_VERBS)},
            {"api_groups": [""], "resources": ["secrets"], "verbs": ["get"]},
        ],
    )
    documents = _documents(COUCHBASE_PLAN)
    for document in documents:
        if document["kind"] == "SFPlan":
            document["spec"]["serviceAccountName"] = COUCHBASE_ACCOUNT
    path = tmp_path_factory.mktemp("couchbase") / "imported.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    apply_yaml(api_client, path, catalog_namespace)


def read(kube: Kube, ref: ResourceRef) -> dict[str, Any] | None:
    """The object as the API server has it now (None: it does not exist, or it is being deleted)."""
    found = kube.get(ref, fresh=True)
    if found is None or found["metadata"].get("deletionTimestamp"):
        return None
    return found


def secret_value(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def delete_out_of_band_then_wait_back(api: client.ApiClient, ref: ResourceRef, timeout: float) -> dict[str, Any]:
    """Delete one rendered object behind opbroker's back and wait until it is there again — a new object (another
    uid), not the old one lingering — and return it.

    Drift correction's check (issue 43): an instance's objects are opbroker's to keep, so one deleted out of band
    must come back without anyone asking."""
    kube = Kube(api)
    before = read(kube, ref)
    assert before is not None, f"{ref.kind} {ref.namespace}/{ref.name} must exist before it is deleted"
    uid = before["metadata"]["uid"]
    assert kube.delete(ref), f"{ref.kind} {ref.namespace}/{ref.name} was gone before it was deleted"

    def recreated() -> dict[str, Any] | None:
        found = read(kube, ref)
        return found if found is not None and found["metadata"]["uid"] != uid else None

    back: dict[str, Any] = wait_for(recreated, timeout, f"{ref.kind} {ref.namespace}/{ref.name} to be recreated")
    return back


def holds(check: Callable[[Served], None], served: Served) -> bool:
    """Whether ``check`` passes now (an object created again waits for its operator's status)."""
    try:
        check(served)
    except (AssertionError, KeyError, TypeError):
        return False
    return True


# -- each type: what its plan renders and what its credentials are -------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One instance and binding as the test made them (OSB ids are also the objects' names here)."""

    kube: Kube
    namespace: str
    instance: str
    binding: str = ""
    bind_parameters: dict[str, Any] = field(default_factory=dict)


def check_database(served: Served) -> None:
    database = get(served.kube.api_client, served.namespace, "databases", served.instance, *DB[:2])
    assert database is not None
    assert database["spec"]["version"] == "15"
    assert database["spec"]["storageGB"] == 1
    assert database["spec"]["users"]["main"] == ["owner"]


def database_credentials(served: Served) -> dict[str, Any]:
    """The demo plan's status template: the binding's database user's Secret (the user named by the plan's
    ``user`` snippet), the Database's host and port."""
    user = "u" + hashlib.sha224(served.binding.encode()).hexdigest()[:15]
    core = client.CoreV1Api(served.kube.api_client)
    secret = core.read_namespaced_secret(f"{served.instance}-{user}-credentials", served.namespace).to_dict()
    database = get(served.kube.api_client, served.namespace, "databases", served.instance, *DB[:2])
    assert database is not None
    username, password = secret_value(secret, "username"), secret_value(secret, "password")
    host, port = database["status"]["host"], database["status"]["port"]
    return {
        "username": username,
        "password": password,
        "hostname": host,
        "port": port,
        "uri": f"postgres://{username}:{password}@{host}:{port}/main",
    }


def check_postgresql(served: Served) -> None:
    pg = zalando.cluster(served.kube.api_client, served.namespace, served.instance)
    assert pg is not None and pg["status"]["PostgresClusterStatus"] == "Running"
    assert pg["spec"]["users"] == {"main": ["superuser", "createdb"]}
    assert pg["spec"]["postgresql"] == {"version": "9.6", "parameters": {"max_connections": "100"}}


def postgresql_credentials(served: Served) -> dict[str, Any]:
    """The seed's status template: the operator's Secret of the binding's user, the cluster's Service."""
    core = client.CoreV1Api(served.kube.api_client)
    name = f"{served.binding}.sapcp-{served.instance}.credentials.postgresql.acid.zalan.do"
    password = secret_value(core.read_namespaced_secret(name, served.namespace).to_dict(), "password")
    host = core.read_namespaced_service(f"sapcp-{served.instance}", served.namespace).spec.cluster_ip
    return {
        "dbname": "main",
        "hostname": host,
        "port": "5432",
        "username": served.binding,
        "password": password,
        "uri": f"postgres://{served.binding}:{password}@{host}:5432/main?sslmode=require",
    }


def _release(served: Served) -> str:
    return release_name({"metadata": {"name": served.instance}})


def check_release(served: Served) -> None:
    settings = read(
        served.kube,
        ResourceRef(
            api_version="v1", kind="ConfigMap", name=f"{_release(served)}-settings", namespace=served.namespace
        ),
    )
    assert settings is not None
    assert settings["data"] == {"greeting": "hi there", "owner": served.instance}


def release_credentials(served: Served) -> dict[str, Any]:
    """The helm plan's bind values: the binding's name, a password derived from its uid; the greeting."""
    binding = get(served.kube.api_client, served.namespace, "sfservicebindings", served.binding)
    assert binding is not None
    uid = binding["metadata"]["uid"]
    return {
        "username": served.binding,
        "password": hashlib.sha256(uid.encode()).hexdigest()[:32],
        "greeting": "hi there",
    }


COUCHBASE_ROLE = ResourceRef(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole", name="secret-store-reader")


def _instance_secret(served: Served) -> dict[str, Any] | None:
    ref = ResourceRef(api_version="v1", kind="Secret", name=served.instance, namespace=served.namespace)
    return read(served.kube, ref)


def check_couchbase(served: Served) -> None:
    secret = _instance_secret(served)
    assert secret is not None, "my-secret is named by the registry's instance-id"
    assert secret_value(secret, "mySecretName") == "TopSecret!"
    assert len(secret_value(secret, "password")) == 32, "the registry's generated admin-password"
    role = read(served.kube, COUCHBASE_ROLE)
    assert role is not None
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def couchbase_credentials(served: Served) -> dict[str, Any]:
    """The bind section's ``credentials`` registry entry: the ``credentials`` snippet — the binding's ``user``
    parameter, the instance's generated admin password (the one in the instance's Secret)."""
    secret = _instance_secret(served)
    assert secret is not None
    return {"username": served.bind_parameters["user"], "password": secret_value(secret, "password")}


@dataclass(frozen=True)
class TemplateTypeCase:
    """A template type's plan and what the test knows about it."""

    type: str
    plan_fixture: str
    """The session fixture that installs the plan (and starts its operator)."""
    service_id: str
    plan_id: str
    parameters: dict[str, Any]
    check_provisioned: Callable[[Served], None]
    credentials: Callable[[Served], dict[str, Any]]
    bind_parameters: dict[str, Any] = field(default_factory=dict)
    plan_accounts: tuple[str, ...] = (DEFAULT_PLAN_SERVICE_ACCOUNT,)
    """The plan accounts the consumer namespace is onboarded for."""
    extra_rendered: tuple[ResourceRef, ...] = ()
    """Objects rendered that the instance's ``status.resources`` may not list (a shared singleton's)."""


CASES = [
    TemplateTypeCase(
        "jinja2", "demo_operator", SERVICE_ID, PLAN_ID, {"version": "15"}, check_database, database_credentials
    ),
    TemplateTypeCase(
        "gotemplate",
        "zalando_operator",
        zalando.SERVICE_ID,
        zalando.PLAN_ID,
        zalando.PARAMETERS,
        check_postgresql,
        postgresql_credentials,
    ),
    TemplateTypeCase("helm", "helm_plan", *HELM_IDS, {"greeting": "hi there"}, check_release, release_credentials),
    TemplateTypeCase(
        "couchbase",
        "couchbase_plan",
        *COUCHBASE_IDS,
        {},
        check_couchbase,
        couchbase_credentials,
        bind_parameters={"user": "app"},
        plan_accounts=(DEFAULT_PLAN_SERVICE_ACCOUNT, COUCHBASE_ACCOUNT),
        extra_rendered=(COUCHBASE_ROLE,),
    ),
]


# -- the platform's side: OSB over HTTP ----------------------------------------------------------------------------


def finished(osb: httpx.Client, path: str, answer: httpx.Response) -> str:
    """The outcome of an OSB request: polled through last_operation when accepted (202), else its own answer."""
    if answer.status_code == 202:
        return str(poll(osb, path, answer.json().get("operation", ""), OPERATION_SECONDS)["state"])
    assert answer.status_code in (200, 201), answer.text
    return "succeeded"


def provision_body(service_id: str, plan_id: str, namespace: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A platform's provision request for the plan, into ``namespace``."""
    return {
        "service_id": service_id,
        "plan_id": plan_id,
        "organization_guid": "org",
        "space_guid": "space",
        "context": {"platform": "kubernetes", "namespace": namespace},
        "parameters": parameters,
    }


def status_of(api: client.ApiClient, namespace: str, plural: str, name: str) -> Any:
    """An instance's or binding's status, for an assertion's message."""
    return (get(api, namespace, plural, name) or {}).get("status")


def recorded(api: client.ApiClient, namespace: str, plural: str, name: str) -> list[ResourceRef]:
    """What the controller recorded as rendered for an instance or binding (``status.resources``)."""
    obj = get(api, namespace, plural, name)
    assert obj is not None, f"{plural}/{name} is not there"
    return [
        ResourceRef(api_version=r["apiVersion"], kind=r["kind"], name=r["name"], namespace=r.get("namespace") or None)
        for r in (obj.get("status") or {}).get("resources") or []
    ]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.type)
def test_a_plan_of_each_template_type_provisions_binds_unbinds_and_deprovisions_over_osb(
    case: TemplateTypeCase,
    request: pytest.FixtureRequest,
    osb: httpx.Client,
    api_client: client.ApiClient,
    catalog_namespace: str,
    namespace: str,
) -> None:
    request.getfixturevalue(case.plan_fixture)
    onboard_namespace(api_client, namespace, control_plane=catalog_namespace, plan_accounts=case.plan_accounts)
    kube = Kube(api_client)
    suffix = uuid.uuid4().hex[:8]
    served = Served(kube, namespace, f"{case.type}-{suffix}", f"{case.type}-b-{suffix}", case.bind_parameters)
    ids = {"service_id": case.service_id, "plan_id": case.plan_id, "accepts_incomplete": "true"}
    path = f"/v2/service_instances/{served.instance}"

    accepted = osb.put(
        path,
        params={"accepts_incomplete": "true"},
        json=provision_body(case.service_id, case.plan_id, namespace, case.parameters),
    )
    assert accepted.status_code == 202, accepted.text
    assert finished(osb, path, accepted) == "succeeded", status_of(
        api_client, namespace, "sfserviceinstances", served.instance
    )
    rendered = recorded(api_client, namespace, "sfserviceinstances", served.instance)
    assert rendered, "the provision rendered nothing"
    for ref in (*rendered, *case.extra_rendered):
        assert read(kube, ref) is not None, f"{ref} is recorded as rendered but does not exist"
    case.check_provisioned(served)
    # Day two: one of its objects deleted behind opbroker's back is created again, as rendered.
    kept = next(ref for ref in rendered if ref.namespace == namespace)
    delete_out_of_band_then_wait_back(api_client, kept, 60)
    wait_for(lambda: holds(case.check_provisioned, served), 60, f"{kept} to be as provisioned again")

    binding_path = f"{path}/service_bindings/{served.binding}"
    bound = osb.put(
        binding_path,
        params={"accepts_incomplete": "true"},
        json={"service_id": case.service_id, "plan_id": case.plan_id, "parameters": case.bind_parameters},
    )
    assert finished(osb, binding_path, bound) == "succeeded", bound.text
    credentials = bound.json().get("credentials") if bound.status_code != 202 else None
    credentials = credentials or osb.get(binding_path).json()["credentials"]
    assert credentials == case.credentials(served)
    bound_objects = recorded(api_client, namespace, "sfservicebindings", served.binding)

    unbound = osb.delete(binding_path, params=ids)
    assert finished(osb, binding_path, unbound) in ("succeeded", "gone"), unbound.text
    assert osb.delete(binding_path, params=ids).status_code == 410
    for ref in bound_objects:
        if ref not in rendered:  # an object of the instance the bind only changed stays
            wait_for(lambda ref=ref: read(kube, ref) is None, 30, f"the binding's {ref} to go with the unbind")

    removed = osb.delete(path, params=ids)
    assert finished(osb, path, removed) == "succeeded", removed.text
    for ref in (*rendered, *case.extra_rendered):
        wait_for(lambda ref=ref: read(kube, ref) is None, 30, f"{ref} to go with the deprovision")
    assert get(api_client, namespace, "sfserviceinstances", served.instance) is None


def test_couchbase_instances_share_the_singleton_and_keep_their_generated_password_through_an_update(
    request: pytest.FixtureRequest,
    osb: httpx.Client,
    api_client: client.ApiClient,
    catalog_namespace: str,
    namespace: str,
) -> None:
    """What sets a Couchbase plan apart, over OSB: its ``singleton: true`` ClusterRole serves every instance and
    goes with the last; the admin password its registry entry generates is kept through an update that renders
    the instance again."""
    request.getfixturevalue("couchbase_plan")
    onboard_namespace(
        api_client,
        namespace,
        control_plane=catalog_namespace,
        plan_accounts=(DEFAULT_PLAN_SERVICE_ACCOUNT, COUCHBASE_ACCOUNT),
    )
    kube = Kube(api_client)
    service_id, plan_id = COUCHBASE_IDS
    ids = {"service_id": service_id, "plan_id": plan_id, "accepts_incomplete": "true"}
    suffix = uuid.uuid4().hex[:8]
    instances = [Served(kube, namespace, f"cb{n}-{suffix}") for n in (1, 2)]
    body = provision_body(service_id, plan_id, namespace, {})
    for served in instances:
        path = f"/v2/service_instances/{served.instance}"
        accepted = osb.put(path, params={"accepts_incomplete": "true"}, json=body)
        assert finished(osb, path, accepted) == "succeeded", status_of(
            api_client, namespace, "sfserviceinstances", served.instance
        )
        check_couchbase(served)
    passwords = {s.instance: secret_value(_instance_secret(s) or {}, "password") for s in instances}

    first, second = instances
    path = f"/v2/service_instances/{first.instance}"
    updated = osb.patch(
        path,
        params={"accepts_incomplete": "true"},
        json={"service_id": service_id, "plan_id": plan_id, "parameters": {"my-namespace": namespace}},
    )
    assert finished(osb, path, updated) == "succeeded", updated.text
    instance = get(api_client, namespace, "sfserviceinstances", first.instance)
    assert instance is not None and instance["spec"]["parameters"] == {"my-namespace": namespace}
    assert secret_value(_instance_secret(first) or {}, "password") == passwords[first.instance]

    removed = osb.delete(path, params=ids)
    assert finished(osb, path, removed) == "succeeded", removed.text
    wait_for(lambda: _instance_secret(first) is None, 30, "the first instance's Secret to go")
    assert read(kube, COUCHBASE_ROLE) is not None, "the shared ClusterRole went while the second instance uses it"
    assert secret_value(_instance_secret(second) or {}, "password") == passwords[second.instance]

    path = f"/v2/service_instances/{second.instance}"
    removed = osb.delete(path, params=ids)
    assert finished(osb, path, removed) == "succeeded", removed.text
    wait_for(lambda: read(kube, COUCHBASE_ROLE) is None, 30, "the shared ClusterRole to go with its last user")
