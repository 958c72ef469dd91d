"""The transport's asynchronous twin (``kubeclient.astreams``: the watches' requests, issue 45), against the HTTP
server of tests/controller/test_kube_transport.py: the request as the blocking transport sends it (credentials, user
agent, accept), every answer reported, an error answer the official exception, a watch's read deadline (its
server-side seconds plus a quarter) and a stalled request's (retried once), lines split across chunks and bounded,
a refused dial ``Unreachable``, and a cancelled read ended at once."""

# ruff: noqa: F811  (test functions take the imported fixture as an argument)

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from kubernetes.client import exceptions

from opbroker.kubeclient import deadlines, transport
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.timeouts import Timeouts
from tests.controller.test_kube_transport import FIRST, SECOND, Received, configuration, server  # noqa: F401


def twin(host: str, timeouts: Timeouts = deadlines.DEFAULT_TIMEOUTS) -> tuple[AsyncTransport, list[int]]:
    """The asynchronous twin of a bounded client's transport, and the answers it reported."""
    api = deadlines.bounded(configuration(host), timeouts=timeouts, user_agent="opbroker-test")
    answers: list[int] = []
    blocking = transport.transport_of(api)
    blocking.on_answer = lambda: answers.append(1)
    return AsyncTransport(blocking), answers


def test_a_request_is_sent_as_the_blocking_transport_sends_it(server: tuple[str, list[Received]]) -> None:
    host, received = server
    requests, answers = twin(host)

    async def scenario() -> bytes:
        try:
            return await requests.request("GET", "/apis/g.io/v1/things", query=[("limit", "5")], headers=ACCEPT)
        finally:
            await requests.aclose()

    assert asyncio.run(scenario()) == b'{"ok": true}'
    ((method, path, _, headers, _),) = received
    assert (method, path) == ("GET", "/apis/g.io/v1/things?limit=5")
    assert headers["Authorization"] == "Bearer token-1" and headers["User-Agent"] == "opbroker-test"
    assert headers["Accept"] == "application/json" and answers == [1]


ACCEPT = {"Accept": "application/json"}


def test_an_error_answer_is_the_official_exception_and_is_reported(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    requests, answers = twin(host)
    with pytest.raises(exceptions.NotFoundException) as refused:
        asyncio.run(requests.request("GET", "/missing", headers=ACCEPT))
    assert refused.value.status == 404 and b'"code": 404' in refused.value.body.encode()
    assert refused.value.headers["X-Answer"] == "told" and answers == [1]


def test_lines_are_split_across_chunks_and_bounded(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    requests, _ = twin(host)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        whole = [line async for line in (await requests.stream("GET", "/stream")).lines()]
        bounded: list[bytes] = []
        stream = await requests.stream("GET", "/stream-long")
        with pytest.raises(ValueError, match="over 60 bytes"):
            async for line in stream.lines(limit=60):
                bounded.append(line)
        await stream.aclose()
        return whole, bounded

    whole, bounded = asyncio.run(scenario())
    assert whole == [FIRST, SECOND] and bounded == [FIRST, SECOND]  # 52 and 54 bytes; then 64, refused


def test_a_watch_read_waits_its_server_side_seconds_and_a_quarter(server: tuple[str, list[Received]]) -> None:
    host, _ = server
    requests, _ = twin(host, Timeouts(connect=1.0, request=0.2))

    async def scenario() -> None:
        stream = await requests.stream("GET", "/stream-hold", query=[("watch", "true")], server_seconds=1.0)
        try:
            async for _ in stream.lines():
                pass
        finally:
            await stream.aclose()

    started = time.monotonic()
    with pytest.raises(transport.DeadlinePassed) as passed:
        asyncio.run(scenario())
    assert 1.8 <= time.monotonic() - started < 4.0, "1 s + max(1 s, a quarter): not the request's 0.2 s"
    assert deadlines.timed_out(passed.value)


def test_a_stalled_request_passes_its_deadline_and_is_retried_once(server: tuple[str, list[Received]]) -> None:
    host, received = server
    requests, _ = twin(host, Timeouts(connect=1.0, request=0.3))
    started = time.monotonic()
    with pytest.raises(transport.DeadlinePassed):
        asyncio.run(requests.request("GET", "/stall", headers=ACCEPT, watch=False))
    assert 0.5 <= time.monotonic() - started < 3.0, "two reads of 0.3 s"
    assert [r[0] for r in received] == ["GET", "GET"]


def test_a_refused_dial_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = deadlines.bounded(configuration(f"http://127.0.0.1:{port}"))
    api.configuration.retries = 0
    with pytest.raises(transport.Unreachable) as refused:
        asyncio.run(AsyncTransport(transport.transport_of(api)).request("GET", "/version"))
    assert isinstance(refused.value, ConnectionError) and not deadlines.timed_out(refused.value)


def test_a_cancelled_read_ends_at_once(server: tuple[str, list[Received]]) -> None:
    """What an informer's stop does: its task cancelled in a read that would wait for the watch's deadline."""
    host, _ = server
    requests, _ = twin(host)
    read: list[bytes] = []

    async def reading() -> None:
        stream = await requests.stream("GET", "/stream-hold", query=[("watch", "true")], server_seconds=60.0)
        try:
            async for line in stream.lines():
                read.append(line)
        finally:
            await stream.aclose()

    async def scenario() -> float:
        task = asyncio.create_task(reading())
        while len(read) < 2:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()
        await requests.aclose()
        return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) < 1.0, "not at the watch's deadline nor the server's release"
    assert read == [FIRST, SECOND]


def test_a_refused_watch_is_the_official_exception_and_is_reported(server: tuple[str, list[Received]]) -> None:
    """A watch's stream is read by its own protocol (``kubeclient.watchstream``): its refusal reads as any other."""
    host, _ = server
    requests, answers = twin(host)
    with pytest.raises(exceptions.NotFoundException) as refused:
        asyncio.run(requests.stream("GET", "/missing", query=[("watch", "true")]))
    assert refused.value.status == 404 and b'"code": 404' in refused.value.body.encode() and answers == [1]


def test_a_refused_watch_dial_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = deadlines.bounded(configuration(f"http://127.0.0.1:{port}"))
    with pytest.raises(transport.Unreachable) as refused:
        asyncio.run(AsyncTransport(transport.transport_of(api)).stream("GET", "/w", query=[("watch", "true")]))
    assert not deadlines.timed_out(refused.value)


def test_a_watch_broken_off_mid_answer_is_unreachable_after_what_came() -> None:
    """The server goes away in the middle of the chunked answer: what came is read, then the stream fails (the
    informer lists again), not an end the reader takes for the server's."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        line = FIRST + b"\n"
        connection.sendall(head + b"%x\r\n%s\r\n" % (len(line), line))
        connection.close()  # no last chunk

    server_thread = threading.Thread(target=serve, daemon=True)
    server_thread.start()
    requests, _ = twin(f"http://127.0.0.1:{listener.getsockname()[1]}")
    read: list[bytes] = []

    async def scenario() -> None:
        stream = await requests.stream("GET", "/w", query=[("watch", "true")])
        try:
            async for line in stream.lines():
                read.append(line)
        finally:
            await stream.aclose()

    try:
        with pytest.raises(transport.Unreachable):
            asyncio.run(scenario())
    finally:
        listener.close()
        server_thread.join(5)
    assert read == [FIRST]


def test_a_token_refresh_hook_runs_off_the_loop(server: tuple[str, list[Received]]) -> None:
    """A kubeconfig's credential command may take seconds (or hang): the requests of watches are built in a
    thread when a refresh hook is installed, so the hook never holds the loop."""
    host, received = server
    made = configuration(host)
    ran_on: list[threading.Thread] = []

    def refresh(config: object) -> None:
        ran_on.append(threading.current_thread())

    made.refresh_api_key_hook = refresh
    requests = AsyncTransport(transport.transport_of(deadlines.bounded(made, user_agent="opbroker-test")))

    async def scenario() -> threading.Thread:
        try:
            await requests.request("GET", "/apis/g.io/v1/things", headers=ACCEPT)
            return threading.current_thread()
        finally:
            await requests.aclose()

    loop_thread = asyncio.run(scenario())
    assert ran_on and all(thread is not loop_thread for thread in ran_on)
    assert received[0][3]["Authorization"] == "Bearer token-1"
