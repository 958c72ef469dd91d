"""The Automation API with the settings spelled out: select a stack with an inline program, preview it into
a change list, ``up``, ``refresh``, ``destroy`` — each engine command under a deadline.

Nothing is read from or kept in module state: every setting is in :class:`Settings`, every result is returned.
The functions take and return the Automation API's own objects (``auto.Stack``, ``auto.UpResult``, ...), so
anything this module does not wrap is one ``stack.<method>`` away.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi import automation as auto

#: Longest one engine command may run, in seconds. An ``up`` that awaits Deployments waits up to
#: pulumi-kubernetes' own 10-minute await; past this the command is interrupted and fails instead of hanging.
COMMAND_DEADLINE = 900.0
#: After an interrupt at the deadline, how long the engine gets to cancel cleanly before it is killed.
INTERRUPT_GRACE = 30.0
#: The environment variable that carries one call's deadline to the engine wrapper (see :func:`engine_command`).
DEADLINE_ENV = "OPBROKER_ENGINE_DEADLINE"


def _provider_folder() -> Path:
    """The opbroker provider plugin's folder (``PulumiPlugin.yaml`` and the executable ``pulumi-resource-opbroker``
    beside the package ``opbroker.provider``): a path handed to the engine, no code of the provider imported."""
    spec = importlib.util.find_spec("opbroker.provider")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the opbroker.provider package is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


#: The opbroker provider plugin's folder: Settings' default ``packages: {opbroker: <it>}``.
PROVIDER_FOLDER = _provider_folder()


class EngineDeadlineError(RuntimeError):
    """An engine command ran past its deadline and was interrupted."""


class EngineNotFoundError(RuntimeError):
    """No ``pulumi`` to run: ``Settings.engine`` names none and there is none on ``PATH``."""


@dataclass(frozen=True)
class Settings:
    """Where a stack's state and secrets live and which engine runs it.

    ``backend_url``: the state backend (``file:///...``, ``s3://...``, a Pulumi Cloud URL). ``passphrase``: the
    passphrase secrets provider's passphrase (``secrets_provider`` "passphrase"; leave it None for another
    provider such as ``awskms://...``). ``engine``: the folder holding ``bin/pulumi`` (None: ``pulumi`` on
    ``PATH``). ``pulumi_home``: the engine's plugins and credentials (None: ``~/.pulumi``). ``work_dir``: where
    the workspace writes ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml`` (None: a new temporary folder). ``env``: more
    environment for the engine and the plugins it starts (e.g. ``KUBECONFIG``). ``packages``: the project's
    ``packages:`` (name to a plugin folder), written into that ``Pulumi.yaml``: the engine starts a resource
    plugin from its folder's executable ``pulumi-resource-<name>`` (default: the opbroker provider, which serves
    ``opbroker.provider.osb_resources``' ServiceInstance and ServiceBinding), nothing on ``PATH`` or in the
    Pulumi home.
    """

    backend_url: str
    passphrase: str | None = field(default=None, repr=False)
    secrets_provider: str = "passphrase"
    engine: Path | None = None
    pulumi_home: Path | None = None
    work_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    packages: Mapping[str, str] = field(default_factory=lambda: {"opbroker": str(PROVIDER_FOLDER)})

    def environment(self) -> dict[str, str]:
        env = {"PULUMI_SKIP_UPDATE_CHECK": "true", **self.env}
        if self.passphrase is not None:
            env["PULUMI_CONFIG_PASSPHRASE"] = self.passphrase
        return env

    def workspace_options(self, project: str) -> auto.LocalWorkspaceOptions:
        return auto.LocalWorkspaceOptions(
            work_dir=str(self.work_dir) if self.work_dir else None,
            pulumi_home=str(self.pulumi_home) if self.pulumi_home else None,
            env_vars=self.environment(),
            secrets_provider=self.secrets_provider,
            project_settings=_ProjectSettings(
                name=project,
                runtime="python",
                backend=auto.ProjectBackend(url=self.backend_url),
                packages=dict(self.packages),
            ),
        )

    def engine_command(self) -> auto.PulumiCommand:
        """The engine (``engine/bin/pulumi``, or ``pulumi`` on ``PATH``) behind a wrapper that runs every command
        under coreutils ``timeout``: SIGINT at the deadline of the call (the engine cancels and stops its
        plugins), SIGKILL ``INTERRUPT_GRACE`` later. Each call sets its deadline in the workspace environment
        (:data:`DEADLINE_ENV`), so exactly the command of that call is stopped. The wrapper is written into
        ``work_dir`` (or a new temporary folder); the engine's own folder stays first on ``PATH`` for the
        language hosts and plugins it finds there."""
        real = self.engine / "bin" / "pulumi" if self.engine else shutil.which("pulumi")
        if real is None or not Path(real).is_file():
            raise EngineNotFoundError(f"no pulumi engine at {real or 'PATH'}: set Settings.engine or install pulumi")
        root = (
            self.work_dir / ".opbroker-engine" if self.work_dir else Path(tempfile.mkdtemp(prefix="opbroker-engine-"))
        )
        (root / "bin").mkdir(parents=True, exist_ok=True)
        wrapper = root / "bin" / "pulumi"
        real_bin = Path(real).resolve().parent
        wrapper.write_text(
            "#!/bin/sh\n"
            "# opbroker.stacks: the Pulumi engine under the deadline of the call (exit 124 when it ran past it).\n"
            f'PATH="{real_bin}:$PATH"; export PATH\n'
            f'exec timeout --signal=INT --kill-after={INTERRUPT_GRACE:g} "${{{DEADLINE_ENV}:-{COMMAND_DEADLINE:g}}}" '
            f'"{Path(real).resolve()}" "$@"\n'
        )
        wrapper.chmod(0o755)
        return auto.PulumiCommand(root=str(root))


class _ProjectSettings(auto.ProjectSettings):
    """``auto.ProjectSettings`` with the project's ``packages:``, which the Automation API's class does not have
    (the engine reads it from ``Pulumi.yaml`` for every runtime, inline programs included)."""

    def __init__(self, *args: Any, packages: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.packages = dict(packages)

    def to_dict(self) -> dict[str, Any]:
        written = dict(super().to_dict())
        if self.packages:
            written["packages"] = dict(self.packages)
        return written


def select_stack(
    project: str,
    stack: str,
    program: Callable[[], None],
    settings: Settings,
    *,
    config: Mapping[str, str | auto.ConfigValue] | None = None,
) -> auto.Stack:
    """``auto.create_or_select_stack`` with an inline program; ``config`` (``key`` or ``project:key``, a
    ``ConfigValue(secret=True)`` for a secret) is written to the stack before it is returned."""
    if settings.work_dir is not None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
    options = settings.workspace_options(project)
    options.pulumi_command = settings.engine_command()
    selected = auto.create_or_select_stack(stack_name=stack, project_name=project, program=program, opts=options)
    if config:
        values = {k: v if isinstance(v, auto.ConfigValue) else auto.ConfigValue(v) for k, v in config.items()}
        selected.set_all_config(values)
    return selected


@dataclass(frozen=True)
class Change:
    """One step the engine plans other than ``same``: the operation, the resource, and the properties that
    differ (``properties``: the provider's detailed diff, property path to kind such as ``update``; ``diffs``:
    the top-level keys)."""

    op: str
    urn: str
    type: str
    diffs: tuple[str, ...]
    properties: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Preview:
    """What ``pulumi preview --diff`` planned: counts by operation, every change, and the engine's diff text."""

    summary: Mapping[str, int]
    changes: tuple[Change, ...]
    text: str

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Deployment:
    """:func:`deploy`'s outcome: the preview, and ``up``'s result when it ran (None: nothing to do, or not
    approved)."""

    preview: Preview
    up: auto.UpResult | None


def _change(metadata: auto.StepEventMetadata) -> Change:
    detailed = metadata.detailed_diff or {}
    return Change(
        op=str(getattr(metadata.op, "value", metadata.op)),
        urn=metadata.urn,
        type=metadata.type,
        diffs=tuple(metadata.diffs or ()),
        properties={path: str(getattr(d.diff_kind, "value", d.diff_kind)) for path, d in detailed.items()},
    )


def preview(
    stack: auto.Stack,
    *,
    policy_packs: Sequence[str] | None = None,
    deadline: float = COMMAND_DEADLINE,
    events: Callable[[auto.EngineEvent], None] | None = None,
    **options: Any,
) -> Preview:
    """``pulumi preview --diff``: the change summary, each planned change with its properties, and the text.
    ``events``: also told every engine event (the diagnostics a component logs under its resource, say)."""
    changes: list[Change] = []

    def on_event(event: auto.EngineEvent) -> None:
        if events is not None:
            events(event)
        pre = event.resource_pre_event
        if pre is not None and pre.metadata.op != auto.OpType.SAME:
            changes.append(_change(pre.metadata))

    with _deadline(stack, deadline):
        result = stack.preview(
            diff=True, color="never", policy_packs=list(policy_packs or ()) or None, on_event=on_event, **options
        )
    summary = {str(getattr(op, "value", op)): n for op, n in result.change_summary.items()}
    return Preview(summary, tuple(changes), result.stdout)


def deploy(
    stack: auto.Stack,
    *,
    approve: Callable[[Preview], bool] | None = None,
    deadline: float = COMMAND_DEADLINE,
    **options: Any,
) -> Deployment:
    """Preview, then ``up`` if there is a change and ``approve`` (given the preview) says yes (None: always).
    ``options`` go to both (``program``, ``policy_packs``, ``target``, ...).

    The ``up`` runs the program again: what it applies is what the program declares then, which is what the
    preview showed unless the program or the cluster changed in between.
    """
    planned = preview(stack, deadline=deadline, **options)
    if not planned.has_changes or (approve is not None and not approve(planned)):
        return Deployment(planned, None)
    return Deployment(planned, up(stack, deadline=deadline, **options))


def up(stack: auto.Stack, *, deadline: float = COMMAND_DEADLINE, **options: Any) -> auto.UpResult:
    """``pulumi up --yes --skip-preview`` (the Automation API's ``stack.up``)."""
    with _deadline(stack, deadline):
        return stack.up(**{"color": "never", **options})


def refresh(stack: auto.Stack, *, deadline: float = COMMAND_DEADLINE, **options: Any) -> auto.RefreshResult:
    """``pulumi refresh --yes``: the state takes what the cluster holds; the result's stdout shows the drift."""
    with _deadline(stack, deadline):
        return stack.refresh(**{"color": "never", "diff": True, **options})


def destroy(stack: auto.Stack, *, deadline: float = COMMAND_DEADLINE, **options: Any) -> auto.DestroyResult:
    """``pulumi destroy --yes``."""
    with _deadline(stack, deadline):
        return stack.destroy(**{"color": "never", **options})


def outputs(stack: auto.Stack) -> dict[str, Any]:
    """The stack's outputs as plain values, secrets included (``stack.outputs()`` keeps the secret flag)."""
    return {name: output.value for name, output in stack.outputs().items()}


# -- the deadline: one call's limit, handed to the engine wrapper ----------------------------------------------


@contextlib.contextmanager
def _deadline(stack: auto.Stack, seconds: float) -> Iterator[None]:
    """Run one engine command under ``seconds`` (the wrapper of :meth:`Settings.engine_command` interrupts it
    then) and raise :class:`EngineDeadlineError` when it failed for that reason."""
    env = stack.workspace.env_vars
    assert isinstance(env, dict), "Settings gives every workspace its own environment dict"
    previous = env.get(DEADLINE_ENV)
    env[DEADLINE_ENV] = f"{seconds:g}"
    started = time.monotonic()
    try:
        yield
    except auto.CommandError as exc:
        if time.monotonic() - started >= seconds:
            raise EngineDeadlineError(f"the engine command ran past its deadline of {seconds:.0f} s") from exc
        raise
    finally:
        if previous is None:
            env.pop(DEADLINE_ENV, None)
        else:
            env[DEADLINE_ENV] = previous
