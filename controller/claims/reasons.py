"""Why a registered service is not a candidate for a claim (condition and event reasons are
:class:`opbroker.controller.core.reasons.Reason`)."""

from __future__ import annotations

from enum import StrEnum


class Rejection(StrEnum):
    """Why a registered service is not a candidate for a claim (prefix of ``CandidateVerdict.reason``)."""

    IDENTITY_MISMATCH = "IdentityMismatch"
    MISSING_KEYS = "MissingEndpointKeys"
    ENVIRONMENT = "NotOfferedInEnvironment"
    CLAIMED = "ClaimedByAnother"
    NOT_AVAILABLE = "NotAvailable"
    DELETING = "BeingDeleted"
    INVALID = "InvalidService"
    NO_TYPE = "NoTypeIdentity"
    NOT_SHARED = "ReferenceNotShared"
    """In another namespace that does not share it with the claim's (never shown: such a service is not
    judged; :func:`~opbroker.controller.claims.core.matching.rejections` names it for callers that ask)."""
