"""The opbroker stack (``Pulumi.yaml`` at the repository root): the control plane plus an example catalog.

    pulumi config set image <registry>/opbroker:<tag>          # the image holding the opbroker command
    pulumi config set --secret brokerPassword <password>       # optional: generated when unset
    pulumi config set retainCrds false                         # optional: destroy removes the CRDs too
    pulumi preview && pulumi up

The catalog is a PostgreSQL offering backed by the Zalando postgres-operator, with a small inline jinja2
plan (examples/catalog/ holds the fuller one), and the demo catalog — the very objects `opbroker dev`
applies, read from examples/demo_operator/catalog.yaml. Every custom resource waits for the control
plane's CRDs and namespace. What is declared lives in ``declarations.py`` beside this file.
"""

import pulumi
from declarations import catalog, control_plane_args

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.provider.host import version
from opbroker.stacks import control_plane_with_catalog

config = pulumi.Config()
namespace = config.get("namespace") or DEFAULT_NAMESPACE
broker: dict = {"replicas": config.get_int("brokerReplicas") or 2}
password = config.get_secret("brokerPassword")
if password is not None:
    broker["password"] = password
control_plane = control_plane_args(
    image=config.get("image") or f"opbroker:{version()}",
    namespace=namespace,
    # `pulumi config set awaitDeployments false` on a cluster whose pods cannot start yet (no nodes).
    await_deployments=config.get_bool("awaitDeployments") is not False,
    broker=broker,
)
retain_crds = config.get_bool("retainCrds")  # `false`: destroy removes the CRDs (and every object of theirs)
if retain_crds is not None:
    control_plane["retain_crds"] = retain_crds

# The catalog waits for the CRDs and the namespace, not for the controller and broker to be running; the stack
# exports namespace, crds, brokerUrl, brokerUsername and brokerPassword (opbroker.stacks).
declared = control_plane_with_catalog(control_plane, catalog(namespace)).catalog
pulumi.export("plan", declared["postgresql-small"].plan_id)  # type: ignore[union-attr]
pulumi.export("service", declared["postgresql"].service_id)  # type: ignore[union-attr]
