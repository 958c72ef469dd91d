"""Every URL the OSB client builds, attacked with ids that would point it elsewhere (issue 42).

A tenant's ``spec.externalID`` of ``../<victim>/service_bindings/x`` once made the client bind on another
tenant's instance (httpx resolves dot segments). Each public method of ``osbclient.Client`` is called here with
adversarial instance and binding ids, over ``httpx.MockTransport``: each id is either refused before anything is
sent (``InvalidID``) or sent as exactly one path segment, read back from the raw path as it went on the wire.
The methods are found by introspection, so a new one that is not listed here fails the test: list it, built with
``osbclient.paths``.
"""

from __future__ import annotations

import inspect
import urllib.parse
from collections.abc import Callable

import httpx
import pytest

from opbroker import osbclient as osb
from opbroker.osbclient import paths

INSTANCE, BINDING = "<instance>", "<binding>"
GOOD = "5b1c8a7e-4a0f-4c1e-9d3a-0e2f6b7c8d9a"

#: Ids that would leave their segment if sent verbatim (or be decoded into one that does): always refused.
ESCAPING = ("../x", "x/../y", "a/b", "a?b", "a#b", "%2e%2e", "%2F", ".", "..", "", "a\nb", "a\x00b", "a\x85b")
#: Ids the rule lets through: each must arrive as exactly one segment, itself.
ONE_SEGMENT = (GOOD, "...", ".a", "..a", "a b", "ünïcödé", "名前", "\U0001f600-id", "a;b", "a&b=c")
ONE_SEGMENT += ("x" * paths.MAX_ID_BYTES, "é" * (paths.MAX_ID_BYTES // 2))
TOO_LONG = ("x" * (paths.MAX_ID_BYTES + 1), "é" * 128)
#: An ``operation`` is a query parameter: sent as it is, whatever it holds.
OPERATION = "op/../../x?y=1&z#frag%2e"

Call = Callable[[osb.Client, str, str], object]
IDS = {"service_id": "svc/../x", "plan_id": "plan?x#y"}

#: Every public method of the client that sends a request: how to call it and the path it must send.
CALLS: dict[str, tuple[Call, tuple[str, ...]]] = {
    "catalog": (lambda c, i, b: c.catalog(), ("v2", "catalog")),
    "read_catalog": (lambda c, i, b: c.read_catalog(), ("v2", "catalog")),
    "provision": (
        lambda c, i, b: c.provision(i, organization_guid="o", space_guid="s", **IDS),
        ("v2", "service_instances", INSTANCE),
    ),
    "update": (lambda c, i, b: c.update(i, **IDS), ("v2", "service_instances", INSTANCE)),
    "deprovision": (lambda c, i, b: c.deprovision(i, **IDS), ("v2", "service_instances", INSTANCE)),
    "get_instance": (lambda c, i, b: c.get_instance(i, **IDS), ("v2", "service_instances", INSTANCE)),
    "last_operation": (
        lambda c, i, b: c.last_operation(i, operation=OPERATION, **IDS),
        ("v2", "service_instances", INSTANCE, "last_operation"),
    ),
    "bind": (lambda c, i, b: c.bind(i, b, **IDS), ("v2", "service_instances", INSTANCE, "service_bindings", BINDING)),
    "get_binding": (
        lambda c, i, b: c.get_binding(i, b, **IDS),
        ("v2", "service_instances", INSTANCE, "service_bindings", BINDING),
    ),
    "binding_last_operation": (
        lambda c, i, b: c.binding_last_operation(i, b, operation=OPERATION, **IDS),
        ("v2", "service_instances", INSTANCE, "service_bindings", BINDING, "last_operation"),
    ),
    "unbind": (
        lambda c, i, b: c.unbind(i, b, **IDS),
        ("v2", "service_instances", INSTANCE, "service_bindings", BINDING),
    ),
}
#: Public methods that send nothing.
SENDS_NOTHING = frozenset({"close"})


def answer(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/catalog"):
        return httpx.Response(200, json={"services": []})
    return httpx.Response(200, json={"state": "succeeded"})


class Recording:
    """One client whose requests are recorded and answered in-process."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        transport = httpx.MockTransport(self._record)
        self.client = osb.Client(osb.Broker("http://broker.test/base"), transport=transport)

    def _record(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return answer(request)

    def sent(self, call: Call, instance_id: str, binding_id: str) -> tuple[list[httpx.Request], osb.InvalidID | None]:
        """The requests ``call`` sent with these ids, and the refusal it raised, if any."""
        self.requests = []
        try:
            call(self.client, instance_id, binding_id)
        except osb.InvalidID as exc:
            return self.requests, exc
        return self.requests, None


def segments(request: httpx.Request) -> tuple[str, ...]:
    """The path as sent on the wire (below the broker's base path), one decoded string per segment."""
    raw = request.url.raw_path.decode("ascii").split("?", 1)[0]
    assert raw.startswith("/base/"), raw
    return tuple(urllib.parse.unquote(s, errors="strict") for s in raw.removeprefix("/base/").split("/"))


def test_every_url_the_client_builds_keeps_each_id_in_its_own_segment() -> None:
    public = {name for name, _ in inspect.getmembers(osb.Client, inspect.isfunction) if not name.startswith("_")}
    assert public - SENDS_NOTHING == set(CALLS), (
        "a public method of the OSB client is not covered here: list it in CALLS, its path built by osbclient.paths"
    )
    assert set(ESCAPING).isdisjoint(ONE_SEGMENT)
    problems: list[str] = []
    recording = Recording()
    for name, (call, expected) in CALLS.items():
        positions = [p for p in (INSTANCE, BINDING) if p in expected] or [None]
        for position in positions:
            for bad in (*ESCAPING, *TOO_LONG, *ONE_SEGMENT) if position else (GOOD,):
                ids = {INSTANCE: GOOD, BINDING: GOOD, **({position: bad} if position else {})}
                requests, refused = recording.sent(call, ids[INSTANCE], ids[BINDING])
                case = f"{name}({position}={bad[:20]!r})"
                if bad in ESCAPING or bad in TOO_LONG:
                    if refused is None or requests:
                        problems.append(f"{case}: not refused ({[str(r.url) for r in requests]})")
                    elif paths.ID_RULE not in str(refused):
                        problems.append(f"{case}: the refusal does not name the rule: {refused}")
                    continue
                if refused is not None or len(requests) != 1:
                    problems.append(f"{case}: {refused or len(requests)} instead of one request")
                    continue
                request = requests[0]
                want = tuple(ids.get(s, s) for s in expected)
                if segments(request) != want:
                    problems.append(f"{case}: sent {request.url.raw_path!r}, not the segments {want}")
                query = urllib.parse.parse_qs(request.url.query.decode("ascii"))
                for key, value in ({**IDS, "operation": OPERATION}).items():
                    if key in query and query[key] != [value]:
                        problems.append(f"{case}: query {key} arrived as {query[key]}, not {value!r}")
                if "last_operation" in name and query.get("operation") != [OPERATION]:
                    problems.append(f"{case}: operation not sent as it is: {query.get('operation')}")
    recording.client.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("value", [*ESCAPING, *TOO_LONG])
def test_a_refused_id_is_a_permanent_broker_error_and_a_value_error(value: str) -> None:
    with pytest.raises(osb.InvalidID) as refused:
        paths.instance(value)
    assert isinstance(refused.value, ValueError)
    assert osb.classify(refused.value) is osb.Failure.PERMANENT
    assert str(refused.value).startswith("instance id: ")
