"""How to reach a Broker: its spec and auth Secret turned into an :class:`opbroker.osbclient.Broker`.

Pure apart from the Secret read the caller does: ``auth_secret_ref(spec, control_plane=...)`` names the Secret
to read — only one in the control-plane namespace: a Broker is cluster-scoped, and whoever may create one must
not be able to have another namespace's Secret read and sent to a URL of their choosing — and
``endpoint(spec, secret)`` checks that the Secret holds what the auth kind needs and says clearly what is
missing (never what it holds).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from opbroker import osbclient
from opbroker.api.conventions import may_refer
from opbroker.controller.core.reasons import Reason

#: Sent as the originating platform with every request that acts for a user.
PLATFORM = "kubernetes"


class EndpointProblem(ValueError):
    """The Broker cannot be reached as specified (a missing Secret or key); the message says which."""

    reason = Reason.ERROR_AUTH_CREDENTIALS


class SecretOutsideControlPlane(EndpointProblem):
    """The Broker's auth Secret is not in the control-plane namespace: it is not read."""

    reason = Reason.AUTH_SECRET_NOT_IN_CONTROL_PLANE


def _auth_ref(spec: Mapping[str, Any]) -> tuple[str, str, str] | None:
    auth = spec.get("authInfo") or {}
    for kind in ("basic", "bearer"):
        ref = (auth.get(kind) or {}).get("secretRef")
        if ref:
            return kind, ref.get("namespace") or "default", ref["name"]
    return None


def auth_secret_ref(spec: Mapping[str, Any], *, control_plane: str) -> tuple[str, str, str] | None:
    """``(kind, namespace, name)`` of the Secret holding the broker's credentials, if it has any; raises
    :class:`SecretOutsideControlPlane` when it is not in ``control_plane`` (Secrets are shared with nobody:
    ``may_refer`` without a ``shareWith``)."""
    ref = _auth_ref(spec)
    if ref is not None and not may_refer(referrer_namespace=control_plane, target_namespace=ref[1]):
        kind, namespace, name = ref
        raise SecretOutsideControlPlane(
            f"the {kind} auth Secret {namespace}/{name} is not in the control-plane namespace {control_plane!r}: "
            "a Broker's credentials are read only from there, so it was not read and nothing was sent"
        )
    return ref


def endpoint(
    spec: Mapping[str, Any], secret: Mapping[str, str] | None, *, version: str | None = None
) -> osbclient.Broker:
    """The OSB endpoint for a Broker ``spec``; ``secret``: the decoded auth Secret (None if it is missing);
    ``version``: the OSB version to speak first (default ``spec.brokerAPIVersion``, else the newest)."""
    ref = _auth_ref(spec)
    auth: osbclient.Auth | None = None
    if ref is not None:
        kind, namespace, name = ref
        if secret is None:
            raise EndpointProblem(f"the {kind} auth Secret {namespace}/{name} does not exist")
        needed = ("username", "password") if kind == "basic" else ("token",)
        missing = [key for key in needed if not secret.get(key)]
        if missing:
            raise EndpointProblem(f"the {kind} auth Secret {namespace}/{name} has no {' or '.join(missing)}")
        auth = (
            osbclient.BasicAuth(secret["username"], secret["password"])
            if kind == "basic"
            else osbclient.BearerToken(secret["token"])
        )
    ca = spec.get("caBundle")
    tls = osbclient.TLS(
        ca_pem=base64.b64decode(ca) if ca else None,
        insecure_skip_tls_verify=bool(spec.get("insecureSkipTLSVerify")),
    )
    return osbclient.Broker(url=spec["url"], auth=auth, tls=tls, api_version=speaking(spec, version))


def speaking(spec: Mapping[str, Any], version: str | None) -> str:
    """``version`` if the client speaks it, else the spec's, else the newest."""
    for candidate in (version, spec.get("brokerAPIVersion")):
        if candidate in osbclient.versions.SUPPORTED:
            return str(candidate)
    return osbclient.API_VERSION


def accepted_version(broker: Mapping[str, Any]) -> str | None:
    """The version a Broker's status records as accepted by the broker at the last catalog fetch — what its
    Instances and Bindings speak — unless it is newer than the spec's (the spec changed since)."""
    held = (broker.get("status") or {}).get("brokerAPIVersion")
    wanted = speaking(broker.get("spec") or {}, None)
    if held not in osbclient.versions.SUPPORTED:
        return None
    order = osbclient.versions.SUPPORTED.index
    return str(held) if order(held) >= order(wanted) else wanted


def identity_of(obj: Mapping[str, Any]) -> osbclient.OriginatingIdentity:
    """The originating identity for a request made for ``obj``: who last changed it is not known to a
    controller, so it is the object itself (its namespace and uid), which a broker can audit against."""
    meta = obj.get("metadata") or {}
    username = f"system:serviceaccount-object:{meta.get('namespace', '')}:{meta.get('name', '')}"
    return osbclient.kubernetes_identity(username, meta.get("uid", ""))
