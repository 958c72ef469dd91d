"""Where the controller's digest key (``controller.core.digests``) is kept: a Secret of the registries namespace,
which tenants have no rights in. Every shard reads the same Secret (the first to start creates it), so a digest one
shard recorded holds for the shard an object moves to, and across restarts."""

from __future__ import annotations

import base64
import binascii
import logging
import secrets

from opbroker.controller.core.digests import KEY_BYTES, DigestKey
from opbroker.controller.core.views import SecretView
from opbroker.controller.runtime.kube import Kube
from opbroker.kubeclient.wire import JsonBody

logger = logging.getLogger(__name__)

SECRET_NAME = "opbroker-digest-key"
DATA_KEY = "key"


class DigestKeyError(RuntimeError):
    """The key's Secret holds something that is not a key (edited by hand): said, never replaced silently — every
    digest recorded with the old key would stop matching, and a second writer of the Secret is worth knowing about."""


def load(key: DigestKey, kube: Kube, namespace: str) -> None:
    """Give ``key`` the one kept in ``namespace``, creating it when there is none (two shards starting at once: one
    creates it, the other's create answers that it exists and it reads that one)."""
    for _ in range(2):
        held = _key_of(kube.read_secret(namespace, SECRET_NAME))
        if held is not None:
            key.use(held)
            return
        fresh = secrets.token_bytes(KEY_BYTES)
        manifest = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": namespace},
            "type": "Opaque",
            "data": {DATA_KEY: base64.b64encode(fresh).decode("ascii")},
        }
        if kube.create(manifest) is not None:
            logger.info("created the digest key Secret %s/%s", namespace, SECRET_NAME)
            key.use(fresh)
            return
    raise DigestKeyError(f"Secret {namespace}/{SECRET_NAME} could neither be read nor created")


def _key_of(body: JsonBody | None) -> bytes | None:
    """The key a Secret holds (None: no Secret); a Secret without a key of the right size is an error."""
    secret = SecretView.maybe(body)
    if secret is None:
        return None
    try:
        held = base64.b64decode(secret.data.get(DATA_KEY) or "", validate=True)
    except (binascii.Error, ValueError):
        held = b""
    if len(held) != KEY_BYTES:
        raise DigestKeyError(
            f"Secret {SECRET_NAME} holds no {KEY_BYTES}-byte key in data.{DATA_KEY}: delete it to have a new one made "
            "(every digest recorded with the old key is then checked again by rendering, once)"
        )
    return held
