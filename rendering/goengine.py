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

Memory has a hard ceiling (``memory_ceiling``, 256 MiB by default): once the process answers its first ping,
its address space is capped (``RLIMIT_AS``) at what it maps then plus the ceiling, and the Go side derives
its garbage collector's soft limit and its heap watchdog from the same number (``gorender/main.go``). A
render that passes the watchdog fails with a limit error; one that passes the hard cap kills the process
(Go's "out of memory"), which fails that render with a limit error and restarts the process for the next.
Either way the render's error is a :class:`RenderLimitError`, which a plan's trial render reports as an
error of the plan.

The process's stderr is read continuously by a thread of its own (a pipe left unread blocks the writer
once 64 KiB are buffered), and each line is logged without values (:func:`loggable`). Nothing it says is
copied into a render's error: a crash is described by what this side observed of that process (its exit
status and the Go runtime's fatal reason), never by its text, which may come from another render.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import resource
import select
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from opbroker.rendering.errors import RenderError, RenderLimitError, TemplateSecurityError, TemplateSourceError
from opbroker.rendering.limits import Limits

_HEADER = struct.Struct(">I")
#: How long past the render's own time limit an answer may take before the process is declared hung.
_ANSWER_GRACE = 2.0
#: Largest answer accepted (the Go side bounds output to ``max_output_bytes``; JSON escaping can double it).
_MAX_FRAME = 64 << 20
#: The renderer's memory ceiling: what its address space may grow by after start. A controller pod's memory
#: limit is 512 MiB by default and the controller itself takes about 150 MiB, so half of it leaves room for
#: both; a real plan's render takes a few MiB.
DEFAULT_MEMORY_CEILING = 256 << 20
#: Longest stderr line read at once (a longer one is read in pieces, each logged as withheld).
_MAX_LINE = 4096
#: How long a stopping process may take to exit and flush its stderr before its fate is judged.
_EXIT_GRACE = 2.0

logger = logging.getLogger(__name__)


class EngineCrashed(RenderError):
    """The renderer process died or hung while rendering; it is restarted for the next render."""


class EngineOutOfMemory(EngineCrashed, RenderLimitError):
    """The render outgrew the renderer's hard memory ceiling and the process died of it."""


#: The Go runtime's fatal reasons this side recognises on stderr, and how a render's error names them.
_FATAL_REASONS = (
    ("fatal error: runtime: out of memory", "out of memory"),
    ("fatal error: out of memory", "out of memory"),
    ("runtime: goroutine stack exceeds", "stack overflow"),
    ("fatal error: stack overflow", "stack overflow"),
)
_SAFE_PREFIXES = ("gorender: ", "fatal error: ", "runtime: ")
_RUNTIME_DETAIL = re.compile(r"\b(?:goroutine \d+|[\w./]+\.go:\d+|0x[0-9a-f]+)")


def loggable(line: str) -> str | None:
    """What may be logged of one stderr line of the renderer, or None for nothing but a count.

    The renderer's own lines (``gorender: ``, helm's warnings already cut to their first words on the Go
    side) and the Go runtime's fatal messages are fixed text; anything else (a panic's value, a stack
    trace's arguments) may hold a template's values and is withheld.
    """
    text = line.rstrip("\n")
    if text.startswith(_SAFE_PREFIXES) and not text.startswith("runtime: unexpected return pc"):
        return text[:300]
    return None


@dataclass
class _Stderr:
    """What one process said on stderr, as this side judged it (one per process, never shared)."""

    lines: int = 0
    withheld: int = 0
    fatal: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _drain(stream: IO[bytes], pid: int, said: _Stderr) -> None:
    """Read ``stream`` to its end, logging each line as :func:`loggable` allows; runs on its own thread."""
    try:
        while True:
            raw = stream.readline(_MAX_LINE)
            if not raw:
                return
            line = raw.decode("utf-8", "replace")
            said.lines += 1
            for marker, reason in _FATAL_REASONS:
                if line.startswith(marker):
                    said.fatal = reason
            text = loggable(line)
            if text is None:
                said.withheld += 1
                logger.debug("gorender[%d]: a stderr line of %d bytes withheld (it may hold values)", pid, len(raw))
            elif text.startswith("gorender: log: "):
                # helm's warnings, one per values key it cannot merge: many per render of such a chart
                logger.debug("gorender[%d]: %s", pid, text)
            else:
                logger.warning("gorender[%d]: %s", pid, text)
    except (OSError, ValueError):
        return
    finally:
        said.done.set()


def _address_space(pid: int) -> int | None:
    """The process's mapped address space in bytes (VmSize), or None where /proc cannot tell."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return None


def _peak_rss(pid: int) -> int | None:
    """The process's peak resident memory in bytes (VmHWM), or None where /proc cannot tell."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


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
    first use); ``limits`` bound every render on both sides; ``memory_ceiling`` bounds the process's memory
    (bytes it may map beyond what it maps at start).
    """

    def __init__(
        self,
        limits: Limits,
        binary: Callable[[], Path] | None = None,
        *,
        memory_ceiling: int = DEFAULT_MEMORY_CEILING,
    ) -> None:
        self.limits = limits
        self.memory_ceiling = memory_ceiling
        self._binary = binary
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr = _Stderr()
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

    def render_couchbase(self, *, name: str, values: Mapping[str, Any]) -> str:
        """Render Couchbase configuration templates (``rendering.couchbase.request`` builds ``values``); the
        answer is JSON: the rendered objects and the registry keys the render set."""
        return self._call({"op": "render", "engine": "couchbase", "name": name}, values)

    def check_couchbase(self, *, name: str, values: Mapping[str, Any]) -> None:
        """Parse every dynamic attribute of Couchbase configuration templates without evaluating any."""
        self._call({"op": "check", "engine": "couchbase", "name": name}, values)

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

    def peak_rss(self) -> int | None:
        """Peak resident memory in bytes of the running process (None if none runs)."""
        pid = self.pid
        return _peak_rss(pid) if pid is not None else None

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
                fate = self._stop()
                if fate == "out of memory":
                    raise EngineOutOfMemory(
                        f"rendering used more than the renderer's memory ceiling of {self.memory_ceiling >> 20} MiB "
                        "and the renderer ran out of memory; it was restarted"
                    ) from None
                if fate == "stack overflow":
                    raise EngineOutOfMemory(
                        "the template recursed deeper than the renderer's stack limit; it was restarted"
                    ) from None
                raise EngineCrashed(f"the Go template renderer stopped while rendering ({exc}; {fate})") from None
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
                [str(binary), "--memory-ceiling", str(self.memory_ceiling)],
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
        process = self._process
        # A renderer dropped without close() (a one-off check) must not leave its process behind.
        weakref.finalize(self, _kill_quietly, process)
        self._stderr = _Stderr()
        assert process.stderr is not None
        drain = threading.Thread(
            target=_drain, args=(process.stderr, process.pid, self._stderr), name=f"gorender-stderr-{process.pid}"
        )
        drain.daemon = True
        drain.start()
        self._cap_memory(process)
        return process

    def _cap_memory(self, process: subprocess.Popen[bytes]) -> None:
        """Cap the process's address space at what it maps once running, plus the ceiling.

        The Go runtime reserves about 1.2 GiB of address space at start that it never touches, so the cap is
        relative: a ping makes sure the runtime is up, then RLIMIT_AS is set from outside (``prlimit``, no
        ``preexec_fn``: the controller is threaded). Where the kernel cannot tell or set it (no /proc, not
        Linux), the process runs with the Go side's soft limit and watchdog only, and that is logged.
        """
        self._next_id += 1
        ping = json.dumps({"id": self._next_id, "op": "ping"}).encode()
        try:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(_HEADER.pack(len(ping)) + ping)
            process.stdin.flush()
            self._read(process.stdout, deadline=time.monotonic() + 5 + _ANSWER_GRACE)
        except (OSError, EOFError, ValueError, TimeoutError):
            return  # a process that cannot answer a ping fails the render that uses it
        mapped = _address_space(process.pid)
        prlimit = getattr(resource, "prlimit", None)
        if mapped is None or prlimit is None:
            logger.warning("the Go template renderer runs without a hard memory ceiling: this system cannot set one")
            return
        cap = mapped + self.memory_ceiling
        try:
            prlimit(process.pid, resource.RLIMIT_AS, (cap, cap))
        except (OSError, ValueError) as exc:
            logger.warning("the Go template renderer runs without a hard memory ceiling: %s", exc)

    def _stop(self) -> str:
        """Stop the process (killing it unless it has exited) and say how it ended: "out of memory" or
        "stack overflow" when the Go runtime said so, else its exit status. Never its stderr's text: that
        may hold another render's values."""
        process, self._process = self._process, None
        said = self._stderr
        if process is None:
            return "not running"
        status = self._reap(process)
        said.done.wait(_EXIT_GRACE)  # the stderr thread reads to the end once the process is gone
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if said.fatal is not None:
            return said.fatal
        return status

    @staticmethod
    def _reap(process: subprocess.Popen[bytes]) -> str:
        """Kill the process unless it has exited and wait for it; its exit status."""
        with contextlib.suppress(OSError):
            process.kill()
        try:
            code = process.wait(timeout=_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            return "did not exit"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


class PeakWatch:
    """The renderer's peak resident memory across a stretch of work, even one that ends its process.

    For tests and the bench: the kernel keeps a process's high-water mark (VmHWM) only while it lives, and a
    child's ``ru_maxrss`` counts its parent's memory from before ``exec``; so a thread reads the high-water
    mark of whichever process the engine runs, every millisecond, and keeps the largest.
    """

    def __init__(self, engine: GoEngine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gorender-peak", daemon=True)
        self.peak = 0

    def __enter__(self) -> PeakWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            process = self._engine._process
            if process is not None:
                self.peak = max(self.peak, _peak_rss(process.pid) or 0)
            self._stop.wait(0.001)


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
