"""Refusing the deletion of an Instance that still has Bindings, as the Service Catalog design says: a
validating admission webhook the controller serves.

Which applies when:

* with the webhook registered (the controller runs with ``--webhook-port``, see ``webhook``), ``kubectl delete
  instance`` fails at once with the bindings named, and nothing changes;
* without it — or when the controller cannot be reached (``failurePolicy: Ignore``: a controller that is down
  must not make instances undeletable) — the deletion is accepted, the finalizer holds the Instance, its
  ``Ready`` condition says ``DeletionBlockedByExistingBindings`` and names them, and it goes once they are
  deleted.

This module is the pure decision; the Bindings it is given come from an index a watch keeps (``bindingrefs``),
and the HTTPS server and the registration are in ``webhook``.
"""

from __future__ import annotations

from collections.abc import Iterable

from opbroker.api import webhooks
from opbroker.controller.servicecatalog.bindingrefs import BindingRef
from opbroker.controller.servicecatalog.core.tenancy import shared_with
from opbroker.controller.servicecatalog.core.views import CatalogObject, ReviewRequest
from opbroker.kubeclient.wire import JsonBody

PATH = webhooks.PATH


def bindings_of(instance: CatalogObject, refs: Iterable[BindingRef]) -> list[str]:
    """``namespace/name`` of every Binding in ``refs`` whose ``instanceRef`` is ``instance`` and that may use it:
    one in another namespace that the Instance does not share with (``spec.shareWith``) is bound to nothing, and
    must not keep another team's Instance from being deleted."""
    wanted = (instance.meta.namespace, instance.meta.name)
    return sorted(
        f"{ref.namespace}/{ref.name}" for ref in refs if ref.instance == wanted and shared_with(instance, ref.namespace)
    )


def review(request: ReviewRequest, bindings: list[str]) -> JsonBody:
    """The AdmissionReview answer for ``request`` (an ``admission.k8s.io/v1`` request): refused when it
    deletes an Instance that ``bindings`` still refer to. (A manifest written: a plain dict.)"""
    allowed = request.operation != "DELETE" or not bindings
    response: JsonBody = {"uid": request.uid, "allowed": allowed}
    if not allowed:
        response["status"] = {
            "code": 409,
            "reason": "Conflict",
            "message": f"instance {request.instance.meta.name!r} still has {len(bindings)} binding(s) "
            f"({', '.join(bindings)}): delete them first",
        }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
