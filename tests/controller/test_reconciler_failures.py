"""The reconcile runtime's one error table: every kind's failure is mapped the same way (pure, no cluster)."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime.failures import Handling, classify, server_failing
from opbroker.controller.runtime.outcomes import Conflict, TemporaryError


def api(status: int) -> ApiException:
    return ApiException(status=status, reason="test")


@pytest.mark.parametrize(
    ("exc", "handling", "label"),
    [
        (Conflict("changed"), Handling.REREAD, "conflict"),
        (api(409), Handling.REREAD, "conflict"),
        (urllib3.exceptions.ProtocolError("reset"), Handling.TRANSIENT, "unreachable"),
        (ConnectionRefusedError(), Handling.TRANSIENT, "unreachable"),
        (TimeoutError(), Handling.TRANSIENT, "unreachable"),
        (api(0), Handling.TRANSIENT, "unreachable"),  # the client's SSL errors come as status 0
        (api(429), Handling.TRANSIENT, "unavailable"),
        (api(500), Handling.TRANSIENT, "unavailable"),
        (api(503), Handling.TRANSIENT, "unavailable"),
        (api(504), Handling.TRANSIENT, "unavailable"),
        (TemporaryError("waiting for the plan"), Handling.TRANSIENT, "temporary"),
        (api(400), Handling.ERROR, "error"),
        (api(403), Handling.ERROR, "error"),
        (api(404), Handling.ERROR, "error"),
        (api(501), Handling.ERROR, "error"),
        (KeyError("spec"), Handling.ERROR, "error"),
        (FileNotFoundError("kubeconfig"), Handling.ERROR, "error"),
    ],
)
def test_the_table_maps_each_failure_once(exc: BaseException, handling: Handling, label: str) -> None:
    failure = classify(exc)
    assert (failure.handling, failure.label) == (handling, label)


def test_the_message_says_what_happened_without_a_traceback() -> None:
    assert classify(api(503)).message == "the API server answered HTTP 503"
    assert classify(TimeoutError()).message == "the API server did not answer (TimeoutError)"
    assert classify(TemporaryError("plan small not in the catalog")).message == "plan small not in the catalog"


@pytest.mark.parametrize(
    ("exc", "failing"),
    [
        (urllib3.exceptions.NewConnectionError(None, "refused"), True),
        (ConnectionResetError(), True),
        (api(0), True),
        (api(500), True),
        (api(501), True),
        (api(503), True),
        (api(429), False),  # overloaded is not down: the cluster is not suspected
        (api(403), False),
        (api(404), False),
        (KeyError("x"), False),
    ],
)
def test_a_sister_cluster_is_suspected_only_when_the_server_is_at_fault(exc: BaseException, failing: bool) -> None:
    assert server_failing(exc) is failing
