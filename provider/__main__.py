"""Entry point of the opbroker component provider plugin (declared by ``PulumiPlugin.yaml``; started by the
executable ``pulumi-resource-opbroker`` beside it, which the engine prefers to the manifest's runtime).

The Pulumi CLI starts it when a program in any language uses ``opbroker:index:*`` resources; it is also
runnable as ``python -m opbroker.provider``. The schema is inferred from the components' typed args, plus the
OSB resources ``ServiceInstance`` and ``ServiceBinding`` (``opbroker.provider.osb_schema``).
"""

import sys

from opbroker.provider.host import serve

if __name__ == "__main__":
    serve(sys.argv[1:])
