"""The opbroker stack (``Pulumi.yaml`` at the repository root): the control plane plus an example catalog.

    pulumi config set image <registry>/opbroker:<tag>          # the image holding the opbroker command
    pulumi config set --secret brokerPassword <password>       # optional: generated when unset
    pulumi preview && pulumi up

The catalog is a PostgreSQL offering backed by the Zalando postgres-operator, with a small inline jinja2
plan (examples/catalog/ holds the fuller one), and the demo catalog — the very objects `opbroker dev`
applies, read from examples/demo_operator/catalog.yaml. Every custom resource waits for the control
plane's CRDs.
"""

from pathlib import Path

import pulumi

from opbroker.api import SFPlan as PlanModel
from opbroker.api import SFService as ServiceModel
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.manifests import load_resources
from opbroker.components import ControlPlane, SFPlan, SFService
from opbroker.provider.host import version

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

config = pulumi.Config()
namespace = config.get("namespace") or DEFAULT_NAMESPACE
broker: dict = {"replicas": config.get_int("brokerReplicas") or 2}
password = config.get_secret("brokerPassword")
if password is not None:
    broker["password"] = password

control_plane = ControlPlane(
    "opbroker",
    {
        "image": config.get("image") or f"opbroker:{version()}",
        "namespace": namespace,
        # `pulumi config set awaitDeployments false` on a cluster whose pods cannot start yet (no nodes).
        "await_deployments": config.get_bool("awaitDeployments") is not False,
        "broker": broker,
        "controller": {
            # The plans below render Zalando postgresql objects; the controller may manage exactly those.
            "operator_rules": [
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
            ],
        },
    },
)
# The catalog waits for the CRDs and the namespace, not for the controller and broker to be running.
after_crds = pulumi.ResourceOptions(depends_on=control_plane.catalog_prerequisites)

postgresql = SFService(
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
    after_crds,
)

small = SFPlan(
    "postgresql-small",
    {
        "id": PLAN_ID,
        "name": "small",
        "description": "One PostgreSQL 16 instance with 10 GiB of storage",
        "service_id": SERVICE_ID,
        "bindable": True,
        "manager": {"async_": True, "async_binding": False},
        "context": {"instances": 1, "version": "16", "diskGB": 10, "requests": {"cpu": "500m", "memory": "1Gi"}},
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
    after_crds,
)

#: The demo catalog, exactly as `opbroker dev` applies it (the demo operator must run in the cluster).
DEMO_CATALOG = Path(__file__).resolve().parent.parent / "demo_operator" / "catalog.yaml"
for resource in load_resources(DEMO_CATALOG.read_text(), str(DEMO_CATALOG)):
    object_args = {"namespace": namespace, "object_name": resource.metadata.name}
    if isinstance(resource, ServiceModel):
        SFService(
            resource.metadata.name or "", {**resource.spec.model_dump(exclude_none=True), **object_args}, after_crds
        )
    elif isinstance(resource, PlanModel):
        SFPlan(resource.metadata.name or "", {**resource.spec.model_dump(exclude_none=True), **object_args}, after_crds)

pulumi.export("namespace", control_plane.namespace)
pulumi.export("crds", control_plane.crd_names)
pulumi.export("brokerUrl", control_plane.broker_url)
pulumi.export("brokerUsername", control_plane.broker_username)
pulumi.export("brokerPassword", control_plane.broker_password)
pulumi.export("plan", small.plan_id)
pulumi.export("service", postgresql.service_id)
