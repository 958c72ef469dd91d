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

from opbroker import osbclient
from opbroker.api.conventions import may_refer
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import Meta
from opbroker.controller.servicecatalog.core.views import AuthRef, BrokerSpec, BrokerView

#: Sent as the originating platform with every request that acts for a user.
PLATFORM = "kubernetes"


class EndpointProblem(ValueError):
    """The Broker cannot be reached as specified (a missing Secret or key); the message says which."""

    reason = Reason.ERROR_AUTH_CREDENTIALS


class SecretOutsideControlPlane(EndpointProblem):
    """The Broker's auth Secret is not in the control-plane namespace: it is not read."""

    reason = Reason.AUTH_SECRET_NOT_IN_CONTROL_PLANE


def auth_secret_ref(spec: BrokerSpec, *, control_plane: str) -> AuthRef | None:
    """``(kind, namespace, name)`` of the Secret holding the broker's credentials, if it has any; raises
    :class:`SecretOutsideControlPlane` when it is not in ``control_plane`` (Secrets are shared with nobody:
    ``may_refer`` without a ``shareWith``)."""
    ref = spec.auth
    if ref is not None and not may_refer(referrer_namespace=control_plane, target_namespace=ref.namespace):
        raise SecretOutsideControlPlane(
            f"the {ref.kind} auth Secret {ref.namespace}/{ref.name} is not in the control-plane namespace "
            f"{control_plane!r}: a Broker's credentials are read only from there, so it was not read and nothing "
            "was sent"
        )
    return ref


def endpoint(spec: BrokerSpec, secret: Mapping[str, str] | None, *, version: str | None = None) -> osbclient.Broker:
    """The OSB endpoint for a Broker ``spec``; ``secret``: the decoded auth Secret (None if it is missing);
    ``version``: the OSB version to speak first (default ``spec.brokerAPIVersion``, else the newest)."""
    ref = spec.auth
    auth: osbclient.Auth | None = None
    if ref is not None:
        where = f"the {ref.kind} auth Secret {ref.namespace}/{ref.name}"
        if secret is None:
            raise EndpointProblem(f"{where} does not exist")
        needed = ("username", "password") if ref.kind == "basic" else ("token",)
        found = {key: secret.get(key) or "" for key in needed}
        missing = [key for key, value in found.items() if not value]
        if missing:
            raise EndpointProblem(f"{where} has no {' or '.join(missing)}")
        auth = (
            osbclient.BasicAuth(found["username"], found["password"])
            if ref.kind == "basic"
            else osbclient.BearerToken(found["token"])
        )
    tls = osbclient.TLS(
        ca_pem=base64.b64decode(spec.ca_bundle) if spec.ca_bundle else None,
        insecure_skip_tls_verify=spec.insecure_skip_tls_verify,
    )
    return osbclient.Broker(url=spec.url, auth=auth, tls=tls, api_version=speaking(spec, version))


def speaking(spec: BrokerSpec, version: str | None) -> str:
    """``version`` if the client speaks it, else the spec's, else the newest."""
    for candidate in (version, spec.api_version):
        if candidate in osbclient.versions.SUPPORTED:
            return str(candidate)
    return osbclient.API_VERSION


def accepted_version(broker: BrokerView) -> str | None:
    """The version a Broker's status records as accepted by the broker at the last catalog fetch — what its
    Instances and Bindings speak — unless it is newer than the spec's (the spec changed since)."""
    held = broker.accepted_api_version
    wanted = speaking(broker.spec, None)
    if held not in osbclient.versions.SUPPORTED:
        return None
    assert held is not None
    order = osbclient.versions.SUPPORTED.index
    return held if order(held) >= order(wanted) else wanted


def identity_of(meta: Meta) -> osbclient.OriginatingIdentity:
    """The originating identity for a request made for the object of ``meta``: who last changed it is not known
    to a controller, so it is the object itself (its namespace and uid), which a broker can audit against."""
    username = f"system:serviceaccount-object:{meta.namespace}:{meta.name}"
    return osbclient.kubernetes_identity(username, meta.uid)
