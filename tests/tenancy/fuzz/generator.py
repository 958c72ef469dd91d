"""The tenant fuzzer's pure half: ``random.Random(seed)`` → a list of typed, frozen actions.

Why pure: a failure must be replayable from its seed alone, and shrinking re-runs sub-lists of the very same
actions on a fresh namespace pair. So the generator never talks to a cluster. What the attacker "knows" of the
victim (its namespace, the OSB ids and uids of its objects — learnt only once the victim's objects exist) is
written as *placeholders* (``${victim.sf_instance_id}``), which the executor substitutes at the moment it
performs an action (:func:`placeholders` lists them). The same seed therefore gives the same actions on every
run, whatever ids the platform happened to choose.

Every action belongs to one *family* of :data:`FAMILIES`: one row per kind of attack, with why it exists. A
family can be switched off only by naming it in :data:`DISABLED` with a written reason; the runner prints that
list at the start of every run and records it with the figures, so nothing is switched off silently.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Json = dict[str, Any]
Verb = Literal["create", "patch", "patch_status", "delete", "platform"]

OSB_GROUP, CATALOG_GROUP, PRIMAZA_GROUP, VERSION = (
    "osb.servicefabrik.io",
    "servicecatalog.k8s.io",
    "primaza.io",
    "v1alpha1",
)


@dataclass(frozen=True)
class Kind:
    """An opbroker kind the tenant may write in its namespace."""

    group: str
    plural: str
    kind: str


KINDS: dict[str, Kind] = {
    k.plural: k
    for k in (
        Kind(OSB_GROUP, "sfserviceinstances", "SFServiceInstance"),
        Kind(OSB_GROUP, "sfservicebindings", "SFServiceBinding"),
        Kind(OSB_GROUP, "sfplans", "SFPlan"),
        Kind(OSB_GROUP, "sfservices", "SFService"),
        Kind(CATALOG_GROUP, "instances", "Instance"),
        Kind(CATALOG_GROUP, "bindings", "Binding"),
        Kind(PRIMAZA_GROUP, "serviceclaims", "ServiceClaim"),
        Kind(PRIMAZA_GROUP, "registeredservices", "RegisteredService"),
    )
}

#: Placeholders the executor fills from what the victim's objects turned out to be (see ``executor.Knowledge``).
PLACEHOLDER = re.compile(r"\$\{([a-z_.]+)\}")
V_NS = "${victim.ns}"
V_SF_ID = "${victim.sf_instance_id}"  # the victim's OSB instance id (the broker's)
V_SF_NAME = "${victim.sf_instance_name}"
V_SF_UID = "${victim.sf_instance_uid}"
V_SF_BINDING_ID = "${victim.sf_binding_id}"
V_SF_BINDING_NAME = "${victim.sf_binding_name}"
V_SF_BINDING_UID = "${victim.sf_binding_uid}"
V_SC_INSTANCE = "${victim.sc_instance_name}"
V_SC_INSTANCE_ID = "${victim.sc_instance_external_id}"
V_SC_INSTANCE_UID = "${victim.sc_instance_uid}"
V_SC_BINDING = "${victim.sc_binding_name}"
V_SC_BINDING_ID = "${victim.sc_binding_external_id}"
V_SECRET = "${victim.secret}"
T_NS = "${tenant.ns}"
CP_NS = "${cp.ns}"
SC_CLASS = "${catalog.sc_class}"
DEMO_SERVICE = "${catalog.demo_service_id}"
DEMO_PLAN = "${catalog.demo_plan_id}"


def placeholders() -> frozenset[str]:
    """Every placeholder name the generator may write (the executor must know each)."""
    names = {
        value[2:-1]
        for key, value in globals().items()
        if key.isupper() and isinstance(value, str) and PLACEHOLDER.fullmatch(value)
    }
    return frozenset(names)


@dataclass(frozen=True)
class Action:
    """One thing the tenant (or, for ``platform``, the platform) does. ``payload`` is canonical JSON text, so the
    value is immutable, hashable and prints as what is sent."""

    family: str
    verb: Verb
    plural: str = ""
    name: str = ""
    payload: str = "{}"

    @property
    def body(self) -> Json:
        decoded: Json = json.loads(self.payload)
        return decoded

    def __str__(self) -> str:
        if self.verb == "platform":
            return "platform()"
        shown = self.payload if len(self.payload) <= 400 else self.payload[:400] + f"…(+{len(self.payload) - 400})"
        return f"{self.family}: {self.verb} {self.plural}/{self.name} {shown}"


def action(family: str, verb: Verb, plural: str, name: str, body: Json | None = None) -> Action:
    return Action(family, verb, plural, name, json.dumps(body or {}, sort_keys=True, separators=(",", ":")))


# -- adversarial values ---------------------------------------------------------------------------------------------

#: Names the tenant's objects take: a small pool (so creates, patches and deletes meet each other), the victim's own
#: names (the API server scopes names by namespace; opbroker's indexes must too), and names valid only by accident.
TENANT_NAMES = ("a", "b", "c")
SEPARATOR_IDS = (
    "../" + V_SF_ID,
    "x/../" + V_SF_ID,
    "%2e%2e/" + V_SF_ID,
    "..%2f" + V_SC_INSTANCE_ID,
    V_SC_INSTANCE_ID + "/service_bindings/" + V_SC_BINDING_ID,
    V_SC_INSTANCE_ID + "?x=",
    V_SC_INSTANCE_ID + "#",
    "..",
    ".",
    "%2e",
    " " + V_SC_INSTANCE_ID,
)


def victim_ids(rng: random.Random) -> str:
    return rng.choice((V_SF_ID, V_SF_BINDING_ID, V_SC_INSTANCE_ID, V_SC_BINDING_ID, V_SF_NAME, V_SC_INSTANCE))


def any_id(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return victim_ids(rng)
    if roll < 0.8:
        return rng.choice(SEPARATOR_IDS)
    return f"tenant-{rng.randrange(4)}"


def tenant_name(rng: random.Random, victim_name: str | None = None) -> str:
    if victim_name is not None and rng.random() < 0.3:
        return victim_name
    return rng.choice(TENANT_NAMES)


def context(rng: random.Random) -> Json:
    return {"platform": "kubernetes", "namespace": rng.choice((V_NS, V_NS, CP_NS, T_NS, "kube-system"))}


def forged_resources(rng: random.Random) -> list[Json]:
    """``status.resources`` entries naming the victim's objects (and the control plane's)."""
    choices = [
        {"apiVersion": "demo.opbroker.io/v1alpha1", "kind": "Database", "name": V_SF_NAME, "namespace": V_NS},
        {"apiVersion": "v1", "kind": "Secret", "name": V_SECRET, "namespace": V_NS},
        {"apiVersion": "v1", "kind": "Secret", "name": V_SC_BINDING, "namespace": V_NS},
        {"apiVersion": "v1", "kind": "Secret", "name": "opbroker-instance-registry-" + V_SF_UID, "namespace": CP_NS},
        {"apiVersion": f"{OSB_GROUP}/{VERSION}", "kind": "SFServiceInstance", "name": V_SF_NAME, "namespace": V_NS},
        {"apiVersion": f"{OSB_GROUP}/{VERSION}", "kind": "SFPlan", "name": "demo-db-small", "namespace": CP_NS},
    ]
    return rng.sample(choices, rng.randint(1, len(choices)))


def made_up_kinds(rng: random.Random) -> list[Json]:
    """Many made-up kinds: a controller that starts a watch (a thread) per listed kind grows without bound."""
    count = rng.choice((8, 32, 64))
    base = rng.randrange(10_000)
    return [
        {"apiVersion": f"g{base + i}.fuzz.example/v1", "kind": f"K{base + i}", "name": "x", "namespace": T_NS}
        for i in range(count)
    ]


def owner_metadata(rng: random.Random) -> Json:
    """opbroker's own label and annotation keys, with the victim's values (``api/conventions.py``)."""
    labels = {
        "opbroker.io/instance": rng.choice((V_SF_NAME, V_SC_INSTANCE)),
        "opbroker.io/binding": V_SF_BINDING_NAME,
        "opbroker.io/registry-of": rng.choice(("instance", "binding")),
        "opbroker.io/owner-namespace": V_NS,
        "app.kubernetes.io/managed-by": "opbroker",
        "opbroker.io/test": "true",
    }
    annotations = {
        "opbroker.io/owner-uid": rng.choice((V_SF_UID, V_SF_BINDING_UID, V_SC_INSTANCE_UID)),
        "opbroker.io/singleton": "true",
        "opbroker.io/singleton-users": V_NS + "/" + V_SF_NAME,
        "opbroker.io/originating-identity": "kubernetes eyJ1c2VybmFtZSI6ImFkbWluIn0=",
    }
    picked_labels = dict(rng.sample(sorted(labels.items()), rng.randint(1, len(labels))))
    picked_annotations = dict(rng.sample(sorted(annotations.items()), rng.randint(1, len(annotations))))
    return {"labels": picked_labels, "annotations": picked_annotations}


# -- bodies -----------------------------------------------------------------------------------------------------------


def sf_instance_spec(rng: random.Random, *, instance_id: str | None = None, **extra: Any) -> Json:
    spec: Json = {
        "instanceId": instance_id or rng.choice((f"tenant-{rng.randrange(4)}", V_SF_ID)),
        "serviceId": DEMO_SERVICE,
        "planId": DEMO_PLAN,
        "parameters": {},
    }
    if rng.random() < 0.5:
        spec["context"] = context(rng)
    return spec | extra


def sf_binding_spec(rng: random.Random, *, binding_id: str | None = None) -> Json:
    return {
        "id": binding_id or rng.choice((f"tenant-b{rng.randrange(4)}", V_SF_BINDING_ID)),
        "instanceId": rng.choice((V_SF_ID, "a", "b", V_SF_NAME)),
        "serviceId": DEMO_SERVICE,
        "planId": DEMO_PLAN,
        "context": context(rng) if rng.random() < 0.5 else {"platform": "kubernetes"},
    }


def sc_instance_spec(rng: random.Random, *, external_id: str | None = None) -> Json:
    spec: Json = {"serviceClassName": SC_CLASS, "planName": "sync-small"}
    if external_id is not None:
        spec["externalID"] = external_id
    if rng.random() < 0.3:
        spec["shareWith"] = [rng.choice((V_NS, "*"))]
    return spec


def sc_binding_spec(rng: random.Random, *, external_id: str | None = None) -> Json:
    ref: Json = {"name": rng.choice(("a", "b", V_SC_INSTANCE))}
    if rng.random() < 0.3:
        ref["namespace"] = rng.choice((V_NS, T_NS))
    spec: Json = {"instanceRef": ref}
    if external_id is not None:
        spec["externalID"] = external_id
    if rng.random() < 0.5:
        spec["secretName"] = rng.choice((V_SECRET, V_SC_BINDING, "own-secret"))
    return spec


def sc_status(rng: random.Random, *, binding: bool) -> Json:
    """Service Catalog status claiming provisioned (bound), deprovision (unbind) owed, orphan mitigation."""
    status: Json = {
        "externalID": rng.choice((V_SC_BINDING_ID, V_SC_INSTANCE_ID) if binding else (V_SC_INSTANCE_ID, V_SF_ID)),
        "asyncOpInProgress": rng.random() < 0.3,
        "orphanMitigationInProgress": rng.random() < 0.4,
        "observedGeneration": rng.choice((1, 2, 99)),
    }
    if rng.random() < 0.5:
        status["currentOperation"] = rng.choice(("Bind", "Unbind") if binding else ("Provision", "Deprovision"))
        status["lastOperation"] = "op-" + victim_ids(rng)
    if binding:
        status["unbindStatus"] = rng.choice(("Required", "Succeeded", "NotRequired"))
    else:
        status["provisionStatus"] = rng.choice(("Provisioned", "Provisioned", "NotProvisioned"))
        status["deprovisionStatus"] = rng.choice(("Required", "Required", "Succeeded", "NotRequired"))
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "InjectedBindResult" if binding else "Provisioned",
            "message": "forged",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    return status


def sf_status(rng: random.Random, *, resources: list[Json]) -> Json:
    status: Json = {
        "state": rng.choice(("succeeded", "succeeded", "delete", "in progress", "failed")),
        "resources": resources,
        "observedGeneration": rng.choice((1, 99)),
    }
    if rng.random() < 0.5:
        status["lastOperation"] = {"type": rng.choice(("provision", "bind", "deprovision")), "id": victim_ids(rng)}
    if rng.random() < 0.4:
        status["response"] = {"secretRef": rng.choice((V_SECRET, V_SC_BINDING))}
    return status


def claim_spec(rng: random.Random) -> Json:
    return {
        "serviceClassIdentity": [{"name": "type", "value": rng.choice(("postgres", "victim-db"))}],
        "serviceEndpointDefinitionKeys": ["url", "password"],
        "environmentTag": "prod",
        "serviceNamespaces": [rng.choice((V_NS, CP_NS, T_NS))],
    }


def registered_spec(rng: random.Random) -> Json:
    return {
        "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
        "serviceEndpointDefinition": [
            {"name": "url", "value": "postgres://x"},
            {"name": "password", "valueFromSecret": {"name": V_SECRET, "key": "password"}},
        ],
        "shareWith": [rng.choice((V_NS, "*"))],
    }


# -- the families ---------------------------------------------------------------------------------------------------


def _create_or_patch(rng: random.Random, family: str, plural: str, name: str, spec: Json) -> Action:
    if rng.random() < 0.6:
        return action(family, "create", plural, name, {"spec": spec})
    return action(family, "patch", plural, name, {"spec": spec})


def fam_ordinary(rng: random.Random) -> Action:
    """What a well-behaved tenant does: its own instances, bindings and Service Catalog objects, deleted again."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings", "instances", "bindings"))
    name = rng.choice(TENANT_NAMES)
    if rng.random() < 0.3:
        return action("ordinary", "delete", plural, name)
    makers: dict[str, Callable[[], Json]] = {
        "sfserviceinstances": lambda: sf_instance_spec(rng, instance_id=f"tenant-{name}"),
        "sfservicebindings": lambda: sf_binding_spec(rng, binding_id=f"tenant-b{name}") | {"instanceId": "tenant-a"},
        "instances": lambda: sc_instance_spec(rng),
        "bindings": lambda: {"instanceRef": {"name": rng.choice(TENANT_NAMES)}},
    }
    spec = makers[plural]()
    return _create_or_patch(rng, "ordinary", plural, name, spec)


def fam_victim_ids(rng: random.Random) -> Action:
    """Objects in the tenant's namespace naming the victim's OSB ids and names: an index keyed by id alone lets
    the last writer take over another namespace's instance (the broker's id index), a 409 taken for "ours"."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings", "instances", "bindings"))
    if plural == "sfserviceinstances":
        spec = sf_instance_spec(rng, instance_id=rng.choice((V_SF_ID, V_SF_NAME)))
        name = tenant_name(rng, V_SF_NAME)
    elif plural == "sfservicebindings":
        spec = sf_binding_spec(rng, binding_id=V_SF_BINDING_ID)
        name = tenant_name(rng, V_SF_BINDING_NAME)
    elif plural == "instances":
        spec = sc_instance_spec(rng, external_id=rng.choice((V_SC_INSTANCE_ID, V_SF_ID)))
        name = tenant_name(rng, V_SC_INSTANCE)
    else:
        spec = sc_binding_spec(rng, external_id=V_SC_BINDING_ID)
        name = tenant_name(rng, V_SC_BINDING)
    return _create_or_patch(rng, "victim_ids", plural, name, spec)


def fam_separators(rng: random.Random) -> Action:
    """Ids with separators and dot segments: an id put into a URL unescaped addresses another instance."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings", "instances", "bindings"))
    weird = rng.choice(SEPARATOR_IDS)
    makers: dict[str, Callable[[], Json]] = {
        "sfserviceinstances": lambda: sf_instance_spec(rng, instance_id=weird),
        "sfservicebindings": lambda: sf_binding_spec(rng, binding_id=weird) | {"instanceId": any_id(rng)},
        "instances": lambda: sc_instance_spec(rng, external_id=weird),
        "bindings": lambda: sc_binding_spec(rng, external_id=weird),
    }
    spec = makers[plural]()
    return _create_or_patch(rng, "separators", plural, tenant_name(rng), spec)


def fam_forged_sf_status(rng: random.Random) -> Action:
    """A tenant writes its SFServiceInstance/-Binding status: succeeded, resources naming the victim's objects."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings"))
    status = sf_status(rng, resources=forged_resources(rng))
    return action("forged_sf_status", "patch_status", plural, tenant_name(rng), {"status": status})


def fam_watch_kinds(rng: random.Random) -> Action:
    """``status.resources`` listing many made-up kinds: watches (threads) started from tenant-written status."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings"))
    status = sf_status(rng, resources=made_up_kinds(rng))
    return action("watch_kinds", "patch_status", plural, tenant_name(rng), {"status": status})


def fam_forged_sc_status(rng: random.Random) -> Action:
    """Service Catalog status saying provisioned / deprovision owed / orphan mitigation, with the victim's id:
    taken as a fact, it has the controller deprovision or unbind the victim at the broker."""
    plural = rng.choice(("instances", "bindings"))
    status = sc_status(rng, binding=plural == "bindings")
    return action("forged_sc_status", "patch_status", plural, tenant_name(rng), {"status": status})


def fam_owner_metadata(rng: random.Random) -> Action:
    """opbroker's label and annotation keys with the victim's values, on every kind (and the teardown finalizer)."""
    plural = rng.choice(sorted(KINDS))
    metadata = owner_metadata(rng)
    if rng.random() < 0.2:
        metadata["finalizers"] = ["opbroker.io/teardown"]
    return action("owner_metadata", "patch", plural, tenant_name(rng), {"metadata": metadata})


def fam_context_namespace(rng: random.Random) -> Action:
    """``context.namespace`` naming the victim's (or the control plane's) namespace."""
    plural = rng.choice(("sfserviceinstances", "sfservicebindings"))
    ctx = {"platform": "kubernetes", "namespace": rng.choice((V_NS, CP_NS))}
    if plural == "sfserviceinstances":
        spec = sf_instance_spec(rng, instance_id=f"tenant-{rng.randrange(4)}", context=ctx)
    else:
        spec = sf_binding_spec(rng) | {"context": ctx}
    return _create_or_patch(rng, "context_namespace", plural, tenant_name(rng), spec)


def fam_cluster_id(rng: random.Random) -> Action:
    """``spec.clusterId`` chosen by the tenant: placement is the scheduler's decision, not the tenant's."""
    cluster = rng.choice(("1", "2", "victim", "../1", V_NS, "x" * 300))
    spec = sf_instance_spec(rng, instance_id=f"tenant-{rng.randrange(4)}", clusterId=cluster)
    return _create_or_patch(rng, "cluster_id", "sfserviceinstances", tenant_name(rng), spec)


def fam_catalog_impostor(rng: random.Random) -> Action:
    """SFPlan/SFService in the tenant's namespace with the real plan's ids: trusted only in the control plane's."""
    plural = rng.choice(("sfplans", "sfservices"))
    if rng.random() < 0.25:
        return action("catalog_impostor", "delete", plural, rng.choice(("demo-db-small", "demo-db", "a")))
    if plural == "sfplans":
        spec: Json = {
            "id": DEMO_PLAN,
            "name": "small",
            "serviceId": DEMO_SERVICE,
            "description": "impostor",
            "templates": [
                {
                    "action": "provision",
                    "type": "jinja2",
                    "content": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen, namespace: "
                    + V_NS
                    + "}\ndata: {x: y}\n",
                }
            ],
        }
        name = rng.choice(("demo-db-small", "a"))
    else:
        spec = {"id": DEMO_SERVICE, "name": "demo-db", "description": "impostor", "bindable": True}
        name = rng.choice(("demo-db", "a"))
    return _create_or_patch(rng, "catalog_impostor", plural, name, spec)


def fam_claims(rng: random.Random) -> Action:
    """ServiceClaims looking into the victim's namespace; RegisteredServices naming the victim's Secret."""
    plural = rng.choice(("serviceclaims", "registeredservices"))
    if rng.random() < 0.3:
        status: Json = (
            {"state": "Bound", "registeredService": V_SC_INSTANCE, "bindingSecret": V_SECRET}
            if plural == "serviceclaims"
            else {"state": "Claimed", "claimedBy": V_NS + "/" + V_SC_INSTANCE}
        )
        return action("claims", "patch_status", plural, tenant_name(rng), {"status": status})
    spec = claim_spec(rng) if plural == "serviceclaims" else registered_spec(rng)
    return _create_or_patch(rng, "claims", plural, tenant_name(rng), spec)


def fam_huge(rng: random.Random) -> Action:
    """Large and many values (bounded so a step stays fast): parameters, labels, a long id."""
    plural = rng.choice(("sfserviceinstances", "instances"))
    size = rng.choice((1024, 16 * 1024, 128 * 1024))
    many = {f"k{i}": "v" * rng.randrange(1, 64) for i in range(rng.choice((10, 200, 1000)))}
    params = {"blob": "x" * size, "many": many}
    if plural == "sfserviceinstances":
        spec = sf_instance_spec(rng, instance_id=rng.choice(("tenant-0", "i" * 1000)), parameters=params)
    else:
        spec = sc_instance_spec(rng) | {"parameters": params}
    if rng.random() < 0.3:
        labels = {f"l{i}.fuzz.example/k": "v" for i in range(rng.choice((20, 100)))}
        return action("huge", "patch", plural, tenant_name(rng), {"metadata": {"labels": labels}})
    return _create_or_patch(rng, "huge", plural, tenant_name(rng), spec)


def fam_deletes(rng: random.Random) -> Action:
    """Deletes of every kind: what a forged status or a held id does only shows when the object goes."""
    plural = rng.choice(sorted(KINDS))
    return action("deletes", "delete", plural, tenant_name(rng, V_SF_NAME))


def fam_platform(rng: random.Random) -> Action:
    """The platform's ordinary traffic into the victim's namespace (the next step of its OSB / Service Catalog
    cycle); part of the list so that shrinking may drop it too."""
    return Action("platform", "platform")


@dataclass(frozen=True)
class Family:
    name: str
    make: Callable[[random.Random], Action]
    weight: int

    @property
    def why(self) -> str:
        return (self.make.__doc__ or "").strip()


#: Every action family, the one table. Weights are relative frequencies among the enabled tenant families.
FAMILIES: tuple[Family, ...] = (
    Family("ordinary", fam_ordinary, 3),
    Family("victim_ids", fam_victim_ids, 3),
    Family("separators", fam_separators, 2),
    Family("forged_sf_status", fam_forged_sf_status, 2),
    Family("watch_kinds", fam_watch_kinds, 1),
    Family("forged_sc_status", fam_forged_sc_status, 2),
    Family("owner_metadata", fam_owner_metadata, 2),
    Family("context_namespace", fam_context_namespace, 1),
    Family("cluster_id", fam_cluster_id, 1),
    Family("catalog_impostor", fam_catalog_impostor, 1),
    Family("claims", fam_claims, 1),
    Family("huge", fam_huge, 1),
    Family("deletes", fam_deletes, 3),
)
FAMILY_NAMES = frozenset(f.name for f in FAMILIES)

#: Families switched off, each with the reason (printed at every run and recorded with the figures). Empty: on
#: current main every family runs, so the fuzzer reports the known holes; an integrator who must keep CI green
#: before a fix lands names the family here with the issue that will close it — never silently.
#: Families switched off, each with the reason (none: every hole the families found on main is closed by the model
#: of issue 42 — the broker's id stamp closed ``victim_ids``, validated and encoded ids closed ``separators``).
DISABLED: dict[str, str] = {}


@dataclass(frozen=True)
class Plan:
    """What one seed does: its actions, and which families were on."""

    seed: int
    actions: tuple[Action, ...]
    enabled: tuple[str, ...]
    disabled: tuple[tuple[str, str], ...] = field(default=())


def enabled_families(disabled: dict[str, str] | None = None, only: frozenset[str] | None = None) -> list[Family]:
    off = DISABLED if disabled is None else disabled
    unknown = (set(off) | set(only or ())) - FAMILY_NAMES
    if unknown:
        raise ValueError(f"unknown action families: {sorted(unknown)} (known: {sorted(FAMILY_NAMES)})")
    return [f for f in FAMILIES if f.name not in off and (only is None or f.name in only)]


def generate(
    seed: int,
    steps: int,
    *,
    platform_every: int = 25,
    disabled: dict[str, str] | None = None,
    only: frozenset[str] | None = None,
) -> Plan:
    """``steps`` actions for ``seed``: tenant actions drawn by weight from the enabled families, a ``platform``
    action every ``platform_every`` steps (0: none). Pure: the same arguments give the same plan."""
    rng = random.Random(seed)
    families = enabled_families(disabled, only)
    if not families:
        raise ValueError("every action family is disabled")
    weights = [f.weight for f in families]
    actions: list[Action] = []
    for index in range(steps):
        if platform_every and index % platform_every == platform_every - 1:
            actions.append(fam_platform(rng))
            continue
        (family,) = rng.choices(families, weights)
        actions.append(family.make(rng))
    off = DISABLED if disabled is None else disabled
    return Plan(seed, tuple(actions), tuple(f.name for f in families), tuple(sorted(off.items())))


def substitute(value: Any, known: dict[str, str]) -> Any:
    """``value`` with every placeholder replaced by what the executor learnt (unknown ones left as written)."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: known.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {substitute(k, known): substitute(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, known) for v in value]
    return value


def ddmin(items: list[Action], fails: Callable[[list[Action]], bool], budget: Callable[[], bool]) -> list[Action]:
    """Zeller's delta debugging: a smaller sub-list that still ``fails`` (1-minimal if the ``budget`` allows).
    ``budget()`` is asked before every trial; once it says no, the smallest failing list so far is returned."""
    current, parts = list(items), 2
    while len(current) >= 2 and budget():
        chunk = max(1, len(current) // parts)
        subsets = [current[i : i + chunk] for i in range(0, len(current), chunk)]
        reduced = False
        for index in range(len(subsets)):
            if not budget():
                return current
            complement = [a for j, s in enumerate(subsets) if j != index for a in s]
            if subsets[index] != current and fails(subsets[index]):
                current, parts, reduced = subsets[index], 2, True
                break
            if complement and fails(complement):
                current, parts, reduced = complement, max(parts - 1, 2), True
                break
        if not reduced:
            if parts >= len(current):
                break
            parts = min(len(current), parts * 2)
    return current


def family_counts(actions: Iterator[Action] | tuple[Action, ...] | list[Action]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for each in actions:
        counts[each.family] = counts.get(each.family, 0) + 1
    return counts
