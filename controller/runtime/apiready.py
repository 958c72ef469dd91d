"""Before the watches start: wait, bounded, until the API server serves every resource the controller watches.

Started while a kube-apiserver is itself starting, custom resources answer ``404 page not found`` until its
CRD handlers are installed, and discovery lacks them (kopf, which ran the watches before issue 31, then logged
"Unresolved resources cannot be served" and never watched them). So the controller first checks, for every
resource its watches name, that discovery lists it (with ``list`` and ``watch``) and that a list of it
(``limit=1``) answers 200, logging what is still missing every few seconds; after a bounded wait it gives up,
and the process exits non-zero so its supervisor (the pod's restart policy) tries again.

A 403 is reported as such: the controller's RBAC lacks ``list`` on that resource, which no wait will fix but
which the message then names.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.views import ApiResource, ApiStatus, resources_of
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.runtime.watches import Watch
from opbroker.kubeclient.lean import LeanApi

logger = logging.getLogger(__name__)

#: How often the wait says what it still waits for.
LOG_EVERY_SECONDS = 5.0
#: Per-request timeout (connect, read) of the checks.
REQUEST_TIMEOUT = (3.0, 5.0)


@dataclass(frozen=True, order=True)
class Wanted:
    """A resource the controller will watch: group ("" is the core group), version, and its name (plural, kind,
    singular or short name, as discovery lists them)."""

    group: str
    version: str
    name: str

    @property
    def path(self) -> str:
        """The discovery path of its group version."""
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def __str__(self) -> str:
        return f"{self.name}.{self.group}/{self.version}" if self.group else f"{self.name} ({self.version})"


def wanted_of(watches: Iterable[Watch]) -> list[Wanted]:
    """Every resource the controller's watches name, once each."""
    wanted = set()
    for watch in watches:
        group, _, version = watch.api_version.rpartition("/")
        wanted.add(Wanted(group, version, watch.plural))
    return sorted(wanted)


class Unreachable(Exception):
    """The API server did not answer at all (refused, reset, timed out)."""


def _get(api: LeanApi, path: str, query: list[tuple[str, Any]] | None = None) -> tuple[int, object]:
    """(200, the decoded answer) of one GET, or (status, the error answer's text); Unreachable when no HTTP answer
    came back."""
    try:
        return 200, api.request("GET", path, query=query or [], timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if not exc.status:  # status 0: a TLS failure, no HTTP answer
            raise Unreachable(_first_line(str(exc))) from exc
        return int(exc.status), exc.body if isinstance(exc.body, str) else ""
    except Exception as exc:  # the transport's Unreachable and DeadlinePassed alike
        raise Unreachable(_first_line(str(exc))) from exc


def _first_line(text: str, limit: int = 120) -> str:
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _answer(status: int, body: object) -> str:
    """A short account of an error answer: the Status message if there is one, else the body's first line."""
    message = ApiStatus.of(body).message
    return f"HTTP {status}: {_first_line(message or (body if isinstance(body, str) else ''))}"


def _match(resources: Iterable[ApiResource], name: str) -> ApiResource | None:
    """The discovery entry a selector name denotes (like kopf: plural, kind, singular or a short name)."""
    return next((r for r in resources if not r.subresource and r.named(name)), None)


def missing(api: client.ApiClient, wanted: Iterable[Wanted]) -> list[str]:
    """What of ``wanted`` the API server does not serve (yet), each with why; [] when everything is served."""
    by_group_version: dict[str, list[Wanted]] = {}
    for item in sorted(wanted):
        by_group_version.setdefault(item.path, []).append(item)
    problems: list[str] = []
    lean = LeanApi(api)
    try:
        for path, items in sorted(by_group_version.items()):
            status, body = _get(lean, path)
            if status != 200:
                problems.extend(f"{item} (discovery {_answer(status, body)})" for item in items)
                continue
            resources = resources_of(body)
            for item in items:
                found = _match(resources, item.name)
                if found is None:
                    problems.append(f"{item} (not in discovery)")
                    continue
                if not {"list", "watch"} <= found.verbs:
                    problems.append(f"{item} (not listable and watchable: verbs {sorted(found.verbs)})")
                    continue
                status, body = _get(lean, f"{path}/{found.name}", [("limit", 1)])
                if status == 403:
                    problems.append(f"{item} (forbidden: the controller's RBAC lacks list on it)")
                elif status != 200:
                    problems.append(f"{item} (list {_answer(status, body)})")
    except Unreachable as exc:
        host = api.configuration.host
        return [f"the API server at {host} does not answer ({exc})"]
    finally:
        lean.close()
    return problems


def wait_until_served(
    api: client.ApiClient,
    wanted: list[Wanted],
    *,
    timeout: float,
    on_wait: Callable[[str], None] = lambda _detail: None,
    poll: float = DEFAULTS.api_ready_poll.base,
    log_every: float = LOG_EVERY_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Check until everything in ``wanted`` is served or ``timeout`` seconds passed (at least one check).

    Returns what is still missing ([] on success). Logs the missing resources every ``log_every`` seconds;
    ``on_wait`` gets a one-line summary at every check that finds something missing (for the health state).
    """
    started = clock()
    last_log: float | None = None
    while True:
        problems = missing(api, wanted)
        now = clock()
        waited = now - started
        if not problems:
            if last_log is not None:
                logger.info("the API server serves every resource the controller watches (after %.0f s)", waited)
            else:
                logger.info("the API server serves every resource the controller watches (%d)", len(wanted))
            return []
        summary = f"waiting for the API server to serve: {'; '.join(problems)}"
        on_wait(summary)
        if waited >= timeout:
            return problems
        if last_log is None or now - last_log >= log_every:
            logger.warning(
                "waiting for the API server to serve what the controller watches (%.0f s of at most %.0f s); "
                "missing: %s",
                waited,
                timeout,
                "; ".join(problems),
            )
            last_log = now
        sleep(min(poll, max(0.0, timeout - waited)))
