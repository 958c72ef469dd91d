"""The contract between the broker, the controller and the templates: names, labels, keys, tokens.

Both sides import these instead of spelling strings, so a rename is one change. Kept pure (no cluster
access) so the Pulumi components and the tests can use it too.

Who writes what:

* The broker creates ``SFServiceInstance`` / ``SFServiceBinding`` (spec = the OSB request) and writes
  ``status.state`` (``in_queue`` / ``update`` / ``delete``) plus ``status.lastOperation`` through the
  status subresource. For a deprovision or unbind it writes ``state: delete`` and then DELETEs the object;
  the controller's finalizer does the teardown and releases the object when done.
* The controller writes every other status field, moves the state to ``in progress`` and then to
  ``succeeded`` / ``failed``, and stores bind credentials in the Secret named by
  ``status.response.secretRef`` (key :data:`CREDENTIALS_KEY`, a JSON object: the OSB bind response body).
* An object whose ``metadata.generation`` is ahead of ``status.observedGeneration`` has work pending.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

DOMAIN = "opbroker.io"

#: Finalizer the controller puts on instances and bindings; removed once teardown has finished.
FINALIZER = f"{DOMAIN}/teardown"

#: Default namespace of the control plane: SFService, SFPlan, SFCluster live here.
DEFAULT_NAMESPACE = "opbroker"


def catalog_namespaces(control_plane: str, configured: Iterable[str] = ()) -> tuple[str, ...]:
    """The trusted namespaces: the only ones the controller and the broker read catalog kinds (SFService,
    SFPlan) from. The configured list when one is given (``--catalog-namespace``, repeatable), else the
    control-plane namespace alone. An SFService or SFPlan anywhere else is a tenant's object: never in the
    catalog, whatever id it claims."""
    listed = tuple(dict.fromkeys(n for n in configured if n))
    return listed or (control_plane,)


def catalog_id(body: Mapping[str, Any]) -> str:
    """The OSB id an SFService or SFPlan declares (``spec.id``; its name when it declares none)."""
    spec = body.get("spec")
    declared = spec.get("id") if isinstance(spec, Mapping) else None
    return str(declared or (body.get("metadata") or {}).get("name") or "")


LABEL_SERVICE = f"{DOMAIN}/service"
LABEL_PLAN = f"{DOMAIN}/plan"
LABEL_INSTANCE = f"{DOMAIN}/instance"
LABEL_BINDING = f"{DOMAIN}/binding"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "opbroker"

#: On every SFServiceInstance and SFServiceBinding the broker records for an OSB request (value
#: :data:`RECORDED_BY_BROKER`): only such an object answers for an OSB id. A tenant may create an object of either
#: kind under any name in its own namespace; it never answers for an id, because no account but opbroker's may
#: write a label under ``opbroker.io/`` on opbroker's kinds (``opbroker.api.admission``).
LABEL_RECORDED_BY = f"{DOMAIN}/recorded-by"
RECORDED_BY_BROKER = "broker"

#: JSON of the decoded ``X-Broker-API-Originating-Identity`` of the request that last changed the object.
ANNOTATION_ORIGINATING_IDENTITY = f"{DOMAIN}/originating-identity"
#: The ``X-Broker-API-Request-Identity`` of that request, for tracing.
ANNOTATION_REQUEST_IDENTITY = f"{DOMAIN}/request-identity"

#: On a rendered object: shared by every instance of the plan (created once, owned by all, deleted with the last).
ANNOTATION_SINGLETON = f"{DOMAIN}/singleton"
#: On a shared singleton owner references cannot hold (cluster-scoped, or in another namespace than its users):
#: the JSON list of the uids of the instances using it. opbroker deletes it when the last one leaves.
ANNOTATION_SINGLETON_USERS = f"{DOMAIN}/singleton-users"

#: On an SFServiceInstance, an SFServiceBinding or the SFPlan they use (value :data:`PAUSED`): the controller stops
#: every step for the object but its deletion — no apply, no evaluation or poll, no refresh of credentials — and
#: says so in a ``Paused`` condition; a deprovision or unbind is never held up by it. Removed, reconciling resumes
#: from the live state. An administrator's tool: the admission policy (``opbroker.api.admission``) lets no account
#: but opbroker's own and cluster administrators write a key under ``opbroker.io/`` on opbroker's kinds, so a
#: tenant can neither pause its objects nor lift a pause.
ANNOTATION_PAUSED = f"{DOMAIN}/paused"
#: The value of :data:`ANNOTATION_PAUSED` that pauses (any other value, or none, does not).
PAUSED = "true"

#: On an SFServiceInstance or SFServiceBinding an administrator abandoned (``opbroker instance abandon``, ``opbroker
#: binding abandon``): why, as given with ``--reason``. Written before opbroker's finalizer is removed, so the object's
#: last version (an audit log, a watch's DELETED event) says why it went without its teardown.
ANNOTATION_ABANDONED_REASON = f"{DOMAIN}/abandoned-reason"
#: Beside :data:`ANNOTATION_ABANDONED_REASON`: who abandoned it, when the API server said (a SelfSubjectReview).
ANNOTATION_ABANDONED_BY = f"{DOMAIN}/abandoned-by"

#: Key of the credentials Secret that holds the bind response (JSON object with ``credentials`` etc.).
CREDENTIALS_KEY = "response"
#: Secret type of binding credentials Secrets, so they are recognisable and never mistaken for others.
CREDENTIALS_SECRET_TYPE = f"{DOMAIN}/binding-credentials"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def resource_name(osb_id: str) -> str:
    """The Kubernetes name for an OSB instance or binding id.

    The id itself when it is a valid DNS-1123 label (so it can also appear inside names the templates
    build), otherwise its sha224 hex digest (56 characters, always valid). Deterministic: every broker
    replica finds the same object for the same id.
    """
    if len(osb_id) <= 63 and _DNS1123_LABEL.match(osb_id):
        return osb_id
    return hashlib.sha224(osb_id.encode("utf-8")).hexdigest()


def credentials_secret_name(binding_name: str) -> str:
    """Name of the Secret holding a binding's credentials (owned by the binding)."""
    return f"{binding_name}-credentials"


def instance_registry_name(instance_name: str) -> str:
    """Name of an instance's registry Secret (Couchbase-style key/JSON-value store)."""
    return f"{instance_name}-registry"


def binding_registry_name(binding_name: str) -> str:
    return f"{binding_name}-binding-registry"


# -- tenancy (issue 24): who owns what, who may refer to what -------------------------------------------------

#: On every object opbroker creates for an owner (rendered objects, credentials Secrets, registries, claim
#: Secrets): the owner's uid. opbroker deletes, un-owns or overwrites an existing object only when the live
#: object carries its owner's uid here; a record in a status proves nothing by itself.
ANNOTATION_OWNER_UID = f"{DOMAIN}/owner-uid"
#: The service account a plan acts with, when the plan names none (created and granted by the platform team;
#: the ControlPlane component creates it in the control-plane namespace).
DEFAULT_PLAN_SERVICE_ACCOUNT = "opbroker-plans"
#: The service account, in a consumer's namespace, that opbroker writes there with when no plan is involved
#: (Service Catalog Binding Secrets and workload projections, claim Secrets): Flux's default service account.
NAMESPACE_SERVICE_ACCOUNT = "opbroker"
#: In a ``shareWith`` list: every namespace.
SHARE_WITH_ALL = "*"


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount authenticates (and is impersonated) as."""
    return f"system:serviceaccount:{namespace}:{name}"


def may_refer(*, referrer_namespace: str, target_namespace: str, share_with: list[str] | tuple[str, ...] = ()) -> bool:
    """The one cross-namespace rule (Gateway API's ReferenceGrant in spirit): an object may refer to one in its
    own namespace; to one in another namespace only when the target's owner listed the referrer's namespace
    (or ``*``) in the target's ``shareWith``. Secrets are never shared this way: pass no ``share_with``."""
    if referrer_namespace == target_namespace:
        return True
    return referrer_namespace in share_with or SHARE_WITH_ALL in share_with


def owned_by(obj: dict[str, object] | None, owner_uid: str) -> bool:
    """Whether the live ``obj`` carries ``owner_uid`` in :data:`ANNOTATION_OWNER_UID` (opbroker made it for
    that owner)."""
    metadata = (obj or {}).get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return isinstance(annotations, dict) and annotations.get(ANNOTATION_OWNER_UID) == owner_uid
