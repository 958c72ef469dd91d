"""Where the Primaza resources live in the API (for :class:`opbroker.controller.runtime.kube.Kube`)."""

from __future__ import annotations

from opbroker.api.primaza import PRIMAZA_GROUP, RegisteredService, ServiceCatalog, ServiceClaim
from opbroker.controller.runtime.kube import Kind

REGISTERED_SERVICES = Kind(PRIMAZA_GROUP, RegisteredService.VERSION, RegisteredService.PLURAL)
CLAIMS = Kind(PRIMAZA_GROUP, ServiceClaim.VERSION, ServiceClaim.PLURAL)
CATALOGS = Kind(PRIMAZA_GROUP, ServiceCatalog.VERSION, ServiceCatalog.PLURAL)
