"""A cluster ``opbroker dev --kubeconfig`` borrows: what it creates there is written down before it is created, so
stopping removes exactly that and leaves the user's cluster as it was.

An object that existed before is used (and updated, if opbroker applies it: its CRDs are this version's afterwards)
but never deleted. Objects opbroker's controller holds with finalizers (instances, bindings, the plans and services
they use) are deleted while the controller still runs, so it can release them; the rest after the processes stopped,
newest first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from opbroker.api import SFService, SFServiceBinding, SFServiceInstance
from opbroker.api.meta import ResourceRef
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.runtime.kube import Kube, describe, ref_of

Progress = Callable[[str], None]
CRD_API = "apiextensions.k8s.io/v1"
#: The groups of objects the controller holds with finalizers: deleted before it stops.
HELD_GROUPS = frozenset({SFService.GROUP})


class Borrowed:
    """The objects created in a borrowed cluster, in creation order."""

    def __init__(self, api: client.ApiClient) -> None:
        self.kube = Kube(api)
        self.created: list[ResourceRef] = []
        self.found: list[ResourceRef] = []
        """Objects opbroker dev needed and found there already: left as they are on exit."""

    def note(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        """Before applying ``manifests``: write down each that does not exist yet."""
        for manifest in manifests:
            ref = ref_of(dict(manifest))
            if ref in self.created or ref in self.found:
                continue
            exists = self.kube.get(ref, fresh=True) is not None
            (self.found if exists else self.created).append(ref)

    def created_crd(self, name: str) -> bool:
        return ResourceRef(api_version=CRD_API, kind="CustomResourceDefinition", name=name) in self.created

    def release_held(self, progress: Progress, timeout: float = 60.0) -> list[ResourceRef]:
        """While the controller runs: delete the instances and bindings left anywhere (only when opbroker dev created
        their CRDs: then every one is this session's), then the opbroker objects it created; wait for them to go.
        What is still there after ``timeout`` is returned (and stays written down)."""
        waiting: list[ResourceRef] = []
        for kind, model in ((BINDINGS, SFServiceBinding), (INSTANCES, SFServiceInstance)):
            if self.created_crd(f"{model.PLURAL}.{model.GROUP}"):
                for obj in self.kube.list_custom(kind, None):
                    ref = ref_of({**obj, "apiVersion": kind.api_version, "kind": model.KIND})
                    self.kube.delete(ref)
                    waiting.append(ref)
                    progress(f"deleting {describe(ref)}")
        held = [ref for ref in reversed(self.created) if ref.api_version.split("/")[0] in HELD_GROUPS]
        for ref in held:
            if self.kube.delete(ref):
                progress(f"deleting {describe(ref)}")
        self.created = [ref for ref in self.created if ref not in held]
        return self._wait_gone([*waiting, *held], timeout)

    def release_rest(self, progress: Progress, timeout: float = 60.0) -> list[ResourceRef]:
        """After the processes stopped: delete the rest, newest first, and wait for namespaces and CRDs to go."""
        for ref in reversed(self.created):
            if self.kube.delete(ref):
                progress(f"deleted {describe(ref)}")
        slow = [ref for ref in self.created if ref.kind in ("Namespace", "CustomResourceDefinition")]
        self.created = []
        return self._wait_gone(slow, timeout)

    def _wait_gone(self, refs: list[ResourceRef], timeout: float) -> list[ResourceRef]:
        deadline = time.monotonic() + timeout
        left = list(refs)
        while left:
            left = [ref for ref in left if self.kube.get(ref, fresh=True) is not None]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return left
