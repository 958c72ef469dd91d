"""The client of the Go template renderer: one long-lived subprocess, framed JSON over its stdin/stdout.

``gotemplate`` and ``helm`` templates are rendered by Go's own engines (see ``gorender/``), never by a Python
imitation. Starting a process per render would cost milliseconds each, so a :class:`GoEngine` starts the
process on first use and keeps it; a lock makes it safe to share between the controller's worker threads
(the process answers one request at a time, in well under a millisecond for a plan's template).

Frames are a 4-byte big-endian length and that many bytes of JSON. Failures map onto the renderer's
errors: the Go side's parse and execution errors keep their template, line and column; a limit becomes a
:class:`RenderLimitError`. If the process dies mid-render (a crash, an OOM kill, or the Go side's watchdog
ending a runaway render), the render fails with a clear error and the next render starts a fresh process.
The Go side enforces the size and time limits itself; this side adds its own deadline on the answer, so a
hung process is killed rather than waited for.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from opbroker.rendering.errors import RenderError, RenderLimitError, TemplateSecurityError, TemplateSourceError
from opbroker.rendering.limits import Limits

_HEADER = struct.Struct(">I")
#: How long past the render's own time limit an answer may take before the process is declared hung.
_ANSWER_GRACE = 2.0
#: Largest answer accepted (the Go side bounds output to ``max_output_bytes``; JSON escaping can double it).
_MAX_FRAME = 64 << 20


class EngineCrashed(RenderError):
    """The renderer process died or hung while rendering; it is restarted for the next render."""


def _error(answer: Mapping[str, Any]) -> RenderError:
    """The Go side's error as a RenderError of the matching kind, located by template, line and column."""
    kind = answer.get("kind")
    message = str(answer.get("message") or "the Go renderer failed without a message")
    cls: type[RenderError] = RenderError
    if kind == "limit":
        cls = RenderLimitError
    elif kind == "chart":
        cls = TemplateSourceError
    elif kind == "sandbox":
        cls = TemplateSecurityError
    prefix = {"parse": "syntax error: ", "values": "helm values: "}.get(str(kind), "")
    line = answer.get("line") or None
    column = answer.get("column") or None
    return cls(prefix + message, line=line, column=column, source=answer.get("template") or None)


class GoEngine:
    """A lazily started, restartable renderer process. Thread-safe; create one per :class:`Renderer`.

    ``binary`` finds the executable (default: :func:`opbroker.gorender.renderer_binary`, which builds it on
    first use); ``limits`` bound every render on both sides.
    """

    def __init__(self, limits: Limits, binary: Callable[[], Path] | None = None) -> None:
        self.limits = limits
        self._binary = binary
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._next_id = 0
        self._sent: set[str] = set()
        self._memo: dict[int, tuple[Any, tuple[str, str]]] = {}
        """Keys of the shared values the running process holds."""
        self.starts = 0
        """How many processes were started (a restart adds one); for tests and metrics."""

    # -- public -------------------------------------------------------------------------------------------------

    def render_template(
        self, *, name: str, template: str, values: Mapping[str, Any], shared: Mapping[str, Any] | None = None
    ) -> str:
        """Render a gotemplate over ``values`` and ``shared``; the rendered text.

        ``shared`` holds variables that stay the same across many renders (the plan, the service): each is
        sent to the process once and named by the hash of its JSON afterwards (the process gives every
        render its own copy), which saves most of the decoding a render costs on the Go side.
        """
        request = {"op": "render", "engine": "gotemplate", "name": name, "template": template}
        return self._call(request, values, shared)

    def render_chart(
        self,
        *,
        name: str,
        chart: bytes,
        values_template: str,
        values: Mapping[str, Any],
        release: str,
        namespace: str,
        shared: Mapping[str, Any] | None = None,
    ) -> str:
        """Render a helm chart archive with the values rendered from ``values_template``; YAML documents."""
        request = {
            "op": "render",
            "engine": "helm",
            "name": name,
            "template": values_template,
            "chart": _b64(chart),
            "release": {"name": release, "namespace": namespace},
        }
        return self._call(request, values, shared)

    def check(self, *, engine: str, name: str, template: str, chart: bytes | None = None) -> None:
        """Parse a template (and load a chart) without rendering it: what ``validate --templates`` needs."""
        request: dict[str, Any] = {"op": "check", "engine": engine, "name": name, "template": template}
        if chart is not None:
            request["chart"] = _b64(chart)
        self._call(request, {})

    def start(self) -> None:
        """Start the process now if it is not running (building the binary first if it has to be)."""
        with self._lock:
            self._running()

    def close(self) -> None:
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    # -- the exchange -------------------------------------------------------------------------------------------

    def _call(self, request: dict[str, Any], values: Mapping[str, Any], shared: Mapping[str, Any] | None = None) -> str:
        request["limits"] = {
            "timeoutMs": int(self.limits.timeout * 1000),
            "maxOutputBytes": self.limits.max_output_bytes,
        }
        blobs = {name: self._blob(value) for name, value in (shared or {}).items()}
        text = request.pop("template", "")
        if text:
            # The text goes once per process; later requests name it by its hash.
            request["templateKey"] = self._blob(text)[0]
        try:
            return self._exchange(dict(request), text, values, blobs)
        except _MissingBlob:
            # The process dropped shared values (its store is bounded): forget what was sent, send them again.
            with self._lock:
                self._sent.clear()
            return self._exchange(dict(request), text, values, blobs)

    def _blob(self, value: Any) -> tuple[str, str]:
        """A shared value's key (a hash of its JSON) and JSON text, remembered per object.

        The plan and the service are the same objects render after render (the controller replaces an
        object it re-reads, it never edits one in place), so hashing each once saves re-serialising it.
        """
        memo = self._memo.get(id(value))
        if memo is not None and memo[0] is value:
            return memo[1]
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
        blob = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest(), text
        with self._lock:
            self._memo[id(value)] = (value, blob)  # holding `value` keeps its id from being reused
            while len(self._memo) > 256:
                self._memo.pop(next(iter(self._memo)))
        return blob

    def _exchange(
        self, request: dict[str, Any], text: str, values: Mapping[str, Any], blobs: dict[str, tuple[str, str]]
    ) -> str:
        with self._lock:
            process = self._running()
            key = request.get("templateKey")
            if key is None or key not in self._sent:
                request["template"] = text
            if blobs:
                request["shared"] = {name: key for name, (key, _) in blobs.items()}
                fresh = {key: text for key, text in blobs.values() if key not in self._sent}
                if fresh:
                    request["blobs"] = "@BLOBS@"
            else:
                fresh = {}
            self._next_id += 1
            request["id"] = self._next_id
            head = json.dumps(request, separators=(",", ":"))
            if fresh:
                texts = ",".join(f"{json.dumps(key)}:{text}" for key, text in fresh.items())
                head = head.replace('"@BLOBS@"', "{" + texts + "}", 1)
            # values go in last, serialised once, without a second copy of the request.
            body = (head[:-1] + ',"values":' + json.dumps(values, separators=(",", ":"), default=str) + "}").encode()
            try:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(_HEADER.pack(len(body)) + body)
                process.stdin.flush()
                answer = self._read(process.stdout, deadline=time.monotonic() + self.limits.timeout + _ANSWER_GRACE)
            except (OSError, EOFError, ValueError, TimeoutError) as exc:
                detail = self._stop()
                raise EngineCrashed(f"the Go template renderer stopped while rendering ({exc}){detail}") from None
            if answer.get("id") != request["id"]:
                self._stop()
                raise EngineCrashed("the Go template renderer answered out of turn; it was restarted")
            error = answer.get("error") or {}
            if error.get("kind") == "missing-blob":
                raise _MissingBlob
            self._sent.update(fresh)
            if key is not None and error.get("kind") != "parse":
                self._sent.add(key)
        if answer.get("ok"):
            return str(answer.get("output") or "")
        if error.get("fatal"):
            with self._lock:
                self._stop()
        raise _error(error)

    def _read(self, stream: IO[bytes], *, deadline: float) -> dict[str, Any]:
        header = self._exactly(stream, _HEADER.size, deadline)
        (size,) = _HEADER.unpack(header)
        if size > _MAX_FRAME:
            raise ValueError(f"an answer of {size} bytes is over the limit")
        answer: dict[str, Any] = json.loads(self._exactly(stream, size, deadline))
        return answer

    @staticmethod
    def _exactly(stream: IO[bytes], size: int, deadline: float) -> bytes:
        chunks, missing = [], size
        fd = stream.fileno()
        while missing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer in time")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError("no answer in time")
            chunk = os.read(fd, missing)
            if not chunk:
                raise EOFError("the process exited")
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    # -- the process --------------------------------------------------------------------------------------------

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if process is not None:
            self._stop()
        binary = self._binary() if self._binary is not None else _default_binary()
        try:
            self._process = subprocess.Popen(
                [str(binary)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                close_fds=True,
                env={"PATH": "/usr/bin:/bin", "GOMAXPROCS": os.environ.get("OPBROKER_GORENDER_PROCS", "2")},
                cwd="/",
            )
        except OSError as exc:
            raise TemplateSourceError(f"cannot start the Go template renderer {binary}: {exc}") from None
        self.starts += 1
        self._sent.clear()
        # A renderer dropped without close() (a one-off check) must not leave its process behind.
        weakref.finalize(self, _kill_quietly, self._process)
        return self._process

    def _stop(self) -> str:
        """Kill the process if it runs; returns what it said on stderr (a Go panic trace), shortened."""
        process, self._process = self._process, None
        if process is None:
            return ""
        if process.poll() is None:
            process.kill()
        try:
            _, stderr = process.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            return ""
        said = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
        return f"; it said: {said[0][:300]}" if said else ""


class _MissingBlob(Exception):
    """The process does not hold a shared value (or template) the request named."""


def _kill_quietly(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def _default_binary() -> Path:
    from opbroker.gorender import BuildError, renderer_binary

    try:
        return renderer_binary()
    except BuildError as exc:
        raise TemplateSourceError(str(exc)) from None
