"""The tenant fuzzer's thin, imperative half: a fresh namespace pair, the victim's objects made the platform's way,
one action performed as the tenant (a real ServiceAccount token, never the admin's), and the platform's own
traffic into the victim's namespace.

Why a fresh pair per run: shrinking re-runs sub-lists of a failing run, and a sub-list must meet the same starting
world (a victim with one OSB instance and binding through opbroker's broker, one Service Catalog Instance and
Binding through the second broker), not what the longer run left behind.
"""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE, resource_name
from tests.brokers.fixture import SecondBroker
from tests.cluster_fixtures import onboard
from tests.servicecatalog_support import ready
from tests.tenancy.fuzz.generator import KINDS, VERSION, Action, Json, substitute
from tests.tenancy_support import Tenant, ensure_service_account, grant, service_account_client
from tests.waiting import wait_for

#: The tenant's Role in its own namespace: every verb on every resource of opbroker's groups (status, labels and
#: annotations included) and on Secrets and ConfigMaps — the trust model's namespace admin.
FUZZ_TENANT_RULES: list[Json] = [
    {
        "apiGroups": ["osb.servicefabrik.io", "resource.servicefabrik.io", "primaza.io", "servicecatalog.k8s.io"],
        "resources": ["*"],
        "verbs": ["*"],
    },
    {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]
REQUEST_TIMEOUT = 15
PROVISION_BOUND = 45.0
VICTIM_VERSION = "15"
"""The victim's provision parameter (the demo plan's schema allows `version`): a GET answered from another
object shows another value."""
"""Seconds a victim's new instance (OSB or Service Catalog) may take to be ready (invariant 5)."""


class PlatformFailed(Exception):
    """A platform step did not finish as a platform expects (within its bound, with the right answer)."""


@dataclass
class Stack:
    """What the fuzzer runs against, built once per test (or bench run) from the session's fixtures."""

    admin: client.ApiClient
    osb_url: str
    osb_password: str
    second_broker: SecondBroker
    sc_class: str
    demo_service_id: str
    demo_plan_id: str
    controller_pid: int
    metrics_url: str | None

    def osb(self) -> httpx.Client:
        headers = {"X-Broker-API-Version": "2.17"}
        return httpx.Client(base_url=self.osb_url, auth=("platform", self.osb_password), headers=headers, timeout=30)


@dataclass
class Victim:
    """What the platform made in the victim's namespace, and what it must keep."""

    sf_instance_id: str
    sf_binding_id: str
    sf_credentials: Json
    sc_instance: str = "orders-db"
    sc_binding: str = "orders-app"
    sc_secret_data: dict[str, str] = field(default_factory=dict)
    knowledge: dict[str, str] = field(default_factory=dict)
    platform_ids: set[str] = field(default_factory=set)
    """Every OSB id the platform used at the second broker (a request for one outside a platform step is the
    tenant's doing)."""


@dataclass
class Pair:
    """A tenant's namespace and a victim's, fresh for one run."""

    stack: Stack
    tenant_ns: str
    victim_ns: str
    tenant: Tenant
    victim: Victim | None = None
    cycle: int = 0
    """The platform's next step (see :meth:`platform_step`)."""
    cycle_ids: dict[str, str] = field(default_factory=dict)

    @property
    def known(self) -> dict[str, str]:
        assert self.victim is not None
        return self.victim.knowledge

    # -- the tenant ---------------------------------------------------------------------------------------------

    def perform(self, act: Action) -> str:
        """Perform one tenant action; ``"ok"`` or the API server's refusal as ``"<status> <reason>"``."""
        kind = KINDS[act.plural]
        name = substitute(act.name, self.known)
        body = substitute(act.body, self.known)
        custom = self.tenant.custom
        ns = self.tenant_ns
        try:
            if act.verb == "create":
                meta = {"name": name, **body.pop("metadata", {})}
                full = {"apiVersion": f"{kind.group}/{VERSION}", "kind": kind.kind, "metadata": meta, **body}
                custom.create_namespaced_custom_object(
                    kind.group, VERSION, ns, kind.plural, full, _request_timeout=REQUEST_TIMEOUT
                )
            elif act.verb == "patch":
                custom.patch_namespaced_custom_object(
                    kind.group, VERSION, ns, kind.plural, name, body, _request_timeout=REQUEST_TIMEOUT
                )
            elif act.verb == "patch_status":
                custom.patch_namespaced_custom_object_status(
                    kind.group, VERSION, ns, kind.plural, name, body, _request_timeout=REQUEST_TIMEOUT
                )
            elif act.verb == "delete":
                custom.delete_namespaced_custom_object(
                    kind.group, VERSION, ns, kind.plural, name, _request_timeout=REQUEST_TIMEOUT
                )
            else:
                raise ValueError(f"not a tenant action: {act}")
        except ApiException as exc:
            if exc.status is None or exc.status >= 500:
                return f"{exc.status} {exc.reason} (server error)"
            return f"{exc.status} {exc.reason}"
        except ValueError as exc:  # the client refuses a value before sending it (a name it cannot put in a URL)
            return f"client {type(exc).__name__}"
        return "ok"

    # -- the platform -------------------------------------------------------------------------------------------

    def setup_victim(self) -> Victim:
        """The victim's objects, made as the platform makes them, and what the attacker learns of them."""
        admin = self.stack.admin
        core = client.CoreV1Api(admin)
        secret = {"metadata": {"name": "victim-secret"}, "stringData": {"password": "s3cr3t-victim"}}
        core.create_namespaced_secret(self.victim_ns, secret)  # type: ignore[arg-type]
        config_map = {"metadata": {"name": "precious"}, "data": {"keep": "me"}}
        core.create_namespaced_config_map(self.victim_ns, config_map)  # type: ignore[arg-type]
        instance_id, binding_id = f"v-{uuid.uuid4().hex[:10]}", f"vb-{uuid.uuid4().hex[:10]}"
        with self.stack.osb() as osb:
            self._osb_provision(osb, instance_id)
            credentials = self._osb_bind(osb, instance_id, binding_id)
        self.victim = Victim(instance_id, binding_id, credentials)
        self._sc_instance(self.victim.sc_instance)
        self.victim.sc_secret_data = self._sc_bind(self.victim.sc_instance, self.victim.sc_binding)
        self.victim.knowledge = self._learn()
        self.victim.platform_ids |= {
            self.victim.knowledge["victim.sc_instance_external_id"],
            self.victim.knowledge["victim.sc_binding_external_id"],
        }
        return self.victim

    def _learn(self) -> dict[str, str]:
        """What an attacker knows of the victim (names, OSB ids, uids), read by the admin."""
        assert self.victim is not None
        v, ns = self.victim, self.victim_ns
        sf_instance = self.admin_get("sfserviceinstances", ns, resource_name(v.sf_instance_id))
        sf_binding = self.admin_get("sfservicebindings", ns, resource_name(v.sf_binding_id))
        sc_instance = self.admin_get("instances", ns, v.sc_instance)
        sc_binding = self.admin_get("bindings", ns, v.sc_binding)
        assert sf_instance and sf_binding and sc_instance and sc_binding, "the victim's objects were not made"
        return {
            "victim.ns": ns,
            "tenant.ns": self.tenant_ns,
            "cp.ns": DEFAULT_NAMESPACE,
            "victim.secret": "victim-secret",
            "victim.sf_instance_id": v.sf_instance_id,
            "victim.sf_instance_name": sf_instance["metadata"]["name"],
            "victim.sf_instance_uid": sf_instance["metadata"]["uid"],
            "victim.sf_binding_id": v.sf_binding_id,
            "victim.sf_binding_name": sf_binding["metadata"]["name"],
            "victim.sf_binding_uid": sf_binding["metadata"]["uid"],
            "victim.sc_instance_name": v.sc_instance,
            "victim.sc_instance_external_id": sc_instance["status"]["externalID"],
            "victim.sc_instance_uid": sc_instance["metadata"]["uid"],
            "victim.sc_binding_name": v.sc_binding,
            "victim.sc_binding_external_id": sc_binding["status"]["externalID"],
            "catalog.sc_class": self.stack.sc_class,
            "catalog.demo_service_id": self.stack.demo_service_id,
            "catalog.demo_plan_id": self.stack.demo_plan_id,
        }

    def admin_get(self, plural: str, namespace: str, name: str) -> Json | None:
        kind = KINDS[plural]
        try:
            found: Json = client.CustomObjectsApi(self.stack.admin).get_namespaced_custom_object(  # type: ignore[assignment]
                kind.group, VERSION, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def _body(self, **extra: Any) -> Json:
        return {
            "service_id": self.stack.demo_service_id,
            "plan_id": self.stack.demo_plan_id,
            "organization_guid": "org",
            "space_guid": "space",
            "context": {"platform": "kubernetes", "namespace": self.victim_ns},
            **extra,
        }

    def _poll(self, osb: httpx.Client, path: str, answer: httpx.Response, what: str) -> str:
        if answer.status_code in (200, 201):
            return "succeeded"
        if answer.status_code != 202:
            raise PlatformFailed(f"{what}: {answer.status_code} {answer.text[:300]}")
        operation = answer.json().get("operation")
        deadline = time.monotonic() + PROVISION_BOUND
        while time.monotonic() < deadline:
            polled = osb.get(f"{path}/last_operation", params={"operation": operation} if operation else {})
            if polled.status_code == 410:
                return "gone"
            if polled.status_code != 200:
                raise PlatformFailed(f"{what}: last_operation {polled.status_code} {polled.text[:300]}")
            state = str(polled.json().get("state"))
            if state != "in progress":
                if state != "succeeded":
                    raise PlatformFailed(f"{what}: {state} {polled.text[:300]}")
                return state
            time.sleep(0.2)
        raise PlatformFailed(f"{what}: still in progress after {PROVISION_BOUND}s")

    def _osb_provision(self, osb: httpx.Client, instance_id: str) -> None:
        path = f"/v2/service_instances/{instance_id}"
        answer = osb.put(
            path, params={"accepts_incomplete": "true"}, json=self._body(parameters={"version": VICTIM_VERSION})
        )
        self._poll(osb, path, answer, f"provision {instance_id}")

    def _osb_bind(self, osb: httpx.Client, instance_id: str, binding_id: str) -> Json:
        path = f"/v2/service_instances/{instance_id}/service_bindings/{binding_id}"
        body = {"service_id": self.stack.demo_service_id, "plan_id": self.stack.demo_plan_id}
        self._poll(osb, path, osb.put(path, params={"accepts_incomplete": "true"}, json=body), f"bind {binding_id}")
        fetched = osb.get(path)
        if fetched.status_code != 200:
            raise PlatformFailed(f"GET binding {binding_id}: {fetched.status_code} {fetched.text[:300]}")
        credentials: Json = fetched.json().get("credentials") or {}
        return credentials

    def _osb_delete(self, osb: httpx.Client, path: str, what: str) -> None:
        ids = {"service_id": self.stack.demo_service_id, "plan_id": self.stack.demo_plan_id}
        self._poll(osb, path, osb.delete(path, params=ids | {"accepts_incomplete": "true"}), what)

    def _sc_create(self, plural: str, name: str, spec: Json) -> None:
        kind = KINDS[plural]
        body = {"apiVersion": f"{kind.group}/{VERSION}", "kind": kind.kind, "metadata": {"name": name}, "spec": spec}
        client.CustomObjectsApi(self.stack.admin).create_namespaced_custom_object(
            kind.group, VERSION, self.victim_ns, plural, body
        )

    def _sc_wait(self, plural: str, name: str, expected: tuple[str, str] | None) -> None:
        deadline = time.monotonic() + PROVISION_BOUND
        found: Json | None = None
        while time.monotonic() < deadline:
            found = self.admin_get(plural, self.victim_ns, name)
            if (ready(found) if found is not None else None) == expected and (found is not None or expected is None):
                return
            time.sleep(0.2)
        state = ready(found) if found else "gone"
        raise PlatformFailed(f"{plural}/{name}: {state}, not {expected or 'gone'} after {PROVISION_BOUND}s")

    def _sc_instance(self, name: str) -> None:
        self._sc_create("instances", name, {"serviceClassName": self.stack.sc_class, "planName": "sync-small"})
        self._sc_wait("instances", name, ("True", "Provisioned"))

    def _sc_bind(self, instance: str, name: str) -> dict[str, str]:
        self._sc_create("bindings", name, {"instanceRef": {"name": instance}})
        self._sc_wait("bindings", name, ("True", "InjectedBindResult"))
        secret = client.CoreV1Api(self.stack.admin).read_namespaced_secret(name, self.victim_ns)
        return {k: str(v) for k, v in (secret.data or {}).items()}

    def _sc_delete(self, plural: str, name: str) -> None:
        kind = KINDS[plural]
        client.CustomObjectsApi(self.stack.admin).delete_namespaced_custom_object(
            kind.group, VERSION, self.victim_ns, plural, name
        )
        self._sc_wait(plural, name, None)

    PHASES = (
        "osb_provision",
        "osb_bind",
        "osb_unbind",
        "osb_deprovision",
        "sc_provision",
        "sc_bind",
        "sc_unbind",
        "sc_deprovision",
    )

    def platform_step(self) -> str:
        """The platform's next step in the victim's namespace: OSB provision → bind → unbind → deprovision through
        opbroker's broker, then a Service Catalog Instance → Binding → unbind → delete through the second broker.
        Raises :class:`PlatformFailed` (invariant 5 and 3: the platform is still served) — the caller reports it."""
        assert self.victim is not None
        phase = self.PHASES[self.cycle % len(self.PHASES)]
        self.cycle += 1
        ids = self.cycle_ids
        if phase == "osb_provision":
            ids["i"], ids["b"] = f"p-{uuid.uuid4().hex[:10]}", f"pb-{uuid.uuid4().hex[:10]}"
        with self.stack.osb() as osb:
            path = f"/v2/service_instances/{ids.get('i')}"
            if phase == "osb_provision":
                self._osb_provision(osb, ids["i"])
            elif phase == "osb_bind":
                credentials = self._osb_bind(osb, ids["i"], ids["b"])
                if not credentials:
                    raise PlatformFailed(f"bind {ids['b']}: no credentials")
                if self.admin_get("sfservicebindings", self.victim_ns, resource_name(ids["b"])) is None:
                    raise PlatformFailed(f"bind {ids['b']} was not recorded in the victim's namespace")
            elif phase == "osb_unbind":
                self._osb_delete(osb, f"{path}/service_bindings/{ids['b']}", f"unbind {ids['b']}")
            elif phase == "osb_deprovision":
                self._osb_delete(osb, path, f"deprovision {ids['i']}")
        if phase == "sc_provision":
            self._sc_instance("cycle-db")
            found = self.admin_get("instances", self.victim_ns, "cycle-db")
            self.victim.platform_ids.add(str(((found or {}).get("status") or {}).get("externalID")))
        elif phase == "sc_bind":
            self._sc_bind("cycle-db", "cycle-app")
            found = self.admin_get("bindings", self.victim_ns, "cycle-app")
            self.victim.platform_ids.add(str(((found or {}).get("status") or {}).get("externalID")))
        elif phase == "sc_unbind":
            self._sc_delete("bindings", "cycle-app")
        elif phase == "sc_deprovision":
            self._sc_delete("instances", "cycle-db")
        return phase

    def victim_as_platform_sees_it(self) -> list[str]:
        """What the platform reads of the victim's OSB instance and binding through opbroker's broker: problems."""
        assert self.victim is not None
        v = self.victim
        problems = []
        with self.stack.osb() as osb:
            got = osb.get(f"/v2/service_instances/{v.sf_instance_id}")
            if got.status_code != 200 or (got.json().get("parameters") or {}).get("version") != VICTIM_VERSION:
                problems.append(f"GET instance {v.sf_instance_id}: {got.status_code} {got.text[:300]}")
            path = f"/v2/service_instances/{v.sf_instance_id}/service_bindings/{v.sf_binding_id}"
            bound = osb.get(path)
            if bound.status_code != 200 or bound.json().get("credentials") != v.sf_credentials:
                problems.append(f"GET binding {v.sf_binding_id}: {bound.status_code} (credentials differ or missing)")
        return problems


def decode(data: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}


def make_pair(stack: Stack) -> Pair:
    """Two fresh, onboarded namespaces (labelled as the test broker's allowed ones) and the tenant of the first,
    logged in with its own ServiceAccount token and :data:`FUZZ_TENANT_RULES`."""
    core = client.CoreV1Api(stack.admin)
    token = uuid.uuid4().hex[:8]
    tenant_ns, victim_ns = f"fz-tenant-{token}", f"fz-victim-{token}"
    for name in (tenant_ns, victim_ns):
        labelled = {"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}}
        core.create_namespace(labelled)  # type: ignore[arg-type]
        onboard(stack.admin, name)
    ensure_service_account(stack.admin, tenant_ns, "tenant")
    subject = {"kind": "ServiceAccount", "name": "tenant", "namespace": tenant_ns}
    grant(stack.admin, tenant_ns, "tenant-admin", FUZZ_TENANT_RULES, subject)
    tenant = Tenant(tenant_ns, "tenant", service_account_client(stack.admin, tenant_ns, "tenant"))
    return Pair(stack, tenant_ns, victim_ns, tenant)


def release(stack: Stack, pair: Pair) -> None:
    """Tear a pair down: delete both namespaces; objects the tenant left stuck on a finalizer (a forged status can
    keep an instance from ever finishing its teardown) are released by the admin after a grace period, so runs
    do not pile up work for the controller."""
    custom = client.CustomObjectsApi(stack.admin)
    core = client.CoreV1Api(stack.admin)
    pair.tenant.api.close()  # type: ignore[no-untyped-call]
    for name in (pair.tenant_ns, pair.victim_ns):
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)

    def cleared() -> bool:
        return not any(True for namespace in (pair.tenant_ns, pair.victim_ns) for _ in _leftovers(custom, namespace))

    try:
        wait_for(cleared, 10, "the pair's objects to go", interval=0.2)
        return
    except AssertionError:
        pass  # the grace period is over: what is left is stuck, released below
    for namespace in (pair.tenant_ns, pair.victim_ns):
        for plural, name in _leftovers(custom, namespace):
            kind = KINDS[plural]
            with contextlib.suppress(ApiException):
                custom.patch_namespaced_custom_object(
                    kind.group, VERSION, namespace, plural, name, {"metadata": {"finalizers": None}}
                )


def _leftovers(custom: client.CustomObjectsApi, namespace: str) -> Iterator[tuple[str, str]]:
    for plural, kind in KINDS.items():
        try:
            listed: Json = custom.list_namespaced_custom_object(kind.group, VERSION, namespace, plural)  # type: ignore[assignment]
            items = listed["items"]
        except ApiException:
            continue
        for item in items:
            yield plural, item["metadata"]["name"]
