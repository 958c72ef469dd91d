"""A configuration's credentials hook, throttled: the official client and the project's transport run it before
every request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: At most one run of a configuration's credentials hook per this many seconds (see :class:`ThrottledRefresh`).
REFRESH_SECONDS = 10.0


class ThrottledRefresh:
    """A configuration's ``refresh_api_key_hook``, run at most once per ``seconds``.

    The client runs the hook before every request. A kubeconfig's hook sets the server, CA and proxy on the
    configuration again each time (the host setter reads the proxy environment: every variable of it), and was
    2.8 % of the controller's CPU while provisioning (issue 31, py-spy). Tokens it refreshes are rotated minutes
    before they expire (kubelet renews a projected token at 80 % of its life; the in-cluster loader re-reads its
    file once a minute), so a refresh at most ``seconds`` late loses nothing.
    """

    def __init__(
        self, hook: Callable[[Any], None], seconds: float = REFRESH_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hook = hook
        self.seconds = seconds
        self.clock = clock
        self._next = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, configuration: Any) -> None:
        now = self.clock()
        with self._lock:
            if now < self._next:
                return
            self._next = now + self.seconds
        self.hook(configuration)
        installed = configuration.refresh_api_key_hook
        if installed is not self:
            # A kubeconfig's hook installs itself again each time it runs (``KubeConfigLoader._set_config``):
            # keep throttling what it installed, or every request after the first refresh runs it again.
            self.hook = installed
            configuration.refresh_api_key_hook = self
