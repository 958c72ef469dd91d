"""The gRPC edge of the provider's custom resources: ``Check``, ``Diff``, ``Create``, ``Read``, ``Update`` and
``Delete`` of ``opbroker:index:ServiceInstance`` and ``opbroker:index:ServiceBinding``.

The SDK's provider server (``pulumi.provider.server.ProviderServicer``) serves components only (Construct, Call,
Invoke); :class:`ProviderServicer` adds the resource methods of Pulumi's ``ResourceProvider`` service on top.
Each method deserializes the engine's properties, renames them (camelCase on the wire, snake_case in
``osb_providers``), runs the OSB logic in a worker thread (it blocks on HTTP and polling; the server keeps
answering the engine meanwhile, e.g. ``Cancel``), and serializes the result with the secrets marked: the broker
password and a binding's credentials always, and every property the program passed as a secret.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs installed
import pulumi
from google.protobuf import empty_pb2, struct_pb2  # type: ignore[import-untyped]
from pulumi.output import Unknown
from pulumi.provider import server
from pulumi.runtime import proto, rpc
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc

from opbroker.provider import osb_providers as logic
from opbroker.provider import osb_schema as schema

#: Seconds a warning to the engine may take; the engine answers at once, a hang loses only the warning.
LOG_DEADLINE = 10.0

_LOGIC: Mapping[str, Callable[[], logic.ServiceInstanceProvider | logic.ServiceBindingProvider]] = {
    schema.INSTANCE_TYPE: logic.ServiceInstanceProvider,
    schema.BINDING_TYPE: logic.ServiceBindingProvider,
}


def type_of(urn: str) -> str:
    """The resource type of a URN (``urn:pulumi:<stack>::<project>::<parent types$>type::<name>``)."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def platform_of(urn: str) -> logic.Platform:
    stack = urn.split("::")[0].removeprefix("urn:pulumi:")
    return logic.Platform(project=urn.split("::")[1], stack=stack)


def _secret_keys(props: Mapping[str, Any]) -> set[str]:
    return {k for k, v in props.items() if rpc.is_rpc_secret(v)}


async def _settled(value: Any) -> Any:
    """Output values (the engine sends them, dependencies and all, since the provider accepts outputs — a
    component's output passed on, e.g. ``${postgresql.serviceId}`` in YAML) as plain values: unknown during a
    preview (``rpc.UNKNOWN``, which the OSB logic knows), secret-wrapped when secret."""
    if isinstance(value, Unknown):  # what deserializing with keep_unknowns makes of an unknown
        return rpc.UNKNOWN
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return rpc.UNKNOWN
        plain = await _settled(await value.future())
        return rpc.wrap_rpc_secret(plain) if await value.is_secret() else plain
    if isinstance(value, dict):
        return {k: await _settled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [await _settled(v) for v in value]
    return value


async def _decode(
    type_: str, struct: struct_pb2.Struct, *, keep_unknowns: bool = False
) -> tuple[dict[str, Any], set[str]]:
    """The properties in snake_case with their secret wrappers removed, and the names that were secret."""
    raw = await _settled(rpc.deserialize_properties(struct, keep_unknowns=keep_unknowns) or {})
    named = schema.to_python(type_, raw)
    return {k: logic._plain(v) for k, v in named.items()}, _secret_keys(named)


async def _encode(type_: str, props: Mapping[str, Any], secret: set[str]) -> struct_pb2.Struct:
    """snake_case properties to the wire, the always-secret ones and ``secret`` wrapped as secrets."""
    marked = secret | schema.secrets(type_)
    wrapped = {
        k: rpc.wrap_rpc_secret(v) if k in marked and v is not None and v != rpc.UNKNOWN else v for k, v in props.items()
    }
    return await rpc.serialize_properties(schema.to_wire(type_, wrapped), {})


def _wire_names(type_: str, names: list[str]) -> list[str]:
    return list(schema.to_wire(type_, dict.fromkeys(names)))


class ProviderServicer(server.ProviderServicer):
    """The SDK's component servicer plus the OSB resources' CRUD methods."""

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> None:
        """The engine shows ``details`` as the error: the OSB message, no Python traceback."""
        await context.abort(grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")

    async def _warn(self, urn: str, message: str) -> None:
        """A warning on the resource, shown by the engine (best effort: a failed log loses only the warning)."""
        try:
            async with grpc.aio.insecure_channel(self.engine_address) as channel:
                request = engine_pb2.LogRequest(severity=engine_pb2.WARNING, message=message, urn=urn)
                await engine_pb2_grpc.EngineStub(channel).Log(request, timeout=LOG_DEADLINE)
        except grpc.RpcError:
            pass

    @staticmethod
    def _logic(type_: str) -> Any:
        """The OSB logic of a resource type (a new one per call: it holds no state between calls)."""
        make = _LOGIC.get(type_)
        if make is None:
            raise ValueError(f"the opbroker provider has no custom resource {type_!r}")
        return make()

    async def Check(self, request: proto.CheckRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        olds, _ = await _decode(type_, request.olds, keep_unknowns=True)
        news, secret = await _decode(type_, request.news, keep_unknowns=True)
        result = self._logic(type_).check(olds, news, platform_of(request.urn))
        failures = [
            proto.CheckFailure(property=_wire_names(type_, [f.property])[0], reason=f.reason) for f in result.failures
        ]
        return proto.CheckResponse(inputs=await _encode(type_, result.inputs, secret), failures=failures)

    async def Diff(self, request: proto.DiffRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        olds, _ = await _decode(type_, request.olds, keep_unknowns=True)
        news, _ = await _decode(type_, request.news, keep_unknowns=True)
        result = self._logic(type_).diff(request.id, olds, news)
        return proto.DiffResponse(
            changes=proto.DiffResponse.DIFF_SOME if result.changes else proto.DiffResponse.DIFF_NONE,
            replaces=_wire_names(type_, result.replaces),
            deleteBeforeReplace=result.delete_before_replace,
            diffs=_wire_names(type_, result.changed),
        )

    async def Create(self, request: proto.CreateRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        props, secret = await _decode(type_, request.properties)
        try:
            result = await asyncio.to_thread(self._logic(type_).create, props)
        except Exception as exc:  # the OSB error (after orphan mitigation) is the engine's error
            await self._fail(context, exc)
            raise
        return proto.CreateResponse(id=result.id, properties=await _encode(type_, result.outs, secret))

    async def Read(self, request: proto.ReadRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        props, secret = await _decode(type_, request.properties)
        inputs, input_secret = await _decode(type_, request.inputs)
        if not props:
            props = inputs  # an import by id: what the program declares is all there is
        if not props.get("broker_url"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{type_} {request.id!r}: an id alone does not say which broker holds it; declare the resource with "
                "its broker connection and the same id instead (docs/pulumi.md: the dynamic-provider version's state)",
            )
        try:
            result = await asyncio.to_thread(self._logic(type_).read, request.id, props)
        except Exception as exc:
            await self._fail(context, exc)
            raise
        if result.note:
            await self._warn(request.urn, result.note)
        if not result.id:
            return proto.ReadResponse(id="")  # gone at the broker: the engine drops it from the state
        return proto.ReadResponse(
            id=result.id,
            properties=await _encode(type_, result.outs, secret | input_secret),
            inputs=await _encode(type_, inputs or _inputs_of(type_, result.outs), input_secret | secret),
        )

    async def Update(self, request: proto.UpdateRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        olds, _ = await _decode(type_, request.olds)
        news, secret = await _decode(type_, request.news)
        try:
            result = await asyncio.to_thread(self._logic(type_).update, request.id, olds, news)
        except Exception as exc:
            await self._fail(context, exc)
            raise
        return proto.UpdateResponse(properties=await _encode(type_, result.outs, secret))

    async def Delete(self, request: proto.DeleteRequest, context: grpc.aio.ServicerContext) -> Any:
        type_ = type_of(request.urn)
        props, _ = await _decode(type_, request.properties)
        try:
            await asyncio.to_thread(self._logic(type_).delete, request.id, props)
        except Exception as exc:
            await self._fail(context, exc)
            raise
        return empty_pb2.Empty()


def _inputs_of(type_: str, outs: Mapping[str, Any]) -> dict[str, Any]:
    names = {p.name for p in schema.PROPS[type_] if p.input}
    return {k: v for k, v in outs.items() if k in names}
