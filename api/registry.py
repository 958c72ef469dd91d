"""Which model serves which (apiVersion, kind): the lookup ``opbroker validate`` and the CRD generator use."""

from __future__ import annotations

from opbroker.api.catalog import SFPlan, SFService
from opbroker.api.cluster import SFCluster
from opbroker.api.meta import KubeResource
from opbroker.api.osb import SFServiceBinding, SFServiceInstance
from opbroker.api.primaza import RegisteredService, ServiceCatalog, ServiceClaim
from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass

#: Every kind opbroker owns, in the order CRDs are installed and printed.
RESOURCE_KINDS: tuple[type[KubeResource], ...] = (
    SFService,
    SFPlan,
    SFServiceInstance,
    SFServiceBinding,
    SFCluster,
    RegisteredService,
    ServiceClaim,
    ServiceCatalog,
    Broker,
    ServiceClass,
    Instance,
    Binding,
)

_BY_TYPE = {(m.api_version_string(), m.KIND): m for m in RESOURCE_KINDS}
_BY_GROUP_KIND = {(m.GROUP, m.KIND): m for m in RESOURCE_KINDS}


def model_for(api_version: str, kind: str) -> type[KubeResource] | None:
    """The model for a document, or None when opbroker does not own the kind.

    A known group and kind under another version still maps to the model, so that validation reports
    the unsupported version instead of silently skipping the document.
    """
    exact = _BY_TYPE.get((api_version, kind))
    if exact is not None:
        return exact
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return _BY_GROUP_KIND.get((group, kind))
