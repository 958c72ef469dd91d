"""What an SFPlan change does to the plan's running instances, shown under the SFPlan in ``pulumi preview``.

At preview time (``pulumi.runtime.is_dry_run()``) the SFPlan component asks the cluster the stack deploys to: for
each instance of the plan, the ``provision`` objects rendered with the plan in the cluster and with the one the
program declares — ``opbroker plan diff --output json --as-plan-account``, the code behind the admin API's
preview, so there is one diff. It runs as a child process: the components do not import the controller (the
layers contract), and a child can be given one deadline for the whole reading and killed past it. The templates'
live sources are read as the plan's ServiceAccount (impersonated), as the controller reads them; nothing is
written. What it answers is logged under the SFPlan: the counts first, then the first diffs, each bounded, Secret
values redacted (the diff's, :func:`opbroker.controller.catalog.rollouts.redacted`).

Which cluster, first found: the SFPlan's ``preview_kubeconfig``, the stack's ``kubernetes:kubeconfig`` (and
``kubernetes:context``), ``KUBECONFIG``, ``~/.kube/config`` — the Kubernetes provider's own order after the first.
A cluster that cannot be read, a plan not in it yet, a user who may not impersonate the plan's account: one line
says so, and the preview goes on.

:func:`find_cluster` and :func:`lines` are pure; :func:`ask` runs the child; :func:`show_under` wires them to a
resource.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pydantic import ValidationError

from opbroker.api import adminrequests as wire
from opbroker.api.catalog import SFPlan

#: The whole reading (every API call of the child, every render) ends by then; past it the child is killed.
DEADLINE_SECONDS = 60.0
#: Changed or failing instances whose diff is shown; the counts cover every instance.
MAX_DIFFS = 5
#: One diff shown is cut after this many lines or bytes, whichever comes first.
MAX_DIFF_LINES = 40
MAX_DIFF_BYTES = 4096
#: Changed or failing instances the child is asked to carry: the first :data:`MAX_DIFFS` are shown with their diff,
#: the others by name.
MAX_LISTED = 20
#: The child's answer is at most this large (its diffs are cut at 3 KiB each); a larger one is not read.
MAX_ANSWER_BYTES = 1024 * 1024
TITLE = "impact on running instances"


class Level(StrEnum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True)
class Cluster:
    """Where the preview reads: a kubeconfig (a file's path, or its text) and its context."""

    kubeconfig: str
    context: str | None
    source: str
    """Where it was found, for the output (never the kubeconfig's text: it may hold a token)."""

    @property
    def is_text(self) -> bool:
        return "\n" in self.kubeconfig or self.kubeconfig.lstrip().startswith(("{", "apiVersion"))


def find_cluster(
    given: str | None,
    config: Callable[[str], str | None],
    env: Mapping[str, str],
    home: Path,
) -> Cluster | None:
    """The cluster to read, first found: ``given`` (the SFPlan's ``preview_kubeconfig``), the stack's
    ``kubernetes:kubeconfig``, ``KUBECONFIG``, ``home/.kube/config``; None: none. Pure but for the last check."""
    context = config("kubernetes:context")
    if given:
        return Cluster(given, context, "the SFPlan's preview_kubeconfig")
    configured = config("kubernetes:kubeconfig")
    if configured:
        return Cluster(configured, context, "the stack's kubernetes:kubeconfig")
    if env.get("KUBECONFIG"):
        return Cluster(env["KUBECONFIG"], context, "KUBECONFIG")
    default = home / ".kube" / "config"
    return Cluster(str(default), context, "~/.kube/config") if default.is_file() else None


# -- what is shown (pure) -------------------------------------------------------------------------------------


def cut(diff: str, *, max_lines: int = MAX_DIFF_LINES, max_bytes: int = MAX_DIFF_BYTES) -> str:
    """``diff`` at most ``max_lines`` lines and ``max_bytes`` UTF-8 bytes, cut at a line end; a cut says how much
    was left out."""
    all_lines = diff.splitlines()
    kept: list[str] = []
    size = 0
    for line in all_lines[:max_lines]:
        size += len(line.encode()) + 1
        if size > max_bytes:
            break
        kept.append(line)
    left = len(all_lines) - len(kept)
    return "\n".join(kept + ([f"… {left} more line(s) not shown"] if left else []))


def lines(
    answer: wire.PreviewAnswer,
    *,
    max_diffs: int = MAX_DIFFS,
    max_lines: int = MAX_DIFF_LINES,
    max_bytes: int = MAX_DIFF_BYTES,
) -> list[tuple[Level, str]]:
    """What the SFPlan's preview shows for ``answer``: the counts first, then the first ``max_diffs`` changed or
    failing instances with their diff or error (each cut), then the names of the others listed. Pure."""
    if answer.phase is not wire.Phase.SUCCEEDED:
        return [(Level.WARNING, f"{TITLE} not shown: {answer.message or answer.phase.value}")]
    total = answer.changed + answer.unchanged + answer.failing
    if answer.message and total == 0:
        return [(Level.INFO, f"{TITLE}: {answer.message}")]
    acting = f" (read as {answer.acting_as})" if answer.acting_as else ""
    counts = (
        f"{TITLE}{acting}: {total} instance(s): {answer.changed} changed, {answer.unchanged} unchanged, "
        f"{answer.failing} failing to render"
    )
    shown: list[tuple[Level, str]] = [(Level.WARNING if answer.failing else Level.INFO, counts)]
    for instance in answer.instances[:max_diffs]:
        where = f"{instance.namespace}/{instance.name}"
        if instance.change == "failing":
            shown.append((Level.WARNING, f"! {where}: fails to render with the new plan: {instance.error or ''}"))
            continue
        text = cut(instance.diff, max_lines=max_lines, max_bytes=max_bytes)
        if instance.truncated and not text.endswith("not shown"):
            text += "\n… the rest of this diff not shown"
        shown.append((Level.INFO, f"~ {where}\n{text}"))
    others = answer.instances[max_diffs:]
    unlisted = answer.changed + answer.failing - len(answer.instances)
    if others or unlisted > 0:
        names = ", ".join(f"{i.namespace}/{i.name}" for i in others)
        more = f"{names}{' and ' if names and unlisted > 0 else ''}{f'{unlisted} more' if unlisted > 0 else ''}"
        shown.append((Level.INFO, f"diffs not shown for {more}: see `opbroker plan diff`"))
    return shown


# -- asking the cluster (a child process) -----------------------------------------------------------------------


def failed(message: str) -> wire.PreviewAnswer:
    return wire.PreviewAnswer(phase=wire.Phase.FAILED, message=message)


@contextlib.contextmanager
def _kubeconfig_file(cluster: Cluster) -> Iterator[str]:
    """A path to the kubeconfig: its own, or its text in a file only this user may read, removed after."""
    if not cluster.is_text:
        yield os.path.expanduser(cluster.kubeconfig)
        return
    with tempfile.TemporaryDirectory(prefix="opbroker-impact-") as folder:
        path = Path(folder) / "kubeconfig"
        path.touch(mode=0o600)
        path.write_text(cluster.kubeconfig, encoding="utf-8")
        yield str(path)


def command(plan_file: str, kubeconfig: str, *, namespace: str, context: str | None) -> list[str]:
    """The child's command line: this Python's ``opbroker plan diff``, JSON, sources read as the plan's account."""
    argv = [sys.executable, "-m", "opbroker.cli.main", "plan", "diff", plan_file, "--kubeconfig", kubeconfig]
    argv += ["--namespace", namespace, "--output", "json", "--as-plan-account", "--limit", str(MAX_LISTED)]
    return argv + (["--kube-context", context] if context else [])


def ask(plan: SFPlan, namespace: str, cluster: Cluster, *, deadline: float = DEADLINE_SECONDS) -> wire.PreviewAnswer:
    """The child's answer for ``plan`` against the instances in ``cluster``; a problem as a Failed answer."""
    with tempfile.TemporaryDirectory(prefix="opbroker-impact-") as folder, _kubeconfig_file(cluster) as kubeconfig:
        plan_file = Path(folder) / "plan.yaml"
        plan_file.write_text(yaml.safe_dump(plan.to_manifest(), sort_keys=False), encoding="utf-8")
        argv = command(str(plan_file), kubeconfig, namespace=namespace, context=cluster.context)
        child = subprocess.Popen(  # its own group: the Go renderer it may start goes with it
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            stdout, stderr = child.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return failed(f"no answer from {cluster.source}'s cluster within {deadline:.0f} s")
    if len(stdout) > MAX_ANSWER_BYTES:
        return failed(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        return wire.PreviewAnswer.model_validate_json(stdout)
    except ValidationError:
        said = stderr.decode("utf-8", errors="replace").strip().splitlines()
        return failed(f"`opbroker plan diff` failed ({child.returncode}): {said[-1][:500] if said else 'no output'}")


def show_under(
    resource: pulumi.Resource,
    plan: SFPlan,
    namespace: Any,
    kubeconfig: Any,
    *,
    asker: Callable[[SFPlan, str, Cluster], wire.PreviewAnswer] | None = None,
) -> pulumi.Output[None]:
    """Log what the plan change does to its running instances under ``resource`` once ``namespace`` (a string or
    an Output: the ControlPlane's) and ``kubeconfig`` (None, a string or an Output: a secret config value) are
    known; an Output the program waits for. ``asker``: default :func:`ask`."""

    async def show(known: list[Any]) -> None:
        resolved, given = known
        cluster = find_cluster(given, pulumi.runtime.get_config, os.environ, Path.home())
        if cluster is None:
            answer = failed("no cluster to read (give preview_kubeconfig, kubernetes:kubeconfig or KUBECONFIG)")
        else:
            answer = await asyncio.to_thread(asker or ask, plan, str(resolved), cluster)
        for level, text in lines(answer):
            log = pulumi.log.warn if level is Level.WARNING else pulumi.log.info
            log(text, resource=resource)
        # pulumi.log sends from a task of its own once the URN is known (it is by now): let it run before the
        # program may end.
        for _ in range(3):
            await asyncio.sleep(0)

    return pulumi.Output.all(namespace, kubeconfig).apply(show)
