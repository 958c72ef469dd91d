"""What every custom-resource component does the same way.

1. Check that the args are plain values (the catalog is data, validated at preview time: an Output
   cannot be validated before it is known).
2. Validate the manifest against the api model, and fail with one line per field at fault *before*
   anything is registered, so ``pulumi preview`` stops on a bad plan and names the field.
3. Register exactly one ``apiextensions.CustomResource`` child named like the component, parented to it,
   waiting for whatever the component waits for (typically the ControlPlane and its CRDs).
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import ValidationError

from opbroker.api import errors
from opbroker.api.conventions import DEFAULT_NAMESPACE, DOMAIN
from opbroker.api.meta import KubeResource

#: Annotation that makes pulumi-kubernetes wait for the object's Ready condition (set by the controller).
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
WAIT_FOR_READY = "condition=Ready"
#: Annotation that makes pulumi-kubernetes take over fields another field manager set (server-side apply with
#: force): the stack owns its catalog objects, so an edit made with kubectl is reported by ``pulumi refresh``
#: and put back by the next ``pulumi up`` instead of failing it with a field conflict.
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
#: Label put on every object a component creates, so ``kubectl get -l`` finds what a stack owns.
LABEL_COMPONENT = f"{DOMAIN}/pulumi-component"

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class InvalidArgsError(pulumi.InputPropertiesError, pulumi.RunError):
    """A component's args do not fit the resource model. Carries one ``(field, reason)`` per problem.

    A ``RunError`` so that a Python program stops with the message and no stack trace; an
    ``InputPropertiesError`` so that the component provider reports each property to the engine.
    """

    def __init__(self, component: str, name: str, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        lines = [f"{component} {name!r} is invalid:", *(f"  {path}: {reason}" for path, reason in self.problems)]
        super().__init__(
            "\n".join(lines),
            [{"property_path": path, "reason": reason} for path, reason in self.problems],
        )


def outputs_in(value: Any, path: str) -> list[str]:
    """Paths under ``value`` that hold an Output or another awaitable (not plain, so not validatable)."""
    if isinstance(value, pulumi.Output) or hasattr(value, "__await__"):
        return [path or "(args)"]
    if isinstance(value, Mapping):
        found = []
        for key, item in value.items():
            found.extend(outputs_in(item, f"{path}.{key}" if path else str(key)))
        return found
    if isinstance(value, list | tuple):
        return [p for index, item in enumerate(value) for p in outputs_in(item, f"{path}[{index}]")]
    return []


def require_plain(component: str, name: str, args: Mapping[str, Any], *, except_keys: Sequence[str] = ()) -> None:
    """Refuse Outputs where the component needs known values to validate."""
    # ``namespace`` may be an Output: the ControlPlane's ``namespace``, which waits for its CRDs and namespace.
    checked = {k: v for k, v in args.items() if k not in except_keys and k != "namespace"}
    found = outputs_in(checked, "")
    if found:
        reason = "must be a plain value (it is validated at preview time), not an Output"
        raise InvalidArgsError(component, name, [(path, reason) for path in found])


def arg_path(path: str) -> str:
    """A model field path in the components' flat args: ``spec.templates[0]`` is ``templates[0]``, a
    problem with the spec as a whole is one with the ``args``, and ``metadata.name`` is ``object_name``."""
    if path == "spec":
        return "args"
    if path.startswith("spec."):
        return path.removeprefix("spec.")
    if path == "metadata.name":
        return "object_name"
    return path


def validate(model: type[KubeResource], component: str, name: str, manifest: dict[str, Any]) -> KubeResource:
    """The manifest as a model instance, or InvalidArgsError with each arg at fault (as the args spell it)."""
    try:
        return model.model_validate(manifest)
    except ValidationError as exc:
        problems = []
        for line in errors.field_errors(exc):
            path, _, reason = line.partition(": ")
            problems.append((arg_path(path), reason))
        raise InvalidArgsError(component, name, problems) from None


def object_name(component: str, name: str, given: str | None, default: str, *, field: str = "object_name") -> str:
    """The Kubernetes name: the one given, else ``default`` — refused early when it is not a valid name."""
    chosen = given or default
    if len(chosen) > 253 or not _DNS1123_SUBDOMAIN.match(chosen):
        reason = f"{chosen!r} is not a valid Kubernetes name (lower case letters, digits, '-', '.')"
        raise InvalidArgsError(component, name, [(field, reason)])
    return chosen


def metadata(
    args: Mapping[str, Any], *, name: str, component_type: str, wait_for_ready: bool = False
) -> dict[str, Any]:
    """``metadata`` for a custom resource: name, namespace (default: the control plane's), labels, annotations."""
    labels = {LABEL_COMPONENT: component_type.rsplit(":", 1)[-1], **(args.get("labels") or {})}
    annotations = {PATCH_FORCE_ANNOTATION: "true", **(args.get("annotations") or {})}
    if wait_for_ready:
        annotations[WAIT_FOR_ANNOTATION] = WAIT_FOR_READY
    namespace = args.get("namespace")
    return {
        "name": name,
        # An Output namespace is set on the custom resource itself (``custom_resource``); validated as the default.
        "namespace": namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE,
        "labels": labels,
        "annotations": annotations,
    }


def child_options(
    parent: pulumi.Resource, opts: pulumi.ResourceOptions | None, *extra_depends_on: pulumi.Resource
) -> pulumi.ResourceOptions:
    """Options of a child: parented, and waiting for what the component was told to wait for.

    Children do not inherit ``depends_on`` from their parent, so a component created with
    ``depends_on=[control_plane]`` passes it down: the custom resource waits for the CRDs.
    """
    depends_on: list[Any] = list(extra_depends_on)
    if opts is not None and opts.depends_on is not None:
        given = opts.depends_on
        depends_on.extend(given if isinstance(given, list | tuple) else [given])
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on or None)


def custom_resource(
    parent: pulumi.Resource,
    name: str,
    resource: KubeResource,
    opts: pulumi.ResourceOptions | None,
    *depends_on: pulumi.Resource,
    namespace: Any = None,
    outputs: Mapping[tuple[str, ...], Any] | None = None,
) -> k8s.apiextensions.CustomResource:
    """The validated resource as a pulumi-kubernetes CustomResource child, named like the component. A
    ``namespace`` Output (the ControlPlane's) replaces the model's: the object then waits for what it waits for.
    ``outputs`` does the same anywhere in the manifest: each Output replaces the placeholder the model was
    validated with at that path (e.g. ``("spec", "instanceRef", "name")``), carrying its dependencies."""
    manifest = resource.to_manifest()
    if is_output(namespace):
        manifest["metadata"]["namespace"] = namespace
    for path, value in (outputs or {}).items():
        *parents, last = path
        target = manifest
        for key in parents:
            target = target[key]
        target[last] = value
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest.get("spec"),
        opts=child_options(parent, opts, *depends_on),
    )


def is_output(value: Any) -> bool:
    return isinstance(value, pulumi.Output) or hasattr(value, "__await__")


def namespace_of(resource: pulumi.CustomResource, model: KubeResource, given: Any) -> pulumi.Output[str]:
    """The object's namespace once it exists: the given Output's value, or the model's."""
    if is_output(given):
        return pulumi.Output.all(resource.id, given).apply(lambda values: str(values[1]))
    return name_of(resource, str(model.metadata.namespace))


def name_of(resource: k8s.apiextensions.CustomResource | pulumi.CustomResource, name: str) -> pulumi.Output[str]:
    """``name`` once the child exists: an output that carries the dependency on the object."""
    return resource.id.apply(lambda _: name)
