"""The opbroker stack (``Pulumi.yaml`` at the repository root): the control plane plus an example catalog.

    pulumi config set image <registry>/opbroker:<tag>          # the image holding the opbroker command
    pulumi config set --secret brokerPassword <password>       # optional: generated when unset
    pulumi preview && pulumi up

The catalog is a PostgreSQL offering backed by the Zalando postgres-operator, with a small inline jinja2
plan (examples/catalog/ holds the fuller one), and the demo catalog — the very objects `opbroker dev`
applies, read from examples/demo_operator/catalog.yaml. Every custom resource waits for the control
plane's CRDs and namespace. What is declared lives in ``declarations.py`` beside this file.
"""

import pulumi
from declarations import catalog, control_plane_args

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.components import ControlPlane, SFPlan, SFService
from opbroker.provider.host import version

config = pulumi.Config()
namespace = config.get("namespace") or DEFAULT_NAMESPACE
broker: dict = {"replicas": config.get_int("brokerReplicas") or 2}
password = config.get_secret("brokerPassword")
if password is not None:
    broker["password"] = password

control_plane = ControlPlane(
    "opbroker",
    control_plane_args(
        image=config.get("image") or f"opbroker:{version()}",
        namespace=namespace,
        # `pulumi config set awaitDeployments false` on a cluster whose pods cannot start yet (no nodes).
        await_deployments=config.get_bool("awaitDeployments") is not False,
        broker=broker,
    ),
)
# The catalog waits for the CRDs and the namespace, not for the controller and broker to be running.
after_crds = pulumi.ResourceOptions(depends_on=control_plane.catalog_prerequisites)
components = {"SFService": SFService, "SFPlan": SFPlan}
declared = {name: components[kind](name, args, after_crds) for kind, name, args in catalog(namespace)}

pulumi.export("namespace", control_plane.namespace)
pulumi.export("crds", control_plane.crd_names)
pulumi.export("brokerUrl", control_plane.broker_url)
pulumi.export("brokerUsername", control_plane.broker_username)
pulumi.export("brokerPassword", control_plane.broker_password)
pulumi.export("plan", declared["postgresql-small"].plan_id)  # type: ignore[attr-defined]
pulumi.export("service", declared["postgresql"].service_id)  # type: ignore[attr-defined]
