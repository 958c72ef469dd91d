"""Running the real Pulumi engine (the engine tests, the bench suite ``pulumi``): the ``pulumi`` CLI, the YAML
language host and the Kubernetes resource plugin built by ``scripts/build-pulumi.sh`` (cached in
``$OPBROKER_CACHE/pulumi-<version>-<key of the wrapper modules>/bin``), the opbroker component provider and
policy pack as executables the engine starts directly (``provider/pulumi-resource-opbroker`` through a
``packages:`` path, ``provider/policypack/pulumi-analyzer-opbroker`` through ``--policy-pack``; nothing of the
repository on ``PATH``), a local file backend, the passphrase secrets provider, no update checks and no plugin
downloads.

Python programs run as the Automation API's inline programs (``opbroker.stacks``): in this process, whose own
language server the engine talks to, so no Python language host is needed (it is not built here: the module proxy
does not serve it). Pulumi YAML programs (the example for other languages, the Service Catalog components, the
policy pack's counter-examples) run through ``Project`` with the YAML language host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pulumi import automation as auto

from opbroker import stacks
from opbroker.devcluster.binaries import module_key

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

    def settings(self, work_dir: Path) -> stacks.Settings:
        """The same engine, home, backend and passphrase for ``opbroker.stacks`` (the Automation API)."""
        env = self.env()
        return stacks.Settings(
            backend_url=self.backend.as_uri(),
            passphrase=PASSPHRASE,
            engine=BIN.parent,
            pulumi_home=self.home,
            work_dir=work_dir,
            env={k: v for k, v in env.items() if k not in ("PULUMI_HOME", "PULUMI_BACKEND_URL")},
        )

    def run(self, cwd: Path, *args: str, expect_failure: bool = False, timeout: float = COMMAND_TIMEOUT) -> Result:
        # The global flags first: after a `--` in args they would be arguments.
        command = [str(BIN / "pulumi"), "--non-interactive", "--color", "never", *args]
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

    def set_config(self, key: str, value: str, *, secret: bool = False) -> None:
        """Set one config value; `--` ends the flags, so a value starting with `-` (a random password) is a value."""
        flags = ("--secret",) if secret else ()
        self.engine.run(self.dir, "config", "set", "--stack", self.stack, *flags, key, "--", value)

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


# -- Pulumi YAML values ------------------------------------------------------------------------------------


def escape(value: Any) -> Any:
    """Pulumi YAML reads ``${...}`` as an interpolation; a literal one is written ``$${...}``."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, list):
        return [escape(v) for v in value]
    if isinstance(value, dict):
        return {k: escape(v) for k, v in value.items()}
    return value


# -- the root stack as an inline program (opbroker.stacks) -------------------------------------------------

ROOT_STACK = REPO / "examples" / "stack"
ROOT_STACK_PROJECT = "opbroker"  # Pulumi.yaml's name: the program's config keys are opbroker:<key>
ROOT_STACK_NAMESPACE = "opbroker"
ROOT_STACK_IMAGE = "opbroker:engine-test"


def declarations() -> ModuleType:
    """``examples/stack/declarations.py``: what the root stack declares."""
    spec = importlib.util.spec_from_file_location("stack_declarations", ROOT_STACK / "declarations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def root_stack_config(password: str, *, image: str = ROOT_STACK_IMAGE, node: bool = False) -> dict[str, Any]:
    """The root stack's config for a local cluster: ``awaitDeployments`` false without a node (pods never
    start), the broker password a secret."""
    return {
        "image": image,
        "namespace": ROOT_STACK_NAMESPACE,
        "awaitDeployments": "true" if node else "false",
        "brokerPassword": auto.ConfigValue(password, secret=True),
    }


def root_stack(
    engine: Engine,
    work_dir: Path,
    password: str,
    *,
    stack: str = "test",
    program: Callable[[], None] | None = None,
    node: bool = False,
    image: str = ROOT_STACK_IMAGE,
) -> auto.Stack:
    """The Python root stack (``examples/stack``, or ``program`` in its place) as an inline program."""
    return stacks.select_stack(
        ROOT_STACK_PROJECT,
        stack,
        program or stacks.python_program(ROOT_STACK),
        engine.settings(work_dir),
        config=root_stack_config(password, image=image, node=node),
    )
