"""The builds compile only what the repository pins (issue 25): the Go wrapper modules' go.mod and go.sum are
committed and name exact versions, the build scripts resolve nothing, the caches are keyed by the pins, and
the image's Python dependencies come from a lock with hashes. Pure: reads files, runs bash for the cache paths."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from opbroker.devcluster import binaries, pulumi_engine

REPOSITORY = Path(__file__).resolve().parents[2]
KUBE_MODULE = REPOSITORY / "devcluster" / "kubebuild"
PULUMI_MODULES = REPOSITORY / "devcluster" / "pulumibuild"
HELM_MODULE = REPOSITORY / "devcluster" / "helmbuild"
WRAPPERS = [KUBE_MODULE, *(PULUMI_MODULES / name for name in ("pulumi", "yaml", "kubernetes")), HELM_MODULE]
BUILD_SCRIPTS = [
    REPOSITORY / "devcluster" / "build.sh",
    REPOSITORY / "scripts" / "build-pulumi.sh",
    REPOSITORY / "scripts" / "build-helm.sh",
]
LOCK = REPOSITORY / "requirements.lock"

#: A module version that names one release: semver, a pre-release or a pseudo-version, no "latest", no branch.
EXACT = re.compile(r"^v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+incompatible)?$")


def _tracked(path: Path) -> bool:
    listed = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(path.relative_to(REPOSITORY))],
        cwd=REPOSITORY,
        capture_output=True,
        check=False,
    )
    return listed.returncode == 0


def _requirements(go_mod: str) -> list[tuple[str, str]]:
    """(module, version) of every module a go.mod requires (a replaced one as its replacement), then of every
    replace target of a module not required (pinned too, though not in the module graph)."""
    required: list[tuple[str, str]] = []
    replaced: dict[str, tuple[str, str]] = {}
    block = None
    for raw in go_mod.splitlines():
        line = raw.split("//")[0].strip()
        if line in (")",):
            block = None
            continue
        if line in ("require (", "replace ("):
            block = line.split()[0]
            continue
        directive = block
        if line.startswith(("require ", "replace ")):
            directive, line = line.split(None, 1)
        if not line or directive is None:
            continue
        if directive == "replace":
            source, target = (side.split() for side in line.split("=>", 1))
            assert len(source) == 1, f"a replace of one version only: {raw!r}"
            assert len(target) == 2, f"a replace by a folder, not a pinned module: {raw!r}"
            replaced[source[0]] = (target[0], target[1])
        else:
            module, version = line.split()
            required.append((module, version))
    return [replaced.pop(m, (m, v)) for m, v in required] + list(replaced.values())


@pytest.mark.process
@pytest.mark.parametrize("module", WRAPPERS, ids=lambda p: p.name)
def test_each_wrapper_module_is_committed_and_pins_every_module_exactly(module: Path) -> None:
    go_mod, go_sum = module / "go.mod", module / "go.sum"
    assert go_mod.is_file() and go_sum.is_file(), f"{module}: go.mod and go.sum must be committed"
    assert _tracked(go_mod) and _tracked(go_sum), f"{module}: go.mod and go.sum are not tracked by git"
    text = go_mod.read_text()
    requirements = _requirements(text)
    required = len(re.findall(r"^\s*(?:require\s+)?\S+ v\S+(?: // indirect)?$", text, re.MULTILINE))
    assert required >= 1
    sums = go_sum.read_text()
    for i, (name, version) in enumerate(requirements):
        assert EXACT.match(version), f"{module.name}: {name} {version} is not an exact version"
        if i < required:  # in the module graph: its go.mod's hash is in go.sum
            assert f"{name} {version}/go.mod h1:" in sums, f"{module.name}: go.sum has no hash for {name} {version}"


def test_no_module_floats() -> None:
    """The sample-* staging modules used to float to whatever the proxy had: each is pinned to the release."""
    requirements = dict(_requirements((KUBE_MODULE / "go.mod").read_text()))
    kube = requirements["k8s.io/kubernetes"]
    staging = "v0." + kube.removeprefix("v1.")
    assert requirements["k8s.io/sample-apiserver"] == staging
    assert requirements["k8s.io/client-go"] == staging
    assert (
        kube == f"v{binaries.KUBE_VERSION}" and requirements["go.etcd.io/etcd/server/v3"] == f"v{binaries.ETCD_VERSION}"
    )
    pulumi = dict(_requirements((PULUMI_MODULES / "pulumi" / "go.mod").read_text()))
    assert pulumi["github.com/pulumi/pulumi/pkg/v3"] == f"v{pulumi_engine.PULUMI_VERSION}"
    kubernetes = dict(_requirements((PULUMI_MODULES / "kubernetes" / "go.mod").read_text()))
    assert kubernetes["github.com/pulumi/pulumi-kubernetes/sdk/v4"] == f"v{pulumi_engine.PULUMI_KUBERNETES_VERSION}"


@pytest.mark.parametrize("script", BUILD_SCRIPTS, ids=lambda p: p.name)
def test_the_build_scripts_resolve_nothing(script: Path) -> None:
    text = script.read_text()
    go_commands = [line for line in text.splitlines() if re.search(r"\bgo (mod|build|get|install|list)\b", line)]
    assert go_commands, "the script runs no go command at all"
    assert "-mod=mod" not in text
    assert "-mod=readonly" in text
    for line in go_commands:
        assert not re.search(r"\bgo (mod tidy|get)\b", line), f"{script.name} resolves modules: {line.strip()}"
        assert not re.search(r"\s-e\b", line), f"{script.name} ignores errors: {line.strip()}"


def _print_bin_dir(script: Path, cache: Path) -> Path:
    answer = subprocess.run(
        ["bash", str(script), "--print-bin-dir"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cache), "OPBROKER_CACHE": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(answer.stdout.strip())


@pytest.mark.process
def test_the_caches_are_keyed_by_the_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripts and the Python side agree on where the binaries of these pins live, and any change of
    go.sum moves it: a build from other pins never passes for this one."""
    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    kube = _print_bin_dir(BUILD_SCRIPTS[0], tmp_path)
    assert kube == binaries.kube_bin_dir()
    assert kube.parent.name == f"kube-{binaries.KUBE_VERSION}-{binaries.module_key(KUBE_MODULE)}"
    pulumi = _print_bin_dir(BUILD_SCRIPTS[1], tmp_path)
    assert pulumi.relative_to(tmp_path) == pulumi_engine.BIN.relative_to(pulumi_engine.CACHE)

    copy = tmp_path / "copy"
    subprocess.run(["cp", "-R", str(KUBE_MODULE), str(copy)], check=True)
    assert binaries.module_key.__wrapped__(copy) == binaries.module_key(KUBE_MODULE)
    with (copy / "go.sum").open("a") as sums:
        sums.write("example.com/other v1.0.0/go.mod h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")
    assert binaries.module_key.__wrapped__(copy) != binaries.module_key(KUBE_MODULE)


@pytest.mark.process
def test_helm_is_cached_by_its_pin_where_the_tests_look_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBROKER_CACHE", str(tmp_path))
    answer = subprocess.run(
        ["bash", str(BUILD_SCRIPTS[2]), "--print-root"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPBROKER_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    root = Path(answer.stdout.strip())
    assert root == tmp_path / f"helm-{binaries.HELM_VERSION}-{binaries.module_key(HELM_MODULE)}"
    assert binaries.helm_binary() is None  # nothing built in this empty cache
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "helm").write_text("")
    assert binaries.helm_binary() == root / "bin" / "helm"
    assert dict(_requirements((HELM_MODULE / "go.mod").read_text()))["helm.sh/helm/v4"] == f"v{binaries.HELM_VERSION}"


# --- the image's Python dependencies --------------------------------------------------------------------------


def _locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every package in requirements.lock."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    locked: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        spec = line.split(" --hash=")[0].strip()
        requirement = Requirement(spec)
        pins = [s for s in requirement.specifier if s.operator == "=="]
        assert len(pins) == 1 and len(requirement.specifier) == 1, f"not pinned to one version: {spec}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        assert hashes, f"no sha256 for {spec}"
        locked[canonicalize_name(requirement.name)] = (pins[0].version, hashes)
    return locked


def test_the_lock_pins_every_runtime_dependency_with_hashes() -> None:
    locked = _locked()
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    direct = [Requirement(r) for r in project["project"]["dependencies"]]
    direct += [Requirement(r) for r in project["build-system"]["requires"]]
    for requirement in direct:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is not in requirements.lock"
        assert requirement.specifier.contains(locked[name][0]), (
            f"the lock's {name} {locked[name][0]} breaks {requirement}"
        )

    # Transitively: each locked package installed here at its locked version declares dependencies; those that
    # apply on Linux and Python 3.11 (the image's) must be locked too.
    environment = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux"}
    checked = 0
    for name, (version, _hashes) in locked.items():
        try:
            installed = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if installed.version != version:
            continue
        checked += 1
        for spec in installed.requires or []:
            requirement = Requirement(spec)
            if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            assert canonicalize_name(requirement.name) in locked, f"{name} needs {requirement.name}: not locked"
    assert checked >= len(direct) // 2, "too few locked packages are installed here to check the lock's closure"


def test_the_containerfile_and_the_local_image_build_install_from_the_lock() -> None:
    containerfile = (REPOSITORY / "Containerfile").read_text()
    assert "--require-hashes" in containerfile and "requirements.lock" in containerfile
    assert "--no-index --no-build-isolation /src" in containerfile
    from opbroker.devcluster import images

    assert images.LOCK == LOCK
    source = Path(images.__file__).read_text()
    assert source.count("--require-hashes") >= 2  # pip download on the host, pip install in the root filesystem
    assert "pip freeze" not in source


def test_the_dev_environment_runs_the_pulumi_sdks_at_the_engines_versions_within_the_declared_ranges() -> None:
    """pyproject.toml gives users compatible ranges; scripts/setup.sh constrains the development environment to
    the engine's versions (scripts/engine-sdks.txt), which must be the engine's and inside those ranges."""
    pins = dict(
        line.split("==")
        for line in (REPOSITORY / "scripts" / "engine-sdks.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins == {
        "pulumi": pulumi_engine.PULUMI_VERSION,
        "pulumi-kubernetes": pulumi_engine.PULUMI_KUBERNETES_VERSION,
    }
    extra = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["optional-dependencies"]["pulumi"]
    ranges = {canonicalize_name(r.name): r.specifier for r in map(Requirement, extra)}
    for name, version in pins.items():
        assert ranges[name].contains(version) and str(ranges[name]) != f"=={version}", (name, ranges[name])
    assert "-c scripts/engine-sdks.txt" in (REPOSITORY / "scripts" / "setup.sh").read_text()
