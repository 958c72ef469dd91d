"""A third-party operator driven through OSB: cert-manager (built from its Go module, run as a process with its
own least-rights kubeconfig) behind the certificates example plan, on the real control plane with the real
controller and broker. The credentials are checked as a TLS library would use them, and a renewal by
cert-manager reaches the binding while nothing else moves.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import CREDENTIALS_KEY
from tests.certmanager_support import CATALOG, cert_manager, certificates_catalog  # noqa: F401  (fixtures)
from tests.controller_support import wait_for

pytestmark = pytest.mark.usefixtures("controller", "cert_manager")
SERVICE, PLAN = list(yaml.safe_load_all(CATALOG.read_text()))
SERVICE_ID, PLAN_ID = SERVICE["spec"]["id"], PLAN["spec"]["id"]
DOMAIN = PLAN["spec"]["context"]["domain"]
CM = ("cert-manager.io", "v1")
IDS = {"service_id": SERVICE_ID, "plan_id": PLAN_ID, "accepts_incomplete": "true"}


@pytest.fixture
def osb(osb_url: tuple[str, str]) -> Iterator[httpx.Client]:
    url, password = osb_url
    headers = {"X-Broker-API-Version": "2.17"}
    with httpx.Client(base_url=url, auth=("platform", password), headers=headers, timeout=60) as http:
        yield http


def poll(osb: httpx.Client, path: str, operation: str, timeout: float = 90) -> list[str]:
    """Every state last_operation answered, until it is no longer ``in progress``."""
    states: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = osb.get(f"{path}/last_operation", params={"operation": operation})
        assert answer.status_code in (200, 410), answer.text
        states.append(answer.json()["state"] if answer.status_code == 200 else "gone")
        if states[-1] != "in progress":
            return states
        time.sleep(0.2)
    raise AssertionError(f"{path}: still in progress after {timeout}s")


def cm_objects(api: client.ApiClient, namespace: str, plural: str) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(*CM, namespace, plural)["items"]


def cm_object(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(*CM, namespace, plural, name)


def ready(certificate: dict[str, Any]) -> bool:
    conditions = (certificate.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def binding_object(api: client.ApiClient, namespace: str, binding: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", namespace, "sfservicebindings", binding
    )


def secret_credentials(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    data = client.CoreV1Api(api).read_namespaced_secret(name, namespace).data
    return json.loads(base64.b64decode(data[CREDENTIALS_KEY]))["credentials"]


def verify(credentials: dict[str, Any], instance: str) -> x509.Certificate:
    """The chain a TLS client and server would use: the certificate is signed by the CA, the key is the
    certificate's, the names are the plan's. Returns the certificate."""
    certificate = x509.load_pem_x509_certificate(credentials["certificate"].encode())
    ca = x509.load_pem_x509_certificate(credentials["ca"].encode())
    key = serialization.load_pem_private_key(credentials["privateKey"].encode(), password=None)
    certificate.verify_directly_issued_by(ca)  # raises unless ca's key signed it and the names chain
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == certificate.public_key().public_numbers()  # type: ignore[union-attr]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    host = f"{instance}.{DOMAIN}"
    assert names.get_values_for_type(x509.DNSName) == [host, f"*.{host}"] == credentials["dnsNames"]
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime.total_seconds() == 2160 * 3600  # the plan's duration
    return certificate


def trigger_renewal(api: client.ApiClient, namespace: str, name: str) -> None:
    """What ``cmctl renew`` does: the Certificate's Issuing condition set True (reason ManuallyTriggered) through
    the status subresource; cert-manager's issuing controllers do the rest."""
    custom = client.CustomObjectsApi(api)
    certificate = custom.get_namespaced_custom_object(*CM, namespace, "certificates", name)
    conditions = [c for c in certificate["status"].get("conditions", []) if c["type"] != "Issuing"]
    conditions.append(
        {
            "type": "Issuing",
            "status": "True",
            "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "observedGeneration": certificate["metadata"]["generation"],
        }
    )
    certificate["status"]["conditions"] = conditions
    custom.replace_namespaced_custom_object_status(*CM, namespace, "certificates", name, certificate)


def test_a_certificate_from_cert_manager_through_osb_verifies_renews_and_leaves_nothing(
    osb: httpx.Client, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    instance = str(uuid.uuid4())
    path = f"/v2/service_instances/{instance}"
    body = {**{k: v for k, v in IDS.items() if k != "accepts_incomplete"}, "organization_guid": "org"}
    body |= {"space_guid": "space", "context": {"platform": "kubernetes", "namespace": namespace}}
    accepted = osb.put(path, params={"accepts_incomplete": "true"}, json=body)
    assert accepted.status_code == 202, accepted.text
    states = poll(osb, path, accepted.json()["operation"])
    assert states[-1] == "succeeded", states
    # Succeeded only once cert-manager had issued: its Certificate Ready, its Secret holding the key pair.
    (certificate,) = [c for c in cm_objects(api_client, namespace, "certificates") if c["metadata"]["name"] == instance]
    assert ready(certificate)
    issued = core.read_namespaced_secret(f"{instance}-tls", namespace)
    assert set(issued.data) >= {"tls.crt", "tls.key", "ca.crt"}

    binding_path = f"{path}/service_bindings/app-1"
    bound = osb.put(binding_path, params={"accepts_incomplete": "true"}, json=body)
    assert bound.status_code == 202, bound.text
    assert poll(osb, binding_path, bound.json()["operation"])[-1] == "succeeded"
    credentials = osb.get(binding_path).json()["credentials"]
    first = verify(credentials, instance)
    assert base64.b64decode(issued.data["tls.crt"]).decode() == credentials["certificate"]
    binding = binding_object(api_client, namespace, "app-1")
    secret_name = binding["status"]["response"]["secretRef"]
    assert secret_credentials(api_client, namespace, secret_name) == credentials
    assert credentials["privateKey"] not in json.dumps(binding)

    # A renewal by cert-manager: a new certificate and key from the same CA, in the binding's Secret and in
    # GET binding, the binding itself untouched.
    instance_before = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances", instance
    )
    ca_certificate = next(
        c for c in cm_objects(api_client, namespace, "certificates") if c["metadata"]["name"] == f"{instance}-ca"
    )
    trigger_renewal(api_client, namespace, instance)

    def renewed() -> dict[str, Any] | None:
        answer = osb.get(binding_path).json()["credentials"]
        return answer if answer["certificate"] != credentials["certificate"] else None

    fresh = wait_for(renewed, 60, "the renewed certificate in GET binding")
    second = verify(fresh, instance)
    assert second.serial_number != first.serial_number and fresh["privateKey"] != credentials["privateKey"]
    assert (fresh["ca"], fresh["dnsNames"]) == (credentials["ca"], credentials["dnsNames"])
    assert secret_credentials(api_client, namespace, secret_name) == fresh
    after = binding_object(api_client, namespace, "app-1")
    assert after["metadata"]["generation"] == binding["metadata"]["generation"]
    assert after["status"]["state"] == "succeeded" and after["status"]["response"]["secretRef"] == secret_name
    instance_after = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances", instance
    )
    assert instance_after["metadata"]["generation"] == instance_before["metadata"]["generation"]
    assert instance_after["status"]["state"] == "succeeded"
    ca_after = next(
        c for c in cm_objects(api_client, namespace, "certificates") if c["metadata"]["name"] == f"{instance}-ca"
    )
    assert ca_after["status"]["revision"] == ca_certificate["status"]["revision"]  # the CA was not reissued
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=app-1").items
    assert "CredentialsRotated" in [e.reason for e in events]
    assert all(fresh["privateKey"] not in (e.message or "") for e in events)

    unbound = osb.delete(binding_path, params=IDS)
    assert unbound.status_code == 202, unbound.text
    assert poll(osb, binding_path, unbound.json()["operation"])[-1] in ("succeeded", "gone")

    def secret_gone() -> bool:
        try:
            core.read_namespaced_secret(secret_name, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(secret_gone, 30, "the binding's credentials Secret to go")
    removed = osb.delete(path, params=IDS)
    assert removed.status_code == 202, removed.text
    assert poll(osb, path, removed.json()["operation"])[-1] == "succeeded"

    def nothing_left() -> bool:
        kinds = ("issuers", "certificates", "certificaterequests")
        left = [o["metadata"]["name"] for plural in kinds for o in cm_objects(api_client, namespace, plural)]
        left += [s.metadata.name for s in core.list_namespaced_secret(namespace).items]
        return not left

    wait_for(nothing_left, 60, "no Issuer, Certificate, CertificateRequest or Secret left in the namespace")
    assert osb.get(path).status_code == 404
