"""Teardown in a terminating namespace (issue 18): the I/O around :func:`decisions.teardown_scope`.

A namespace being deleted accepts no new objects (HTTP 403 "... because it is being terminated"). A
teardown that ran its plan's ``unbind`` template there was refused forever, and its finalizer held the
namespace's deletion for good. The reconcilers ask :func:`namespace_going` first and, when it is, skip the
templates, release only what lives elsewhere and let go (the plans say why in an Event:
:func:`decisions.terminating_teardown_message`).
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.views import namespace_terminating
from opbroker.controller.runtime.kube import Kube

logger = logging.getLogger(__name__)


def namespace_going(kube: Kube, namespace: str) -> bool:
    """Whether ``namespace`` is being deleted (or already gone)."""
    try:
        return namespace_terminating(kube.read_namespace(namespace))
    except ApiException as exc:
        if exc.status == 403:  # a ClusterRole from before namespaces could be read: teardown as before
            return False
        raise
