"""The admin API's edge over real HTTP, before anything reaches Kubernetes (no API server needed: the broker
points at a closed port, and every request here is decided before a call would be made).

Covers: the admin API needs credentials of its own (the OSB platform's are refused there, and the admin's are
refused on ``/v2``); it is not served without admin credentials; a broker configured with the same credentials
for both does not start; pacing, page sizes, unknown fields and plan names are checked (400) and a proposed plan
too large for its request object is refused (413) before the plan is looked up. And a broker whose credentials
Secret cannot be reached at start-up says so in one line (it let urllib3's MaxRetryError escape as a traceback).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from opbroker.api import adminrequests
from opbroker.broker.app import create_app
from opbroker.broker.authentication import ConfigurationError
from opbroker.broker.server import BackgroundServer, server
from opbroker.broker.settings import Settings
from opbroker.devcluster.controlplane import free_ports

OSB = ("platform", "osb-password-1")
ADMIN = ("operator", "admin-password-2")


def unreachable_api() -> client.ApiClient:
    (port,) = free_ports(1)  # nothing listens there
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.verify_ssl = False
    return client.ApiClient(configuration)


def serve(**values: Any) -> Iterator[str]:
    settings = Settings(username=OSB[0], password=OSB[1], namespace_index=False, **values)
    (port,) = free_ports(1)
    background = BackgroundServer(server(settings, unreachable_api(), host="127.0.0.1", port=port, log_level="error"))
    background.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        background.stop()


@pytest.fixture(scope="module")
def admin_url() -> Iterator[str]:
    yield from serve(admin_username=ADMIN[0], admin_password=ADMIN[1])


def test_the_admin_api_takes_only_the_admin_credentials(admin_url: str) -> None:
    with httpx.Client(base_url=admin_url, timeout=30) as http:
        for auth in (None, OSB, (ADMIN[0], "wrong")):
            answer = http.post("/admin/plans/small/rollout", json={}, auth=auth)
            assert answer.status_code == 401, (auth, answer.text)
            assert answer.json()["error"] == "Unauthorized"
            assert answer.headers["www-authenticate"] == 'Basic realm="opbroker"'
            assert http.get("/admin/plans/small/rollout", auth=auth).status_code == 401
            assert http.delete("/admin/plans/small/rollout", auth=auth).status_code == 401
        refused = http.get("/v2/catalog", auth=ADMIN, headers={"X-Broker-API-Version": "2.17"})
        assert refused.status_code == 401, "the admin's credentials are not the platform's"


def test_without_admin_credentials_there_is_no_admin_api() -> None:
    for url in serve():
        with httpx.Client(base_url=url, timeout=30) as http:
            for auth in (OSB, ADMIN):
                assert http.post("/admin/plans/small/rollout", json={}, auth=auth).status_code == 404


def test_the_admin_credentials_must_not_be_the_platforms() -> None:
    same = Settings(username=OSB[0], password=OSB[1], admin_username=OSB[0], admin_password=OSB[1])
    with pytest.raises(ConfigurationError, match="must differ from the OSB credentials"):
        create_app(same, unreachable_api())
    shared = Settings(credentials_secret="creds", admin_credentials_secret="creds")
    with pytest.raises(ConfigurationError, match="must not be the OSB credentials Secret"):
        create_app(shared, unreachable_api())


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/admin/plans/small/rollout", {"rate": 0}, "rate"),
        ("/admin/plans/small/rollout", {"rate": adminrequests.MAX_RATE + 1}, "rate"),
        ("/admin/plans/small/rollout", {"batchSize": 0}, "batchSize"),
        ("/admin/plans/small/rollout", {"batchSize": adminrequests.MAX_BATCH_SIZE + 1}, "batchSize"),
        ("/admin/plans/small/rollout", {"batchsize": 5}, "batchsize"),
        ("/admin/plans/small/preview", {"proposed": {}, "limit": adminrequests.MAX_PREVIEW_LIMIT + 1}, "limit"),
        ("/admin/plans/small/preview", {"proposed": {}, "context": 11}, "context"),
        ("/admin/plans/small/preview", {"limit": 5}, "proposed"),
        ("/admin/plans/Not_A_Name/rollout", {}, "plan"),
    ],
)
def test_pacing_pages_and_names_are_checked(admin_url: str, path: str, body: dict[str, Any], field: str) -> None:
    with httpx.Client(base_url=admin_url, timeout=30, auth=ADMIN) as http:
        answer = http.post(path, json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "BadRequest" and field in answer.json()["description"]


def test_a_proposed_plan_too_large_for_its_request_object_is_refused(admin_url: str) -> None:
    """Below the broker's 1 MiB body limit, above what the request's ConfigMap may carry: 413, and no API call
    (the API server is unreachable here: a lookup would have answered 503)."""
    plan = {"kind": "SFPlan", "spec": {"description": "x" * (adminrequests.MAX_PLAN_BYTES + 1)}}
    with httpx.Client(base_url=admin_url, timeout=30, auth=ADMIN) as http:
        answer = http.post("/admin/plans/small/preview", json={"proposed": plan})
        assert answer.status_code == 413, answer.text
        assert f"at most {adminrequests.MAX_PLAN_BYTES}" in answer.json()["description"]
        huge = http.post("/admin/plans/small/preview", json={"proposed": {"x": "y" * (1024 * 1024)}})
        assert huge.status_code == 413, "the broker's own body limit comes first"


def test_diffs_are_cut_at_a_line_end_within_their_byte_limit() -> None:
    diff = "".join(f"+ line {n} é\n" for n in range(1000))
    text, cut = adminrequests.cut(diff, 100)
    assert cut and len(text.encode()) <= 100 and text.endswith("\n") and diff.startswith(text)
    assert adminrequests.cut("short\n", 100) == ("short\n", False)


def test_request_names_stay_valid_and_distinct_for_long_plan_names() -> None:
    one, two = "a" * 250 + "x", "a" * 250 + "y"
    names = {adminrequests.object_name(adminrequests.Kind.ROLLOUT, plan) for plan in (one, two)}
    assert len(names) == 2 and all(len(name) <= 253 for name in names)
    assert adminrequests.object_name(adminrequests.Kind.PREVIEW, "small") == "opbroker-preview-small"


def test_a_credentials_secret_out_of_reach_at_start_up_is_a_clear_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read the credentials Secret opbroker/creds: Unreachable"):
        create_app(Settings(credentials_secret="creds", namespace="opbroker"), unreachable_api())
