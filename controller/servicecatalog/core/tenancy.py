"""Who may act on what, for the Service Catalog kinds (issue 24): pure decisions over the objects as read.

A tenant may write its own Instances and Bindings — their status included — and Secrets in its namespace,
nothing elsewhere. So nothing here trusts a status: what decides comes from what the API server guarantees
(an object's uid and creationTimestamp, an immutable spec) or from a live object read just before acting.

* **Consent** (:func:`shared_with`): a Binding uses an Instance in another namespace only when the Instance
  lists the Binding's namespace (or ``*``) in ``spec.shareWith`` — :func:`opbroker.api.conventions.may_refer`,
  the one rule for every reference. A Binding without it binds nothing and holds up no deletion.
* **External ids** (:func:`external_id`, :func:`holds_external_id`): the OSB id an object acts with is its
  ``spec.externalID``, else a UUID derived from its uid — never ``status.externalID``, which its owner could
  point at someone else's id. A derived id is the object's own by construction. A chosen one is its own only
  while no other object of the kind in the cluster has a better claim on it: a derived id beats a chosen one,
  an earlier chosen one a later one, and two chosen in the same second leave it to neither. An object that
  does not hold its id never sends anything for it — not even a deprovision or an unbind when deleted.
* **Valid ids** (:func:`id_problem`): a chosen id goes into an OSB URL, so it must keep the OSB client's one id
  rule (``opbroker.osbclient.paths``). The API server refuses a bad one on create; one made before it did is
  held by nobody: nothing is ever sent for it (``InvalidExternalID``), as for an id someone else holds.
* **Refusals** (:func:`refusal`): a chosen id the broker refuses to create (409: it has it already, with
  other attributes) is someone else's; any permanent refusal of a chosen id means the broker made nothing of
  ours under it, so deleting the object asks nothing of the broker.
* **Secrets** (:func:`may_write_secret`): a Binding writes or deletes only a Secret that does not exist or
  that carries its own uid in ``opbroker.io/owner-uid`` (:func:`opbroker.api.conventions.owned_by`).
* **Broker credentials**: read only from the control-plane namespace (``endpoints.auth_secret_ref``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from opbroker.api.conventions import ANNOTATION_OWNER_UID, may_refer, owned_by
from opbroker.controller.core.reasons import Reason
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.kubeclient.wire import JsonObject
from opbroker.osbclient import paths

#: The namespace of the UUIDs derived from object uids (uuid5): fixed, so a derived id never changes.
_DERIVED = uuid.UUID("7f3c1a52-0b8e-5d2a-9c1e-6a4f2d8b0e31")


def derived_id(uid: str) -> str:
    """The OSB id of an object that chose none: a UUID only the object with ``uid`` can have."""
    return str(uuid.uuid5(_DERIVED, uid))


def chosen(obj: CatalogObject) -> bool:
    """Whether the object chose its OSB id (``spec.externalID``)."""
    return obj.chosen_id is not None


def external_id(obj: CatalogObject) -> str:
    """The OSB id the Instance or Binding acts with: ``spec.externalID``, else derived from its uid."""
    return obj.chosen_id or derived_id(obj.meta.uid)


def id_problem(obj: CatalogObject) -> str | None:
    """Why the object's chosen id may not be sent in an OSB URL (a sentence naming the rule), None when it may or
    when the object chose none (a derived id is a UUID)."""
    return None if obj.chosen_id is None else paths.id_problem(obj.chosen_id)


def holds_external_id(obj: CatalogObject, others: Iterable[CatalogObject]) -> bool:
    """Whether ``obj`` holds its OSB id against ``others`` (every object of its kind in the cluster; itself
    may be among them): a derived id always; a chosen one unless another object has it derived, or chose it
    earlier or in the same second (creationTimestamp, which no tenant can set). An id that breaks the id rule
    (:func:`id_problem`) is held by nobody."""
    if not chosen(obj):
        return True
    if id_problem(obj) is not None:
        return False
    mine = external_id(obj)
    for other in others:
        if other.meta.uid == obj.meta.uid or external_id(other) != mine:
            continue
        if not chosen(other) or other.created <= obj.created:
            return False
    return True


def shared_with(instance: CatalogObject, namespace: str) -> bool:
    """Whether a Binding in ``namespace`` may use ``instance`` (its own namespace, or listed in shareWith)."""
    return may_refer(
        referrer_namespace=namespace,
        target_namespace=instance.meta.namespace,
        share_with=list(instance.instance_spec.share_with),
    )


def refusal(*, chosen_id: bool, status: int | None, failure: Reason) -> tuple[Reason, bool]:
    """For a provision or bind the broker refused for good (no orphan mitigation, no retry): the reason to
    report and whether the object keeps no claim at the broker (deprovision/unbind ``NotRequired``). Only a
    chosen id is disowned: a derived one is this object's whatever the broker answers."""
    if not chosen_id:
        return failure, False
    return (Reason.EXTERNAL_ID_IN_USE if status == 409 else failure), True


def may_write_secret(live: JsonObject | None, owner_uid: str) -> bool:
    """Whether the object with ``owner_uid`` may overwrite or delete the Secret ``live`` (as just read): one
    that does not exist, or one it stamped."""
    return live is None or owned_by(dict(live), owner_uid)


def stamp(owner_uid: str) -> dict[str, str]:
    """The annotations marking a Secret as made for the object with ``owner_uid``."""
    return {ANNOTATION_OWNER_UID: owner_uid}
