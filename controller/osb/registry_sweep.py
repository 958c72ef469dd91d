"""The registries' housekeeping (issue 29): moving those from before issue 29 out of consumers' namespaces, and
deleting those whose instance or binding is gone.

Registries live in the registry namespace, where no owner reference from a consumer's namespace reaches; their
owner's teardown deletes them. This pass catches the rest: at the leader's start (so an upgrade moves every
registry at once, not only those of objects reconciled again) and every ``registry_sweep`` of the policy table
(:mod:`opbroker.controller.runtime.policies`) after.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.core.views import ObjectView, SecretView
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb import registries
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.policies import DEFAULTS, Policies

logger = logging.getLogger(__name__)

#: The old place's registries are recognised by these labels (and their name and owner reference).
LEGACY_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},opbroker.io/instance,!{registries.LABEL_REGISTRY_OF}"
_KINDS = {"instance": INSTANCES, "binding": BINDINGS}
_OWNER_KINDS = {"SFServiceInstance": "instance", "SFServiceBinding": "binding"}


def owner_uid_of(kube: Kube) -> Callable[[str, str, str], str | None]:
    """The uid of the live instance or binding ``(kind, namespace, name)``, read past the store: each kind is
    listed (metadata only) at its first question — one request per 500 objects instead of a GET per registry
    (at a restart over 2 000 bindings those GETs were a fifth of the controller's CPU until idle). Listed after
    the registries were: a registry is written after its owner exists, so its owner is in the listing unless it
    is gone, and one that went and came back under its name shows its new uid."""
    listed: dict[str, dict[tuple[str, str], str]] = {}

    def lookup(kind: str, namespace: str, name: str) -> str | None:
        if kind not in listed:
            listed[kind] = kube.uids_of(_KINDS[kind])
        return listed[kind].get((namespace, name))

    return lookup


def move_legacy(kube: Kube, namespace: str, door: Callable[[str], Kube]) -> int:
    """Move every registry still at its old place (``<name>-registry`` beside its owner) into ``namespace``,
    values unchanged; the old Secret is deleted through ``door(its namespace)``. The number moved."""
    moved = 0
    for listed in kube.list_secrets(None, label_selector=LEGACY_SELECTOR):
        secret = SecretView.of(listed)
        meta, owners = secret.meta, secret.meta.owners
        if len(owners) != 1 or owners[0].kind not in _OWNER_KINDS or not meta.name.endswith("-registry"):
            continue  # a credentials Secret, or nothing of ours
        kind = _OWNER_KINDS[owners[0].kind]
        owner = ObjectView.maybe(kube.get_custom(_KINDS[kind], meta.namespace, owners[0].name or "", fresh=True))
        if owner is None or owner.meta.uid != owners[0].uid:
            continue  # the garbage collector takes it with its owner
        where = registries.place(owner.meta, kind=kind, namespace=namespace)
        if where.legacy_name != meta.name:
            continue
        if not registries.stamped(SecretView.maybe(kube.read_secret(where.namespace, where.name)), where.owner_uid):
            if not registries.legacy_owned(secret, where.owner_uid):
                continue
            registries.save(kube, where, registries.decode(secret) or {}, registries.domain_labels(secret))
        door(meta.namespace).delete_secret(meta.namespace, meta.name, uid=meta.uid or None)
        moved += 1
    return moved


def housekeeping(kube: Kube, namespace: str, door: Callable[[str], Kube]) -> None:
    """One pass: move the old place's registries, delete the orphans. Errors are logged, never raised (the
    next pass tries again)."""
    try:
        moved = move_legacy(kube, namespace, door)
        if moved:
            logger.info("moved %d registries into namespace %s", moved, namespace)
        registries.sweep(kube, namespace, owner_uid_of(kube))
    except Exception:
        logger.exception("registry housekeeping failed; tried at the next pass")


async def keep_house(
    kube: Kube, namespace: str, door: Callable[[str], Kube], *, policies: Policies = DEFAULTS, clock: Clock = SYSTEM
) -> None:
    """Run :func:`housekeeping` now and after each ``registry_sweep`` of ``policies`` (jittered, on ``clock``), in
    a thread (its calls block)."""
    while True:
        await asyncio.to_thread(housekeeping, kube, namespace, door)
        await clock.sleep(policies.delay(policies.registry_sweep))
