"""Teardown in a terminating namespace (issue 18): the I/O around :func:`decisions.teardown_scope`.

A namespace being deleted accepts no new objects (HTTP 403 "... because it is being terminated"). A
teardown that ran its plan's ``unbind`` template there was refused forever, and its finalizer held the
namespace's deletion for good. The reconcilers ask :func:`namespace_going` first and, when it is, skip the
templates, release only what lives elsewhere and let go (:func:`announce`).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import TeardownScope
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import ObjectView, namespace_terminating
from opbroker.controller.kube import Kube

logger = logging.getLogger(__name__)


def namespace_going(kube: Kube, namespace: str) -> bool:
    """Whether ``namespace`` is being deleted (or already gone)."""
    try:
        return namespace_terminating(kube.read_namespace(namespace))
    except ApiException as exc:
        if exc.status == 403:  # a ClusterRole from before namespaces could be read: teardown as before
            return False
        raise


def announce(kube: Kube, obj: dict[str, Any], scope: TeardownScope) -> None:
    """Say why the finalizer goes without the plan's teardown: in the log and, best effort, an Event (the
    namespace may already refuse new Events)."""
    view = ObjectView.of(obj)
    meta = view.meta
    message = decisions.terminating_teardown_message(meta.namespace, scope)
    logger.info("%s %s/%s: %s", view.kind or None, meta.namespace, meta.name, message)
    kube.emit_event(obj, reason=Reason.NAMESPACE_TERMINATING.value, message=message)
