"""Entry point of the opbroker component provider plugin (declared by ``PulumiPlugin.yaml``; also started as the
executable plugin ``provider/plugins/pulumi-resource-opbroker``).

The Pulumi CLI starts it when a program in any language uses ``opbroker:index:*`` resources; it is also
runnable as ``python -m opbroker.provider``. The schema is inferred from the components' typed args.
"""

import sys

from pulumi.provider import main

from opbroker.provider.host import provider

if __name__ == "__main__":
    main(provider(), sys.argv[1:])
