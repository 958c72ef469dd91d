"""Typed views of the official client's answers.

The client annotates custom-object answers as ``object`` (they are the decoded JSON); the broker and the controller
read them through this. (A watch's events are read with :func:`opbroker.kubeclient.informer.events_of`.)
"""

from __future__ import annotations

from opbroker.kubeclient.wire import JsonBody


def json_object(answer: object) -> JsonBody:
    """A custom-object API answer as the JSON object it is."""
    if not isinstance(answer, dict):
        raise TypeError(f"the Kubernetes API answered a {type(answer).__name__}, not a JSON object")
    return answer
