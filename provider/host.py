"""The opbroker provider: the components of ``opbroker.components`` and the OSB resources ``ServiceInstance`` and
``ServiceBinding`` (``opbroker.provider.custom``), usable from every Pulumi language.

``provider/__main__.py`` hosts it (:func:`serve`; the plugin's entry point, declared by ``PulumiPlugin.yaml``); tests
and ``python -m opbroker.provider.schemagen`` build the same provider in-process to read its schema: the one the
SDK infers from the components' args, plus the OSB resources' entries (``opbroker.provider.osb_schema``).
"""

import argparse
import asyncio
import contextlib
import json
import sys
from importlib import metadata
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs installed
import pulumi
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError
from pulumi.runtime.proto import provider_pb2_grpc

from opbroker.components import COMPONENTS
from opbroker.provider import custom, osb_schema

#: The package name: type tokens are ``opbroker:index:<Component>``.
PACKAGE = "opbroker"
#: The gRPC server's options, the values Pulumi's own provider servers use (a private constant of the SDK,
#: ``pulumi.runtime._grpc_settings``, so spelled out here): messages up to 400 MiB (a large program's
#: ``construct`` carries every input), and a request may wait half an hour for the server to take it.
GRPC_SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", 400 * 1024 * 1024),
    ("grpc.server_max_unrequested_time_in_server", 30 * 60),
]


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
    """The provider: every opbroker component (the schema inferred from their args) and the OSB resources."""
    made = OpbrokerProvider(list(COMPONENTS), PACKAGE, version=version())
    if made.schema is None:  # a ComponentProvider always has one (inferred from the args); the base Provider may not
        raise RuntimeError("the component provider has no schema")
    inferred = json.loads(made.schema)
    inferred["resources"] = {**inferred.get("resources", {}), **osb_schema.resources()}
    made.schema = json.dumps(inferred)
    return made


def schema() -> dict[str, Any]:
    """The provider's Pulumi package schema."""
    parsed: dict[str, Any] = json.loads(provider().schema or "{}")
    return parsed


def serve(args: list[str]) -> None:
    """Serve the provider to the engine at ``args[0]`` (what ``pulumi.provider.main`` does, with the servicer that
    also serves the OSB resources): print the gRPC port, serve until stopped."""
    parser = argparse.ArgumentParser(description="the opbroker Pulumi provider (gRPC server)")
    parser.add_argument("engine", help="the Pulumi engine's address")
    known, _ = parser.parse_known_args(args)

    async def run() -> None:
        grpc_server = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
        servicer = custom.ProviderServicer(provider(), args, engine_address=known.engine)
        provider_pb2_grpc.add_ResourceProviderServicer_to_server(servicer, grpc_server)
        port = grpc_server.add_insecure_port(address="127.0.0.1:0")
        await grpc_server.start()
        sys.stdout.buffer.write(f"{port}\n".encode())
        sys.stdout.buffer.flush()
        await grpc_server.wait_for_termination()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
