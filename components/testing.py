"""Run components under Pulumi's mocks and look at what they registered — for opbroker's tests and yours.

    with testing.mocked() as mocks:
        @pulumi.runtime.test
        def program():
            plan = SFPlan("small", {...})
            return plan.plan_id          # wait on outputs that come from the children
        program()
    registration = mocks.one("kubernetes:osb.servicefabrik.io/v1alpha1:SFPlan", "small")

Each ``mocked()`` block runs on a fresh event loop (closed afterwards), records every registration with
its inputs, parent URN and dependencies, and answers the few outputs a provider would compute (the
generated password of ``random:RandomPassword``).
"""

import asyncio
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

#: What pulumi's RPC layer puts around a secret value (``{SECRET_SIG: SECRET_VALUE, "value": ...}``).
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"
FAKE_PASSWORD = "mock-generated-password"


@dataclass(frozen=True)
class Registration:
    """One RegisterResource call, as the engine would have seen it."""

    type: str
    name: str
    inputs: dict[str, Any]
    parent: str
    custom: bool
    dependencies: tuple[str, ...]
    urn: str
    additional_secret_outputs: tuple[str, ...] = ()
    retain_on_delete: bool = False
    """``retain_on_delete``: deleting the resource from the stack leaves the object in the cluster."""
    protect: bool = False
    aliases: tuple[str, ...] = ()
    """The aliases it was registered with: alias URNs, and alias specs as text (``parentUrn: "..."``)."""

    def plain_inputs(self) -> dict[str, Any]:
        """The inputs with secrets unwrapped and whole-number floats back to ints."""
        plain: dict[str, Any] = unwrap(self.inputs)
        return plain


def unwrap(value: Any) -> Any:
    """Strip the secret wrappers pulumi's serialisation adds, and give whole floats back as ints."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return unwrap(value.get("value"))
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) == SECRET_VALUE


class RecordingMocks(pulumi.runtime.Mocks):
    """Echo inputs back as state (plus computed outputs per type) and keep every registration."""

    def __init__(self, computed: Mapping[str, Callable[[pulumi.runtime.MockResourceArgs], dict[str, Any]]]) -> None:
        self.computed = dict(computed)
        self.registrations: list[Registration] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ in self.computed:
            state.update(self.computed[args.typ](args))
        namespace = (state.get("metadata") or {}).get("namespace") if isinstance(state.get("metadata"), dict) else None
        return (f"{namespace}/{args.name}" if namespace else f"{args.name}-id"), state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    # -- queries -------------------------------------------------------------------------------------------

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str) -> Registration:
        found = [r for r in self.registrations if r.type == type_ and r.name == name]
        assert len(found) == 1, f"expected one {type_} {name!r}, found {len(found)}: {self.summary()}"
        return found[0]

    def summary(self) -> list[tuple[str, str]]:
        return [(r.type, r.name) for r in self.registrations]

    def children_of(self, urn: str) -> list[Registration]:
        return [r for r in self.registrations if r.parent == urn]


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also keeping what ``MockResourceArgs`` leaves out: parent, dependencies and the
    lifecycle options (``retain_on_delete``, ``protect``)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recording = mocks

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self.recording.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    inputs=rpc.deserialize_properties(request.object, keep_unknowns=True),
                    parent=request.parent,
                    custom=request.custom,
                    dependencies=tuple(request.dependencies),
                    urn=response.urn,
                    additional_secret_outputs=tuple(request.additionalSecretOutputs),
                    retain_on_delete=bool(request.retainOnDelete),
                    protect=bool(request.protect),
                    aliases=(*request.aliasURNs, *(str(alias) for alias in request.aliases)),
                )
            )
        return response


@dataclass
class _Computed:
    outputs: dict[str, Callable[[pulumi.runtime.MockResourceArgs], dict[str, Any]]] = field(
        default_factory=lambda: {RANDOM_PASSWORD: lambda _: {"result": FAKE_PASSWORD}}
    )


@contextmanager
def mocked(
    *,
    project: str = "opbroker",
    stack: str = "test",
    preview: bool = False,
    config: Mapping[str, str] | None = None,
) -> Iterator[RecordingMocks]:
    """Pulumi's mocks on a fresh event loop, with ``config`` (full keys, e.g. ``opbroker:image``) set."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = RecordingMocks(_Computed().outputs)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=RecordingMonitor(mocks))
    pulumi.runtime.set_all_config(dict(config or {}))
    try:
        yield mocks
    finally:
        pulumi.runtime.set_all_config({})
        loop.close()
        asyncio.set_event_loop(None)
