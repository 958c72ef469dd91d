"""Which namespaces a request's ``context.namespace`` may name (issue 24 B, the DESIGN's trust model).

In the OSB Kubernetes profile a platform says, in ``context.namespace``, whose namespace a request is for: the
broker records the instance there (``context_namespaces``), and the controller defaults every object the plan
renders without a namespace to it — with ``--no-context-namespaces`` too. So the namespace a request names
decides where the platform's objects land, and the broker honours only those the platform allows:

* the broker's own default instance namespace (where a request naming none goes anyway);
* the namespaces listed (``--allowed-namespace``, repeatable);
* the namespaces whose labels match a label selector (``--allowed-namespace-selector``, apimachinery's string
  form: ``opbroker.io/tenant=true``, ``team in (a,b)``); a namespace that does not exist matches none.

Anything else is refused with 400 and an OSB error body giving the reason, before anything is recorded. With
neither list nor selector configured only the default instance namespace is allowed; every namespace is
``kubernetes.io/metadata.name`` (a label the API server sets on each), which a platform trusting all its
namespaces can select.

Pure: the labels are read (and cached, bounded) at the edge, by the repository, and only when the decision needs
them (:meth:`NamespacePolicy.needs_labels`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opbroker.api.selectors import Selector, parse
from opbroker.broker import errors

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class NamespacePolicy:
    default: str
    """The broker's default instance namespace: always allowed (as good as naming none)."""
    names: frozenset[str] = frozenset()
    selector: Selector | None = None

    @classmethod
    def of(cls, *, default: str, names: Iterable[str] = (), selector: str | None = None) -> NamespacePolicy:
        """The policy of the broker's settings; :class:`~opbroker.api.selectors.SelectorError` when ``selector``
        does not parse."""
        parsed = parse(selector) if selector and selector.strip() else None
        return cls(default, frozenset(n for n in names if n), parsed)

    def needs_labels(self, namespace: str | None) -> bool:
        """Whether deciding on ``namespace`` needs its labels (read them only then)."""
        return namespace is not None and self.selector is not None and not self.listed(namespace)

    def listed(self, namespace: str) -> bool:
        return namespace == self.default or namespace in self.names


def context_namespace(context: Mapping[str, Any] | None) -> str | None:
    """The namespace a request's context names (None: none); 400 when it is not a namespace name."""
    if not context or context.get("namespace") is None:
        return None
    namespace = context["namespace"]
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise errors.bad_request("context.namespace must be a Kubernetes namespace name (a DNS-1123 label)")
    return namespace


def admit(namespace: str | None, policy: NamespacePolicy, labels: Mapping[str, str] | None = None) -> None:
    """Refuse (400) a request whose ``context.namespace`` the platform does not allow.

    ``labels``: the Namespace's labels, read when :meth:`NamespacePolicy.needs_labels` says so; None when it does
    not exist (or was not read).
    """
    if namespace is None or policy.listed(namespace):
        return
    if policy.selector is not None and labels is not None and policy.selector.matches(labels):
        return
    allowed = "this broker records instances only in its own namespace"
    if policy.names or policy.selector is not None:
        allowed = "this broker records instances only in the namespaces the platform allows"
        if policy.selector is not None:
            allowed += f" (those labelled {policy.selector})"
    missing = " (the namespace does not exist)" if policy.selector is not None and labels is None else ""
    fix = (
        "; the platform allows more with the broker's --allowed-namespace or --allowed-namespace-selector "
        "(`opbroker dev --allowed-namespace NS` locally)"
    )
    raise errors.bad_request(f"context.namespace {namespace!r} is not allowed{missing}: {allowed}{fix}")
