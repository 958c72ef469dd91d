"""How to reach a Broker: its spec and auth Secret turned into an :class:`opbroker.osbclient.Broker`.

Pure apart from the Secret read the caller does: ``endpoint(spec, secret)`` checks that the Secret holds
what the auth kind needs and says clearly what is missing (never what it holds).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from opbroker import osbclient

#: Sent as the originating platform with every request that acts for a user.
PLATFORM = "kubernetes"


class EndpointProblem(ValueError):
    """The Broker cannot be reached as specified (a missing Secret or key); the message says which."""


def auth_secret_ref(spec: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(kind, namespace, name)`` of the Secret holding the broker's credentials, if it has any."""
    auth = spec.get("authInfo") or {}
    for kind in ("basic", "bearer"):
        ref = (auth.get(kind) or {}).get("secretRef")
        if ref:
            return kind, ref.get("namespace") or "default", ref["name"]
    return None


def endpoint(spec: Mapping[str, Any], secret: Mapping[str, str] | None) -> osbclient.Broker:
    """The OSB endpoint for a Broker ``spec``; ``secret``: the decoded auth Secret (None if it is missing)."""
    ref = auth_secret_ref(spec)
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
    return osbclient.Broker(url=spec["url"], auth=auth, tls=tls)


def identity_of(obj: Mapping[str, Any]) -> osbclient.OriginatingIdentity:
    """The originating identity for a request made for ``obj``: who last changed it is not known to a
    controller, so it is the object itself (its namespace and uid), which a broker can audit against."""
    meta = obj.get("metadata") or {}
    username = f"system:serviceaccount-object:{meta.get('namespace', '')}:{meta.get('name', '')}"
    return osbclient.kubernetes_identity(username, meta.get("uid", ""))
