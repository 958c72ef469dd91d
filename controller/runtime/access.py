"""Whether an identity may read something, asked of the API server once and remembered for a while.

A plan acts with the rights of its ServiceAccount (:meth:`opbroker.controller.runtime.kube.Kube.acting_as`): its writes
go to the API server impersonating that account, which authorises each of them. Its reads of ``sources`` are
faster from the controller's watch cache (the store), which the controller fills with its own rights; before
answering one from there, the controller asks the API server whether the plan's account could have read it
itself (a SubjectAccessReview), and remembers the answer per (user, verb, group, resource, namespace) for
:data:`DEFAULT_TTL_SECONDS`. A right revoked meanwhile is honoured by the cache at most that much later; a GET
past the cache is authorised by the API server at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from opbroker.controller.runtime.clock import SYSTEM
from opbroker.kubeclient.lean import LeanApi
from opbroker.kubeclient.wire import JsonBody, path_of

#: How long an answer is remembered. Short enough that a revoked grant stops reads through the cache soon;
#: long enough that a busy plan asks once per resource and namespace, not once per read.
DEFAULT_TTL_SECONDS = 60.0
#: Answers remembered at most (oldest forgotten first): bounded whatever the number of plans and namespaces.
MAX_ANSWERS = 4096
#: Where SubjectAccessReviews are created.
REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#: Deadline of one review request.
REVIEW_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Access:
    """One question: may ``user`` ``verb`` ``resource`` (of ``group``) in ``namespace`` (None: cluster scope)?"""

    user: str
    verb: str
    group: str
    resource: str
    namespace: str | None


def service_account_groups(user: str) -> list[str]:
    """The groups the API server gives a ServiceAccount (and an impersonated one): what RBAC bindings to
    ``system:serviceaccounts[:<namespace>]`` match."""
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}", "system:authenticated"]
    return ["system:authenticated"]


class AccessReviews:
    """SubjectAccessReviews, answers cached with a time to live (``clock`` passed in so tests fake time).

    One question is asked once at a time: workers asking what another is already asking wait for its answer
    instead of sending the same review (a restart's first reconciles all ask the same few questions at once — the
    restart bench counted 8 reviews where 2 questions were asked). A waiter whose asker failed asks itself."""

    def __init__(
        self,
        ask: Callable[[Access], bool],
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = SYSTEM.monotonic,
        max_answers: int = MAX_ANSWERS,
    ) -> None:
        self._ask = ask
        self._ttl = ttl_seconds
        self._clock = clock
        self._max = max_answers
        self._answers: OrderedDict[Access, tuple[float, bool]] = OrderedDict()
        self._asking: dict[Access, threading.Event] = {}
        """Questions being asked now, each with what its waiters wait on."""
        self._lock = threading.Lock()
        self.asked = 0
        """Reviews sent to the API server (the bench reports it)."""

    def allowed(self, access: Access) -> bool:
        while True:
            now = self._clock()
            with self._lock:
                known = self._answers.get(access)
                if known is not None and now - known[0] < self._ttl:
                    return known[1]
                asking = self._asking.get(access)
                if asking is None or asking.is_set():
                    mine = self._asking[access] = threading.Event()
                    break
            # Bounded: the asker's request has its own deadline; an asker still silent past it is not waited for.
            if not asking.wait(REVIEW_TIMEOUT_SECONDS + 1.0):
                asking.set()  # given up on: the next look asks itself
        try:
            answer = self._ask(access)
        except BaseException:
            self._done(access, mine)
            raise
        with self._lock:
            self.asked += 1
            self._answers[access] = (now, answer)
            self._answers.move_to_end(access)
            while len(self._answers) > self._max:
                self._answers.popitem(last=False)
        self._done(access, mine)
        return answer

    def _done(self, access: Access, mine: threading.Event) -> None:
        """The question ``mine`` stood for is answered (or failed): its waiters look again."""
        with self._lock:
            if self._asking.get(access) is mine:
                del self._asking[access]
        mine.set()


def api_reviewer(api: LeanApi) -> Callable[[Access], bool]:
    """Ask the API server (``create subjectaccessreviews``) with the rights of ``api``'s client (the controller's
    own)."""

    def ask(access: Access) -> bool:
        attributes: JsonBody = {"verb": access.verb, "group": access.group, "resource": access.resource}
        if access.namespace:
            attributes["namespace"] = access.namespace
        review: JsonBody = {  # no type meta: the path names it (the body the generated client sent)
            "spec": {
                "user": access.user,
                "groups": service_account_groups(access.user),
                "resourceAttributes": attributes,
            },
        }
        answer = api.request("POST", REVIEWS, body=review, timeout=REVIEW_TIMEOUT_SECONDS)
        return path_of(answer, "status", "allowed") is True

    return ask
