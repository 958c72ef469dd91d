"""Leadership: one Lease campaigned for, renewed and released by the controller's own event loop (issue 45).

Two replicas run active-passive, as controller-runtime's do: each campaigns for a Lease in the control-plane
namespace; only its holder acts. The rules are client-go's (``leaderelection.go``), kept as a pure core here
(:func:`decide`, :func:`observe`, :func:`taken`):

* a Lease held by another identity counts as held until ``leaseDurationSeconds`` after this candidate *first saw*
  its current record (its own monotonic clock, never the stored times: the replicas' clocks need not agree);
* a candidate that finds it free (absent, released, or not renewed within its duration as observed) writes
  itself in at the version it read: of two candidates, the API server lets one write (the other's is a 409);
* the holder renews every ``retry_period``; a leader whose renewals do not succeed within the renew deadline
  (two thirds of the lease) — failing or hanging — stops acting, before a standby may take the lease over;
  a leader that finds another holder stops at once;
* a leader that stops as asked empties the holder (client-go's ``ReleaseOnCancel``), so the standby takes over at
  its next try instead of after the lease duration.

Why our own, not ``kubernetes.leaderelection``: the library's election loop blocks the thread that runs it (the
controller's loop ran inside its callback, in the library's thread), checks the renew deadline only between
attempts (a hung renewal kept a leader acting: a guard thread of ours watched the time), retries API errors by
ending its loop, and writes its record's times as local naive strings. Here the election is two coroutines on
the one loop (:meth:`Leadership.campaign`, :meth:`Leadership.hold`): the deadline is raced against each
attempt on the runtime's clock, so a hung renewal ends the leader at the deadline with no guard thread.

Each attempt is a GET and a PUT (or POST) through the project's own transport with request deadlines
(:class:`LeaseLock`), awaited on the loop (its asynchronous twin, :class:`~opbroker.kubeclient.astreams.AsyncTransport`,
on connections of its own): a renewal never waits behind reconciles that hold every worker of the runtime's pool,
needs no thread, and a renewal still hanging at the deadline is cancelled there (its connection closed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.kubeclient import jsontext
from opbroker.kubeclient.answers import json_object
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.lean import object_path
from opbroker.kubeclient.wire import JsonBody, JsonObject, int_of, mapping_of, text_of

logger = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1"


# -- the pure core ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says of its holder (``holder`` empty: released, or never written)."""

    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: JsonObject) -> LeaseRecord:
        """The record a Lease holds; a field missing or of the wrong type reads as empty."""
        spec = mapping_of(lease.get("spec"))
        return cls(
            holder=text_of(spec.get("holderIdentity")) or "",
            duration_seconds=int_of(spec.get("leaseDurationSeconds")) or 0,
            acquire_time=text_of(spec.get("acquireTime")),
            renew_time=text_of(spec.get("renewTime")),
            transitions=int_of(spec.get("leaseTransitions")) or 0,
        )

    def spec(self) -> JsonBody:
        """The Lease's ``spec`` holding this record."""
        spec: JsonBody = {"leaseDurationSeconds": self.duration_seconds, "leaseTransitions": self.transitions}
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


@dataclass(frozen=True)
class Seen:
    """A record as a candidate observed it, and when it first did (its monotonic clock)."""

    record: LeaseRecord
    at: float


def observe(previous: Seen | None, record: LeaseRecord, now: float) -> Seen:
    """What a candidate knows after reading ``record`` at ``now``: a record unchanged since keeps its first sight."""
    if previous is not None and previous.record == record:
        return previous
    return Seen(record, now)


def held_by_another(seen: Seen, identity: str, now: float, lease_seconds: int) -> bool:
    """Whether another identity holds the lease: named in it, and its record seen changing within the lease's
    duration (its own, else ``lease_seconds``)."""
    record = seen.record
    duration = record.duration_seconds or lease_seconds
    return bool(record.holder) and record.holder != identity and seen.at + duration > now


def taken(record: LeaseRecord | None, identity: str, lease_seconds: int, stamp: str) -> LeaseRecord:
    """The record ``identity`` writes to hold the lease at ``stamp``: a renewal keeps the acquisition time; a
    takeover (from another holder, or a released lease) starts a new one and counts a transition."""
    if record is not None and record.holder == identity:
        return dataclasses.replace(record, duration_seconds=lease_seconds, renew_time=stamp)
    transitions = record.transitions + 1 if record is not None else 0
    return LeaseRecord(identity, lease_seconds, stamp, stamp, transitions)


def micro_time(moment: datetime.datetime) -> str:
    """An instant as a Lease's ``MicroTime`` holds it: UTC, six fractional digits, ``Z``."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Outcome(enum.Enum):
    """One attempt's result."""

    LEADING = "leading"
    """The lease is this candidate's (created, taken or renewed)."""
    HELD = "held"
    """Another identity holds it."""
    FAILED = "failed"
    """No answer, an error, or a write refused (someone wrote first): try again."""


# -- the lock: one attempt at a time, on the loop ------------------------------------------------------------


class LeaseLock:
    """The Lease ``namespace/name`` read and written as JSON through ``api`` (its deadlines bound each request).
    Used by one election, one attempt at a time: it keeps what it saw between attempts."""

    def __init__(
        self,
        api: AsyncTransport,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: int,
        clock: Clock = SYSTEM,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._seen: Seen | None = None
        self.holder = ""
        """The holder the last attempt found (for the log)."""

    @property
    def path(self) -> str:
        return object_path(LEASES, "leases", self.namespace, self.name)

    async def attempt(self) -> Outcome:
        """Acquire or renew once: read the Lease, then create it, or write this identity in at the version read."""
        now, stamp = self._clock.monotonic(), micro_time(self._clock.now())
        try:
            return await self._attempt(now, stamp)
        except ApiException as exc:
            if exc.status != 409:  # a 409 is a write someone else made first: a plain failed attempt
                logger.warning("lease %s/%s: HTTP %s", self.namespace, self.name, exc.status)
        except Exception as exc:  # no answer within the deadline, a refused connection
            logger.warning("lease %s/%s: %s", self.namespace, self.name, type(exc).__name__)
        return Outcome.FAILED

    async def _attempt(self, now: float, stamp: str) -> Outcome:
        try:
            lease = await self._call("GET", self.path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            record = taken(None, self.identity, self.lease_seconds, stamp)
            body: JsonBody = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": record.spec()}
            await self._call("POST", object_path(LEASES, "leases", self.namespace), body)
            self._seen, self.holder = Seen(record, now), self.identity
            return Outcome.LEADING
        current = LeaseRecord.of(lease)
        self._seen = observe(self._seen, current, now)
        self.holder = current.holder
        if held_by_another(self._seen, self.identity, now, self.lease_seconds):
            return Outcome.HELD
        record = taken(current, self.identity, self.lease_seconds, stamp)
        written = {**lease, "spec": {**mapping_of(lease.get("spec")), **record.spec()}}
        await self._call("PUT", self.path, written)  # carries the version read: a write since is a 409
        self._seen, self.holder = Seen(record, now), self.identity
        return Outcome.LEADING

    async def held(self) -> bool:
        """Whether another identity holds the lease (read only, by the candidate's rules: renewed, as this lock
        saw it change, within its duration); a Lease that does not exist is held by nobody. What a replica of
        another layout holds is waited for this way (:meth:`Leadership.wait_until_free`), never taken."""
        now = self._clock.monotonic()
        try:
            lease = await self._call("GET", self.path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        self._seen = observe(self._seen, LeaseRecord.of(lease), now)
        self.holder = self._seen.record.holder
        return held_by_another(self._seen, self.identity, now, self.lease_seconds)

    async def release(self) -> bool:
        """Empty the holder if this identity still holds the lease, at the version read (a lease taken meanwhile
        is left alone: 409). False when someone else holds it; raises when the API does not answer."""
        lease = await self._call("GET", self.path)
        spec = mapping_of(lease.get("spec"))
        if text_of(spec.get("holderIdentity")) != self.identity:
            return False
        released = {key: value for key, value in spec.items() if key != "holderIdentity"}
        await self._call("PUT", self.path, {**lease, "spec": released})
        return True

    async def close(self) -> None:
        """Close the lock's connections."""
        await self.api.aclose()

    async def _call(self, method: str, path: str, body: JsonObject | None = None) -> JsonBody:
        """One request's JSON answer (a non-2xx answer raises its ``ApiException``)."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        sent = None if body is None else jsontext.dumps(body)
        return json_object(jsontext.loads(await self.api.request(method, path, body=sent, headers=headers)))


# -- the election on the loop --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    """Why a leader stops acting: it found another holder, or its renewals did not succeed in time."""

    lost_to: str | None
    """The identity found holding the lease (None: overdue)."""
    age: float
    """Seconds since the last successful renewal started."""


class Leadership:
    """Campaign for, hold and release the lease of ``lock`` on the running loop, on ``clock``."""

    def __init__(
        self,
        lock: LeaseLock,
        *,
        renew_deadline: float,
        retry_period: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self.lock = lock
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self.renewed_at: float | None = None
        """When the last successful acquisition or renewal *started*: the lease the API server stored is no older."""

    async def campaign(self) -> None:
        """Return once this candidate holds the lease (try every ``retry_period``); cancel to give up."""
        await campaign_any([self], retry_period=self.retry_period, clock=self._clock)

    async def hold(self) -> Ended:
        """Renew every ``retry_period`` while leading; return when leading must end: another holder found, or no
        renewal succeeded within the renew deadline (an attempt still hanging then is cancelled)."""
        assert self.renewed_at is not None, "campaign first"
        while True:
            # The pause ends at the deadline at the latest: a failed attempt close to it is not followed by a
            # whole retry period of acting past it.
            left = self.renewed_at + self.renew_deadline - self._clock.monotonic()
            await self._clock.sleep(min(self.retry_period, max(0.0, left)))
            started = self._clock.monotonic()
            remaining = self.renewed_at + self.renew_deadline - started
            if remaining <= 0:
                return Ended(None, started - self.renewed_at)
            attempt = asyncio.ensure_future(self.lock.attempt())
            deadline = asyncio.ensure_future(self._clock.sleep(remaining))
            await asyncio.wait({attempt, deadline}, return_when=asyncio.FIRST_COMPLETED)
            deadline.cancel()
            if not attempt.done():
                attempt.cancel()
                return Ended(None, self._clock.monotonic() - self.renewed_at)
            outcome = attempt.result()
            if outcome is Outcome.LEADING:
                self.renewed_at = started
            elif outcome is Outcome.HELD:
                return Ended(self.lock.holder, started - self.renewed_at)

    async def wait_until_free(self, others: Sequence[LeaseLock], *, forbidden_is_free: bool = False) -> None:
        """Return once nobody holds any of ``others``' leases (each read every ``retry_period`` until found free; a
        failed read counts as held): the leader of one layout waits so for the other layout's, so that during a
        change between one controller and shards the old leaders — which act until their renewals are refused
        (their Role changed) or they are stopped — and the new ones never act at once (issue 46). A shard waits for
        the unsharded controller's Lease, the unsharded controller for every shard's.

        ``forbidden_is_free``: a read refused with 403 counts as free (logged once) — the unsharded controller's
        Role from before it read the shards' Leases cannot tell; waiting for ever would stop it, so it acts as it
        did then. Cancel to give up."""
        waiting = list(others)
        reported: dict[str, str] = {}
        forbidden: list[str] = []
        while True:
            still = []
            for other in waiting:
                try:
                    held = await other.held()
                except Exception as exc:  # no answer, refused: not known to be free
                    if forbidden_is_free and isinstance(exc, ApiException) and exc.status == 403:
                        forbidden.append(other.name)
                        continue
                    logger.warning("lease %s/%s could not be read (%s); waiting", other.namespace, other.name, exc)
                    held = True
                if not held:
                    continue
                still.append(other)
                if other.holder and reported.get(other.name) != other.holder:
                    reported[other.name] = other.holder
                    logger.info(
                        "lease %s/%s is held by %s; waiting until it is free", other.namespace, other.name, other.holder
                    )
            if forbidden:
                logger.warning("%d lease(s) may not be read (403), not waited for: %s", len(forbidden), forbidden[0])
                forbidden = []
            if not still:
                return
            waiting = still
            await self._clock.sleep(self.retry_period)

    async def release(self, timeout: float) -> bool:
        """Hand the lease over (best effort, within ``timeout`` seconds): whether it was released."""
        try:
            released = await asyncio.wait_for(self.lock.release(), timeout)
        except Exception as exc:  # no answer in time, a conflict (taken meanwhile): the standby waits it out
            logger.warning(
                "could not release lease %s/%s (%s); the standby takes over when it expires",
                self.lock.namespace,
                self.lock.name,
                type(exc).__name__,
            )
            return False
        if released:
            logger.info("%s released lease %s/%s", self.lock.identity, self.lock.namespace, self.lock.name)
        return released

    async def close(self) -> None:
        """Close the lock's connections."""
        await self.lock.close()


async def campaign_any(candidates: Sequence[Leadership], *, retry_period: float, clock: Clock = SYSTEM) -> int:
    """Return once this candidate holds one of ``candidates``' leases — in each round the first, in order, found free
    (expired, released, or never made) — and its position: a standby under ``--shard-takeover`` campaigns so for
    every shard's Lease, its own first. Each lease is judged as :meth:`Leadership.campaign` judges its one (expired
    only once its record stood unrenewed for a lease duration as this candidate saw it). Cancel to give up."""
    reported: dict[str, str] = {}
    while True:
        for position, election in enumerate(candidates):
            started = clock.monotonic()
            outcome = await election.lock.attempt()
            if outcome is Outcome.LEADING:
                election.renewed_at = started
                return position
            holder = election.lock.holder
            if outcome is Outcome.HELD and reported.get(election.lock.name) != holder:
                reported[election.lock.name] = holder
                logger.info("the lease is held by %s; waiting (%s)", holder, election.lock.name)
        await clock.sleep(retry_period)
