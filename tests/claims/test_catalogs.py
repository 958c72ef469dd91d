"""ServiceCatalogs on the real control plane: which environments get one, and what each lists.

Aspects: catalogs for the environments that claims and inclusion constraints name (not for excluded
ones), listing the Available services offered there; a claimed service leaves, a released one returns;
a catalog whose environment nobody names any more is deleted.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.claims_support import (
    catalog_names,
    create,
    delete,
    get,
    put_secret,
    registered_service,
    service_claim,
    status,
)
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller")


def test_catalogs_per_environment(api_client: client.ApiClient, namespace: str) -> None:
    put_secret(api_client, namespace, "db-credentials", {"password": "pw"})
    create(api_client, namespace, registered_service("pg-dev-stage", environments=["dev", "stage"]))
    create(api_client, namespace, registered_service("pg-not-prod", environments=["!prod"]))
    create(api_client, namespace, service_claim("cache", identity={"type": "redis"}, environment="qa"))

    expected = {"dev": ["pg-dev-stage", "pg-not-prod"], "stage": ["pg-dev-stage", "pg-not-prod"], "qa": ["pg-not-prod"]}
    wait_for(
        lambda: {env: catalog_names(api_client, namespace, env) for env in expected} == expected, 15, "the catalogs"
    )
    assert catalog_names(api_client, namespace, "prod") is None  # excluded, named by nobody positively
    entry = get(api_client, namespace, "ServiceCatalog", "qa")["spec"]["services"][0]  # type: ignore[index]
    assert entry == {
        "name": "pg-not-prod",
        "serviceClassIdentity": [{"name": "provider", "value": "aws"}, {"name": "type", "value": "postgresql"}],
        "serviceEndpointDefinitionKeys": ["host", "password", "port"],
    }

    # Claimed: it leaves every catalog; released: it comes back.
    create(api_client, namespace, service_claim("app", environment="qa"))
    wait_for(lambda: status(api_client, namespace, "RegisteredService", "pg-not-prod").get("claimedBy"), 15, "claim")
    wait_for(lambda: catalog_names(api_client, namespace, "dev") == ["pg-dev-stage"], 10, "it to leave dev")
    wait_for(lambda: catalog_names(api_client, namespace, "qa") == [], 10, "it to leave qa")
    delete(api_client, namespace, "ServiceClaim", "app")
    wait_for(lambda: catalog_names(api_client, namespace, "qa") == ["pg-not-prod"], 10, "it to come back")

    # Nobody names qa any more: its catalog goes; the others stay.
    delete(api_client, namespace, "ServiceClaim", "cache")
    wait_for(lambda: catalog_names(api_client, namespace, "qa") is None, 10, "the qa catalog to go")
    assert catalog_names(api_client, namespace, "stage") == ["pg-dev-stage", "pg-not-prod"]
