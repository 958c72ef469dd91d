"""Child processes with their output in a log file: what ``opbroker dev`` and the tests start.

Each runs in its own session so Ctrl-C in a terminal reaches only the parent, which then stops the
children in order; ``kill`` is there for crash tests (SIGKILL, no clean shutdown).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


class Process:
    def __init__(self, name: str, command: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.command = command
        self.log = log_dir / f"{name}.log"
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        handle = self.log.open("ab")
        environment = {**os.environ, **(self.env or {})}
        self.popen = subprocess.Popen(
            self.command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=environment,
        )
        handle.close()

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, like a crashed or evicted pod."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
