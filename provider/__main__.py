"""Entry point of the opbroker component provider plugin (declared by ``PulumiPlugin.yaml``).

The Pulumi CLI starts it when a program in any language uses ``opbroker:index:*`` resources; it is also
runnable as ``python -m opbroker.provider``. The schema is inferred from the components' typed args.
"""

from pulumi.provider.experimental import component_provider_host

from opbroker.components import COMPONENTS
from opbroker.provider.host import PACKAGE, version

if __name__ == "__main__":
    component_provider_host(name=PACKAGE, components=list(COMPONENTS), version=version())
