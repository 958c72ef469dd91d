"""The opbroker components from Python: a catalog whose templates are files, a second cluster with its
kubeconfig, a registered service and a claim on it — and, when ``brokerUrl`` is configured, an instance
and a binding provisioned through that OSB broker (ours or anyone's), resources of the opbroker provider
plugin (Pulumi.yaml's ``packages``; ``opbroker.stacks.Settings`` writes the same for inline programs).

    pulumi config set namespace opbroker                      # where the control plane runs
    pulumi config set --secret cluster2Kubeconfig "$(cat kubeconfig-2)"   # optional
    pulumi config set brokerUrl http://localhost:8080         # optional, e.g. a port-forwarded broker
    pulumi config set brokerUsername opbroker
    pulumi config set --secret brokerPassword ...
"""

from pathlib import Path

import pulumi

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.components import RegisteredService, ServiceClaim, SFCluster, SFPlan, SFService
from opbroker.provider.osb_resources import ServiceBinding, ServiceInstance

SERVICE_ID = "1f6b1d6e-9b7a-4bb4-8d3c-3c0f6c1b5a01"
PLAN_ID = "0a4e4f5c-8d2b-4b8e-9f0e-6c7d8e9fa102"
TEMPLATES = Path(__file__).resolve().parent / "templates"

config = pulumi.Config()
namespace = config.get("namespace") or DEFAULT_NAMESPACE

redis = SFService(
    "redis",
    {
        "id": SERVICE_ID,
        "name": "redis",
        "description": "Redis with Sentinel failover (spotahome redis-operator)",
        "bindable": True,
        "tags": ["redis", "cache"],
        "namespace": namespace,
    },
)
small = SFPlan(
    "redis-small",
    {
        "id": PLAN_ID,
        "name": "small",
        "description": "Three Redis replicas with 256 MiB each",
        "service_id": SERVICE_ID,
        "context": {"replicas": 3, "memory": "256Mi"},
        "base_dir": str(TEMPLATES),
        "templates": [
            {"action": "provision", "file": "provision.yaml.j2"},
            {"action": "sources", "file": "sources.yaml.j2"},
            {"action": "status", "file": "status.yaml.j2"},
        ],
        "namespace": namespace,
    },
)

kubeconfig = config.get_secret("cluster2Kubeconfig")
if kubeconfig is not None:
    SFCluster(
        "cluster-2",
        {
            "cluster_id": "2",
            "kubeconfig": kubeconfig,
            "scheduling_limit_percentage": 80,
            "labels": {"region": "eu-west"},
            "namespace": namespace,
        },
    )

orders_db = RegisteredService(
    "orders-db",
    {
        "service_class_identity": [{"name": "type", "value": "postgresql"}, {"name": "provider", "value": "aws"}],
        "service_endpoint_definition": [
            {"name": "host", "value": "orders-db.example.internal"},
            {"name": "port", "value": "5432"},
            {"name": "password", "value_from_secret": {"name": "orders-db-credentials", "key": "password"}},
        ],
        "constraints": {"environments": ["dev", "!prod"]},
        "healthcheck": {"tcp": {"host": "orders-db.example.internal", "port": 5432}, "failure_threshold": 3},
        "sla": "L3",
        "namespace": namespace,
    },
)
ServiceClaim(
    "orders-app-db",
    {
        "service_class_identity": [{"name": "type", "value": "postgresql"}],
        "service_endpoint_definition_keys": ["host", "port", "password"],
        "environment_tag": "dev",
        "application": {"kind": "Deployment", "selector": {"match_labels": {"app": "orders"}}},
        "namespace": namespace,
    },
    pulumi.ResourceOptions(depends_on=[orders_db]),
)

broker_url = config.get("brokerUrl")
if broker_url:
    connection = {
        "broker_url": broker_url,
        "broker_username": config.get("brokerUsername") or "opbroker",
        "broker_password": config.require_secret("brokerPassword"),
    }
    cache = ServiceInstance(
        "orders-cache",
        **connection,
        service_id=SERVICE_ID,
        plan_id=PLAN_ID,
        parameters={},
        opts=pulumi.ResourceOptions(depends_on=[small]),
    )
    binding = ServiceBinding(
        "orders-cache-app",
        **connection,
        instance_id=cache.instance_id,
        service_id=SERVICE_ID,
        plan_id=PLAN_ID,
    )
    pulumi.export("cacheInstance", cache.instance_id)
    pulumi.export("cacheCredentials", binding.credentials)

pulumi.export("plan", small.plan_id)
pulumi.export("registeredService", orders_db.object_name)
