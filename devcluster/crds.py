"""Installing opbroker's CRDs into a cluster and waiting until the API server serves them."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.crd import all_crds


def install_crds(api_client: client.ApiClient, crds: list[dict[str, Any]] | None = None, timeout: float = 30.0) -> None:
    """Create or update every CRD, then wait for each to be Established (idempotent)."""
    extensions = client.ApiextensionsV1Api(api_client)
    wanted = crds if crds is not None else all_crds()
    for crd in wanted:
        name = crd["metadata"]["name"]
        try:
            current = extensions.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # The client serializes a manifest dict as it does its models (annotated: the model only).
            extensions.create_custom_resource_definition(crd)  # type: ignore[arg-type]
        else:
            version = current.metadata.resource_version if current.metadata is not None else None
            body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}}
            extensions.replace_custom_resource_definition(name, body)  # type: ignore[arg-type]  # as above
    deadline = time.monotonic() + timeout
    pending = {crd["metadata"]["name"] for crd in wanted}
    while pending:
        for name in sorted(pending):
            status = extensions.read_custom_resource_definition(name).status
            conditions = (status.conditions if status is not None else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not established after {timeout:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
