"""The broker's watches (namespace index, waiting on an object) decode each event once (issue 31)."""

from __future__ import annotations

import json

from opbroker.kubeclient import answers


def test_a_custom_object_event_is_decoded_once_and_keeps_the_clients_shape() -> None:
    """The client decoded each line, encoded the object again and decoded that: ``object`` was a copy of
    ``raw_object``. Now both are the one decoded object, and the version to resume from is kept as before."""
    stream = answers.Watch()._watch
    obj = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "42"}, "spec": {"x": [1, 2]}}
    event = stream.unmarshal_event(json.dumps({"type": "MODIFIED", "object": obj}), "object")
    assert event["type"] == "MODIFIED" and event["object"] == obj
    assert event["object"] is event["raw_object"]
    assert stream.resource_version == "42"
    error = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    gone = stream.unmarshal_event(json.dumps({"type": "ERROR", "object": error}), "object")
    assert gone["raw_object"] == error and stream.resource_version == "42"  # an error moves no version
    assert stream.unmarshal_event("  ", "object") is None and stream.unmarshal_event("{not json", "object") is None
