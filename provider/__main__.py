"""Entry point of the opbroker component provider plugin (declared by ``PulumiPlugin.yaml``; started by the
executable ``pulumi-resource-opbroker`` beside it, which the engine prefers to the manifest's runtime).

The Pulumi CLI starts it when a program in any language uses ``opbroker:index:*`` resources; it is also
runnable as ``python -m opbroker.provider``. The schema is inferred from the components' typed args.
"""

import sys

from pulumi.provider import main

from opbroker.provider.host import provider

if __name__ == "__main__":
    main(provider(), sys.argv[1:])
