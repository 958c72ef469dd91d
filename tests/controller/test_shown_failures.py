"""The one model of what a failure shows on the object it stopped (``core.shown_failures``, its edge
``reconciler.troubles``): each failure, as the real exception a reconcile meets, to one reason and a message that
names the fix and carries no value (pure, no cluster)."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.refusals import refusal
from opbroker.controller.core.shown_failures import explain
from opbroker.controller.runtime.kube import KubeError, Refused
from opbroker.controller.runtime.outcomes import TemporaryError
from opbroker.controller.runtime.troubles import shown_for, trouble_of
from opbroker.rendering import RenderError

SECRET = "hunter2-s3cret-v4lue"


def api(status: int, message: str, reason: str = "x") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "code": status, "reason": reason, "message": message})
    return exc


NOT_ONBOARDED = api(
    403,
    'secrets is forbidden: User "system:serviceaccount:team-a:opbroker" cannot create resource "secrets" in API '
    'group "" in the namespace "team-a"',
    "Forbidden",
)
PLAN_ACCOUNT = api(
    403,
    'configmaps "x" is forbidden: User "system:serviceaccount:opbroker:opbroker-plan" cannot create resource '
    '"configmaps" in API group "" in the namespace "team-a"',
    "Forbidden",
)
WEBHOOK = api(400, f'admission webhook "deny.example.com" denied the request: value "{SECRET}" is not allowed')
POLICY = api(
    422,
    f"ValidatingAdmissionPolicy 'no-big' with binding 'no-big-b' denied request: size \"{SECRET}\" too big",
    "Invalid",
)
INVALID = api(
    422,
    f'Widget.demo.io "w" is invalid: spec.size: Invalid value: "{SECRET}": spec.size in body must be of type '
    f"integer, spec.count: Invalid value: 4815162342: must be less than 10",
    "Invalid",
)
MISSING_CRD = api(404, "the server could not find the requested resource", "NotFound")


def _transport() -> osbclient.TransportFailure:
    return osbclient.ResponseLost("bind of binding b", "ReadTimeout", timed_out=True)


CASES = [
    (NOT_ONBOARDED, Reason.NAMESPACE_NOT_ONBOARDED, 'namespace "team-a" is not onboarded'),
    (PLAN_ACCOUNT, Reason.ACCOUNT_LACKS_RIGHT, "grant it that right"),
    (api(403, "forbidden for reasons", "Forbidden"), Reason.FORBIDDEN, "grant the identity"),
    (WEBHOOK, Reason.ADMISSION_DENIED, 'admission webhook "deny.example.com" refused'),
    (POLICY, Reason.ADMISSION_DENIED, 'ValidatingAdmissionPolicy "no-big" refused'),
    (INVALID, Reason.OBJECT_INVALID, "fix the plan's template"),
    (MISSING_CRD, Reason.KIND_NOT_INSTALLED, "install the operator"),
    (KubeError("the API server does not serve Widget in demo.io/v1"), Reason.KIND_NOT_INSTALLED, "install"),
    (api(503, "etcd leader changed"), Reason.API_SERVER_UNAVAILABLE, "retried with backoff"),
    (urllib3.exceptions.ProtocolError("reset"), Reason.API_SERVER_UNAVAILABLE, "did not answer"),
    (ApiException(status=0, reason="SSL"), Reason.API_SERVER_UNAVAILABLE, "did not answer"),
    (
        osbclient.ServerError(503, None, "down for maintenance", what="bind of binding b"),
        Reason.BROKER_FAILED,
        "its operator must look at it",
    ),
    (_transport(), Reason.BROKER_UNREACHABLE, "did not answer in time"),
    (osbclient.BrokerUnreachable("bind", "ConnectError", timed_out=False), Reason.BROKER_UNREACHABLE, "be reached"),
    (RenderError("undefined variable 'x'", plan="small"), Reason.RENDER_FAILED, "fix the template"),
    (KeyError("spec"), Reason.RECONCILE_FAILED, "(KeyError; the controller's log has the trace)"),
    (ValueError(f"input_value={{'password': '{SECRET}'}}"), Reason.RECONCILE_FAILED, "ValueError"),
]


@pytest.mark.parametrize(("exc", "reason", "fix"), CASES, ids=[f"{i}-{c[1].value}" for i, c in enumerate(CASES)])
def test_each_failure_shows_one_reason_and_its_fix(exc: BaseException, reason: Reason, fix: str) -> None:
    trouble = trouble_of(exc)
    assert trouble is not None
    shown = explain(trouble)
    assert (shown.reason, fix in shown.message) == (reason, True), shown.message
    assert SECRET not in shown.message and "4815162342" not in shown.message


def test_a_transient_failure_the_runtime_wrapped_is_shown_by_its_cause() -> None:
    wrapped = TemporaryError("bind of binding b: the broker did not answer")
    wrapped.__cause__ = _transport()
    shown = shown_for(wrapped)
    assert shown is not None and shown.reason is Reason.BROKER_UNREACHABLE


@pytest.mark.parametrize("exc", [api(503, "busy"), urllib3.exceptions.ProtocolError("reset"), api(0, "SSL")])
def test_the_api_servers_own_trouble_is_not_written_on_each_object(exc: BaseException) -> None:
    """Every object's at once, and nothing any can fix: the queue retries, the object is not written."""
    assert shown_for(exc) is None


def test_a_kinds_own_retry_is_not_shown_again() -> None:
    """A plan's ``Retry`` wrote its condition and Event before raising: the runtime adds nothing."""
    assert shown_for(TemporaryError("3 errors so far")) is None


def test_a_refusal_keeps_its_masked_description() -> None:
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"}, "stringData": {}}
    body = {"message": f'admission webhook "w" denied the request: "{SECRET}"', "reason": "BadRequest"}
    shown = shown_for(Refused(refusal(400, body, manifest)))
    assert shown is not None and shown.reason is Reason.ADMISSION_DENIED
    assert "Secret n/s" in shown.message and SECRET not in shown.message


def test_a_broker_answer_reaches_the_message_only_as_the_client_redacted_it() -> None:
    """The OSB client redacts what it raises; the model adds nothing of the request (no URL credentials)."""
    exc = osbclient.ServerError(500, "boom", None, what="provision of instance i")
    shown = shown_for(exc)
    assert shown is not None and "provision of instance i: broker answered 500" in shown.message


def test_messages_are_cut_keeping_the_fix() -> None:
    shown = shown_for(api(422, "x" * 5000, "Invalid"))
    assert shown is not None and len(shown.message) <= 900 and shown.message.startswith("the API server refused")
