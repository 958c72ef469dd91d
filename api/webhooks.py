"""The Service Catalog admission webhook's contract: the names the controller serves and registers under, and
the ValidatingWebhookConfiguration itself — shared by the controller (which fills in the CA, or registers the
whole configuration when reached by URL) and the ControlPlane component (which registers it in-cluster).

Pure data: no cluster access.
"""

from __future__ import annotations

import base64
from typing import Any

from opbroker.api.servicecatalog import Instance

#: The path the webhook serves AdmissionReviews on.
PATH = "/validate/instances"
#: Default name of the ValidatingWebhookConfiguration (the ControlPlane names its own per namespace).
CONFIGURATION = "opbroker-servicecatalog"
#: Default name of the Secret, in the control-plane namespace, holding the CA and the serving certificate.
SECRET = "opbroker-webhook-tls"
#: The one webhook in the configuration (the key its ``caBundle`` is set under).
WEBHOOK_NAME = "instances.servicecatalog.k8s.io"
#: Port of the webhook Service (the API server's default for a Service reference).
SERVICE_PORT = 443
#: How long the API server waits for an answer before it applies ``failurePolicy``.
TIMEOUT_SECONDS = 5


def configuration(
    ca: bytes,
    *,
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    name: str = CONFIGURATION,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration sending Instance DELETEs to the webhook, by ``url`` or by ``service``
    (namespace, name, port). An empty ``ca`` leaves ``caBundle`` out: the controller fills it in."""
    client_config: dict[str, Any] = {}
    if ca:
        client_config["caBundle"] = base64.b64encode(ca).decode()
    if url is not None:
        client_config["url"] = url.rstrip("/") + PATH
    else:
        assert service is not None
        namespace, service_name, port = service
        client_config["service"] = {"namespace": namespace, "name": service_name, "port": port, "path": PATH}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                # A controller that is down must not make Instances undeletable: the finalizer holds such a
                # deletion instead.
                "failurePolicy": "Ignore",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "clientConfig": client_config,
                "rules": [
                    {
                        "apiGroups": [Instance.GROUP],
                        "apiVersions": [Instance.VERSION],
                        "resources": [Instance.PLURAL],
                        "operations": ["DELETE"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }
