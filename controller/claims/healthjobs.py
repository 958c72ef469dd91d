"""Container health checks as Kubernetes Jobs: the manifests, and what a Job's state means. Pure.

A ``container`` health check runs its image once per period as a Job (``backoffLimit: 0``,
``restartPolicy: Never``, ``activeDeadlineSeconds`` = the deadline) with the service's resolved endpoint
definition mounted from a Secret the way a workload gets a binding: files under
``/bindings/<service>/<key>`` (``SERVICE_BINDING_ROOT=/bindings``) and one env var per key (upper case,
e.g. ``HOST``, ``PASSWORD``). ``command`` runs with ``/bin/sh -c``; without it, the image's entrypoint.

Reading the Job:

* ``Complete`` → Passed;
* ``Failed`` because the container exited non-zero (``BackoffLimitExceeded``) → Failed (counts toward
  the threshold);
* ``Failed`` with ``DeadlineExceeded``, or no verdict ``deadline`` seconds after the Job was created
  (image never pulled, no node, no kubelet — as on a bare control plane) → Undetermined: the check could
  not tell. The controller enforces the deadline itself, so it holds even where no Job controller runs.

The deadline is the check's period: a check that cannot finish within one period has not determined
anything. The period is ``periodSeconds``; Primaza's ``container.minutes`` sets it (minutes * 60) when
``periodSeconds`` is not given explicitly.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping

from opbroker.api.conventions import ANNOTATION_OWNER_UID, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.api.primaza import HealthCheck
from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.core import names
from opbroker.controller.claims.core.states import CheckOutcome, Result
from opbroker.controller.claims.core.views import JobView, OwnerRef
from opbroker.controller.core.reasons import Reason
from opbroker.kubeclient.wire import JsonBody, JsonObject

BINDING_ROOT = "/bindings"
CONTAINER_NAME = "healthcheck"


def period_of(check: HealthCheck) -> float:
    """Seconds between two checks (see the module docstring for ``minutes``)."""
    if check.container is not None and check.container.minutes and "period_seconds" not in check.model_fields_set:
        return float(check.container.minutes * 60)
    return float(check.period_seconds)


def env_name(key: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]", "_", key).upper()
    return f"_{name}" if name[:1].isdigit() else name


def manifests(
    service: OwnerRef, check: HealthCheck, data: Mapping[str, str], *, service_type: str, fingerprint: str
) -> tuple[JsonBody, JsonBody]:
    """(Secret, Job) for one run of a container check, both owned by the RegisteredService and stamped with
    its uid (``opbroker.io/owner-uid``): in its namespace, with its endpoint values only."""
    assert check.container is not None
    name = names.healthcheck_name(service.name)
    labels = {names.LABEL_REGISTERED_SERVICE: names.label_value(service.name)}
    secret = servicebinding.binding_secret(
        name=name, namespace=service.namespace, data=data, service_type=service_type, owner=service, labels=labels
    )
    container: JsonBody = {
        "name": CONTAINER_NAME,
        "image": check.container.image,
        "env": [
            {"name": "SERVICE_BINDING_ROOT", "value": BINDING_ROOT},
            *(
                {"name": env_name(key), "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
                for key in sorted(data)
            ),
        ],
        "volumeMounts": [{"name": "endpoint", "mountPath": f"{BINDING_ROOT}/{service.name}", "readOnly": True}],
    }
    if check.container.command:
        container["command"] = ["/bin/sh", "-c", check.container.command]
    stamped: dict[str, str] = {LABEL_MANAGED_BY: MANAGED_BY, **labels}
    job: JsonBody = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": service.namespace,
            "labels": stamped,
            "annotations": {names.ANNOTATION_FINGERPRINT: fingerprint, ANNOTATION_OWNER_UID: service.uid},
            "ownerReferences": [service.controlling()],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(period_of(check))),
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "volumes": [{"name": "endpoint", "secret": {"secretName": name}}],
                },
            },
        },
    }
    return secret, job


def _job(job: JobView | JsonObject) -> JobView:
    return job if isinstance(job, JobView) else JobView.of(job)


def _created(job: JobView) -> datetime.datetime | None:
    raw = job.created
    if isinstance(raw, datetime.datetime):
        return raw if raw.tzinfo else raw.replace(tzinfo=datetime.UTC)
    if not raw:
        return None
    return datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def read(job: JobView | JsonObject, *, deadline: float, now: datetime.datetime) -> CheckOutcome | None:
    """What a health-check Job says: an outcome, or None while it may still finish."""
    job = _job(job)
    for condition in job.conditions:
        if condition.status != "True":
            continue
        if condition.type == "Complete":
            return CheckOutcome(Result.PASSED, Reason.HEALTHY, "health-check container succeeded")
        if condition.type == "Failed":
            if condition.reason == "DeadlineExceeded":
                return CheckOutcome(
                    Result.UNDETERMINED, Reason.CHECK_DEADLINE, f"health-check Job did not finish within {deadline:g}s"
                )
            return CheckOutcome(
                Result.FAILED,
                Reason.PROBE_FAILED,
                f"health-check container failed ({condition.reason or 'Failed'})",
            )
    created = _created(job)
    if created is not None and (now - created).total_seconds() >= deadline:
        return CheckOutcome(
            Result.UNDETERMINED,
            Reason.CHECK_DEADLINE,
            f"health-check Job did not finish within {deadline:g}s (no pod ran it to completion)",
        )
    return None


def remaining(job: JobView | JsonObject, *, deadline: float, now: datetime.datetime) -> float:
    """Seconds until the deadline of a running Job."""
    created = _created(_job(job))
    if created is None:
        return deadline
    return max(0.0, deadline - (now - created).total_seconds())
