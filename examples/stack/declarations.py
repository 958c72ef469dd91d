"""What the root stack declares, as plain data: the ControlPlane's args and the catalog's components.

``__main__.py`` registers these through ``opbroker.stacks.control_plane_with_catalog``; the engine tests run that
very program inline (``tests/pulumi/test_engine.py``) and change one plan's args through this module.
"""

from pathlib import Path
from typing import Any

from opbroker.api import SFPlan as PlanModel
from opbroker.api import SFService as ServiceModel
from opbroker.api.manifests import load_resources

SERVICE_ID = "6d4c3b8e-3e4f-4d8e-9c55-0a8f5c1d2b10"
PLAN_ID = "b7f3a3f2-5a1c-4a52-a39f-2c4e3d9a7e21"

#: What the controller applies for an instance: one Zalando postgresql cluster.
PROVISION = """\
apiVersion: acid.zalan.do/v1
kind: postgresql
metadata:
  name: pg-{{ instance.metadata.name }}
spec:
  teamId: pg
  numberOfInstances: {{ plan.spec.context.instances }}
  postgresql:
    version: "{{ plan.spec.context.version }}"
  volume:
    size: {{ plan.spec.context.diskGB }}Gi
  users:
    app: [createdb]
  databases:
    app: app
"""

#: Live objects the status template reads: the cluster, and (when binding) the operator's user Secret.
SOURCES = """\
postgresql:
  apiVersion: acid.zalan.do/v1
  kind: postgresql
  name: pg-{{ instance.metadata.name }}
  namespace: {{ instance.metadata.namespace }}
{% if binding is defined and binding %}
secret:
  apiVersion: v1
  kind: Secret
  name: app.pg-{{ instance.metadata.name }}.credentials.postgresql.acid.zalan.do
  namespace: {{ instance.metadata.namespace }}
{% endif %}
"""

#: Operation states read back from the operator. The bind response names where the password lives
#: (examples/catalog/ has a plan that hands out the decoded password itself).
STATUS = """\
{% set phase = postgresql.status.PostgresClusterStatus if postgresql is defined and postgresql.status else "" %}
{% set failed = phase in ("CreateFailed", "UpdateFailed") %}
provision:
  state: {{ "succeeded" if phase == "Running" else "failed" if failed else "in progress" }}
  description: "{{ phase }}"
bind:
  state: {{ "succeeded" if secret is defined and secret else "in progress" }}
  response:
    credentials:
      host: pg-{{ instance.metadata.name }}.{{ instance.metadata.namespace }}.svc
      port: 5432
      database: app
      username: app
      passwordSecretRef:
        name: app.pg-{{ instance.metadata.name }}.credentials.postgresql.acid.zalan.do
        key: password
unbind:
  state: succeeded
deprovision:
  state: {{ "in progress" if postgresql is defined and postgresql else "succeeded" }}
"""

#: The demo catalog, exactly as `opbroker dev` applies it (the demo operator must run in the cluster).
DEMO_CATALOG = Path(__file__).resolve().parent.parent / "demo_operator" / "catalog.yaml"
#: TLS certificates issued by cert-manager (examples/certificates; cert-manager must run in the cluster).
CERTIFICATES_CATALOG = Path(__file__).resolve().parent.parent / "certificates" / "catalog.yaml"
#: PostgreSQL from Debian's packages run by Kubernetes' own controllers (its image must be on the nodes:
#: ``opbroker.devcluster.postgres_image``); no operator needed.
POSTGRESQL_CATALOG = Path(__file__).resolve().parent.parent / "postgresql-statefulset" / "catalog.yaml"

#: Rules for the operator kinds the plans render: the controller may manage exactly those.
OPERATOR_RULES = [
    {
        "api_groups": ["acid.zalan.do"],
        "resources": ["postgresqls"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "api_groups": ["demo.opbroker.io"],
        "resources": ["databases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "api_groups": ["cert-manager.io"],
        "resources": ["issuers", "certificates"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    # The PostgreSQL (Debian) plan's kinds: Kubernetes' own.
    *(
        {
            "api_groups": [group],
            "resources": [resource],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
        for group, resource in (("apps", "statefulsets"), ("", "services"), ("batch", "jobs"))
    ),
]


def control_plane_args(
    *, image: str, namespace: str, await_deployments: bool, broker: dict[str, Any]
) -> dict[str, Any]:
    """The ControlPlane's args (``broker`` holds the replicas and, when given, the password)."""
    return {
        "image": image,
        "namespace": namespace,
        "await_deployments": await_deployments,
        "broker": broker,
        "controller": {"operator_rules": OPERATOR_RULES},
    }


def catalog(namespace: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The catalog as ``(component, resource name, args)``: "SFService" or "SFPlan"."""
    entries: list[tuple[str, str, dict[str, Any]]] = [
        (
            "SFService",
            "postgresql",
            {
                "id": SERVICE_ID,
                "name": "postgresql",
                "description": "PostgreSQL clusters run by the Zalando postgres-operator",
                "bindable": True,
                "tags": ["postgresql", "relational"],
                "instances_retrievable": True,
                "bindings_retrievable": True,
                "plan_updatable": True,
                "metadata": {"displayName": "PostgreSQL"},
                "namespace": namespace,
            },
        ),
        (
            "SFPlan",
            "postgresql-small",
            {
                "id": PLAN_ID,
                "name": "small",
                "description": "One PostgreSQL 16 instance with 10 GiB of storage",
                "service_id": SERVICE_ID,
                "bindable": True,
                "manager": {"async_": True, "async_binding": False},
                "context": {
                    "instances": 1,
                    "version": "16",
                    "diskGB": 10,
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                },
                "schemas": {
                    "service_instance": {
                        "create": {
                            "parameters": {
                                "$schema": "http://json-schema.org/draft-07/schema#",
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"extensions": {"type": "array", "items": {"type": "string"}}},
                            }
                        }
                    }
                },
                "templates": [
                    {"action": "provision", "type": "jinja2", "content": PROVISION},
                    {"action": "sources", "type": "jinja2", "content": SOURCES},
                    {"action": "status", "type": "jinja2", "content": STATUS},
                ],
                "namespace": namespace,
            },
        ),
    ]
    resources = [
        resource
        for path in (DEMO_CATALOG, CERTIFICATES_CATALOG, POSTGRESQL_CATALOG)
        for resource in load_resources(path.read_text(), str(path))
    ]
    for resource in resources:
        object_args = {"namespace": namespace, "object_name": resource.metadata.name}
        args = {**resource.spec.model_dump(exclude_none=True), **object_args}
        if isinstance(resource, ServiceModel):
            entries.append(("SFService", resource.metadata.name or "", args))
        elif isinstance(resource, PlanModel):
            entries.append(("SFPlan", resource.metadata.name or "", args))
    return entries
