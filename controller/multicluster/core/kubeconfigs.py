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

from collections.abc import Mapping
from typing import Any

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


def problems(kubeconfig: Any) -> list[str]:
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
