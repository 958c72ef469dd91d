"""Repeated Events aggregated into one with a count (issue 47, ``controller.event_series``): the bounded memory
(pure), the door against a real kube-apiserver (N identical Events: one Event, count N; one request each, no extra
request for an Event that does not repeat), and the controller itself: a plan that keeps failing to apply leaves one
``ApplyFailed`` Event counting its failures."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from opbroker.controller.runtime.clock import FAKE_EPOCH
from opbroker.controller.runtime.event_series import ENTRY_OVERHEAD, EventSeries, Recorded, key_of
from opbroker.controller.runtime.kube import Kube, event_body
from tests.cluster_fixtures import onboarded_namespace
from tests.controller.test_lifecycle import SERVICE_ID, provision
from tests.controller_support import apply_yaml, wait_for

SUBJECT = {
    "apiVersion": "osb.servicefabrik.io/v1alpha1",
    "kind": "SFServiceInstance",
    "metadata": {"name": "inst", "namespace": "team-a", "uid": "u-1"},
}


def _key(message: str, uid: str = "u-1") -> tuple[str, ...]:
    subject = {**SUBJECT, "metadata": {**SUBJECT["metadata"], "uid": uid}}
    return key_of(event_body(subject, reason="ApplyFailed", message=message, warning=True, now=FAKE_EPOCH))


def test_the_same_event_is_one_key_and_any_difference_another() -> None:
    assert _key("m") == _key("m")
    assert len({_key("m"), _key("n"), _key("m", uid="u-2")}) == 3  # a new object of that name is another
    normal = key_of(event_body(SUBJECT, reason="ApplyFailed", message="m", warning=False, now=FAKE_EPOCH))
    assert normal != _key("m")


def test_the_memory_is_bounded_by_entries_least_recent_first() -> None:
    series = EventSeries(max_entries=3)
    for n in range(5):
        series.put(_key(str(n)), Recorded("team-a", f"e{n}", 1))
    assert len(series) == 3 and series.get(_key("0")) is None and series.get(_key("4")) is not None
    series.put(_key("2"), Recorded("team-a", "e2", 2))  # counted again: the most recent now
    series.put(_key("5"), Recorded("team-a", "e5", 1))
    assert series.get(_key("2")) == Recorded("team-a", "e2", 2) and series.get(_key("3")) is None


def test_the_memory_is_bounded_by_bytes() -> None:
    long = "x" * 1000
    one = sum(map(len, _key(long + "0"))) + len("e0") + len("team-a") + ENTRY_OVERHEAD
    series = EventSeries(max_bytes=one * 2 + 10)
    for n in range(6):
        series.put(_key(long + str(n)), Recorded("team-a", f"e{n}", 1))
    assert len(series) == 2 and series.bytes <= series.max_bytes
    series.forget(_key(long + "5"))
    assert len(series) == 1 and series.bytes == one


# -- the door, against a real kube-apiserver --------------------------------------------------------------------


def _events(api: client.ApiClient, namespace: str, reason: str) -> list[Any]:
    return list(client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"reason={reason}").items)


def test_identical_events_are_one_event_with_a_count(api_client: client.ApiClient, namespace: str) -> None:
    kube = Kube(api_client)
    requests: list[str] = []
    sent = kube.custom.request

    def counted(method: str, path: str, **kwargs: Any) -> Any:
        requests.append(method)
        return sent(method, path, **kwargs)

    kube.custom.request = counted  # type: ignore[method-assign]
    subject = {**SUBJECT, "metadata": {**SUBJECT["metadata"], "namespace": namespace}}
    for _ in range(7):
        kube.emit_event(subject, reason="ApplyFailed", message="the API server refused it", warning=True)
    kube.emit_event(subject, reason="ApplyFailed", message="another cause", warning=True)
    assert requests == ["POST", *["PATCH"] * 6, "POST"]  # one request each: nothing extra when nothing repeats

    events = sorted(_events(api_client, namespace, "ApplyFailed"), key=lambda e: e.message)
    assert [(e.message, e.count) for e in events] == [("another cause", 1), ("the API server refused it", 7)]
    repeated = events[1]
    assert repeated.last_timestamp >= repeated.first_timestamp

    # An Event the API server no longer has (expired, deleted) is recorded anew.
    client.CoreV1Api(api_client).delete_namespaced_event(repeated.metadata.name, namespace)
    kube.emit_event(subject, reason="ApplyFailed", message="the API server refused it", warning=True)
    again = [e for e in _events(api_client, namespace, "ApplyFailed") if e.message == "the API server refused it"]
    assert [e.count for e in again] == [1]


def test_doors_acting_as_another_account_share_the_memory(api_client: client.ApiClient) -> None:
    kube = Kube(api_client)
    assert kube.acting_as("system:serviceaccount:x:y").recorded_events is kube.recorded_events


# -- the controller: a plan that keeps failing to apply -------------------------------------------------------

FAILING_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {name}
  serviceId: {service}
  description: a plan whose account may not create what it renders
  bindable: false
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata:
        name: {{{{ instance.metadata.name }}}}-{name}
      rules: []
"""


@pytest.mark.usefixtures("controller")
def test_a_plan_that_keeps_failing_to_apply_leaves_one_event_with_a_count(
    api_client: client.ApiClient, catalog_namespace: str, tmp_path: Path
) -> None:
    """The plan's account may not create a ClusterRole: each retry is refused the same way (403), counted up to
    ``--error-threshold`` (4 in the tests), then the operation gives up. The retries' Events are one."""
    name = f"failing-{uuid.uuid4().hex[:6]}"
    path = tmp_path / "plan.yaml"
    path.write_text(FAILING_PLAN.format(name=name, service=SERVICE_ID))
    apply_yaml(api_client, path, catalog_namespace)
    with onboarded_namespace(api_client, "agg") as namespace:
        provision(api_client, namespace, "inst", plan_id=name, service_id=SERVICE_ID)
        wait_for(lambda: _events(api_client, namespace, "GaveUp"), 90, "the operation to give up")
        failed = [e for e in _events(api_client, namespace, "ApplyFailed") if e.involved_object.name == "inst"]
        assert len(failed) == 1, [(e.message, e.count) for e in failed]
        assert failed[0].count >= 2, failed[0]
        assert 'clusterroles (API group "rbac.authorization.k8s.io") at the cluster scope' in failed[0].message
