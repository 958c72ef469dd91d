"""Every condition and event reason the controller writes: one enum, constants, never inline strings.

Grouped by the kind that writes them; a reason shared by several kinds (``Bound``, ``InProgress``,
``Unreachable``) is one member.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # -- instances and bindings (and the catalog entries they come from) ------------------------------------
    PROVISIONED = "Provisioned"
    BOUND = "Bound"
    IN_PROGRESS = "InProgress"
    FAILED = "Failed"
    PLAN_NOT_FOUND = "PlanNotFound"
    PLAN_INVALID = "PlanInvalid"
    SERVICE_INVALID = "ServiceInvalid"
    ACCEPTED = "Accepted"
    INSTANCE_NOT_READY = "InstanceNotReady"
    INSTANCE_NOT_FOUND = "InstanceNotFound"
    BINDINGS_EXIST = "BindingsExist"
    RENDER_FAILED = "RenderFailed"
    APPLY_FAILED = "ApplyFailed"
    APPLY_REFUSED = "ApplyRefused"
    GAVE_UP = "GaveUp"
    TIMED_OUT = "OperationTimedOut"
    DEPROVISION_UNCONFIRMED = "DeprovisionUnconfirmed"
    DEPROVISIONING = "Deprovisioning"
    UNBINDING = "Unbinding"
    NAMESPACE_TERMINATING = "NamespaceTerminating"
    PLAN_IN_USE = "PlanInUse"
    """An SFPlan being deleted waits for the instances that still use it."""
    PLAN_WITHDRAWN = "PlanWithdrawn"
    """A new instance of an SFPlan being deleted."""
    # -- registered services ---------------------------------------------------------------------------------
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
    # -- service claims --------------------------------------------------------------------------------------
    NO_MATCH = "NoMatch"
    MATCH_LOST = "MatchLost"
    SERVICE_NOT_READY = "ServiceNotReady"
    CLAIM_INVALID = "ClaimInvalid"
    BINDING_FAILED = "BindingFailed"
    ROTATED = "CredentialsRotated"
    """Claims' and broker bindings' credentials followed a rotation of their source."""
    # -- automatic registration of broker bindings -----------------------------------------------------------
    SERVICE_REGISTERED = "ServiceRegistered"
    REGISTRATION_CONFLICT = "RegistrationConflict"
    # -- multi-cluster placement and SFClusters --------------------------------------------------------------
    SCHEDULED = "Scheduled"
    SCHEDULING_FAILED = "SchedulingFailed"
    REPLICATED = "Replicated"
    CLUSTER_REACHABLE = "ClusterReachable"
    CLUSTER_UNREACHABLE = "ClusterUnreachable"
    CLUSTER_NOT_REGISTERED = "ClusterNotRegistered"
    REACHABLE = "Reachable"
    INSTANCES_REMAIN = "InstancesRemain"
    CATALOG_FAILED = "CatalogReplicationFailed"
