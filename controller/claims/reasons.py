"""Condition and event reasons of the claims subsystem: constants, never inline strings."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # RegisteredService
    REGISTERED = "Registered"
    AVAILABLE = "Available"
    CLAIMED = "Claimed"
    RELEASED = "Released"
    UNREACHABLE = "Unreachable"
    UNDETERMINED = "Undetermined"
    HEALTHY = "HealthCheckPassed"
    PROBE_FAILED = "HealthCheckFailed"
    NO_HEALTHCHECK = "NoHealthCheck"
    CHECK_PENDING = "HealthCheckPending"
    CHECK_DEADLINE = "HealthCheckDeadlineExceeded"
    CHECK_INVALID = "HealthCheckInvalid"
    SECRET_MISSING = "SecretMissing"
    SPEC_INVALID = "SpecInvalid"
    # ServiceClaim
    BOUND = "Bound"
    NO_MATCH = "NoMatch"
    MATCH_LOST = "MatchLost"
    SERVICE_NOT_READY = "ServiceNotReady"
    CLAIM_INVALID = "ClaimInvalid"
    BINDING_FAILED = "BindingFailed"
    ROTATED = "CredentialsRotated"
    # Automatic registration
    SERVICE_REGISTERED = "ServiceRegistered"
    REGISTRATION_CONFLICT = "RegistrationConflict"


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
