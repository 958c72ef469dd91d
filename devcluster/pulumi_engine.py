"""Running the real Pulumi engine (the engine tests, the bench suite ``pulumi``): the ``pulumi`` CLI, the YAML
language host and the Kubernetes resource plugin built by ``scripts/build-pulumi.sh`` (cached in
``$OPBROKER_CACHE/pulumi-<version>-<key of the wrapper modules>/bin``), the opbroker component provider and
policy pack as executables the engine starts directly (``provider/pulumi-resource-opbroker`` through a
``packages:`` path, ``provider/policypack/pulumi-analyzer-opbroker`` through ``--policy-pack``; nothing of the
repository on ``PATH``), a local file backend, the passphrase secrets provider, no update checks and no plugin
downloads.

Programs are Pulumi YAML: the Python language host is not served by the module proxy (see the README), so what
the Python programs declare is declared through the component provider, from the same args (``yaml_properties``
turns a component's Python args into the provider schema's property names).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from opbroker.devcluster.binaries import module_key
from opbroker.provider import host

REPO = Path(__file__).resolve().parent.parent  # devcluster/ sits at the repository's root
PULUMI_VERSION = "3.260.0"
PULUMI_KUBERNETES_VERSION = "4.25.0"
CACHE = Path(os.environ.get("OPBROKER_CACHE", Path.home() / ".cache" / "opbroker"))
#: The committed wrapper modules scripts/build-pulumi.sh compiles (their go.mod and go.sum pin every module).
MODULES = REPO / "devcluster" / "pulumibuild"
BIN = CACHE / f"pulumi-{PULUMI_VERSION}-{module_key(MODULES)}" / "bin"
#: The component provider's folder: Pulumi.yaml's ``packages: {opbroker: <it>}`` (the engine runs the executable
#: ``pulumi-resource-opbroker`` beside its PulumiPlugin.yaml, no language host).
PROVIDER = REPO / "provider"
#: The ``packages:`` of a Pulumi YAML program using ``opbroker:index:*`` (the key is the package's name: the engine
#: looks for ``pulumi-resource-<key>`` in the folder).
PACKAGES = {"opbroker": str(PROVIDER)}
#: The policy pack as an executable analyzer: ``--policy-pack <it>``.
POLICY_PACK = REPO / "provider" / "policypack" / "pulumi-analyzer-opbroker"
PASSPHRASE = "opbroker-engine-tests"
#: Longest any one engine command may take: a hang fails the test instead of sitting it out.
COMMAND_TIMEOUT = 240


class EngineError(AssertionError):
    """A pulumi command failed (or succeeded where the test expected a failure)."""


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Engine:
    """One pulumi home and file backend; ``run`` runs a pulumi command in a project folder."""

    home: Path
    backend: Path
    kubeconfig: Path
    timings: dict[str, float] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        env.update(
            {
                "PATH": os.pathsep.join([str(BIN), str(Path(sys.executable).parent), env["PATH"]]),
                "PULUMI_HOME": str(self.home),
                "PULUMI_BACKEND_URL": self.backend.as_uri(),
                "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
                "PULUMI_SKIP_UPDATE_CHECK": "true",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
                "OPBROKER_PYTHON": sys.executable,
                "KUBECONFIG": str(self.kubeconfig),
                "NO_COLOR": "1",
            }
        )
        return env

    def run(self, cwd: Path, *args: str, expect_failure: bool = False, timeout: float = COMMAND_TIMEOUT) -> Result:
        command = [str(BIN / "pulumi"), *args, "--non-interactive", "--color", "never"]
        start = time.monotonic()
        # Its own process group: on a timeout the CLI *and* its plugins go (killing only the CLI orphans them).
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise EngineError(f"pulumi {' '.join(args)} did not finish in {timeout} s:\n{stdout}{stderr}") from None
        result = Result(list(args), process.returncode, stdout, stderr, time.monotonic() - start)
        if expect_failure and result.returncode == 0:
            raise EngineError(f"pulumi {' '.join(args)} succeeded, a failure was expected:\n{result.output}")
        if not expect_failure and result.returncode != 0:
            raise EngineError(f"pulumi {' '.join(args)} failed ({result.returncode}):\n{result.output}")
        return result

    def json(self, cwd: Path, *args: str) -> Any:
        return json.loads(self.run(cwd, *args, "--json").stdout)


@dataclass
class Project:
    """A Pulumi YAML project in its own folder, with one stack selected."""

    engine: Engine
    dir: Path
    stack: str

    def run(self, *args: str, expect_failure: bool = False) -> Result:
        return self.engine.run(self.dir, *args, "--stack", self.stack, expect_failure=expect_failure)

    def write(self, program: Mapping[str, Any]) -> None:
        (self.dir / "Pulumi.yaml").write_text(yaml.safe_dump(dict(program), sort_keys=False, width=1000))

    def preview(self, *extra: str, expect_failure: bool = False) -> Result:
        return self.run("preview", "--diff", *extra, expect_failure=expect_failure)

    def up(self, *extra: str, expect_failure: bool = False) -> Result:
        return self.run("up", "--yes", "--skip-preview", *extra, expect_failure=expect_failure)

    def outputs(self) -> dict[str, Any]:
        result = self.run("stack", "output", "--json", "--show-secrets")
        return dict(json.loads(result.stdout))

    def resources(self) -> list[dict[str, Any]]:
        """The stack's resources as the state has them (``pulumi stack export``)."""
        state = json.loads(self.run("stack", "export").stdout)
        return list(state["deployment"].get("resources") or [])

    def urns(self, type_: str) -> list[str]:
        return [r["urn"] for r in self.resources() if r["type"] == type_]


def new_project(engine: Engine, folder: Path, program: Mapping[str, Any], stack: str = "test") -> Project:
    folder.mkdir(parents=True, exist_ok=True)
    project = Project(engine, folder, stack)
    project.write(program)
    engine.run(folder, "stack", "init", stack)
    return project


# -- component args (as the Python components take them) -> Pulumi YAML properties ---------------------------

_SCHEMA: dict[str, Any] | None = None


def provider_schema() -> dict[str, Any]:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = host.schema()
    return _SCHEMA


def camel(key: str) -> str:
    head, *rest = key.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _convert(value: Any, spec: Mapping[str, Any]) -> Any:
    schema = provider_schema()
    ref = spec.get("$ref", "")
    if ref.startswith("#/types/"):
        type_spec = schema["types"][ref.removeprefix("#/types/")]
        if type_spec.get("enum"):
            return value
        return _convert_object(value, type_spec.get("properties") or {}, ref)
    if spec.get("type") == "array" and isinstance(value, list):
        return [_convert(item, spec.get("items") or {}) for item in value]
    if (
        spec.get("type") == "object"
        and isinstance(value, Mapping)
        and isinstance(spec.get("additionalProperties"), dict)
    ):
        return {k: _convert(v, spec["additionalProperties"]) for k, v in value.items()}
    return value


def _convert_object(args: Mapping[str, Any], properties: Mapping[str, Any], where: str) -> dict[str, Any]:
    converted = {}
    for key, value in args.items():
        name = camel(key)
        if name not in properties:
            raise KeyError(f"{where}: {key!r} ({name!r}) is not a property of the provider schema")
        converted[name] = _convert(value, properties[name])
    return converted


def yaml_properties(token: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """A component's Python args as the properties a Pulumi YAML program gives it (schema names, nested types)."""
    resource = provider_schema()["resources"][token]
    return escape_object(_convert_object(args, resource["inputProperties"], token))


def escape(value: Any) -> Any:
    """Pulumi YAML reads ``${...}`` as an interpolation; a literal one is written ``$${...}``."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, list):
        return [escape(v) for v in value]
    if isinstance(value, dict):
        return escape_object(value)
    return value


def escape_object(value: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`escape` for an object's every value."""
    return {k: escape(v) for k, v in value.items()}


# -- the root stack as a Pulumi YAML program ----------------------------------------------------------------

ROOT_STACK_NAMESPACE = "opbroker"
ROOT_STACK_IMAGE = "opbroker:engine-test"


def declarations() -> ModuleType:
    """``examples/stack/declarations.py``: what the root stack declares."""
    spec = importlib.util.spec_from_file_location("stack_declarations", REPO / "examples" / "stack" / "declarations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def root_stack_program(
    password: str, *, retain_crds: bool | None = None, plan_changes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The root stack (examples/stack) as a Pulumi YAML program: the same components with the same args, for a
    cluster without nodes (``await_deployments`` false)."""
    d = declarations()
    namespace = ROOT_STACK_NAMESPACE
    control_plane = d.control_plane_args(
        image=ROOT_STACK_IMAGE,
        namespace=namespace,
        await_deployments=False,
        broker={"replicas": 2, "password": password},
    )
    if retain_crds is not None:
        control_plane["retain_crds"] = retain_crds
    resources: dict[str, Any] = {
        "opbroker": {
            "type": "opbroker:index:ControlPlane",
            "properties": yaml_properties("opbroker:index:ControlPlane", control_plane),
        }
    }
    for kind, name, args in d.catalog(namespace):
        if plan_changes and name in plan_changes:
            args = {**args, **plan_changes[name]}
        token = f"opbroker:index:{kind}"
        properties = yaml_properties(token, args)
        # The catalog gets the ControlPlane's `namespace` output (known once its CRDs and namespace exist).
        assert properties["namespace"] == namespace
        properties["namespace"] = "${opbroker.namespace}"
        resources[name] = {"type": token, "properties": properties}
    return {
        "name": "opbroker-engine",
        "runtime": "yaml",
        "packages": PACKAGES,
        "resources": resources,
        "outputs": {
            "namespace": "${opbroker.namespace}",
            "crds": "${opbroker.crdNames}",
            "brokerUrl": "${opbroker.brokerUrl}",
            "brokerUsername": "${opbroker.brokerUsername}",
            "brokerPassword": "${opbroker.brokerPassword}",
            "plan": "${postgresql-small.planId}",
            "service": "${postgresql.serviceId}",
        },
    }
