"""The component provider: the components of ``opbroker.components``, usable from every Pulumi language.

``provider/__main__.py`` hosts it (the plugin's entry point, declared by ``PulumiPlugin.yaml``); tests and
``python -m opbroker.provider.schemagen`` build the same provider in-process to read its schema.
"""

import json
from importlib import metadata
from typing import Any

import pulumi
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError

from opbroker.components import COMPONENTS

#: The package name: type tokens are ``opbroker:index:<Component>``.
PACKAGE = "opbroker"


def version() -> str:
    """The provider's version: the installed distribution's."""
    try:
        return metadata.version("opbroker")
    except metadata.PackageNotFoundError:
        return "0.0.0"


class OpbrokerProvider(ComponentProvider):
    """The component provider, reporting a component's invalid args as invalid properties.

    The SDK wraps whatever a component's constructor raises in ``ComponentInitError``, which the engine shows as
    "Unexpected <class 'Exception'>" with a Python traceback (seen with the real engine); an
    ``InputPropertiesError`` (what ``InvalidArgsError`` is) is re-raised as a plain one, so the engine reports
    each property at fault and nothing else."""

    def construct(
        self, name: str, resource_type: str, inputs: Any, options: pulumi.ResourceOptions | None = None
    ) -> Any:
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as exc:
            inner = exc.inner
            if isinstance(inner, pulumi.InputPropertiesError):
                # Not the component's own error class: that is also a RunError, which the provider server passes
                # through as an unexpected exception before it looks for invalid properties.
                raise pulumi.InputPropertiesError(inner.message, inner.errors) from None
            raise


def provider() -> ComponentProvider:
    """The component provider for every opbroker component (the schema is inferred from their args)."""
    return OpbrokerProvider(list(COMPONENTS), PACKAGE, version=version())


def schema() -> dict[str, Any]:
    """The provider's Pulumi package schema."""
    text = provider().schema
    if text is None:  # a ComponentProvider always has one (inferred from the args); the base Provider may not
        raise RuntimeError("the component provider has no schema")
    parsed: dict[str, Any] = json.loads(text)
    return parsed
