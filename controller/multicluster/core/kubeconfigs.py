"""What an SFCluster's kubeconfig may hold (issue 24 C): data, never a command to run or a file to read. Pure.

The kubeconfig comes from a Secret, and the client library acts on what it finds there: ``exec`` runs a
command on the controller's machine, ``auth-provider`` runs a provider's command (``cmd-path``) or refreshes
tokens through it, and ``tokenFile``, ``certificate-authority``, ``client-certificate`` and ``client-key`` name
files it reads (the service account token, another cluster's keys). So a kubeconfig naming any of them — in any
cluster or user entry, current or not, even beside the ``-data`` form that would win — is refused before a
client is built, with the field named (``users[0].user.exec``); the SFCluster is then not Ready, reason
``KubeconfigRefused``. What is left is what a kubeconfig for a remote cluster needs: ``server``,
``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``, ``token``,
``username``/``password``, ``tls-server-name``, ``insecure-skip-tls-verify``, ``proxy-url``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping

from opbroker.kubeclient.wire import JsonBody

#: Fields of ``users[].user`` the controller refuses, and what the client would do with each.
REFUSED_USER_FIELDS = {
    "exec": "runs a command on the controller",
    "auth-provider": "runs an auth provider's command or token refresh on the controller",
    "tokenFile": "reads a file on the controller",
    "client-certificate": "reads a file on the controller (use client-certificate-data)",
    "client-key": "reads a file on the controller (use client-key-data)",
}
#: Fields of ``clusters[].cluster`` the controller refuses.
REFUSED_CLUSTER_FIELDS = {
    "certificate-authority": "reads a file on the controller (use certificate-authority-data)",
}


def problems(kubeconfig: object) -> list[str]:
    """Every refused field of a parsed kubeconfig, as ``path: why`` (empty: it may be used)."""
    if not isinstance(kubeconfig, Mapping):
        return ["the kubeconfig is not a YAML mapping"]
    found: list[str] = []
    for section, inner, refused in (
        ("users", "user", REFUSED_USER_FIELDS),
        ("clusters", "cluster", REFUSED_CLUSTER_FIELDS),
    ):
        entries = kubeconfig.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            found.append(f"{section}: not a list")
            continue
        for index, entry in enumerate(entries):
            body = entry.get(inner) if isinstance(entry, Mapping) else None
            if body is None:
                continue
            if not isinstance(body, Mapping):
                found.append(f"{section}[{index}].{inner}: not a mapping")
                continue
            found += [f"{section}[{index}].{inner}.{field}: {why}" for field, why in refused.items() if field in body]
    return found


#: Fields naming a file, and the ``-data`` field (base64 of the file) or plain field that carries it instead.
_INLINED = {
    "certificate-authority": ("certificate-authority-data", True),
    "client-certificate": ("client-certificate-data", True),
    "client-key": ("client-key-data", True),
    "tokenFile": ("token", False),
}


def data_only(
    kubeconfig: object, read: Callable[[str], bytes], *, context: str | None = None, server: str | None = None
) -> JsonBody:
    """The one context of ``kubeconfig`` (``context``, default its current one) the controller may use: its
    cluster and user only, each file they name read (``read``) into the field carrying the data, the server
    replaced by ``server`` when given (the address the master reaches the cluster at). A command (``exec``,
    ``auth-provider``) cannot be inlined: ValueError naming the field — give a token or certificates instead."""
    if not isinstance(kubeconfig, Mapping):
        raise ValueError("the kubeconfig is not a YAML mapping")
    chosen = context or kubeconfig.get("current-context")
    listed = [c for c in kubeconfig.get("contexts") or [] if isinstance(c, Mapping)]
    contexts = {c.get("name"): c.get("context") or {} for c in listed}
    if chosen not in contexts:
        raise ValueError(f"the kubeconfig has no context {chosen!r}")
    wanted = contexts[chosen]

    def entry(section: str, inner: str, name: object) -> JsonBody:
        for item in kubeconfig.get(section) or []:
            if isinstance(item, Mapping) and item.get("name") == name:
                return dict(item.get(inner) or {})
        raise ValueError(f"the kubeconfig's context {chosen!r} names {section[:-1]} {name!r}, which it lacks")

    def inline(body: JsonBody, where: str) -> JsonBody:
        for field, (target, encoded) in _INLINED.items():
            if field in body:
                path = str(body.pop(field))
                try:
                    content = read(path)
                except OSError as exc:
                    raise ValueError(f"{where}.{field}: cannot read {path}: {exc.strerror or exc}") from None
                body[target] = base64.b64encode(content).decode() if encoded else content.decode().strip()
        for field in ("exec", "auth-provider"):
            if field in body:
                raise ValueError(
                    f"{where}.{field}: {REFUSED_USER_FIELDS[field]}; use a kubeconfig with a token or client "
                    "certificates for this cluster"
                )
        return body

    cluster = inline(entry("clusters", "cluster", wanted.get("cluster")), "cluster")
    user = inline(entry("users", "user", wanted.get("user")), "user")
    if server:
        cluster["server"] = server
    name = str(chosen)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
