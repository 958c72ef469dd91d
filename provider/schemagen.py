"""Print the component provider's schema (``provider/schema.json`` is this output, checked by a test).

python -m opbroker.provider.schemagen > provider/schema.json
"""

import json
import sys

from opbroker.provider import host


def render() -> str:
    """The schema as stable, diff-friendly JSON."""
    return json.dumps(host.schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
