"""The leader election's Lease, read and written as JSON through the project's own transport (issue 45).

The election (``kubernetes.leaderelection``, :mod:`.leadership`) keeps its lock behind a small interface — ``name``,
``namespace``, ``identity`` and ``get``/``create``/``update`` of a :class:`LeaderElectionRecord` — which the
library's ``LeaseLock`` fills through the generated ``CoordinationV1Api`` and its models. :class:`LeaseLock` here
is the same lock over :class:`~opbroker.kubeclient.lean.LeanApi`: the same requests (GET, then POST to create or
PUT of the Lease read, carrying its ``resourceVersion``), the same answers to the election (``(False, the
ApiException)`` from a failed read, False from a failed write), and the deadlines and answer report of the client
it is built on. A transport failure (no answer) is raised, as the generated client raised its own;
:class:`~.leadership.GuardedElection` counts it a failed attempt.

Times: the election writes its record's times as ``str(datetime)`` of the local clock, naive; they go on the wire as
the UTC instant (``MicroTime``, six fractional digits), and come back to the record in the election's format.
"""

from __future__ import annotations

import datetime
import logging

from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

from opbroker.kubeclient.lean import LeanApi, object_path
from opbroker.kubeclient.wire import JsonBody, JsonObject, int_of, mapping_of, text_of

logger = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1"
#: The election's own spellings of a time (``str(datetime)``: microseconds left out when zero).
_RECORD_FORMATS = ("%Y-%m-%d %H:%M:%S.%f%z", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S%z", "%Y-%m-%d %H:%M:%S")


def wire_time(record_time: str) -> str:
    """A record's time as the Lease stores it: the UTC instant, ``MicroTime``'s format (a naive time is local)."""
    for spelling in _RECORD_FORMATS:
        try:
            parsed = datetime.datetime.strptime(record_time, spelling)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()
        return parsed.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise ValueError(f"Failed to parse time string: {record_time}")


def record_time(wire: str) -> str:
    """A Lease's time as the election's record holds it: ``str`` of the local time, naive."""
    return str(datetime.datetime.fromisoformat(wire).astimezone().replace(tzinfo=None))


def record_of(lease: JsonObject) -> LeaderElectionRecord:
    """The election record a Lease holds (fields it lacks, or of the wrong type, left None)."""
    record = LeaderElectionRecord(None, None, None, None)
    spec = mapping_of(lease.get("spec"))
    holder = text_of(spec.get("holderIdentity"))
    if holder:
        record.holder_identity = holder
    duration = int_of(spec.get("leaseDurationSeconds"))
    if duration:
        record.lease_duration = str(duration)
    acquired, renewed = text_of(spec.get("acquireTime")), text_of(spec.get("renewTime"))
    if acquired:
        record.acquire_time = record_time(acquired)
    if renewed:
        record.renew_time = record_time(renewed)
    return record


def spec_of(record: LeaderElectionRecord, current: JsonObject | None = None) -> JsonBody:
    """The Lease's spec holding ``record`` (over ``current``: its other fields kept)."""
    spec: JsonBody = dict(current or {})
    if record.holder_identity is None:
        spec.pop("holderIdentity", None)
    else:
        spec["holderIdentity"] = record.holder_identity
    spec["leaseDurationSeconds"] = int(record.lease_duration)
    spec["acquireTime"] = wire_time(record.acquire_time)
    spec["renewTime"] = wire_time(record.renew_time)
    return spec


class LeaseLock:
    """The election's lock on the Lease ``namespace/name`` (the library's lock interface; see the module)."""

    def __init__(self, api: LeanApi, name: str, namespace: str, identity: str) -> None:
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = str(identity)
        self.lease_reference: JsonBody | None = None
        """The Lease last read or created: what an update writes over (its version makes the write conditional)."""

    def get(self, name: str, namespace: str) -> tuple[bool, LeaderElectionRecord | ApiException]:
        """(True, the record) of the Lease, or (False, the error answer) — a 404's body says it is missing."""
        try:
            lease = self.api.request("GET", object_path(LEASES, "leases", namespace, name))
        except ApiException as exc:
            return False, exc
        self.lease_reference = dict(mapping_of(lease))
        return True, record_of(self.lease_reference)

    def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        """Create the Lease holding ``election_record``; False when the API server refuses (one exists)."""
        body: JsonBody = {"metadata": {"name": name}, "spec": spec_of(election_record)}
        try:
            created = self.api.request("POST", object_path(LEASES, "leases", namespace), body=body)
        except ApiException as exc:
            logger.info("Failed to create lock as %s", exc)
            return False
        self.lease_reference = dict(mapping_of(created))  # a following update works from it without a read
        return True

    def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        """Write ``updated_record`` over the Lease last read, at its version; False when refused (written since)."""
        if self.lease_reference is None:
            logger.info("Lease not initialized, call get or create first")
            return False
        self.lease_reference["spec"] = spec_of(updated_record, mapping_of(self.lease_reference.get("spec")))
        try:
            self.api.request("PUT", object_path(LEASES, "leases", namespace, name), body=self.lease_reference)
        except ApiException as exc:
            logger.info("Failed to update lock as %s", exc)
            return False
        return True
