"""The Service Catalog kinds (``servicecatalog.k8s.io/v1alpha1``) as components: ``Broker``, ``Instance`` and
``Binding``, so that infra repositories declare brokers, instances and bindings as code.

Like the other components, each validates its args against ``opbroker.api.servicecatalog`` before anything is
registered (``pulumi preview`` stops on a bad broker URL or instance name and names the arg), registers one
custom resource named like the component, and can wait for the controller's ``Ready`` condition
(``wait_for_ready``, ``pulumi.com/waitFor``; off by default, as for the other components).

Confidential values are never plain: broker credentials and secret parameters are taken as (secret) Outputs or
plain values, go into a Secret the component creates (its ``stringData`` a Pulumi secret and an additional
secret output), and the custom resource only names that Secret (``authInfo.*.secretRef``, ``parametersFrom``).

Where a value is an Output (a namespace, the Instance a Binding binds to), the model is validated with a
placeholder and the Output goes into the manifest, carrying its dependencies: a Binding given
``instance_name=instance.object_name`` waits for the Instance.

No ``from __future__ import annotations`` here: the component provider reads these annotations at run time.
"""

import base64
import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pydantic import TypeAdapter, ValidationError

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.meta import KubeResource
from opbroker.api.servicecatalog import Binding as BindingModel
from opbroker.api.servicecatalog import Broker as BrokerModel
from opbroker.api.servicecatalog import DNSLabel, RelistBehavior
from opbroker.api.servicecatalog import Instance as InstanceModel
from opbroker.components import resources
from opbroker.components.primaza import ApplicationSelectorArgs

BROKER_TYPE = "opbroker:index:Broker"
INSTANCE_TYPE = "opbroker:index:Instance"
BINDING_TYPE = "opbroker:index:Binding"
#: Keys of the broker credentials Secret (what ``authInfo.basic`` / ``authInfo.bearer`` read).
USERNAME_KEY = "username"
PASSWORD_KEY = "password"
TOKEN_KEY = "token"
#: Key of the parameters Secret a component creates for ``secret_parameters`` (a JSON object).
PARAMETERS_KEY = "parameters"
#: What a value that is an Output is validated as (the Output replaces it in the manifest).
_PLACEHOLDER_NAME = "placeholder"
_PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


class BasicAuthArgs(TypedDict):
    """HTTP basic-auth credentials for a broker. Pass Pulumi secrets (``pulumi.Output.secret``, secret config)."""

    username: pulumi.Input[str]
    """The user name (stored in the Secret, key ``username``)."""
    password: pulumi.Input[str]
    """The password (stored in the Secret, key ``password``)."""


# Not ``BrokerArgs``: the ControlPlane's broker settings have that name, and the component provider keys types
# and their field docs by class name.
class ServiceCatalogBrokerArgs(TypedDict):
    """An OSB broker registered with the cluster (a cluster-scoped ``Broker``), with the Secret holding its
    credentials when it needs authentication."""

    url: str
    """The broker's base URL (http or https)."""
    basic_auth: NotRequired[BasicAuthArgs]
    """Basic-auth credentials; the component creates a ``kubernetes.io/basic-auth`` Secret holding them.
    At most one of ``basic_auth`` and ``bearer_token``."""
    bearer_token: NotRequired[pulumi.Input[str]]
    """A bearer token (without ``Bearer``); the component creates a Secret holding it (key ``token``)."""
    credentials_namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the credentials Secret (a Broker is cluster-scoped, the Secret is not); defaults to
    ``opbroker``, the control plane's. It must be the control plane's namespace: the controller reads a Broker's
    credentials nowhere else (``AuthSecretNotInControlPlane``). Pass the ControlPlane's ``namespace`` output to
    wait for it."""
    credentials_secret_name: NotRequired[str]
    """Name of the credentials Secret; defaults to ``<object_name>-auth``."""
    ca_bundle: NotRequired[str]
    """PEM bundle of CA certificates trusted for the broker's serving certificate (sent base64-encoded)."""
    insecure_skip_tls_verify: NotRequired[bool]
    """Do not verify the broker's TLS certificate (strongly discouraged; use ``ca_bundle``)."""
    relist_behavior: NotRequired[RelistBehavior]
    """``Duration`` (the default): fetch the catalog again every ``relist_duration``; ``Manual``: only when the
    spec changes or ``relist_requests`` is increased."""
    relist_duration: NotRequired[str]
    """How often the catalog is fetched again, as a Go duration (``15m``, ``1h30m``); default ``15m``."""
    relist_requests: NotRequired[int]
    """Increase to make the controller fetch the catalog now; never decrease it."""
    object_name: NotRequired[str]
    """Name of the Broker object; defaults to the component's name."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the controller fetched the broker's catalog (``Ready``, ``pulumi.com/waitFor``)."""


class ParametersSecretKeyRefArgs(TypedDict):
    """A key of an existing Secret in the object's own namespace."""

    name: str
    """Name of the Secret."""
    key: str
    """The key, whose value is a JSON object of parameters."""


class ParametersFromArgs(TypedDict):
    """Parameters read from an existing Secret (a JSON object merged into the parameters)."""

    secret_key_ref: ParametersSecretKeyRefArgs
    """The Secret key holding the JSON object."""


class InstanceArgs(TypedDict):
    """A request to provision a service class's plan (a namespaced ``Instance``), with the Secret holding its
    secret parameters when there are any."""

    namespace: pulumi.Input[str]
    """Namespace of the Instance (and of its parameters Secret)."""
    service_class_name: str
    """The ServiceClass: its object name, or the broker's name for the service (externalName). Immutable."""
    plan_name: NotRequired[str]
    """The plan; may be omitted when the class has exactly one. Changing it asks for a plan update."""
    parameters: NotRequired[dict[str, Any]]
    """Parameters for the broker, stored plainly in the Instance: nothing confidential here."""
    secret_parameters: NotRequired[pulumi.Input[dict[str, Any]]]
    """Confidential parameters (values may be Pulumi secrets): the component writes them as a JSON object to a
    Secret and lists it in ``parametersFrom``. A name may not be both here and in ``parameters``."""
    parameters_secret_name: NotRequired[str]
    """Name of the Secret for ``secret_parameters``; defaults to ``<object_name>-parameters``."""
    parameters_from: NotRequired[list[ParametersFromArgs]]
    """Parameters read from Secrets that exist already."""
    external_id: NotRequired[str]
    """The OSB instance id; derived from the Instance's uid by the controller when omitted. Immutable."""
    share_with: NotRequired[list[str]]
    """Namespaces whose Bindings may bind to the Instance (``*``: every namespace); Bindings in its own
    namespace always may, those elsewhere only with this consent."""
    update_requests: NotRequired[int]
    """Increase to make the controller send an update request; never decrease it."""
    object_name: NotRequired[str]
    """Name of the Instance object; defaults to the component's name."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the broker provisioned the instance (``Ready``, ``pulumi.com/waitFor``)."""


class BindingArgs(TypedDict):
    """A request for credentials to an Instance (a namespaced ``Binding``): the controller writes them to a
    Secret, and projects it into the selected workloads when ``application`` is given."""

    namespace: pulumi.Input[str]
    """Namespace of the Binding and of the credentials Secret."""
    instance_name: pulumi.Input[str]
    """Name of the Instance to bind to. Pass an ``Instance`` component's ``object_name`` output to create the
    Binding after the Instance. Immutable."""
    instance_namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the Instance when it is not the Binding's (the Instance's ``namespace`` output); that Instance
    must list the Binding's namespace in its ``share_with``."""
    secret_name: NotRequired[str]
    """Name of the Secret the credentials are written to; defaults to the Binding's name. Immutable. The
    controller creates it: an existing Secret of that name is never overwritten."""
    application: NotRequired[ApplicationSelectorArgs]
    """Workloads in the Binding's namespace to project the credentials into (servicebinding.io)."""
    parameters: NotRequired[dict[str, Any]]
    """Bind parameters, stored plainly in the Binding: nothing confidential here."""
    secret_parameters: NotRequired[pulumi.Input[dict[str, Any]]]
    """Confidential bind parameters: written as a JSON object to a Secret listed in ``parametersFrom``."""
    parameters_secret_name: NotRequired[str]
    """Name of the Secret for ``secret_parameters``; defaults to ``<object_name>-binding-parameters``."""
    parameters_from: NotRequired[list[ParametersFromArgs]]
    """Bind parameters read from Secrets that exist already."""
    external_id: NotRequired[str]
    """The OSB binding id; derived from the Binding's uid by the controller when omitted. Immutable."""
    object_name: NotRequired[str]
    """Name of the Binding object; defaults to the component's name."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on the object."""
    annotations: NotRequired[dict[str, str]]
    """Extra annotations on the object."""
    wait_for_ready: NotRequired[bool]
    """Wait until the credentials are in the Secret (``Ready``, ``pulumi.com/waitFor``)."""


# -- validation -------------------------------------------------------------------------------------------------


def _validate(
    model: type[KubeResource], name: str, manifest: dict[str, Any], renames: Mapping[str, str]
) -> KubeResource:
    """``resources.validate`` with the model's paths spelt as this component's args (``renames``: model path
    prefix -> arg)."""
    try:
        return resources.validate(model, model.KIND, name, manifest)
    except resources.InvalidArgsError as exc:
        problems = []
        for path, reason in exc.problems:
            for prefix, arg in renames.items():
                if path == prefix or path.startswith((prefix + ".", prefix + "[")):
                    path = arg
                    break
            problems.append((path, reason))
        raise resources.InvalidArgsError(model.KIND, name, problems) from None


def _placeholder(value: Any, default: str | None = None) -> Any:
    """What a maybe-Output arg is validated as: itself when plain, a valid name when an Output."""
    if resources.is_output(value):
        return _PLACEHOLDER_NAME if default is None else default
    return value


def _required(kind: str, name: str, args: Mapping[str, Any], *keys: str) -> None:
    missing = [(key, "is required") for key in keys if args.get(key) in (None, "")]
    if missing:
        raise resources.InvalidArgsError(kind, name, missing)


_NAMESPACE = TypeAdapter(DNSLabel)


def _check_namespace(kind: str, name: str, args: Mapping[str, Any], key: str) -> None:
    """A plain namespace arg is a DNS-1123 label (the API server would refuse anything else; say so first)."""
    value = args.get(key)
    if value is None or resources.is_output(value):
        return
    try:
        _NAMESPACE.validate_python(value)
    except ValidationError as exc:
        reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise resources.InvalidArgsError(kind, name, [(key, reason)]) from None


def _parameters_spec(
    kind: str, name: str, args: Mapping[str, Any], default_secret_name: str
) -> tuple[dict[str, Any], str | None]:
    """``parameters`` and ``parametersFrom`` of an Instance or Binding, and the name of the Secret the component
    creates for ``secret_parameters`` (None without them)."""
    spec: dict[str, Any] = {}
    parameters = args.get("parameters")
    if parameters is not None:
        spec["parameters"] = parameters
    parameters_from = list(args.get("parameters_from") or [])
    secret_parameters = args.get("secret_parameters")
    secret_name = None
    if secret_parameters is not None:
        if isinstance(secret_parameters, Mapping):
            both = sorted(str(k) for k in secret_parameters if isinstance(parameters, Mapping) and k in parameters)
            if both:
                reason = f"{', '.join(map(repr, both))} also in parameters: a parameter comes from one place only"
                raise resources.InvalidArgsError(kind, name, [("secret_parameters", reason)])
        elif not resources.is_output(secret_parameters):
            reason = "must be an object of parameter names to values"
            raise resources.InvalidArgsError(kind, name, [("secret_parameters", reason)])
        secret_name = args.get("parameters_secret_name") or default_secret_name
        parameters_from.append({"secret_key_ref": {"name": secret_name, "key": PARAMETERS_KEY}})
    if parameters_from:
        spec["parameters_from"] = parameters_from
    return spec, secret_name


def _parameters_renames(args: Mapping[str, Any]) -> dict[str, str]:
    """The parametersFrom entry the component adds (the last) is the ``parameters_secret_name`` arg's."""
    generated = len(args.get("parameters_from") or [])
    return {f"parameters_from[{generated}]": "parameters_secret_name"}


def _encode_ca_bundle(kind: str, name: str, pem: Any) -> str | None:
    if pem is None:
        return None
    if not isinstance(pem, str) or _PEM_CERTIFICATE not in pem:
        reason = f"must be a PEM bundle with at least one {_PEM_CERTIFICATE} block"
        raise resources.InvalidArgsError(kind, name, [("ca_bundle", reason)])
    return base64.b64encode(pem.encode("utf-8")).decode("ascii")


def broker_model(name: str, args: ServiceCatalogBrokerArgs) -> BrokerModel:
    """The validated Broker for ``args`` (credentials not included: the Broker names their Secret), or
    InvalidArgsError naming each arg at fault."""
    resources.require_plain("Broker", name, args, except_keys=("basic_auth", "bearer_token", "credentials_namespace"))
    _required("Broker", name, args, "url")
    basic, bearer = args.get("basic_auth"), args.get("bearer_token")
    if basic is not None and bearer is not None:
        raise resources.InvalidArgsError(
            "Broker", name, [("bearer_token", "give basic_auth or bearer_token, not both")]
        )
    if basic is not None:
        missing = [(f"basic_auth.{k}", "is required") for k in (USERNAME_KEY, PASSWORD_KEY) if basic.get(k) is None]
        if missing:
            raise resources.InvalidArgsError("Broker", name, missing)
    object_name = resources.object_name("Broker", name, args.get("object_name"), name)
    meta = resources.metadata(
        args, name=object_name, component_type=BROKER_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    meta.pop("namespace")  # cluster-scoped
    spec: dict[str, Any] = {
        "url": args.get("url"),
        "ca_bundle": _encode_ca_bundle("Broker", name, args.get("ca_bundle")),
        "insecure_skip_tls_verify": args.get("insecure_skip_tls_verify"),
        "relist_behavior": args.get("relist_behavior"),
        "relist_duration": args.get("relist_duration"),
        "relist_requests": args.get("relist_requests"),
    }
    if basic is not None or bearer is not None:
        secret_ref = {
            "namespace": _placeholder(args.get("credentials_namespace") or DEFAULT_NAMESPACE, DEFAULT_NAMESPACE),
            "name": args.get("credentials_secret_name") or f"{object_name}-auth",
        }
        spec["auth_info"] = {"basic" if basic is not None else "bearer": {"secret_ref": secret_ref}}
    spec = {k: v for k, v in spec.items() if v is not None}
    renames = {
        "metadata": "object_name",
        "auth_info.basic.secret_ref.name": "credentials_secret_name",
        "auth_info.bearer.secret_ref.name": "credentials_secret_name",
        "auth_info.basic.secret_ref.namespace": "credentials_namespace",
        "auth_info.bearer.secret_ref.namespace": "credentials_namespace",
    }
    model = _validate(BrokerModel, name, {"metadata": meta, "spec": spec}, renames)
    assert isinstance(model, BrokerModel)
    return model


def instance_model(name: str, args: InstanceArgs) -> InstanceModel:
    """The validated Instance for ``args``, or InvalidArgsError naming each arg at fault."""
    resources.require_plain("Instance", name, args, except_keys=("secret_parameters",))
    _required("Instance", name, args, "namespace", "service_class_name")
    _check_namespace("Instance", name, args, "namespace")
    object_name = resources.object_name("Instance", name, args.get("object_name"), name)
    meta = resources.metadata(
        args, name=object_name, component_type=INSTANCE_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    spec, _ = _parameters_spec("Instance", name, args, f"{object_name}-parameters")
    spec.update(
        {
            k: args.get(k)
            for k in ("service_class_name", "plan_name", "external_id", "share_with", "update_requests")
            if args.get(k) is not None
        }
    )
    renames = {"metadata": "object_name", **_parameters_renames(args)}
    model = _validate(InstanceModel, name, {"metadata": meta, "spec": spec}, renames)
    assert isinstance(model, InstanceModel)
    return model


def binding_model(name: str, args: BindingArgs) -> BindingModel:
    """The validated Binding for ``args``, or InvalidArgsError naming each arg at fault."""
    resources.require_plain(
        "Binding", name, args, except_keys=("instance_name", "instance_namespace", "secret_parameters")
    )
    _required("Binding", name, args, "namespace", "instance_name")
    _check_namespace("Binding", name, args, "namespace")
    object_name = resources.object_name("Binding", name, args.get("object_name"), name)
    meta = resources.metadata(
        args, name=object_name, component_type=BINDING_TYPE, wait_for_ready=bool(args.get("wait_for_ready"))
    )
    spec, _ = _parameters_spec("Binding", name, args, f"{object_name}-binding-parameters")
    instance_ref = {"name": _placeholder(args.get("instance_name"))}
    if args.get("instance_namespace") is not None:
        instance_ref["namespace"] = _placeholder(args.get("instance_namespace"))
    spec["instance_ref"] = instance_ref
    for key in ("secret_name", "application", "external_id"):
        if args.get(key) is not None:
            spec[key] = args.get(key)
    renames = {
        "metadata": "object_name",
        "instance_ref.name": "instance_name",
        "instance_ref.namespace": "instance_namespace",
        "instance_ref": "instance_name",
        **_parameters_renames(args),
    }
    model = _validate(BindingModel, name, {"metadata": meta, "spec": spec}, renames)
    assert isinstance(model, BindingModel)
    return model


# -- the Secrets ------------------------------------------------------------------------------------------------


def _secret(
    parent: pulumi.Resource,
    resource_name: str,
    opts: pulumi.ResourceOptions | None,
    *,
    name: str,
    namespace: Any,
    component: str,
    string_data: Mapping[str, Any],
    type_: str = "Opaque",
) -> k8s.core.v1.Secret:
    """A Secret child whose values are Pulumi secrets (in the inputs and in the state)."""
    return k8s.core.v1.Secret(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": {resources.LABEL_COMPONENT: component}},
        type=type_,
        string_data={key: pulumi.Output.secret(value) for key, value in string_data.items()},
        opts=pulumi.ResourceOptions.merge(
            resources.child_options(parent, opts),
            pulumi.ResourceOptions(additional_secret_outputs=["data", "stringData"]),
        ),
    )


def _parameters_json(value: Any) -> pulumi.Output[str]:
    """``secret_parameters`` (an object, or an Output of one, maybe with Outputs inside) as a secret JSON text."""

    def dump(parameters: Any) -> str:
        if not isinstance(parameters, Mapping):
            raise TypeError(f"secret_parameters must be an object of parameter names to values, not {parameters!r}")
        return json.dumps(dict(parameters), sort_keys=True)

    return pulumi.Output.secret(pulumi.Output.from_input(value).apply(dump))


def _parameters_secret(
    parent: pulumi.Resource,
    name: str,
    opts: pulumi.ResourceOptions | None,
    args: Mapping[str, Any],
    model: InstanceModel | BindingModel,
    component: str,
) -> k8s.core.v1.Secret | None:
    if args.get("secret_parameters") is None:
        return None
    generated = (model.spec.parameters_from or [])[-1].secret_key_ref
    return _secret(
        parent,
        f"{name}-parameters",
        opts,
        name=generated.name,
        namespace=_namespace(args, model),
        component=component,
        string_data={generated.key: _parameters_json(args["secret_parameters"])},
    )


def _namespace(args: Mapping[str, Any], model: KubeResource) -> Any:
    given = args.get("namespace")
    return given if resources.is_output(given) else str(model.metadata.namespace)


# -- the components ---------------------------------------------------------------------------------------------


class Broker(pulumi.ComponentResource):
    """An OSB broker registered with the cluster (a cluster-scoped Service Catalog ``Broker``), with the Secret
    holding its credentials. The controller fetches its catalog and writes one ServiceClass per service."""

    object_name: pulumi.Output[str]
    """Name of the Broker object."""
    credentials_secret_name: pulumi.Output[str | None]
    """Name of the Secret holding the broker's credentials (none without credentials)."""

    def __init__(self, name: str, args: ServiceCatalogBrokerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = broker_model(name, args)
        super().__init__(BROKER_TYPE, name, None, opts)
        auth = model.spec.auth_info
        waits_for: list[pulumi.Resource] = []
        outputs: dict[tuple[str, ...], Any] = {}
        self.secret: k8s.core.v1.Secret | None = None
        config = auth.basic or auth.bearer if auth is not None else None
        if auth is not None and config is not None:
            method = "basic" if auth.basic is not None else "bearer"
            given_namespace = args.get("credentials_namespace")
            namespace = given_namespace if resources.is_output(given_namespace) else config.secret_ref.namespace
            if resources.is_output(given_namespace):
                outputs[("spec", "authInfo", method, "secretRef", "namespace")] = given_namespace
            basic = args.get("basic_auth")
            data: dict[str, Any]
            if basic is not None:
                data = {USERNAME_KEY: basic["username"], PASSWORD_KEY: basic["password"]}
                secret_type = "kubernetes.io/basic-auth"
            else:
                data, secret_type = {TOKEN_KEY: args.get("bearer_token")}, "Opaque"
            self.secret = _secret(
                self,
                f"{name}-auth",
                opts,
                name=config.secret_ref.name,
                namespace=namespace,
                component="Broker",
                string_data=data,
                type_=secret_type,
            )
            waits_for.append(self.secret)
        self.resource = resources.custom_resource(self, name, model, opts, *waits_for, outputs=outputs)
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.credentials_secret_name = pulumi.Output.from_input(None)
        if self.secret is not None and config is not None:
            self.credentials_secret_name = resources.name_of(self.secret, config.secret_ref.name)
        self.register_outputs(
            {"object_name": self.object_name, "credentials_secret_name": self.credentials_secret_name}
        )


class Instance(pulumi.ComponentResource):
    """A provisioned instance of a ServiceClass's plan (a namespaced Service Catalog ``Instance``), with the
    Secret holding its secret parameters."""

    object_name: pulumi.Output[str]
    """Name of the Instance object."""
    namespace: pulumi.Output[str]
    """Namespace of the Instance object."""

    def __init__(self, name: str, args: InstanceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = instance_model(name, args)
        super().__init__(INSTANCE_TYPE, name, None, opts)
        self.secret = _parameters_secret(self, name, opts, args, model, "Instance")
        waits_for = [self.secret] if self.secret else []
        self.resource = resources.custom_resource(self, name, model, opts, *waits_for, namespace=args.get("namespace"))
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.register_outputs({"object_name": self.object_name, "namespace": self.namespace})


class Binding(pulumi.ComponentResource):
    """Credentials to an Instance (a namespaced Service Catalog ``Binding``): the controller writes them to the
    Secret ``secret_name`` in the Binding's namespace (mount it, or let ``application`` project it)."""

    object_name: pulumi.Output[str]
    """Name of the Binding object."""
    namespace: pulumi.Output[str]
    """Namespace of the Binding object and of its credentials Secret."""
    secret_name: pulumi.Output[str]
    """Name of the Secret the controller writes the credentials to (once Ready, with ``wait_for_ready``)."""

    def __init__(self, name: str, args: BindingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        model = binding_model(name, args)
        super().__init__(BINDING_TYPE, name, None, opts)
        self.secret = _parameters_secret(self, name, opts, args, model, "Binding")
        waits_for = [self.secret] if self.secret else []
        outputs: dict[tuple[str, ...], Any] = {
            ("spec", "instanceRef", key): args.get(arg)
            for key, arg in (("name", "instance_name"), ("namespace", "instance_namespace"))
            if resources.is_output(args.get(arg))
        }
        self.resource = resources.custom_resource(
            self, name, model, opts, *waits_for, namespace=args.get("namespace"), outputs=outputs
        )
        self.object_name = resources.name_of(self.resource, str(model.metadata.name))
        self.namespace = resources.namespace_of(self.resource, model, args.get("namespace"))
        self.secret_name = resources.name_of(self.resource, model.spec.effective_secret_name(str(model.metadata.name)))
        self.register_outputs(
            {"object_name": self.object_name, "namespace": self.namespace, "secret_name": self.secret_name}
        )
