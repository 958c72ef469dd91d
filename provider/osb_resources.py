"""The typed Python face of the provider's OSB resources: ``ServiceInstance`` and ``ServiceBinding`` are
``pulumi.CustomResource`` classes of type ``opbroker:index:ServiceInstance``/``ServiceBinding``, served by the
opbroker provider plugin (``provider/pulumi-resource-opbroker``) as in every other language. Nothing of the
provider runs in the program: the engine starts the plugin, which provisions and binds (``osb_providers``).

The engine finds the plugin through the project's ``packages: {opbroker: <provider folder>}`` (what
``opbroker.stacks.Settings`` writes for inline programs; a ``pulumi up`` project lists it in its Pulumi.yaml).

State written by the dynamic-provider version of these classes (type ``pulumi-python:dynamic:Resource``) is not
carried over: see docs/pulumi.md (*OSB resources*) for the re-import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from opbroker.provider import osb_schema as schema
from opbroker.provider.osb_providers import DEFAULT_POLL_INTERVAL, DEFAULT_TIMEOUT


class _OSBResource(pulumi.CustomResource):
    """Python names (snake_case) to the provider's (camelCase) and back, from the schema's table."""

    _token: str

    def __init__(self, resource_name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None) -> None:
        outputs = {p.name: None for p in schema.PROPS[self._token] if not p.input}
        secret = [p.name for p in schema.PROPS[self._token] if p.secret]
        merged = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=secret))
        super().__init__(self._token, resource_name, {**props, **outputs}, merged)

    def translate_input_property(self, prop: str) -> str:
        return schema.to_wire(self._token, {prop: None}).popitem()[0]

    def translate_output_property(self, prop: str) -> str:
        return schema.to_python(self._token, {prop: None}).popitem()[0]


class ServiceInstance(_OSBResource):
    """A service instance at any OSB broker, provisioned on create, updated in place for plan, parameter
    and context changes, deprovisioned on delete. Async operations are polled until done or ``timeout``."""

    _token = schema.INSTANCE_TYPE

    instance_id: pulumi.Output[str]
    """The OSB instance id (generated unless given)."""
    dashboard_url: pulumi.Output[str | None]
    """Dashboard URL the broker returned, if any."""
    state: pulumi.Output[str]
    """State of the last operation (``succeeded``)."""
    broker_api_version: pulumi.Output[str]
    """The OSB version the broker accepted (``api_version`` or an older one it stepped down to on 412)."""

    def __init__(
        self,
        resource_name: str,
        *,
        broker_url: pulumi.Input[str],
        broker_username: pulumi.Input[str],
        broker_password: pulumi.Input[str],
        service_id: pulumi.Input[str],
        plan_id: pulumi.Input[str],
        parameters: pulumi.Input[Mapping[str, Any]] | None = None,
        context: pulumi.Input[Mapping[str, Any]] | None = None,
        organization_guid: pulumi.Input[str] | None = None,
        space_guid: pulumi.Input[str] | None = None,
        instance_id: pulumi.Input[str] | None = None,
        api_version: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        orphan_mitigation: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "broker_url": broker_url,
            "broker_username": broker_username,
            "broker_password": pulumi.Output.secret(broker_password),
            "service_id": service_id,
            "plan_id": plan_id,
            "parameters": parameters,
            "context": context,
            "organization_guid": organization_guid,
            "space_guid": space_guid,
            "instance_id": instance_id,
            "api_version": api_version,
            "timeout": timeout,
            "poll_interval": poll_interval,
            "orphan_mitigation": orphan_mitigation,
        }
        super().__init__(resource_name, props, opts)


class ServiceBinding(_OSBResource):
    """A binding at any OSB broker; its credentials (and the broker password) are secret outputs."""

    _token = schema.BINDING_TYPE

    binding_id: pulumi.Output[str]
    """The OSB binding id (generated unless given)."""
    credentials: pulumi.Output[dict[str, Any]]
    """The bind response's credentials (secret)."""
    syslog_drain_url: pulumi.Output[str | None]
    route_service_url: pulumi.Output[str | None]
    volume_mounts: pulumi.Output[list[Any] | None]
    broker_api_version: pulumi.Output[str]
    """The OSB version the broker accepted (``api_version`` or an older one it stepped down to on 412)."""

    def __init__(
        self,
        resource_name: str,
        *,
        broker_url: pulumi.Input[str],
        broker_username: pulumi.Input[str],
        broker_password: pulumi.Input[str],
        instance_id: pulumi.Input[str],
        service_id: pulumi.Input[str],
        plan_id: pulumi.Input[str],
        parameters: pulumi.Input[Mapping[str, Any]] | None = None,
        bind_resource: pulumi.Input[Mapping[str, Any]] | None = None,
        context: pulumi.Input[Mapping[str, Any]] | None = None,
        binding_id: pulumi.Input[str] | None = None,
        api_version: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        orphan_mitigation: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "broker_url": broker_url,
            "broker_username": broker_username,
            "broker_password": pulumi.Output.secret(broker_password),
            "instance_id": instance_id,
            "service_id": service_id,
            "plan_id": plan_id,
            "parameters": parameters,
            "bind_resource": bind_resource,
            "context": context,
            "binding_id": binding_id,
            "api_version": api_version,
            "timeout": timeout,
            "poll_interval": poll_interval,
            "orphan_mitigation": orphan_mitigation,
        }
        super().__init__(resource_name, props, opts)
