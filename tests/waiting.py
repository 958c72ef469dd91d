"""The tests' one wait: poll a condition until it holds or a deadline passes (issue 45: four copies were one too
many). For a real process or a real API server, whose progress a test cannot drive; what waits on the controller's
own timers runs on a fake clock instead (``controller/runtime/clock.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.1
) -> Any:
    """The first truthy value ``condition`` returns within ``timeout`` seconds, polled every ``interval``; an
    ``AssertionError`` naming ``what`` when it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
