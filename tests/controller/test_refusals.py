"""How the controller classifies and describes the API server's refusals of rendered objects (pure)."""

from __future__ import annotations

import base64
import json

import pytest

from opbroker.controller.core.refusals import (
    MAX_MESSAGE,
    MAX_SCANNED,
    Severity,
    echoed_values,
    masked,
    refusal,
    severity,
)

MANIFEST = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "9c3e-cfg", "namespace": "team-a"}}


@pytest.mark.parametrize(
    ("status", "want"),
    [
        (400, Severity.PERMANENT),
        (413, Severity.PERMANENT),
        (422, Severity.PERMANENT),
        (403, Severity.COUNTED),
        (404, Severity.COUNTED),
        (409, Severity.TRANSIENT),
        (429, Severity.TRANSIENT),
        (500, Severity.TRANSIENT),
        (503, Severity.TRANSIENT),
        (None, Severity.TRANSIENT),
    ],
)
def test_severity_of_each_status(status: int | None, want: Severity) -> None:
    assert severity(status) is want


def test_values_are_masked_but_the_objects_own_name_is_kept() -> None:
    status = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": 'ConfigMap "9c3e-cfg" is invalid: [metadata.labels: Invalid value: "hunter2 \\"x\\"!": a valid '
        'label must be an empty string or consist of alphanumeric characters, data[pw]: Invalid value: "p@ss"]',
    }
    found = refusal(422, json.dumps(status), MANIFEST)
    text = found.describe()
    assert text.startswith('the API server refused ConfigMap team-a/9c3e-cfg (422 Invalid): ConfigMap "9c3e-cfg"')
    assert "hunter2" not in text and "p@ss" not in text
    assert text.count('Invalid value: "…"') == 2
    assert found.severity is Severity.PERMANENT


def test_unparseable_or_missing_bodies_still_describe_the_refusal() -> None:
    assert refusal(400, "<html>bad gateway</html>", MANIFEST).describe().endswith("(400 Unknown): no explanation given")
    assert (
        "(404 NotFound)"
        in refusal(404, {"reason": "NotFound", "message": 'namespaces "x" not found'}, MANIFEST).describe()
    )
    cluster_scoped = {"kind": "ClusterRole", "metadata": {"name": "r"}}
    assert refusal(422, b"{}", cluster_scoped).describe().startswith("the API server refused ClusterRole r (422")


def test_long_messages_are_cut() -> None:
    long = refusal(422, {"message": "x" * 10_000}, MANIFEST)
    assert len(long.message) == MAX_MESSAGE and long.message.endswith("…")


def test_masking_leaves_unquoted_text_alone() -> None:
    assert masked('spec.size: Invalid value: 0: must be >= 1, name "a"', keep=("a",)) == (
        'spec.size: Invalid value: 0: must be >= 1, name "a"'
    )


# --- masking that does not depend on quoting (issue 25) ----------------------------------------------------

PIN = 4815162342
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "9c3e-creds", "namespace": "team-a"},
    "stringData": {"pin": PIN, "password": "correct horse battery"},
    "data": {"token": base64.b64encode(b"tok-3f9a8b7c").decode()},
}


def test_a_number_server_side_apply_echoes_unquoted_is_masked() -> None:
    """The API server's own text for a Secret whose ``stringData`` carries a number (a template rendered a
    numeric PIN without quotes): server-side apply prints the value unquoted."""
    status = {
        "kind": "Status",
        "code": 500,
        "reason": "InternalError",
        "message": "failed to create typed patch object (/v1, Kind=Secret): .stringData.pin: expected string, "
        f"got &value.valueUnstructured{{Value:{PIN}}}",
    }
    text = refusal(422, status, SECRET).describe()
    assert str(PIN) not in text, text
    assert ".stringData.pin: expected string" in text and "team-a/9c3e-creds" in text


@pytest.mark.parametrize(
    "message",
    [
        "admission webhook denied the request: password correct horse battery is too guessable",
        "ValidatingAdmissionPolicy 'p' denied request: token tok-3f9a8b7c is revoked",  # data, decoded
        f"data[token]: {base64.b64encode(b'correct horse battery').decode()} is not allowed",  # base64 form
        "the value 'correct horse battery' (single quotes) is refused",
        "first line of correct horse batt",  # no full occurrence: not masked (and no quotes either)
    ],
)
def test_values_of_the_object_are_masked_however_they_are_printed(message: str) -> None:
    text = masked(message, keep=("9c3e-creds", "team-a"), values=echoed_values(SECRET))
    for secret in ("correct horse battery", "tok-3f9a8b7c", base64.b64encode(b"correct horse battery").decode()):
        assert secret not in text, text
    if "batt" in message and "battery" not in message:
        assert text == message


def test_overlapping_values_leave_no_part_of_either() -> None:
    text = masked("got abcdefghij here", values=("abcdef", "defghij"))
    assert text == "got … here"


def test_a_value_inside_the_objects_own_name_does_not_mask_the_name() -> None:
    manifest = {
        "kind": "ConfigMap",
        "metadata": {"name": "postgres-main", "namespace": "ns"},
        "data": {"a": "postgres"},
    }
    status = {"message": 'ConfigMap "postgres-main" is invalid: data[a]: postgres is not allowed'}
    text = refusal(422, status, manifest).message
    assert text == 'ConfigMap "postgres-main" is invalid: data[a]: … is not allowed', text


def test_a_message_cut_for_length_leaves_no_part_of_a_value_or_a_quoted_string() -> None:
    secret = "s" * 40
    cut_value = "x" * (MAX_SCANNED - 10) + secret + " tail"
    assert "sss" not in masked(cut_value, values=(secret,))
    cut_quote = "y" * (MAX_SCANNED - 5) + ' "p@ssword-that-is-long" tail'
    text = masked(cut_quote, values=("unrelated",))
    assert "p@ss" not in text and text.endswith("…")


def test_short_values_and_keys_are_not_masked() -> None:
    manifest = {"kind": "ConfigMap", "metadata": {"name": "n"}, "data": {"replicas": "3", "tcp": "TCP"}}
    assert echoed_values(manifest) == frozenset({"ConfigMap", "Q29uZmlnTWFw"})


def test_a_retried_answer_to_a_write_is_masked_too() -> None:
    """A 500 to an apply is retried, and its text reaches logs and events when retries give up: its body is
    masked like a refusal's, its status kept (callers tell 409 and 5xx apart by it)."""
    from kubernetes.client.exceptions import ApiException

    from opbroker.controller.runtime.kube import Refused, _refused

    body = json.dumps(
        {
            "kind": "Status",
            "code": 500,
            "reason": "InternalError",
            "message": f"failed to create typed patch object (/v1, Kind=Secret): .stringData.pin: expected string, "
            f"got &value.valueUnstructured{{Value:{PIN}}}",
            "details": {"causes": [{"message": f"Value:{PIN}"}]},
        }
    )
    raw = ApiException(status=500, reason="Internal Server Error")
    raw.body = body
    answer = _refused(raw, SECRET)
    assert not isinstance(answer, Refused) and answer.status == 500
    assert str(PIN) not in str(answer) and ".stringData.pin: expected string" in str(answer)
    refused = ApiException(status=422, reason="Unprocessable Entity")
    refused.body = body
    assert isinstance(_refused(refused, SECRET), Refused) and str(PIN) not in str(_refused(refused, SECRET))
