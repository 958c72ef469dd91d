"""opbroker as a package, used from outside the repository (issue 44).

The wheel and sdist are built (``uv build``: the sdist first, the wheel from it, so the sdist holds everything
the wheel needs), the wheel is installed with its ``pulumi`` extra into a fresh virtual environment in a
temporary folder, and everything below runs from there, with nothing of the checkout on ``PATH``,
``PYTHONPATH`` or as the working folder:

* ``opbroker --version`` and ``--help``; ``opbroker provider path`` points into that environment;
* a Python infra program in a folder of its own (its ``Pulumi.yaml``, ``from opbroker.components import ...``)
  previews, deploys and destroys a ControlPlane and a catalog (SFService, SFPlan) under the real engine through
  the Automation API (``opbroker.stacks``), on a local control plane (no node: ``await_deployments`` false);
* a Pulumi YAML program in another folder declares the installed provider plugin as a user types it
  (``packages: {opbroker: <opbroker provider path>}``), previews, deploys and destroys the same — the engine
  starts the plugin's executable from site-packages, which finds the environment's interpreter itself (the
  engine's ``PATH`` holds only the engine and the system's folders); then, with ``opbroker provider install``
  (the plugin in Pulumi's plugin cache), the same program with no ``packages:`` previews.

One environment serves every check. Its installs come from the package index (uv's cache after the first run),
the Pulumi SDKs constrained to the engine's versions (scripts/engine-sdks.txt).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from opbroker.devcluster.pulumi_engine import BIN
from tests.conftest import REPO

pytestmark = pytest.mark.apiserver  # its fixture starts a local control plane (tests/pulumi_engine_support.py)

pytest_plugins = ["tests.pulumi_engine_support"]

PASSPHRASE = "opbroker-wheel-test"
PASSWORD = secrets.token_urlsafe(16)
SERVICE_ID = "5b0f1c2e-7a3d-4e8f-9b1a-2c3d4e5f6a70"
PLAN_ID = "9c8b7a6f-5e4d-4c3b-8a29-1f0e9d8c7b61"
PROVISION = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: cache-{{ instance.metadata.name }}
data:
  size: "{{ plan.spec.context.size }}"
"""
STATUS = """\
provision:
  state: succeeded
deprovision:
  state: succeeded
"""
#: The machine's way to the package index, as a user's shell has it too: certificates, proxies, pip's and uv's own.
NETWORK_SETTINGS = (
    "SSL_CERT_",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_",
    "UV_",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
)
#: Seconds any one step may take (a build, an install, an engine command).
STEP_TIMEOUT = 600


def run(*command: str | Path, cwd: Path, env: dict[str, str], timeout: float = STEP_TIMEOUT) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    )
    return done.stdout


def outside_env(path: list[Path], **extra: str) -> dict[str, str]:
    """A user's environment: HOME (uv's cache), the way to the package index, the given folders then the system's
    on PATH; nothing of the checkout (no PYTHONPATH, no virtualenv, no OPBROKER_* or PULUMI_* from the test run)."""
    network = {k: v for k, v in os.environ.items() if k.upper().startswith(NETWORK_SETTINGS)}
    return {
        **network,
        "HOME": os.environ["HOME"],
        "PATH": os.pathsep.join([*map(str, path), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        **extra,
    }


def assert_outside_the_checkout(*paths: Path) -> None:
    for path in paths:
        assert not path.resolve().is_relative_to(REPO.resolve()), f"{path} is inside the checkout"


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    measured: dict[str, float] = {}
    yield measured
    print("\n[wheel] seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in measured.items()))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, timings: dict[str, float]) -> Path:
    """A fresh virtual environment outside the checkout with the built wheel and its ``pulumi`` extra."""
    root = tmp_path_factory.mktemp("wheel")
    assert_outside_the_checkout(root)
    uv = Path(sys.executable).parent / "uv"
    dist = root / "dist"
    start = time.monotonic()
    run(uv, "build", "--quiet", "--out-dir", dist, REPO, cwd=root, env=outside_env([]))
    timings["build"] = time.monotonic() - start
    wheels, sdists = sorted(dist.glob("opbroker-*.whl")), sorted(dist.glob("opbroker-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    start = time.monotonic()
    venv = root / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    run(uv, "venv", "--quiet", "--python", base_python, venv, cwd=root, env=outside_env([]))
    run(
        uv,
        *("pip", "install", "--quiet", f"{wheels[0]}[pulumi]", "--constraint", REPO / "scripts" / "engine-sdks.txt"),
        cwd=root,
        env=outside_env([], VIRTUAL_ENV=str(venv)),
    )
    timings["install"] = time.monotonic() - start
    return venv


@pytest.fixture(scope="module")
def user(venv: Path) -> dict[str, str]:
    """The user's shell with the environment activated (its bin/ first on PATH); not the engine's folder."""
    return outside_env([venv / "bin"], VIRTUAL_ENV=str(venv))


def test_the_installed_command_reports_its_version_and_commands(venv: Path, user: dict[str, str]) -> None:
    elsewhere = venv.parent
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert run("opbroker", "--version", cwd=elsewhere, env=user).strip() == f"opbroker {declared}"
    help_text = run("opbroker", "--help", cwd=elsewhere, env=user)
    for command in ("controller", "broker", "dev", "provider", "crds"):
        assert command in help_text
    # The CRDs are package data: the installed command prints them with nothing of the checkout around.
    crds = list(yaml.safe_load_all(run("opbroker", "crds", cwd=elsewhere, env=user)))
    assert {"sfservices.osb.servicefabrik.io", "sfplans.osb.servicefabrik.io"} <= {c["metadata"]["name"] for c in crds}
    folder = Path(run("opbroker", "provider", "path", cwd=elsewhere, env=user).strip())
    assert folder.is_relative_to(venv) and (folder / "PulumiPlugin.yaml").is_file()
    for executable in (folder / "pulumi-resource-opbroker", folder / "policypack" / "pulumi-analyzer-opbroker"):
        assert os.access(executable, os.X_OK), f"{executable} is not executable"


# -- the Python infra program (Automation API) ----------------------------------------------------------------

INFRA_MAIN = f'''\
"""A platform team's infra program: the opbroker control plane and a one-plan catalog."""

import pulumi

from opbroker.components import ControlPlane, SFPlan, SFService

config = pulumi.Config()
namespace = config.require("namespace")
plane = ControlPlane(
    "opbroker",
    {{
        "image": "opbroker:0.1.0",
        "namespace": namespace,
        "await_deployments": False,
        "broker": {{"password": config.require_secret("brokerPassword")}},
    }},
)
# The catalog waits for the CRDs and the namespace, and is deleted while the controller still runs.
after = pulumi.ResourceOptions(depends_on=[*plane.catalog_prerequisites, plane.controller])
SFService(
    "cache",
    {{"id": "{SERVICE_ID}", "name": "cache", "description": "A cache", "bindable": True, "namespace": namespace}},
    after,
)
plan = SFPlan(
    "cache-small",
    {{
        "id": "{PLAN_ID}",
        "name": "small",
        "description": "A small cache",
        "service_id": "{SERVICE_ID}",
        "context": {{"size": 1}},
        "templates": [
            {{"action": "provision", "type": "jinja2", "content": {PROVISION!r}}},
            {{"action": "status", "type": "jinja2", "content": {STATUS!r}}},
        ],
        "namespace": namespace,
    }},
    after,
)
pulumi.export("brokerUrl", plane.broker_url)
pulumi.export("plan", plan.plan_id)
'''

#: The script that drives it: ``deploy.py up|destroy``, through opbroker.stacks (the Automation API).
INFRA_DRIVER = """\
import json
import os
import sys
from pathlib import Path

from pulumi import automation as auto

from opbroker import stacks

here = Path(__file__).resolve().parent
settings = stacks.Settings(
    backend_url=Path(os.environ["STATE"]).as_uri(),
    passphrase=os.environ["PASSPHRASE"],
    engine=Path(os.environ["ENGINE"]),
    pulumi_home=Path(os.environ["STATE"]).parent / "home",
    work_dir=here,
    env={"KUBECONFIG": os.environ["KUBECONFIG"], "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"},
)
stack = stacks.select_stack(
    "infra",
    "dev",
    stacks.python_program(here),
    settings,
    config={"namespace": "infra", "brokerPassword": auto.ConfigValue(os.environ["PASSWORD"], secret=True)},
)
if sys.argv[1] == "up":
    preview = stacks.preview(stack)
    stacks.up(stack)
    print(json.dumps({"summary": preview.summary, "outputs": stacks.outputs(stack)}))
else:
    stacks.destroy(stack)
    print(json.dumps({"destroyed": True}))
"""


def test_a_python_infra_program_of_its_own_deploys_the_control_plane_and_a_catalog(
    venv: Path, user: dict[str, str], engine_cluster: Path, tmp_path: Path, timings: dict[str, float]
) -> None:
    program = tmp_path / "infra"
    program.mkdir()
    (program / "Pulumi.yaml").write_text("name: infra\nruntime: python\ndescription: our platform\n")
    (program / "__main__.py").write_text(INFRA_MAIN)
    (program / "deploy.py").write_text(INFRA_DRIVER)
    assert_outside_the_checkout(program, engine_cluster)
    env = {
        **user,
        "STATE": str(tmp_path / "state"),
        "PASSPHRASE": PASSPHRASE,
        "PASSWORD": PASSWORD,
        "ENGINE": str(BIN.parent),
        "KUBECONFIG": str(engine_cluster),
    }
    (tmp_path / "state").mkdir()
    start = time.monotonic()
    result = json.loads(run("python", "deploy.py", "up", cwd=program, env=env).splitlines()[-1])
    timings["python program preview+up"] = time.monotonic() - start
    assert result["summary"]["create"] >= 20, result["summary"]
    assert result["outputs"]["brokerUrl"] == "http://opbroker-broker.infra.svc:8080"
    assert result["outputs"]["plan"] == PLAN_ID
    api = config.new_client_from_config(config_file=str(engine_cluster))
    plans = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", "infra", "sfplans"
    )
    assert [p["spec"]["id"] for p in plans["items"]] == [PLAN_ID]
    assert client.AppsV1Api(api).read_namespaced_deployment("opbroker-controller", "infra").spec.replicas >= 1
    start = time.monotonic()
    run("python", "deploy.py", "destroy", cwd=program, env=env)
    timings["python program destroy"] = time.monotonic() - start
    assert "infra" not in {
        n.metadata.name for n in client.CoreV1Api(api).list_namespace().items if n.status.phase == "Active"
    }


# -- the Pulumi YAML program through the installed provider plugin ----------------------------------------------


def yaml_program(provider_folder: str) -> dict[str, Any]:
    """What a user writes in Pulumi.yaml: the plugin folder ``opbroker provider path`` printed, then resources."""
    return {
        "name": "infra-yaml",
        "runtime": "yaml",
        "packages": {"opbroker": provider_folder},
        "resources": {
            "controlPlane": {
                "type": "opbroker:index:ControlPlane",
                "properties": {
                    "image": "opbroker:0.1.0",
                    "namespace": "infra-yaml",
                    "awaitDeployments": False,
                    "broker": {"password": PASSWORD},
                },
            },
            "cache": {
                "type": "opbroker:index:SFService",
                "properties": {
                    "namespace": "${controlPlane.namespace}",
                    "id": SERVICE_ID,
                    "name": "cache",
                    "description": "A cache",
                    "bindable": True,
                },
            },
            "small": {
                "type": "opbroker:index:SFPlan",
                "properties": {
                    "namespace": "${controlPlane.namespace}",
                    "id": PLAN_ID,
                    "name": "small",
                    "description": "A small cache",
                    "serviceId": SERVICE_ID,
                    "context": {"size": 1},
                    "templates": [
                        {"action": "provision", "type": "jinja2", "content": PROVISION.replace("${", "$${")},
                        {"action": "status", "type": "jinja2", "content": STATUS},
                    ],
                },
            },
        },
        "outputs": {"brokerUrl": "${controlPlane.brokerUrl}", "plan": "${small.planId}"},
    }


def test_a_pulumi_yaml_program_uses_the_installed_provider_plugin(
    venv: Path, user: dict[str, str], engine_cluster: Path, tmp_path: Path, timings: dict[str, float]
) -> None:
    folder = run("opbroker", "provider", "path", cwd=tmp_path, env=user).strip()
    program = tmp_path / "infra-yaml"
    program.mkdir()
    # Relative to the project's folder, as docs/pulumi.md writes it for a project-local environment.
    folder = os.path.relpath(folder, program)
    (program / "Pulumi.yaml").write_text(yaml.safe_dump(yaml_program(folder), sort_keys=False, width=1000))
    for state in ("home", "state"):
        (tmp_path / state).mkdir()
    # The engine's own environment: its folder and the system's on PATH, no virtualenv (the plugin's executable
    # finds the interpreter that installed it), no OPBROKER_PYTHON, no Python language host anywhere.
    engine = outside_env(
        [BIN],
        PULUMI_HOME=str(tmp_path / "home"),
        PULUMI_BACKEND_URL=(tmp_path / "state").as_uri(),
        PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_DIY_BACKEND_NO_LEGACY_WARNING="true",
        KUBECONFIG=str(engine_cluster),
        NO_COLOR="1",
    )
    for name in ("pulumi-language-python", "pulumi-resource-opbroker", "opbroker"):
        assert shutil.which(name, path=engine["PATH"]) is None, f"{name} is on the engine's PATH"
    for name in ("python", "python3"):
        found = shutil.which(name, path=engine["PATH"])
        assert found is None or not Path(found).resolve().is_relative_to(venv.resolve()), found
    assert_outside_the_checkout(program)
    pulumi = BIN / "pulumi"
    run(pulumi, "stack", "init", "dev", cwd=program, env=engine)
    start = time.monotonic()
    preview = json.loads(run(pulumi, "preview", "--json", "--non-interactive", cwd=program, env=engine))
    timings["yaml preview"] = time.monotonic() - start
    planned = {s["urn"].rsplit("::", 1)[-1] for s in preview.get("steps") or [] if s.get("op") == "create"}
    assert {"controlPlane", "cache", "small"} <= planned, sorted(planned)
    # The installed policy pack, an executable analyzer the engine starts from site-packages too.
    pack = run("opbroker", "provider", "path", "--policy-pack", cwd=tmp_path, env=user).strip()
    checked = run(pulumi, "preview", "--non-interactive", "--policy-pack", pack, cwd=program, env=engine)
    assert re.search(r"opbroker@v0\.0\.1 \(local: \S*/pulumi-analyzer-opbroker\)", checked), checked
    start = time.monotonic()
    run(pulumi, "up", "--yes", "--skip-preview", "--non-interactive", cwd=program, env=engine)
    timings["yaml up"] = time.monotonic() - start
    outputs = json.loads(run(pulumi, "stack", "output", "--json", cwd=program, env=engine))
    assert outputs == {"brokerUrl": "http://opbroker-broker.infra-yaml.svc:8080", "plan": PLAN_ID}
    api = config.new_client_from_config(config_file=str(engine_cluster))
    plans = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "osb.servicefabrik.io", "v1alpha1", "infra-yaml", "sfplans"
    )
    assert [p["spec"]["templates"][0]["content"] for p in plans["items"]] == [PROVISION]
    start = time.monotonic()
    run(pulumi, "destroy", "--yes", "--skip-preview", "--non-interactive", cwd=program, env=engine)
    timings["yaml destroy"] = time.monotonic() - start

    # By name instead of folder: `opbroker provider install` puts the plugin into Pulumi's plugin cache (a copy
    # away from the environment, so a launcher naming its interpreter), and a program with no `packages:` finds it.
    start = time.monotonic()
    pulumi_settings = {k: v for k, v in engine.items() if k.startswith("PULUMI_")}
    installed = run(
        "opbroker", "provider", "install", "--pulumi", pulumi, cwd=tmp_path, env={**user, **pulumi_settings}
    )
    assert str(venv) in installed, installed
    by_name = {k: v for k, v in yaml_program(folder).items() if k != "packages"}
    (program / "Pulumi.yaml").write_text(yaml.safe_dump(by_name, sort_keys=False, width=1000))
    preview = json.loads(run(pulumi, "preview", "--json", "--non-interactive", cwd=program, env=engine))
    planned = {s["urn"].rsplit("::", 1)[-1] for s in preview.get("steps") or [] if s.get("op") == "create"}
    assert {"controlPlane", "cache", "small"} <= planned, sorted(planned)
    timings["plugin install + yaml preview"] = time.monotonic() - start


def test_the_checkout_was_never_on_a_path(venv: Path) -> None:
    """What the environment's interpreter imports opbroker from: the wheel's copy in site-packages."""
    where = run(
        venv / "bin" / "python",
        "-c",
        textwrap.dedent("""
            import opbroker.cli, opbroker.provider, sys
            print(opbroker.cli.__file__); print(opbroker.provider.__file__); print(sys.path)
        """),
        cwd=venv.parent,
        env=outside_env([venv / "bin"]),
    )
    assert str(REPO) not in where, where
    assert where.count(str(venv / "lib")) >= 2, where
