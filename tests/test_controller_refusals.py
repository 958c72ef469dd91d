"""How the controller classifies and describes the API server's refusals of rendered objects (pure)."""

from __future__ import annotations

import json

import pytest

from opbroker.controller.refusals import MAX_MESSAGE, Severity, masked, refusal, severity

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
