"""The component provider: the components of ``opbroker.components``, usable from every Pulumi language.

``provider/__main__.py`` hosts it (the plugin's entry point, declared by ``PulumiPlugin.yaml``); tests and
``python -m opbroker.provider.schemagen`` build the same provider in-process to read its schema.
"""

import json
from importlib import metadata
from typing import Any

from pulumi.provider.experimental.component import ComponentProvider

from opbroker.components import COMPONENTS

#: The package name: type tokens are ``opbroker:index:<Component>``.
PACKAGE = "opbroker"


def version() -> str:
    """The provider's version: the installed distribution's."""
    try:
        return metadata.version("opbroker")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def provider() -> ComponentProvider:
    """The component provider for every opbroker component (the schema is inferred from their args)."""
    return ComponentProvider(list(COMPONENTS), PACKAGE, version=version())


def schema() -> dict[str, Any]:
    """The provider's Pulumi package schema."""
    return json.loads(provider().schema)
